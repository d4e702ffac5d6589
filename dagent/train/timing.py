"""Where a GRPO step's seconds go: a callback that splits each optimizer step into phases.

Measured phases (wall seconds, nested, all on the trainer's thread):
- `step`: on_step_begin -> on_step_end (the whole optimizer step, generation included);
- `rollout`: TRL's `_generate_and_score_completions` (generation, tools, rewards, old/ref logprobs);
- `generation`: TRL's `_generate_single_turn` (the model decoding, every turn);
- `env`: the in-process environment class's methods (`reset`, every tool, `get_reward`: dagent's
  code), reported by `Runtime(clock=...)`;
- `sandbox_setup`: inside env, creating and staging a sandbox (and closing it);
- `sandbox_tools`: inside env, the sandbox's exec / read / write that tools make
  (`dagent.sandbox.timed`).
Against a server (`--env-url`) the environment runs elsewhere: its seconds land in `scoring`.
Reported per step (`time/<phase>` in the trainer's metrics, so trackio gets them) as EXCLUSIVE
shares: generation; tools in the sandbox; sandbox setup; environment overhead (env minus its
sandbox time: registry, clipping, staging bookkeeping, grading); trainer scoring (rollout minus
generation and env: reference/old logprobs, TRL's tool-loop templating and tokenising, reward
bookkeeping); optimizer (step minus rollout:
forward, backward, optimizer step).

The two TRL methods are private; on a TRL without them the step is reported unsplit
(`time/unsplit` 1.0) instead of failing the run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from transformers import TrainerCallback

from dagent.clock import PhaseClock
from dagent.train.trl_seams import GENERATE_TURN, ROLLOUT

TRL_PHASES = {"rollout": ROLLOUT, "generation": GENERATE_TURN}
EXCLUSIVE = ("generation", "sandbox_tools", "sandbox_setup", "env_overhead", "scoring", "optimizer")


def exclusive(raw: dict[str, float]) -> dict[str, float]:
    """Nested phase totals -> the exclusive split (seconds); keys EXCLUSIVE plus `step`."""
    step, rollout = raw.get("step", 0.0), raw.get("rollout", 0.0)
    env, gen = raw.get("env", 0.0), raw.get("generation", 0.0)
    tools, setup = raw.get("sandbox_tools", 0.0), raw.get("sandbox_setup", 0.0)
    return {
        "generation": gen,
        "sandbox_tools": tools,
        "sandbox_setup": setup,
        "env_overhead": max(env - tools - setup, 0.0),
        "scoring": max(rollout - gen - env, 0.0),
        "optimizer": max(step - rollout, 0.0),
        "step": step,
    }


@dataclass
class StepTimer(TrainerCallback):
    """Adds `time/<phase>` (seconds this step) to the trainer's metrics; keeps every step's split."""

    clock: PhaseClock = field(default_factory=PhaseClock)
    trainer: Any = None
    steps: list[dict[str, float]] = field(default_factory=list)
    split: bool = False
    _t0: float | None = None

    def attach(self, trainer: Any) -> None:
        """Time the trainer's rollout and generation methods (instance attributes; TRL untouched)."""
        self.trainer = trainer
        missing = [m for m in TRL_PHASES.values() if not callable(getattr(trainer, m, None))]
        self.split = not missing
        if self.split:
            for name, method in TRL_PHASES.items():
                setattr(trainer, method, self.clock.timed(name, getattr(trainer, method)))

    def on_step_begin(self, args, state, control, **kwargs):
        self.clock.take()  # what ran between steps (logging, saving) is no step's
        self._t0 = time.perf_counter()
        return control

    def on_step_end(self, args, state, control, **kwargs):
        if self._t0 is None:
            return control
        raw = self.clock.take()
        raw["step"] = time.perf_counter() - self._t0
        split = exclusive(raw) if self.split else {"step": raw["step"]}
        self.steps.append(split)
        metrics = getattr(self.trainer, "_metrics", None)
        if metrics is not None:
            for k, v in split.items():
                metrics["train"][f"time/{k}"].append(v)
            if not self.split:
                metrics["train"]["time/unsplit"].append(1.0)
        return control
