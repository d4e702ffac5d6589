"""The arguments the white-box and black-box training jobs share (`jobs/train_*.py`, `dagent train
whitebox|blackbox`): one definition of each, subclassed by `WhiteboxArgs` and `BlackboxArgs`."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from dagent.errors import ConfigError
from dagent.train.preflight import TaskRates


@dataclass
class TrainArgs:
    preset: str = field(
        default="cpu", metadata={"help": "gpu: the published recipe; cpu: sized for a small CPU machine."}
    )
    model: str = field(
        default="tiny-qwen3",
        metadata={
            "help": (
                "tiny-qwen3, smollm2-135m, a model dir (an SFT checkpoint) or a Hub model repo OWNER/NAME[@REVISION] "
                "(OWNER/RUN@checkpoint-N: a pushed run's checkpoint)."
            )
        },
    )
    suite: str | None = field(
        default=None, metadata={"help": "Task suite: local build, Hub repo id (default: the bundled build)."}
    )
    split: str | None = field(default=None, metadata={"help": "Training split (default: the preset's, train:easy)."})
    max_steps: int | None = field(default=None, metadata={"help": "Optimizer steps (default: the preset's)."})
    max_minutes: float | None = field(
        default=None,
        metadata={
            "help": (
                "Stop (and checkpoint) at the first step that ends past this many minutes; a control of the same "
                "length then takes --max-steps of the steps done."
            )
        },
    )
    num_generations: int | None = field(default=None, metadata={"help": "Group size G (default: the preset's)."})
    groups_per_step: int | None = field(
        default=None,
        metadata={"help": "Groups (prompts, each of G rollouts) an optimizer step (default: the preset's; cpu: 1)."},
    )
    learning_rate: float | None = field(
        default=None, metadata={"help": "Learning rate (0 for a control run of the same length)."}
    )
    warmup_steps: int | None = field(
        default=None,
        metadata={
            "help": (
                "Linear warm-up steps (default: the preset's); 0 for a short smoke, whose first step would otherwise "
                "have lr 0."
            )
        },
    )
    save_steps: int | None = field(
        default=None, metadata={"help": "Checkpoint every N steps (optimizer, scheduler and trainer state)."}
    )
    seed: int = field(default=0, metadata={"help": "Seed of the trainer and the sampling."})
    base_pass1: float | None = field(
        default=None, metadata={"help": "Measured base pass@1 on the training tier, for the group-size check (F39)."}
    )
    base_eval: str | None = field(
        default=None,
        metadata={
            "help": (
                "The starting model's evaluation on the training tier (`dagent eval --out DIR`): the group-size check "
                "uses each task's own rate (F55), not the mean."
            )
        },
    )
    mixed_only: bool = field(
        default=False,
        metadata={
            "help": (
                "Train only on the tasks whose rate in --base-eval lies between 0.2 and 0.8: the groups that carry a "
                "gradient (F55)."
            )
        },
    )
    force: bool = field(default=False, metadata={"help": "Train even where most groups would score alike (F39, F55)."})
    report_to: str = field(default="trackio", metadata={"help": "trackio (offline store by default) or none."})
    run_name: str | None = field(default=None, metadata={"help": "Run name in trackio and the output dir."})
    push_to_hub: str | None = field(
        default=None,
        metadata={"help": "Hub model repo: every checkpoint-N/ (optimizer state included) and a model card."},
    )

    resume_from: str | None = field(
        default=None,
        metadata={
            "help": (
                "PATH or OWNER/NAME@checkpoint-N to resume from (weights, optimizer, scheduler, RNG state and step)."
            )
        },
    )
    control: str = field(
        default="none",
        metadata={
            "help": (
                "permuted: the control run, each batch's rewards shuffled across its rollouts (same optimiser, steps, "
                "data and code path; the reward no longer tracks the answer, F52); none: training."
            )
        },
    )
    trackio_space: str | None = field(
        default=None,
        metadata={
            "help": (
                "A Hub Space (OWNER/NAME) the trackio metrics sync to, so a job's curves outlive its container "
                "(default: the offline store under --out/trackio)."
            )
        },
    )
    project_url: str | None = field(
        default=None,
        metadata={
            "help": (
                "The project's repository named in model cards (default: $DAGENT_PROJECT_URL, the checkout's origin "
                "remote, or where a job installed dagent from)."
            )
        },
    )
    processes: int = field(
        default=0,
        metadata={
            "help": (
                "Trainer processes: 0 = one per visible GPU (the job relaunches itself under `accelerate launch` on a "
                "multi-GPU machine), N = that many (2 on a CPU: gloo)."
            )
        },
    )
    accelerate_config: str = field(
        default="multi_gpu",
        metadata={
            "help": (
                "With more than one process: TRL's accelerate config (multi_gpu = DDP, zero1/zero2/zero3 = DeepSpeed "
                "ZeRO, fsdp1/fsdp2) or a YAML path."
            )
        },
    )

    def rates(self) -> Any:
        """The per-task rates of --base-eval (dagent.train.preflight.TaskRates), or None."""
        if self.mixed_only and not self.base_eval:
            raise ConfigError("--mixed-only selects tasks by their measured rate: give --base-eval DIR too")
        return TaskRates.read(self.base_eval) if self.base_eval else None

    def apply_project_url(self) -> None:
        """Model cards and provenance name `--project-url` (read from $DAGENT_PROJECT_URL)."""
        if self.project_url:
            os.environ["DAGENT_PROJECT_URL"] = self.project_url

    def trackio(self) -> dict[str, Any]:
        """The trainer config's trackio settings: a Space when asked for, else the offline store."""
        return {"trackio_space_id": self.trackio_space} if self.report_to == "trackio" and self.trackio_space else {}

    def overrides(self, **more: Any) -> dict[str, Any]:
        """The recipe fields this run sets (None: the preset's), `more` included."""
        given = dict(
            split=self.split,
            max_steps=self.max_steps,
            num_generations=self.num_generations,
            learning_rate=self.learning_rate,
            warmup_steps=self.warmup_steps,
            save_steps=self.save_steps,
            seed=self.seed,
            **more,
        )
        return {k: v for k, v in given.items() if v is not None}
