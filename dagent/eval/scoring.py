"""Evaluation statistics over `EvalRecord`s: pass@k, one arm's scores, two arms paired (pure).

Scores are per TASK. A task's n is its GRADED samples and c its correct ones; an ungraded sample
(reward None) is never a wrong one (F32), and a task with no graded sample is excluded and
counted under its cause (F24). Invariants, each tested:

- every `lines()` states the exclusions before any score, and every score says what it is over;
- pass@k is Chen et al. (2021)'s unbiased estimator; a task with fewer than k graded samples is
  left out of pass@k for that k (and counted), never padded;
- `paired` compares two arms on the tasks graded in BOTH, and counts every task it dropped;
- intervals and p-values are seeded: the same records and seed give the same numbers.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from dagent.core.outcome import CUTOFFS, EvalRecord
from dagent.errors import ConfigError

TIERS = ("easy", "medium", "hard")
#: Wrong-answer categories, from the notes `dagent.grading` and `evaluation.settle` write.
WRONG_CATEGORIES = (
    "no_answer",
    "empty",
    "placeholder",
    "shell_command",
    "hedge",
    "outside_tolerance",
    "wrong_items",
    "not_a_number",
    "text_differs",
    "other",
)
_FROZEN = ConfigDict(frozen=True, extra="forbid")
_EXACT_PERMUTATION_MAX = 16  # up to 2**16 sign patterns are enumerated, beyond that sampled


def pass_at_k(n: int, c: int, k: int) -> float:
    """1 - C(n-c, k) / C(n, k): the chance that k of the n samples hold at least one correct."""
    for name, v in (("n", n), ("c", c), ("k", k)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise ConfigError(f"pass_at_k takes integers; got {name}={v!r}")
    if k < 1:
        raise ConfigError(f"pass@k needs k >= 1, got k={k}")
    if not 0 <= c <= n:
        raise ConfigError(f"pass@k needs 0 <= c <= n (correct among graded), got n={n}, c={c}")
    if k > n:
        raise ConfigError(
            f"pass@{k} needs at least {k} graded samples of the task, got n={n}: "
            f"evaluate with samples >= {k} or ask for a smaller k"
        )
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def _check_k(k: object) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ConfigError(f"k (of pass@k) must be a positive integer, got {k!r}")


class TaskTally(BaseModel):
    """One task in one arm: its samples, graded and correct, and why the others were ungraded."""

    model_config = _FROZEN
    task_id: str
    tier: str
    samples: int
    n: int = Field(description="Graded samples.")
    c: int = Field(description="Correct samples.")
    causes: dict[str, int] = Field(description="Ungraded samples by cause.")

    @property
    def cause(self) -> str:
        """The exclusion cause of a task with no graded sample: its most frequent one."""
        return min(self.causes.items(), key=lambda kv: (-kv[1], kv[0]))[0] if self.causes else "unknown"


def tally(records: Iterable[EvalRecord]) -> dict[str, TaskTally]:
    """One arm's records grouped by task, in first-seen order. Refuses a (task, sample) twice."""
    groups: dict[str, list[EvalRecord]] = defaultdict(list)
    seen: set[tuple[str, int]] = set()
    for r in records:
        if (r.task_id, r.sample) in seen:
            raise ConfigError(
                f"task {r.task_id!r} sample {r.sample} appears twice: pass one arm's "
                "records (one evaluation's records.jsonl) at a time"
            )
        seen.add((r.task_id, r.sample))
        groups[r.task_id].append(r)
    return {
        tid: TaskTally(
            task_id=tid,
            tier=rs[0].difficulty_tier,
            samples=len(rs),
            n=sum(r.outcome != "ungraded" for r in rs),
            c=sum(r.outcome == "correct" for r in rs),
            causes=dict(Counter(r.cause or "unknown" for r in rs if r.outcome == "ungraded")),
        )
        for tid, rs in groups.items()
    }


def bootstrap_ci(values: Sequence[float], *, n_boot: int = 10_000, seed: int = 0) -> tuple[float, float] | None:
    """95% percentile bootstrap interval of the mean over `values` (tasks); None when empty.
    Resamples are drawn in chunks, so memory stays bounded for any number of tasks."""
    if n_boot < 1:
        raise ConfigError(f"n_boot must be >= 1, got {n_boot}")
    if not len(values):
        return None
    v, rng, means = np.asarray(values, dtype=float), np.random.default_rng(seed), []
    step = max(1, 2_000_000 // len(v))
    for start in range(0, n_boot, step):
        means.append(v[rng.integers(0, len(v), size=(min(step, n_boot - start), len(v)))].mean(axis=1))
    lo, hi = np.quantile(np.concatenate(means), [0.025, 0.975])
    return float(lo), float(hi)


class GroupScores(BaseModel):
    """A set of tasks (an arm or one tier of it): the counts first, then the scores over graded."""

    model_config = _FROZEN
    tasks: int
    graded_tasks: int
    excluded_by_cause: dict[str, int] = Field(description="Tasks with no graded sample, by cause.")
    samples: int
    graded_samples: int
    short_of_k: dict[int, int] = Field(description="Per k: graded tasks with fewer than k graded samples.")
    pass_at: dict[int, float | None] = Field(description="Per k: mean pass@k over the tasks with n >= k.")
    pass1_ci: tuple[float, float] | None = Field(description="95% bootstrap CI of pass@1 over tasks.")
    mean_reward: float | None = Field(description="Mean reward over graded samples.")

    @property
    def excluded_tasks(self) -> int:
        return self.tasks - self.graded_tasks

    def score_text(self) -> str:
        parts = []
        for k, v in self.pass_at.items():
            text = "n/a" if v is None else f"{v:.1%}"
            if k == 1 and self.pass1_ci is not None:
                text += f" [95% CI {self.pass1_ci[0]:.1%}, {self.pass1_ci[1]:.1%}]"
            parts.append(f"pass@{k} {text} over {self.graded_tasks - self.short_of_k[k]} tasks")
        reward = "n/a" if self.mean_reward is None else f"{self.mean_reward:.3f}"
        return "  ".join(parts + [f"mean reward {reward} over {self.graded_samples} graded samples"])


def _group(
    tallies: Sequence[TaskTally], rewards: Sequence[float], k_values: Sequence[int], n_boot: int, seed: int
) -> GroupScores:
    graded = [t for t in tallies if t.n]
    pass_at, short = {}, {}
    for k in k_values:
        vals = [pass_at_k(t.n, t.c, k) for t in graded if t.n >= k]
        pass_at[k], short[k] = (sum(vals) / len(vals) if vals else None), len(graded) - len(vals)
    return GroupScores(
        tasks=len(tallies),
        graded_tasks=len(graded),
        excluded_by_cause=dict(sorted(Counter(t.cause for t in tallies if not t.n).items())),
        samples=sum(t.samples for t in tallies),
        graded_samples=sum(t.n for t in tallies),
        short_of_k=short,
        pass_at=pass_at,
        pass1_ci=bootstrap_ci([t.c / t.n for t in graded], n_boot=n_boot, seed=seed),
        mean_reward=sum(rewards) / len(rewards) if rewards else None,
    )


_PLACEHOLDER = re.compile(r"<[^<>\n]{1,60}>")
_SHELL = re.compile(
    r"^\s*(?:\$\s*)?(?:echo|printf|cat|tee|python3?|bash|sh|awk|sed|grep|head|tail|"
    r"cut|sort|uniq|wc|jq|ls|cd|sqlite3|duckdb)\s|\$\(|>>?\s*\S*answer\.txt",
    re.I,
)


def wrong_category(record: EvalRecord) -> str:
    """Why a wrong answer was wrong, as one of WRONG_CATEGORIES (from the grader's note)."""
    note, answer = record.note.strip(), record.answer
    if note == "no answer file was written" or (answer is None and note.startswith("empty answer (none")):
        return "no_answer"
    if note.startswith("empty answer") or (answer is not None and not answer.strip()):
        return "empty"
    for prefix, category in (("placeholder", "placeholder"), ("shell command", "shell_command"), ("hedge", "hedge")):
        if note.startswith(prefix):
            return category
    if answer is not None and _PLACEHOLDER.search(answer):
        return "placeholder"
    if answer is not None and _SHELL.search(answer):
        return "shell_command"
    if "outside tolerance" in note:
        return "outside_tolerance"
    if record.method == "list":
        return "wrong_items"
    if note == "answer is not a number" or note.startswith("not a number"):
        return "not_a_number"
    if note.startswith("text differs"):
        return "text_differs"
    return "other"


class Scores(GroupScores):
    """One arm: counts and scores overall and per tier, wrong answers by category, the step cap."""

    arm: str
    by_tier: dict[str, GroupScores]
    ungraded_by_cause: dict[str, int] = Field(description="Ungraded SAMPLES by cause.")
    wrong_by_category: dict[str, int]
    step_cap: int | None = None
    at_step_cap: float | None = Field(
        default=None,
        description="Fraction of graded samples with a known tool count whose tool_calls reached step_cap.",
    )
    cut_off_by: dict[str, int] = Field(
        default_factory=dict,
        description="Samples by where they were cut off (dagent.core.outcome.CUTOFFS), all outcomes.",
    )
    cut_off: float | None = Field(
        default=None,
        description="Fraction of the LLM agent's samples (model_calls known) that were cut off; None for the oracle.",
    )

    def lines(self) -> list[str]:
        """The report: exclusions first, then the scores, then what the wrong answers were."""
        out = [f"{self.arm}: tasks {self.tasks}  graded {self.graded_tasks}  excluded {self.excluded_tasks}"]
        out += [f"  excluded: {cause} x{n} tasks" for cause, n in self.excluded_by_cause.items()]
        if self.ungraded_by_cause:
            out.append(
                f"  ungraded samples {self.samples - self.graded_samples} of {self.samples}: "
                + ", ".join(f"{c} x{n}" for c, n in self.ungraded_by_cause.items())
            )
        out += [
            f"  pass@{k}: {n} graded tasks have fewer than {k} graded samples, left out"
            for k, n in self.short_of_k.items()
            if n
        ]
        out.append("  " + self.score_text())
        for tier, g in self.by_tier.items():
            excl = ", ".join(f"{c} x{n}" for c, n in g.excluded_by_cause.items()) or "none"
            out.append(f"  {tier:<6} tasks {g.tasks}  excluded {g.excluded_tasks} ({excl})  {g.score_text()}")
        wrong = sum(self.wrong_by_category.values())
        if wrong:
            out.append(f"  wrong answers {wrong}: " + ", ".join(f"{c} {n}" for c, n in self.wrong_by_category.items()))
        if self.step_cap is not None:
            at = "n/a" if self.at_step_cap is None else f"{self.at_step_cap:.1%}"
            out.append(f"  at the step cap ({self.step_cap} tool calls): {at} of graded samples")
        if self.cut_off is not None:
            where = ", ".join(f"{c} {n}" for c, n in self.cut_off_by.items()) or "none"
            out.append(f"  cut off mid-task: {self.cut_off:.1%} of samples ({where})")
        return out


def _arm_name(records: Sequence[EvalRecord]) -> str:
    names = sorted({f"{r.agent}/{r.model}" if r.model else r.agent for r in records})
    return ", ".join(names) or "empty"


def task_scores(
    records: Iterable[EvalRecord],
    k_values: Sequence[int] = (1,),
    *,
    step_cap: int | None = None,
    arm: str | None = None,
    n_boot: int = 10_000,
    seed: int = 0,
) -> Scores:
    """One arm's scores (module docstring); `arm` labels it (default: its agent/model)."""
    records = list(records)
    k_values = tuple(sorted(set(k_values)))
    if not k_values:
        raise ConfigError("k_values is empty: ask for at least pass@1, k_values=(1,)")
    for k in k_values:
        _check_k(k)
    tallies = tally(records)
    graded = [r for r in records if r.outcome != "ungraded"]

    def rewards(rs: Iterable[EvalRecord]) -> list[float]:
        return [r.reward for r in rs if r.outcome != "ungraded" and r.reward is not None]

    present = {t.tier for t in tallies.values()}
    tiers = [t for t in TIERS if t in present] + sorted(present - set(TIERS))
    by_tier = {
        tier: _group(
            [t for t in tallies.values() if t.tier == tier],
            rewards(r for r in records if r.difficulty_tier == tier),
            k_values,
            n_boot,
            seed,
        )
        for tier in tiers
    }
    wrong = Counter(wrong_category(r) for r in records if r.outcome == "wrong")
    known = [r.tool_calls for r in graded if r.tool_calls is not None]
    at_cap = None if step_cap is None or not known else sum(t >= step_cap for t in known) / len(known)
    llm = [r for r in records if r.model_calls is not None]
    cut = Counter(r.cutoff for r in llm if r.cutoff)
    return Scores(
        **_group(list(tallies.values()), rewards(records), k_values, n_boot, seed).model_dump(),
        arm=arm or _arm_name(records),
        by_tier=by_tier,
        ungraded_by_cause=dict(
            sorted(Counter(r.cause or "unknown" for r in records if r.outcome == "ungraded").items())
        ),
        wrong_by_category={c: wrong[c] for c in WRONG_CATEGORIES if wrong[c]},
        step_cap=step_cap,
        at_step_cap=at_cap,
        cut_off_by={c: cut[c] for c in CUTOFFS if cut[c]},
        cut_off=sum(cut.values()) / len(llm) if llm else None,
    )


def sign_flip_p(diffs: Sequence[float], *, n_perm: int = 10_000, seed: int = 0) -> float:
    """Two-sided p of a paired sign-flip permutation test on the sum of `diffs`: exact when at most
    16 differences are non-zero, else Monte Carlo with `n_perm` seeded draws ((1 + hits)/(1 + n))."""
    d = np.asarray([x for x in diffs if x != 0], dtype=float)
    if not len(d):
        return 1.0
    observed = abs(d.sum()) - 1e-9
    if len(d) <= _EXACT_PERMUTATION_MAX:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=len(d))))
        return float(np.mean(np.abs(signs @ d) >= observed))
    rng, hits = np.random.default_rng(seed), 0
    step = max(1, 2_000_000 // len(d))
    for start in range(0, n_perm, step):
        signs = rng.choice((1.0, -1.0), size=(min(step, n_perm - start), len(d)))
        hits += int(np.sum(np.abs(signs @ d) >= observed))
    return (1 + hits) / (1 + n_perm)


class Paired(BaseModel):
    """Candidate B against baseline A on the tasks graded in both, with what was left out."""

    model_config = _FROZEN
    a_arm: str
    b_arm: str
    k: int
    tasks_in_both: int = Field(description="Tasks present in both arms' records.")
    paired_tasks: int = Field(description="Tasks in both with >= k graded samples in each arm.")
    excluded_a_by_cause: dict[str, int] = Field(description="Tasks in both, ungraded in A, by cause.")
    excluded_b_by_cause: dict[str, int] = Field(description="Tasks in both, ungraded in B, by cause.")
    short_of_k: int = Field(description="Tasks graded in both with fewer than k graded samples in one.")
    only_a: int
    only_b: int
    mean_a: float | None
    mean_b: float | None
    diff: float | None = Field(description="Mean over paired tasks of pass@k(B) - pass@k(A).")
    ci: tuple[float, float] | None = Field(description="95% percentile bootstrap CI of diff, over tasks.")
    p_value: float | None = Field(description="Two-sided paired sign-flip permutation test.")
    wins: int
    losses: int
    ties: int

    def lines(self) -> list[str]:
        """The comparison: exclusions first, then the difference with its CI and p."""
        out = [
            f"{self.b_arm} vs {self.a_arm} (baseline), pass@{self.k} per task: tasks in both "
            f"{self.tasks_in_both}  paired {self.paired_tasks}  "
            f"only in {self.a_arm} {self.only_a}  only in {self.b_arm} {self.only_b}"
        ]
        for arm, causes in ((self.a_arm, self.excluded_a_by_cause), (self.b_arm, self.excluded_b_by_cause)):
            out += [f"  excluded (ungraded in {arm}): {c} x{n} tasks" for c, n in causes.items()]
        if self.short_of_k:
            out.append(f"  excluded (fewer than {self.k} graded samples): {self.short_of_k} tasks")
        if self.diff is None:
            out.append("  no task is graded in both arms: nothing to compare")
            return out
        assert self.ci is not None and self.mean_a is not None and self.mean_b is not None
        out.append(
            f"  {self.a_arm} {self.mean_a:.1%}  {self.b_arm} {self.mean_b:.1%}  difference "
            f"{self.diff:+.1%} [95% CI {self.ci[0]:+.1%}, {self.ci[1]:+.1%}]  p={self.p_value:.3g}  "
            f"wins {self.wins} losses {self.losses} ties {self.ties} over {self.paired_tasks} tasks"
        )
        return out


def paired_values(
    ta: dict[str, TaskTally], tb: dict[str, TaskTally], k: int = 1
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The tasks graded in both tallies with at least k graded samples each, and their pass@k in A and B."""
    usable = [tid for tid in ta if tid in tb and ta[tid].n >= k and tb[tid].n >= k]
    return (
        usable,
        np.array([pass_at_k(ta[t].n, ta[t].c, k) for t in usable]),
        np.array([pass_at_k(tb[t].n, tb[t].c, k) for t in usable]),
    )


def paired(
    a_records: Iterable[EvalRecord],
    b_records: Iterable[EvalRecord],
    *,
    k: int = 1,
    n_boot: int = 10_000,
    seed: int = 0,
    a_arm: str | None = None,
    b_arm: str | None = None,
) -> Paired:
    """Compare candidate B with baseline A task by task (module docstring)."""
    _check_k(k)
    a_records, b_records = list(a_records), list(b_records)
    ta, tb = tally(a_records), tally(b_records)
    both = [tid for tid in ta if tid in tb]
    graded = [tid for tid in both if ta[tid].n and tb[tid].n]
    usable, va, vb = paired_values(ta, tb, k)
    d = vb - va
    return Paired(
        a_arm=a_arm or _arm_name(a_records),
        b_arm=b_arm or _arm_name(b_records),
        k=k,
        tasks_in_both=len(both),
        paired_tasks=len(usable),
        excluded_a_by_cause=dict(sorted(Counter(ta[t].cause for t in both if not ta[t].n).items())),
        excluded_b_by_cause=dict(sorted(Counter(tb[t].cause for t in both if not tb[t].n).items())),
        short_of_k=len(graded) - len(usable),
        only_a=len(ta) - len(both),
        only_b=sum(tid not in ta for tid in tb),
        mean_a=float(va.mean()) if len(va) else None,
        mean_b=float(vb.mean()) if len(vb) else None,
        diff=float(d.mean()) if len(d) else None,
        ci=bootstrap_ci(d, n_boot=n_boot, seed=seed),
        p_value=sign_flip_p(d, n_perm=n_boot, seed=seed) if len(d) else None,
        wins=int(np.sum(d > 0)),
        losses=int(np.sum(d < 0)),
        ties=int(np.sum(d == 0)),
    )
