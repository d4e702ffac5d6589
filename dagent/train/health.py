"""Training health, watched while a run trains: a TRL/transformers callback.

It stops the run, with a named reason kept in `HealthWatch.stopped`, when
- the run sits in the ABSORBING state: reward_std 0 and grad-norm 0 for `patience` logged steps in
  a row, which together hold at least `absorbing_groups` groups (every group scores alike and
  nothing moves; F39), or
- entropy climbs away from its start (`entropy_rise` above the mean of its first logged values, for
  `patience` steps in a row: the sampler and the trainer disagree, or the policy is collapsing
  into noise; F05), calibrated on the seed's measured runs (the fields' comment), or
- entropy falls by `entropy_fall` (the policy going deterministic: exploration ends).
It also adds, to the metrics the trainer logs, ungraded rollouts by cause (white-box episodes
finished since the last step, from the episode registry; None rewards are not zeros, F32) and
keeps TRL's own `tools/failure_frequency` (malformed tool calls) and `completions/clipped_ratio`
(rollouts cut by the completion budget). Step 0's importance ratio, when the trainer reports one,
is checked to read about 1 (F05).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from transformers import TrainerCallback

from dagent.core.outcome import cause_head
from dagent.errors import DagentError
from dagent.tools.episode import finished_episodes


def groups_per_step(args: Any) -> int:
    """GRPO groups in one optimizer step, from the trainer's arguments (1 when they do not say):
    completions a step (batch x accumulation x processes) over the group size."""
    generations = getattr(args, "num_generations", None)
    if not isinstance(generations, int) or generations < 1:
        return 1
    completions = (
        getattr(args, "per_device_train_batch_size", generations)
        * getattr(args, "gradient_accumulation_steps", 1)
        * max(1, getattr(args, "world_size", 1))
    )
    return max(1, completions // generations)


class TrainingHealthError(DagentError):
    """The run was stopped by the health watch; the message names why."""


@dataclass
class HealthWatch(TrainerCallback):
    patience: int = 3
    # The absorbing state also needs this many alike GROUPS in a row, not only `patience` steps: with
    # one group a step (both cpu presets), a warm start at 50% on tasks of mixed difficulty has about
    # half its groups alike by chance, and 3 steps in a row then stopped 2 of 5 six-step black-box
    # runs of the learning protocol (runs of the same seed ended at different steps). 12 alike in a
    # row: ~2e-4 at half the groups alike by chance, ~1% at 70%; a model truly stuck reaches it anyway.
    absorbing_groups: int = 12
    # Entropy against its own start (the mean of the first `baseline_steps` logged values), relative:
    # the seed's collapsing run climbed 0.23 -> 0.59 nats over 24 steps while the reference held
    # 0.17-0.21 (about +-10% around its start); +50% (and at least `entropy_delta` nats) for
    # `patience` steps stops the first early and never the second. A fall by half is the other
    # collapse (the policy going deterministic: beta=0 with nothing holding it).
    entropy_rise: float = 0.5
    entropy_fall: float = 0.5
    entropy_delta: float = 0.05
    baseline_steps: int = 3
    ratio_tolerance: float = 0.1
    trainer: Any = None  # set after the trainer is built, to add metrics to its log
    stopped: str | None = None
    history: list[dict[str, float]] = field(default_factory=list)
    _flat: int = 0
    _flat_groups: int = 0
    _hot: int = 0
    _cold: int = 0
    _entropies: list[float] = field(default_factory=list)
    _seen: set = field(default_factory=set)

    def ungraded_since_last(self) -> Counter:
        out: Counter = Counter()
        for eid, summary in finished_episodes().items():
            if eid in self._seen:
                continue
            self._seen.add(eid)
            if summary.get("reward") is None:
                out[cause_head(summary.get("cause")) or "unknown"] += 1
        return out

    def on_step_end(self, args, state, control, **kwargs):
        metrics = getattr(self.trainer, "_metrics", None)
        if metrics is not None:
            ungraded = self.ungraded_since_last()
            train = metrics["train"]
            train["ungraded/total"].append(float(sum(ungraded.values())))
            for cause, n in ungraded.items():
                train[f"ungraded/{cause}"].append(float(n))
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        if "reward_std" not in logs and "grad_norm" not in logs:
            return control
        self.history.append({k: float(v) for k, v in logs.items() if isinstance(v, (int, float))})
        ratio = logs.get("sampling/importance_sampling_ratio/mean")
        if len(self.history) == 1 and ratio is not None and abs(float(ratio) - 1.0) > self.ratio_tolerance:
            self._stop(
                control,
                f"importance_ratio_off: step 0's importance ratio is {float(ratio):.3f}, not ~1: "
                "the engine samples under other settings than the trainer scores (F05)",
            )
        flat = float(logs.get("reward_std", 1.0)) == 0.0 and float(logs.get("grad_norm", 1.0)) == 0.0
        self._flat = self._flat + 1 if flat else 0
        self._flat_groups = self._flat_groups + groups_per_step(args) if flat else 0
        if self._flat >= self.patience and self._flat_groups >= self.absorbing_groups:
            self._stop(
                control,
                f"absorbing_state: reward_std 0 and grad_norm 0 for {self._flat} steps "
                f"({self._flat_groups} groups) in a row: "
                "every group scores alike and nothing learns; warm-start with SFT, change the tier or "
                "raise num_generations (F39)",
            )
        entropy = logs.get("entropy")
        if entropy is not None:
            self._watch_entropy(float(entropy), control)
        return control

    def _watch_entropy(self, entropy: float, control) -> None:
        self._entropies.append(entropy)
        if len(self._entropies) <= self.baseline_steps:
            return
        start = sum(self._entropies[: self.baseline_steps]) / self.baseline_steps
        hot = entropy > start * (1 + self.entropy_rise) and entropy - start >= self.entropy_delta
        cold = entropy < start * (1 - self.entropy_fall) and start - entropy >= self.entropy_delta
        self._hot = self._hot + 1 if hot else 0
        self._cold = self._cold + 1 if cold else 0
        step = len(self._entropies)
        if self._hot >= self.patience:
            self._stop(
                control,
                f"entropy_climbing: entropy {entropy:.3f} vs {start:.3f} at the start (+"
                f"{100 * (entropy / start - 1):.0f}%) for {self._hot} logged steps, at step {step}: the policy "
                "is collapsing into noise or the sampler and the trainer disagree; check sampling (F05), lower "
                "the learning rate",
            )
        if self._cold >= self.patience:
            self._stop(
                control,
                f"entropy_collapsing: entropy {entropy:.3f} vs {start:.3f} at the start ("
                f"{100 * (entropy / start - 1):.0f}%) for {self._cold} logged steps, at step {step}: the policy "
                "is going deterministic and exploration ends; raise beta (a KL to the reference) or lower the "
                "learning rate",
            )

    def _stop(self, control, reason: str) -> None:
        if self.stopped is None:
            self.stopped = reason
        control.should_training_stop = True

    def raise_if_stopped(self) -> None:
        if self.stopped is not None:
            raise TrainingHealthError(self.stopped)
