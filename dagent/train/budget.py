"""A wall-clock budget for a training run: "as many steps as fit in an hour".

`TimeBudget(minutes)` is a transformers callback: at the first optimizer step that ends past the
budget it asks the trainer to save a checkpoint and stop, so the run ends on a whole step with its
optimizer, scheduler and trainer state saved (`checkpoint-N`, N the steps done), and `steps_done`
says how many a control of the same length must run (`--max-steps N`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from transformers import TrainerCallback

from dagent.errors import ConfigError


@dataclass
class TimeBudget(TrainerCallback):
    minutes: float
    clock: Any = time.monotonic
    started: float | None = None
    steps_done: int = 0
    expired: bool = False
    _t0: float = field(default=0.0, repr=False)

    def __post_init__(self) -> None:
        if not self.minutes > 0:
            raise ConfigError(f"--max-minutes must be above 0, not {self.minutes}")

    def on_train_begin(self, args, state, control, **kwargs):
        self.started = self.clock()
        return control

    def on_step_end(self, args, state, control, **kwargs):
        self.steps_done = state.global_step
        if self.started is not None and self.clock() - self.started >= self.minutes * 60:
            self.expired = True
            control.should_save = True
            control.should_training_stop = True
        return control
