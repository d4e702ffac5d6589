"""The black-box recipe: the GRPO settings of `dagent train blackbox`, and the conditions a harness
runs under in training and evaluation alike (its step cap, tokens per call, timeout: F47).

`gpu()` is the reference run's (async); `gpu_steps25()` its documented 25-step cap; `cpu()` fits a
2-core machine. Resolve one by name with `dagent.recipes.resolve("blackbox", preset, **overrides)`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from dagent.core.conditions import Conditions
from dagent.core.sampling import RECIPE_SAMPLING
from dagent.recipes.hardware import cpu_has_bf16
from dagent.tools.episode import MAX_STEPS

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
    agent_steps: int = (
        17  # the agent's own step cap; the reference run's hard cap (it bound 4,627 times), <= the env budget (F35)
    )
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
    # sync on a CPU: "auto" serves rollouts from a bfloat16 copy of the trainer's weights where bf16 is
    # on (a CPU that computes it natively: dagent.engine.inprocess); "float32": the module itself
    generation_dtype: str = "auto"
    seed: int = 0

    @property
    def engine_dtype(self) -> str | None:
        """The dtype of the sync trainer's in-process engine's copy (None: it serves the module itself)."""
        if self.generation_dtype not in ("auto", "float32"):
            raise ValueError(f"generation_dtype={self.generation_dtype!r}: use auto or float32")
        return "bfloat16" if self.use_cpu and self.bf16 and self.generation_dtype == "auto" else None

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
        took most of a step; the figures: docs/results.md, "Black-box on this CPU, measured")."""
        base = cls(
            num_generations=4,
            groups_per_step=1,
            learning_rate=5e-6,
            warmup_steps=2,
            max_steps=40,
            save_steps=10,
            agent_steps=8,
            max_output_tokens=384,
            agent_timeout_s=600.0,
            use_cpu=True,
            bf16=cpu_has_bf16(),
        )
        return replace(base, **overrides)

    @property
    def conditions(self) -> Conditions:
        """The black-box episode's conditions (dagent.core.conditions), as training runs it."""
        return Conditions.of(
            "black-box",
            RECIPE_SAMPLING,
            tokens_per_call=self.max_output_tokens,
            tokens_per_episode=None,
            step_cap=self.agent_steps,
            output_chars=None,
            timeout_s=self.agent_timeout_s,
        )

    @property
    def batch(self) -> int:
        return self.num_generations * self.groups_per_step
