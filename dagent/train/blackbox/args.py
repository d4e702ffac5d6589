"""The black-box job's arguments (`BlackboxArgs`), read once into a plan (`dagent.train.blackbox.plan`)
that the sync trainer (`dagent.train.blackbox.trainer`) and the async launcher
(`dagent.train.blackbox.async_trainer`) both build from. The recipe itself is `dagent.recipes.BlackboxRecipe`."""

from __future__ import annotations

from dataclasses import dataclass, field

from dagent.errors import ConfigError
from dagent.recipes import HARNESSES, BlackboxRecipe, resolve
from dagent.train.args import TrainArgs
from dagent.train.options import Refusal

# Refused on both black-box launch paths (F59, dagent.train.options).
ONE_PROCESS = Refusal(
    "accelerate_config",
    "black-box training runs one trainer process",
    "drop it, or train white-box on several processes",
)


@dataclass
class BlackboxArgs(TrainArgs):
    """`jobs/train_blackbox.py` and `dagent train blackbox` (one definition)."""

    mode: str = field(
        default="sync",
        metadata={
            "help": (
                "sync: GRPOTrainer(rollout_func) with the trainer's model served in-process (CPU, one process); async: "
                "AsyncGRPOTrainer + HarnessRolloutWorker with vLLM on its own GPU."
            )
        },
    )
    harness: str = field(
        default="opencode",
        metadata={"help": "Agent harnesses, comma-separated; each GRPO group runs one (routed by group id, F40)."},
    )
    agent_steps: int | None = field(
        default=None, metadata={"help": "The agent's own step cap (at most the environment's budget, F35)."}
    )
    out: str = field(
        default="runs/blackbox", metadata={"help": "Output directory (checkpoint-N/, final/, receipts.jsonl)."}
    )
    env_url: str | None = field(
        default=None,
        metadata={"help": "async: a running black-box server or Space (its capture must reach --engine-url)."},
    )
    engine_url: str | None = field(
        default=None,
        metadata={"help": "async: where the job's vLLM answers as the server sees it (a public URL for a Space)."},
    )
    engine_devices: str = field(
        default="0",
        metadata={"help": "async: CUDA devices of the vLLM engine, e.g. 0 or 0,1 (the trainer takes the rest)."},
    )
    dry_run: bool = field(
        default=False, metadata={"help": "async: build and check the config, print the engine command, start nothing."}
    )
    generation_dtype: str | None = field(
        default=None,
        metadata={
            "help": (
                "sync on a CPU: auto (the preset's) serves rollouts from a bfloat16 copy of the trainer's weights "
                "where the CPU computes bfloat16 natively; float32: from the trainer's module itself."
            )
        },
    )

    def recipe(self) -> BlackboxRecipe:
        given = self.overrides(
            agent_steps=self.agent_steps, groups_per_step=self.groups_per_step, generation_dtype=self.generation_dtype
        )
        return resolve("blackbox", self.preset, **given)

    def harnesses(self) -> tuple[str, ...]:
        names = tuple(h.strip() for h in self.harness.split(",") if h.strip())
        if not names:
            raise ConfigError("--harness names no harness: use opencode, pi or opencode,pi")
        unknown = [h for h in names if h not in HARNESSES]
        if unknown:
            raise ConfigError(f"unknown harness {unknown[0]!r}: use {', '.join(HARNESSES)}")
        return names
