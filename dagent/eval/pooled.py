"""A paired difference pooled over training seeds (pure): the claim a reviewer reads.

Each seed s is one pair of evaluations of the SAME tasks (baseline A_s, candidate B_s: GRPO and its
warm start, or GRPO and its permuted-reward control). Per seed, the per-task differences d_{s,t}
of pass@k over the tasks graded in both (`scoring.paired_values`; exclusions counted first, F24).
Pooled: the mean of d over every (seed, task) pair, with a bootstrap 95% CI that carries the
run-to-run spread as well as the task sampling (a CI over tasks alone would read three seeds as
three times the evidence).

Seeds evaluated on the SAME tasks (and, against the warm start, paired with ONE shared evaluation
of it) are crossed with the tasks, not nested in them: a task's effect is shared by every seed,
and resampling tasks separately within each seed counts that noise S times over, as if it were
independent (F58: the interval and the detectable effect come out too narrow). So the bootstrap
draws seeds and TASKS jointly (the pigeonhole bootstrap: one draw of seed rows, one draw of task
columns, the mean of the cells drawn; Owen 2007, slightly conservative), and the detectable
effect comes from the crossed variance components (`power.Components.crossed`). Seeds that share
no task fall back to the nested model. Seeded: the same records and seed give the same numbers.

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
    ci: tuple[float, float] | None = Field(
        description="95% bootstrap CI: seeds and tasks drawn jointly (crossed), or "
        "seeds then tasks within seeds (nested: seeds share no task)."
    )
    design: str = Field(default="crossed", description="crossed: seeds evaluated on shared tasks (F58); nested: not.")
    signs_agree: bool | None = Field(description="Every seed's own difference has the pooled one's sign.")
    task_sd: float | None = Field(default=None, description="Spread of per-task differences within a seed.")
    seed_sd: float | None = Field(default=None, description="Spread of the seeds' means beyond the within-seed spread.")
    shared_sd: float | None = Field(
        default=None, description="Crossed: the spread of the task effect every seed shares."
    )
    detectable: float | None = Field(
        default=None,
        description="The pooled difference this design (its seeds x tasks, "
        "its own variance components) detects with 80% power (F56).",
    )
    within_seed_detectable: float | None = Field(
        default=None,
        description="One seed only: the difference its tasks and samples alone would detect with 80% power "
        "(the spread between training seeds unknown, so never a verdict's detectable effect).",
    )

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
            out.append(
                f"{head}: {p.diff:+.1%} [95% CI {p.ci[0]:+.1%}, {p.ci[1]:+.1%}] "
                f"(wins {p.wins} losses {p.losses} ties {p.ties})"
            )
        if self.diff is None or self.ci is None:
            out.append("  pooled: no (seed, task) pair graded in both arms")
        else:
            out.append(
                f"  pooled over {self.pairs} (seed, task) pairs: {self.diff:+.1%} "
                f"[95% CI {self.ci[0]:+.1%}, {self.ci[1]:+.1%}], per-seed signs "
                f"{'agree' if self.signs_agree else 'DISAGREE'}"
            )
        try:
            shared = f", shared task sd {self.shared_sd:.3f}" if self.design == "crossed" else ""
            out.append(
                f"  verdict: {self.verdict()} ({self.design} seeds x tasks: seed-by-task sd {self.task_sd:.3f}"
                f"{shared}, between-seed sd {self.seed_sd:.3f})"
            )
        except PowerError as e:
            if self.within_seed_detectable is None:
                out.append(f"  verdict: none stated: {e}")
            else:
                out.append(
                    "  verdict: none stated: one seed, so the spread between training seeds is unknown and no "
                    "pooled verdict is given (F56); within this seed alone (its tasks and samples, not its "
                    f"training seed) the design detects about {self.within_seed_detectable * 100:.1f} points "
                    "with 80% power"
                )
        return out


def _matrix(diffs: Sequence[tuple[list[str], np.ndarray]]) -> tuple[np.ndarray, list[str]]:
    """Seeds x tasks (the union of the seeds' paired tasks, first seen first), NaN where a seed has none."""
    tasks = list(dict.fromkeys(t for ids, _ in diffs for t in ids))
    where = {t: j for j, t in enumerate(tasks)}
    m = np.full((len(diffs), len(tasks)), np.nan)
    for i, (ids, d) in enumerate(diffs):
        m[i, [where[t] for t in ids]] = d
    return m, tasks


def crossed_ci(m: np.ndarray, n_boot: int, seed: int) -> tuple[float, float] | None:
    """95% CI of the mean of the non-NaN cells of seeds x tasks `m`, seed rows and task columns drawn
    jointly with replacement (every drawn seed is read on the same drawn tasks)."""
    rows = [i for i in range(m.shape[0]) if not np.isnan(m[i]).all()]
    if not rows:
        return None
    m = m[rows]
    rng = np.random.default_rng(seed)
    means = np.empty(n_boot)
    for b in range(n_boot):
        cells = m[np.ix_(rng.integers(0, m.shape[0], m.shape[0]), rng.integers(0, m.shape[1], m.shape[1]))]
        means[b] = np.nanmean(cells) if not np.isnan(cells).all() else np.nan
    lo, hi = np.nanquantile(means, [0.025, 0.975])
    return float(lo), float(hi)


def nested_ci(diffs: Sequence[np.ndarray], n_boot: int, seed: int) -> tuple[float, float] | None:
    """95% CI for seeds that share no task: seeds drawn, then tasks within each drawn seed."""
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


def pooled(
    seeds: Iterable[tuple[Iterable[EvalRecord], Iterable[EvalRecord]]],
    *,
    k: int = 1,
    n_boot: int = 4_000,
    seed: int = 0,
    a_arm: str = "A",
    b_arm: str = "B",
) -> Pooled:
    """B against A pooled over seeds (module docstring); `seeds` holds one (A records, B records) per seed."""
    per_seed, diffs = [], []
    for a_records, b_records in seeds:
        a_records, b_records = list(a_records), list(b_records)
        per_seed.append(paired(a_records, b_records, k=k, n_boot=n_boot, seed=seed, a_arm=a_arm, b_arm=b_arm))
        ids, va, vb = paired_values(tally(a_records), tally(b_records), k)
        diffs.append((ids, vb - va))
    if not per_seed:
        raise ConfigError("pooled() needs at least one seed's (baseline, candidate) records")
    m, _ = _matrix(diffs)
    values = m[~np.isnan(m)]
    diff = float(values.mean()) if len(values) else None
    signs = [np.sign(p.diff) for p in per_seed if p.diff is not None]
    kept = [i for i, (ids, _) in enumerate(diffs) if len(ids)]
    shared = m[kept][:, ~np.isnan(m[kept]).any(axis=0)] if kept else m[:0]
    crossed = len(kept) > 1 and shared.shape[1] > 0
    comps = detectable = None
    if crossed and shared.shape[1] > 1:
        comps = Components.crossed(shared)
    elif not crossed and len(kept) > 1 and all(len(diffs[i][0]) > 1 for i in kept):
        comps = Components.of([diffs[i][1] for i in kept])
    if comps is not None:
        detectable = mde(comps, seeds=len(kept), tasks=comps.tasks)
    within = None
    if len(kept) == 1 and len(diffs[kept[0]][0]) > 1:  # one seed: its own task spread, seed spread unknown
        one = Components.of([diffs[kept[0]][1]])
        within = mde(one, seeds=1, tasks=one.tasks)
    ci = crossed_ci(m, n_boot, seed) if crossed else nested_ci([d for _, d in diffs], n_boot, seed)
    return Pooled(
        a_arm=a_arm,
        b_arm=b_arm,
        k=k,
        seeds=len(per_seed),
        per_seed=per_seed,
        pairs=len(values),
        diff=diff,
        ci=ci,
        design="crossed" if crossed else "nested",
        signs_agree=None if diff is None else all(s == np.sign(diff) for s in signs),
        task_sd=comps.task_sd if comps else None,
        seed_sd=comps.seed_sd if comps else None,
        shared_sd=comps.shared_sd if comps and crossed else None,
        detectable=detectable,
        within_seed_detectable=within,
    )
