"""Re-grade recorded answers with the current grader and list every verdict that flips (pure).

Run it whenever the grader changes (`dagent eval regrade RUN_DIR`): a grader fix that turns
yesterday's wrong into today's correct changes every number measured with it, and a comparison
across the change compares graders, not policies. tests/eval/test_regrade.py runs it on a committed
fixture, so a grader change that flips a recorded verdict fails CI until the fixture is renewed
on purpose.

What is re-graded: every GRADED record's answer, through `dagent.grading.settle.settle` with the
suite's full task (the same call that graded it). What is not, and why (counted by reason):
ungraded records (the grader never decided: an infrastructure cause did), answers the record
clipped (`dagent.harness.play.ANSWER_CLIP`: the grader saw more than the record kept), and tasks the
suite does not hold.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from dagent.core.outcome import EvalRecord, outcome_of
from dagent.grading.settle import settle
from dagent.harness.play import ANSWER_CLIP as CLIPPED_AT


@dataclass(frozen=True)
class Flip:
    """One verdict the current grader decides differently."""

    task_id: str
    sample: int
    answer: str | None
    before: tuple[str, str, str]  # (outcome, rule, note) as recorded
    after: tuple[str, str, str]  # (outcome, rule, note) now

    def line(self) -> str:
        return (
            f"{self.task_id} s{self.sample}: {self.before[0]} -> {self.after[0]}  answer {self.answer!r:.60}"
            f"  was `{self.before[1]}` {self.before[2]!r:.60}, now `{self.after[1]}` {self.after[2]!r:.60}"
        )


@dataclass(frozen=True)
class Regrade:
    records: int
    regraded: int
    skipped: dict[str, int]  # reason -> records
    flips: tuple[Flip, ...]
    renoted: int  # same verdict, another rule or note

    def lines(self) -> list[str]:
        out = [
            f"regraded {self.regraded} of {self.records} records: {len(self.flips)} verdict(s) flip, "
            f"{self.renoted} keep their verdict under another rule or note"
        ]
        out += [f"  not regraded: {reason} x{n}" for reason, n in self.skipped.items()]
        out += ["  " + f.line() for f in self.flips]
        return out


def regrade(records: Iterable[EvalRecord], suite) -> Regrade:
    """Re-grade `records` against `suite` (module docstring)."""
    records = list(records)
    tasks: dict[str, object] = {}
    for base in suite.bases:
        for task in suite.tasks(base):
            tasks[task.task_id] = task
    skipped: Counter[str] = Counter()
    flips: list[Flip] = []
    renoted = regraded = 0
    for r in records:
        task = tasks.get(r.task_id)
        if r.outcome == "ungraded":
            skipped["ungraded (an infrastructure cause decided, not the grader)"] += 1
            continue
        if task is None:
            skipped["task not in this suite"] += 1
            continue
        if r.answer is not None and len(r.answer) >= CLIPPED_AT:
            skipped[f"answer clipped in the record (>= {CLIPPED_AT} characters)"] += 1
            continue
        regraded += 1
        grade = settle(task, None if r.answer is None else r.answer.encode("utf-8"), model_calls=r.model_calls)
        now = (outcome_of(grade), grade.method, grade.note)
        if now[0] != r.outcome:
            flips.append(Flip(r.task_id, r.sample, r.answer, (r.outcome, r.method, r.note), now))
        elif (grade.method, grade.note) != (r.method, r.note):
            renoted += 1
    return Regrade(len(records), regraded, dict(skipped), tuple(flips), renoted)


def recorded_grader(run_dir: Path) -> str | None:
    """The grader digest a run's summary.json recorded (None where it recorded none)."""
    summary = (run_dir if run_dir.is_dir() else run_dir.parent) / "summary.json"
    if not summary.is_file():
        return None
    return (json.loads(summary.read_text()).get("provenance") or {}).get("grader")
