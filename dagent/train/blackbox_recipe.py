"""The black-box training recipe (`BlackboxRecipe`, by preset), the checks that refuse it before a
run starts, and the job's arguments: what the sync trainer (`dagent.train.blackbox`) and the async
launcher (`dagent.train.blackbox_async`) both read."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from dagent.core.conditions import Conditions
from dagent.core.sampling import RECIPE_SAMPLING
from dagent.errors import ConfigError
from dagent.harness.contract import check_step_cap
from dagent.tools.episode import MAX_STEPS
from dagent.train.args import TrainArgs
from dagent.train.grpo import cpu_has_bf16
from dagent.train.preflight import Check, check_group_size, check_split

HARNESSES = ("opencode", "pi")


@dataclass(frozen=True)
class BlackboxRecipe:
    """GRPO settings for black-box training. `gpu()` is the reference run's (async); `cpu()` fits a
    2-core machine (sync, transformers in-process engine)."""

    split: str = "train:easy"
    num_generations: int = 8
    groups_per_step: int = 2  # prompts per optimizer step
    beta: float = 0.0  # the reference async run trains without a reference model
    learning_rate: float = 1e-6
    warmup_steps: int = 10
    max_steps: int = 400
    save_steps: int = 20
    agent_steps: int = 17  # the agent's own step cap; the reference run's hard cap (it bound 4,627 times), <= the env budget (F35)
    env_max_steps: int = MAX_STEPS  # the environment's step budget (tool calls an episode serves)
    max_output_tokens: int = 8192  # what capture clamps an agent's max_tokens to
    agent_timeout_s: float = 600.0
    # sync mode: GRPOTrainer's rollout_func trains ONE row per rollout, so a chain that forks is
    # dropped; 1024 keeps a tail drift (a harness re-serialising its last answer) as one realigned row
    fork_threshold_tokens: int = 1024
    # async mode: TRL's lossless capture (its rollout loop forks at any drift, threshold 0), chosen by
    # measurement over the same rollouts (`benchmarks/rollouts.py --n 8 --tool-json compact`, opencode
    # and pi alike): at 1024 each drifted tool call is realigned INTO CONTEXT, 26 trained tokens per
    # rollout, the tool calls untrained; at 0 every sampled token is trained, 96 per rollout, in 3
    # rows; where nothing drifts both give the same one row. TRL's worker defaults to True and then
    # ignores the config's threshold (F46): the recipe names the choice, the launcher passes it, and
    # the config carries the threshold the worker really uses (`worker_fork_threshold`).
    lossless_capture: bool = True
    use_cpu: bool = False
    bf16: bool = True
    seed: int = 0

    @property
    def worker_fork_threshold(self) -> int:
        """The fork threshold TRL's rollout loop uses in async mode (0 under lossless capture)."""
        return 0 if self.lossless_capture else self.fork_threshold_tokens

    @classmethod
    def gpu(cls, **overrides: Any) -> BlackboxRecipe:
        return replace(cls(), **overrides)

    @classmethod
    def gpu_steps25(cls, **overrides: Any) -> BlackboxRecipe:
        """The reference recipe with the 25-step cap its write-up documents (the run itself capped at
        17): for agents whose tasks need the longer loop, at the cost of longer rollouts."""
        return replace(cls(agent_steps=25), **overrides)

    @classmethod
    def cpu(cls, **overrides: Any) -> BlackboxRecipe:
        """Small groups, one prompt a step, fp32 weights on the CPU (the engine serves the trainer's
        own module: bf16 autocast only where the CPU has it), and a short agent: 8 steps of at most
        384 tokens (with 15 steps most of a group's rollouts ran to the cap and a group's rollouts
        took most of a step; the figures: README, "Black-box on this CPU")."""
        base = cls(num_generations=4, groups_per_step=1, learning_rate=5e-6, warmup_steps=2, max_steps=40,
                   save_steps=10, agent_steps=8, max_output_tokens=384, agent_timeout_s=600.0,
                   use_cpu=True, bf16=cpu_has_bf16())
        return replace(base, **overrides)

    @property
    def conditions(self) -> Conditions:
        """The black-box episode's conditions (dagent.core.conditions), as training runs it."""
        return Conditions.of("black-box", RECIPE_SAMPLING, tokens_per_call=self.max_output_tokens,
                             tokens_per_episode=None, step_cap=self.agent_steps, output_chars=None,
                             timeout_s=self.agent_timeout_s)

    @property
    def batch(self) -> int:
        return self.num_generations * self.groups_per_step


PRESETS = {"gpu": BlackboxRecipe.gpu, "gpu-steps25": BlackboxRecipe.gpu_steps25, "cpu": BlackboxRecipe.cpu}


def preflight(recipe: BlackboxRecipe, n_tasks: int, *, base_pass1: float | None = None,
              force: bool = False, rates: Any = None) -> list[Check]:
    return [check_split(n_tasks, recipe.split),
            check_step_cap(recipe.agent_steps, recipe.env_max_steps),
            check_group_size(recipe.num_generations, base_pass1, rates=rates, force=force)]


@dataclass
class BlackboxArgs(TrainArgs):
    """`jobs/train_blackbox.py` and `dagent train blackbox` (one definition)."""

    mode: str = field(default="sync", metadata={"help": "sync: GRPOTrainer(rollout_func) with the trainer's model served in-process (CPU, one process); async: AsyncGRPOTrainer + HarnessRolloutWorker with vLLM on its own GPU."})
    harness: str = field(default="opencode", metadata={"help": "Agent harnesses, comma-separated; each GRPO group runs one (routed by group id, F40)."})
    agent_steps: int | None = field(default=None, metadata={"help": "The agent's own step cap (at most the environment's budget, F35)."})
    out: str = field(default="runs/blackbox", metadata={"help": "Output directory (checkpoint-N/, final/, receipts.jsonl)."})
    env_url: str | None = field(default=None, metadata={"help": "async: a running black-box server or Space (its capture must reach --engine-url)."})
    engine_url: str | None = field(default=None, metadata={"help": "async: where the job's vLLM answers as the server sees it (a public URL for a Space)."})
    engine_devices: str = field(default="0", metadata={"help": "async: CUDA devices of the vLLM engine, e.g. 0 or 0,1 (the trainer takes the rest)."})
    dry_run: bool = field(default=False, metadata={"help": "async: build and check the config, print the engine command, start nothing."})

    def recipe(self) -> BlackboxRecipe:
        if self.preset not in PRESETS:
            raise ConfigError(f"unknown preset {self.preset!r}: use {', '.join(PRESETS)}")
        given = self.overrides(agent_steps=self.agent_steps, groups_per_step=self.groups_per_step)
        return PRESETS[self.preset](**given)

    def harnesses(self) -> tuple[str, ...]:
        names = tuple(h.strip() for h in self.harness.split(",") if h.strip())
        if not names:
            raise ConfigError("--harness names no harness: use opencode, pi or opencode,pi")
        unknown = [h for h in names if h not in HARNESSES]
        if unknown:
            raise ConfigError(f"unknown harness {unknown[0]!r}: use {', '.join(HARNESSES)}")
        return names
