"""What a protocol run could have detected (pure): variance components of a paired difference
pooled over seeds, the smallest effect a design sees with 80% power, and the verdict that refuses to
state a result without it (F56).

The pooled difference of two arms (GRPO - control, or GRPO - warm start) is the mean of d[s, t]
over seeds s and tasks t, each d the difference of pass@1 of task t between the arms of seed s. Two
sources of spread, estimated from a run by the method of moments:

- within a seed, the spread of d over tasks (`task_sd`): which tasks a seed's arms differ on
  (sampling, and the tasks' own response to training);
- between seeds, the spread of the seeds' own means beyond what the within-seed spread explains
  (`seed_sd`): training runs that differ by seed.

When every seed is evaluated on the SAME tasks (and paired with one shared baseline evaluation),
seeds and tasks are crossed, and a third component appears: the part of a task's difference that
every seed shares (`shared_sd`: the task is easy for every trained arm, or the one warm-start
evaluation of it was unlucky). It does not average out over seeds, only over tasks (F58):

Var(pooled mean) = seed_sd^2 / S + shared_sd^2 / T + task_sd^2 / (S T), and the effect detected
with power 1 - beta
at two-sided level alpha is (z_{1-alpha/2} + z_{1-beta}) x its square root (normal approximation;
with 3 seeds the seed term is itself known only roughly, so a design is sized with margin).
More samples a task shrink `task_sd` only in its sampling part: `mde` takes the task spread at the
design's samples, and `task_sd_at` scales a measured one between the two bounds (all sampling noise,
or none).

    comps = Components.of([d_seed0, d_seed1, d_seed2])   # per-seed arrays of per-task differences
    comps = Components.crossed(d)                        # d[s, t]: the same tasks in every seed (F58)
    mde(comps, seeds=3, tasks=128)                          # e.g. 0.09: 9 points
    verdict(diff=0.05, ci=(-0.02, 0.12), detectable=0.09)  # "no effect detected; ... 9.0 points"
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from dagent.errors import DagentError

__all__ = ["Components", "PowerError", "mde", "task_sd_at", "verdict"]


class PowerError(DagentError):
    """A result stated without the effect its design could detect (F56)."""


@dataclass(frozen=True)
class Components:
    """The spread of per-task differences within a seed, of the seeds' means between seeds and, where
    the seeds share their tasks, of the tasks' effect every seed shares (`shared_sd`)."""

    task_sd: float
    seed_sd: float
    seeds: int  # what they were estimated from
    tasks: int  # tasks a seed (the mean over seeds)
    shared_sd: float = 0.0  # crossed designs only: the task effect common to every seed (F58)

    @classmethod
    def of(cls, per_seed: Sequence[Sequence[float]]) -> Components:
        """From each seed's per-task differences (method of moments; the seed variance floored at 0)."""
        arrays = [np.asarray(d, dtype=float) for d in per_seed if len(d)]
        if not arrays or any(len(a) < 2 for a in arrays):
            raise PowerError("variance components need at least 2 tasks in every seed")
        within = float(np.mean([a.var(ddof=1) for a in arrays]))
        tasks = float(np.mean([len(a) for a in arrays]))
        means = np.array([a.mean() for a in arrays])
        between = float(means.var(ddof=1)) - within / tasks if len(arrays) > 1 else 0.0
        return cls(math.sqrt(within), math.sqrt(max(0.0, between)), len(arrays), round(tasks))

    @classmethod
    def crossed(cls, d: np.ndarray) -> Components:
        """From a seeds x tasks matrix of differences on the SAME tasks (two-way random effects without
        replication, method of moments, each component floored at 0): `task_sd` is then the
        seed-by-task interaction, `shared_sd` the tasks' common effect. With one seed the shared and
        the interaction parts cannot be told apart, and all of it is taken as shared."""
        d = np.asarray(d, dtype=float)
        if d.ndim != 2 or d.shape[1] < 2 or np.isnan(d).any():
            raise PowerError("crossed components need a complete seeds x tasks matrix with at least 2 tasks")
        s, t = d.shape
        if s == 1:
            return cls(0.0, 0.0, 1, t, shared_sd=float(d[0].std(ddof=1)))
        grand = d.mean()
        rows, cols = d.mean(axis=1), d.mean(axis=0)
        ms_seed = t * float(((rows - grand) ** 2).sum()) / (s - 1)
        ms_task = s * float(((cols - grand) ** 2).sum()) / (t - 1)
        resid = d - rows[:, None] - cols[None, :] + grand
        ms_resid = float((resid**2).sum()) / ((s - 1) * (t - 1))
        return cls(
            math.sqrt(ms_resid),
            math.sqrt(max(0.0, (ms_seed - ms_resid) / t)),
            s,
            t,
            shared_sd=math.sqrt(max(0.0, (ms_task - ms_resid) / s)),
        )


def task_sd_at(measured: float, samples_then: int, samples_now: int, *, sampling_share: float = 1.0) -> float:
    """The within-seed task spread at `samples_now` samples a task, from one measured at
    `samples_then`, when `sampling_share` of its variance is sampling noise (1.0: all of it, the
    optimistic bound; 0.0: none, the pessimistic one)."""
    var = measured**2
    return math.sqrt(var * (1 - sampling_share) + var * sampling_share * samples_then / samples_now)


def mde(
    comps: Components, *, seeds: int, tasks: int, task_sd: float | None = None, alpha: float = 0.05, power: float = 0.8
) -> float:
    """The smallest true pooled difference the design (seeds x tasks) detects with `power` at
    two-sided level `alpha`, from `comps` (or a task spread `task_sd` for the design's samples)."""
    if seeds < 1 or tasks < 1:
        raise PowerError(f"a design of {seeds} seeds x {tasks} tasks measures nothing")
    sd = comps.task_sd if task_sd is None else task_sd
    se = math.sqrt(comps.seed_sd**2 / seeds + comps.shared_sd**2 / tasks + sd**2 / (seeds * tasks))
    z = NormalDist()
    return (z.inv_cdf(1 - alpha / 2) + z.inv_cdf(power)) * se


def verdict(
    diff: float | None, ci: tuple[float, float] | None, detectable: float | None, *, signs_agree: bool | None = None
) -> str:
    """The sentence a report may state about a pooled difference: a detected effect (CI above or
    below 0, seeds agreeing) or "no effect detected", each WITH the effect the design could detect.
    Refuses (PowerError) when that is not known (F56)."""
    if detectable is None or not math.isfinite(detectable):
        raise PowerError(
            "no detectable effect given: a result (or its absence) stated without the effect the "
            "design could see reads sampling noise as evidence; compute it (dagent.eval.power.mde) "
            "from the run's own variance components and state it beside the result (F56)"
        )
    if diff is None or ci is None:
        return f"nothing to compare (the design could detect {detectable:+.1%} with 80% power)"
    size = f"{diff:+.1%} [95% CI {ci[0]:+.1%}, {ci[1]:+.1%}]"
    power = f"the design could detect about {detectable * 100:.1f} points with 80% power"
    if ci[0] > 0 and signs_agree is not False:
        return f"effect detected: {size}; {power}"
    if ci[1] < 0 and signs_agree is not False:
        return f"negative effect detected: {size}; {power}"
    return f"no effect detected: {size}; {power}, so a smaller effect is not ruled out"
