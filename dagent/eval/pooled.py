"""A paired difference pooled over training seeds (pure): the claim a reviewer reads.

Each seed s is one pair of evaluations of the SAME tasks (baseline A_s, candidate B_s: GRPO and its
warm start, or GRPO and its permuted-reward control). Per seed, the per-task differences d_{s,t}
of pass@k over the tasks graded in both (`scoring.paired_values`; exclusions counted first, F24).
Pooled: the mean of d over every (seed, task) pair, with a two-level bootstrap 95% CI that
resamples SEEDS, then tasks within each drawn seed, so the interval carries the run-to-run spread
as well as the task sampling (a CI over tasks alone would read three seeds as three times the
evidence). Seeded: the same records and seed give the same numbers.

    pooled([(warm_start_0, grpo_0), (warm_start_1, grpo_1), (warm_start_2, grpo_2)],
           a_arm="warm start", b_arm="GRPO")
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from dagent.core.outcome import EvalRecord
from dagent.errors import ConfigError
from dagent.eval.power import Components, PowerError, mde, verdict
from dagent.eval.scoring import Paired, paired, paired_values, tally

__all__ = ["Pooled", "pooled"]


class Pooled(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    a_arm: str
    b_arm: str
    k: int
    seeds: int
    per_seed: list[Paired] = Field(description="Each seed's own paired comparison, exclusions counted.")
    pairs: int = Field(description="(seed, task) pairs graded in both arms.")
    diff: float | None = Field(description="Mean of B - A over every (seed, task) pair.")
    ci: tuple[float, float] | None = Field(description="95% two-level bootstrap CI: seeds, then tasks within seeds.")
    signs_agree: bool | None = Field(description="Every seed's own difference has the pooled one's sign.")
    task_sd: float | None = Field(default=None, description="Spread of per-task differences within a seed.")
    seed_sd: float | None = Field(default=None, description="Spread of the seeds' means beyond the within-seed spread.")
    detectable: float | None = Field(default=None, description="The pooled difference this design (its seeds x tasks, "
                                     "its own variance components) detects with 80% power (F56).")

    def verdict(self) -> str:
        """What may be said of the difference, with the effect the design could detect (F56); raises
        `PowerError` where that is unknown (one seed, or under 2 tasks a seed)."""
        return verdict(self.diff, self.ci, self.detectable, signs_agree=self.signs_agree)

    def lines(self) -> list[str]:
        out = [f"{self.b_arm} - {self.a_arm}, pass@{self.k}, pooled over {self.seeds} seeds:"]
        for s, p in enumerate(self.per_seed):
            excluded = {**p.excluded_a_by_cause, **{f"{c} ({p.b_arm})": n for c, n in p.excluded_b_by_cause.items()}}
            head = f"  seed {s}: {p.paired_tasks} tasks paired, excluded {excluded or 'none'}"
            if p.diff is None:
                out.append(head + ": nothing to compare")
                continue
            assert p.ci is not None
            out.append(f"{head}: {p.diff:+.1%} [95% CI {p.ci[0]:+.1%}, {p.ci[1]:+.1%}] "
                       f"(wins {p.wins} losses {p.losses} ties {p.ties})")
        if self.diff is None or self.ci is None:
            out.append("  pooled: no (seed, task) pair graded in both arms")
        else:
            out.append(f"  pooled over {self.pairs} (seed, task) pairs: {self.diff:+.1%} "
                       f"[95% CI {self.ci[0]:+.1%}, {self.ci[1]:+.1%}], per-seed signs "
                       f"{'agree' if self.signs_agree else 'DISAGREE'}")
        try:
            out.append(f"  verdict: {self.verdict()} (within-seed task sd {self.task_sd:.3f}, between-seed sd "
                       f"{self.seed_sd:.3f})")
        except PowerError as e:
            out.append(f"  verdict: none stated: {e}")
        return out


def _two_level_ci(diffs: Sequence[np.ndarray], n_boot: int, seed: int) -> tuple[float, float] | None:
    kept = [d for d in diffs if len(d)]
    if not kept:
        return None
    rng = np.random.default_rng(seed)
    means = np.empty(n_boot)
    for b in range(n_boot):
        drawn = [kept[i] for i in rng.integers(0, len(kept), size=len(kept))]
        values = np.concatenate([d[rng.integers(0, len(d), size=len(d))] for d in drawn])
        means[b] = values.mean()
    lo, hi = np.quantile(means, [0.025, 0.975])
    return float(lo), float(hi)


def pooled(seeds: Iterable[tuple[Iterable[EvalRecord], Iterable[EvalRecord]]], *, k: int = 1, n_boot: int = 4_000,
           seed: int = 0, a_arm: str = "A", b_arm: str = "B") -> Pooled:
    """B against A pooled over seeds (module docstring); `seeds` holds one (A records, B records) per seed."""
    per_seed, diffs = [], []
    for a_records, b_records in seeds:
        a_records, b_records = list(a_records), list(b_records)
        per_seed.append(paired(a_records, b_records, k=k, n_boot=n_boot, seed=seed, a_arm=a_arm, b_arm=b_arm))
        _, va, vb = paired_values(tally(a_records), tally(b_records), k)
        diffs.append(vb - va)
    if not per_seed:
        raise ConfigError("pooled() needs at least one seed's (baseline, candidate) records")
    everything = np.concatenate(diffs) if diffs else np.array([])
    diff = float(everything.mean()) if len(everything) else None
    signs = [np.sign(p.diff) for p in per_seed if p.diff is not None]
    comps = detectable = None
    kept = [d for d in diffs if len(d)]
    if len(kept) > 1 and all(len(d) > 1 for d in kept):
        comps = Components.of(kept)
        detectable = mde(comps, seeds=len(kept), tasks=comps.tasks)
    return Pooled(a_arm=a_arm, b_arm=b_arm, k=k, seeds=len(per_seed), per_seed=per_seed, pairs=len(everything),
                  diff=diff, ci=_two_level_ci(diffs, n_boot, seed),
                  signs_agree=None if diff is None else all(s == np.sign(diff) for s in signs),
                  task_sd=comps.task_sd if comps else None, seed_sd=comps.seed_sd if comps else None,
                  detectable=detectable)
