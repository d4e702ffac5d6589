"""Checking a suite someone else built (`dagent suite validate SUITE_OR_REPO`).

Every check reports `Problem`s instead of raising, so one run lists everything wrong with a suite
(bad input never crashes it: a missing column, an unreadable file, an unknown answer type, text
that is not UTF-8 are each a problem with its place):

- `layout`: no `data/<split>-*.parquet`, or a shard pyarrow cannot read;
- `schema`: a row that is not a `dagent.core.task.Task` (the field and why);
- `file`: a data file missing under `tables/`, unreadable, empty, or two files of one task with
  the same base name (they would collide in /workdir/input);
- `disjoint`: a (table, template) pair in two splits (a held-out score would be a memorised one);
- `duplicate` / `conflict`: one instruction twice, and with different golds (F11); a task_id twice;
- `gold`: a gold the grader cannot read for its answer type, or that does not grade correct
  against itself;
- `tolerance`: atol inconsistent with the rounding the instruction asks for (N decimal places
  wants atol between 0.5 and 1 unit of the last place; a whole number wants atol below 1);
- `oracle` (with `oracle=True`): the reference program, run in a sandbox, does not reproduce the
  gold; tasks without a program are counted as skipped, never as passed.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from dagent.core.suite import BASE_SPLITS, TaskSuite
from dagent.core.task import Task
from dagent.grading.dispatch import grade_answer
from dagent.harness.oracle import OracleAgent
from dagent.harness.play import run_episode
from dagent.sandbox import get_backend

_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
_DECIMALS = re.compile(r"round(?:ed)?\s+(?:it\s+|the\s+\w+\s+)?to\s+(\d+|one|two|three|four|five|six)\s+decimal", re.I)
_WHOLE = re.compile(
    r"(?:nearest|a)\s+(?:whole\s+number|integer)|round(?:ed)?\s+to\s+(?:the\s+)?nearest\s+(?:whole|integer|unit)", re.I
)


@dataclass(frozen=True)
class Problem:
    check: str
    where: str
    message: str

    def line(self) -> str:
        return f"[{self.check}] {self.where}: {self.message}"


@dataclass
class SuiteReport:
    root: Path
    tasks: dict[str, list[Task]] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    oracle_run: int = 0
    oracle_skipped: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def lines(self) -> list[str]:
        counts = ", ".join(f"{s} {len(t)}" for s, t in self.tasks.items()) or "no tasks read"
        out = [f"{self.root}: {counts}"]
        if self.oracle_run or self.oracle_skipped:
            out.append(
                f"oracle: {self.oracle_run} reference programs run, {self.oracle_skipped} tasks "
                "without a program skipped (not checked)"
            )
        by_check: dict[str, int] = defaultdict(int)
        for p in self.problems:
            by_check[p.check] += 1
        out.append(
            "no problems"
            if self.ok
            else f"{len(self.problems)} problems: " + ", ".join(f"{k} {v}" for k, v in by_check.items())
        )
        out += [p.line() for p in self.problems]
        return out


def expected_atol(instruction: str) -> tuple[float, float] | None:
    """The (lowest, highest) atol the rounding asked for allows, or None when none is asked."""
    if m := _DECIMALS.search(instruction):
        n = int(_WORDS.get(m.group(1).lower(), m.group(1)))
        return 0.5 * 10**-n, 10**-n
    if _WHOLE.search(instruction):
        return 0.0, 1.0 - 1e-9
    return None


def read_rows(root: Path, report: SuiteReport) -> None:
    import pyarrow.parquet as pq

    if not (root / "data").is_dir():
        report.problems.append(
            Problem(
                "layout",
                str(root),
                "no data/ directory: a suite holds data/<split>-*.parquet and tables/ (docs/suite.md)",
            )
        )
        return
    for split in BASE_SPLITS:
        for shard in sorted((root / "data").glob(f"{split}-*.parquet")):
            try:
                rows = pq.read_table(shard).to_pylist()
            except Exception as e:  # noqa: BLE001 - any unreadable shard is a problem to list
                report.problems.append(Problem("layout", shard.name, f"cannot read: {type(e).__name__}: {e}"))
                continue
            for i, row in enumerate(rows):
                where = f"{shard.name} row {i} {row.get('task_id', '?')}"
                try:
                    report.tasks.setdefault(split, []).append(Task.model_validate(row))
                except (ValidationError, ValueError) as e:
                    report.problems.append(Problem("schema", where, first_error(e)))
    if not any((root / "data").glob("*.parquet")):
        report.problems.append(
            Problem("layout", str(root / "data"), f"no <split>-*.parquet shards (splits: {', '.join(BASE_SPLITS)})")
        )


def first_error(e: Exception) -> str:
    """A validation error in one line: the first fields and why (pydantic), else the first line."""
    errors = getattr(e, "errors", None)
    if callable(errors):
        parts = [f"{'.'.join(map(str, err.get('loc', ())))}: {err.get('msg')}" for err in errors()[:3]]
        return "; ".join(parts)
    return str(e).splitlines()[0]


def check_files(root: Path, tasks: dict[str, list[Task]]) -> list[Problem]:
    out: list[Problem] = []
    seen: dict[str, str | None] = {}
    for split, items in tasks.items():
        for i, t in enumerate(items):
            names = [Path(f).name for f in t.data_files]
            if len(set(names)) != len(names):
                out.append(Problem("file", f"{split}[{i}] {t.task_id}", f"two data files share a base name: {names}"))
            for f in t.data_files:
                if "://" in f:  # a table in a bucket: staged from there, not checked offline
                    continue
                if f not in seen:
                    p = Path(f)
                    seen[f] = (
                        "path must stay under tables/ (no '..', not absolute)"
                        if p.is_absolute() or ".." in p.parts
                        else _unreadable(root / "tables" / f)
                    )
                if seen[f]:
                    out.append(Problem("file", f"{split}[{i}] {t.task_id}", f"tables/{f}: {seen[f]}"))
    return out


def _unreadable(path: Path) -> str | None:
    if not path.is_file():
        return "missing"
    try:
        if path.stat().st_size == 0:
            return "empty file"
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            pq.read_metadata(path)
        else:
            with path.open("rb") as fh:
                fh.read(4096).decode("utf-8")
    except UnicodeDecodeError as e:
        return f"not UTF-8 text (byte {e.start})"
    except Exception as e:  # noqa: BLE001 - unreadable in any way
        return f"unreadable: {type(e).__name__}: {e}"
    return None


def check_disjoint(tasks: dict[str, list[Task]]) -> list[Problem]:
    where: dict[tuple[str, str], set[str]] = defaultdict(set)
    for split, items in tasks.items():
        for t in items:
            for table in t.table_ids or tuple(t.data_files):
                where[(table, t.template_id)].add(split)
    return [
        Problem("disjoint", f"{table} x {template}", f"in {', '.join(sorted(splits))}")
        for (table, template), splits in sorted(where.items())
        if len(splits) > 1
    ]


def check_duplicates(tasks: dict[str, list[Task]]) -> list[Problem]:
    by_text: dict[str, list[tuple[str, Task]]] = defaultdict(list)
    for split, items in tasks.items():
        for t in items:
            by_text[t.instruction].append((split, t))
    out = []
    for text, hits in by_text.items():
        if len(hits) < 2:
            continue
        ids = ", ".join(f"{s}:{t.task_id}" for s, t in hits)
        golds = sorted({t.gold for _, t in hits})
        if len(golds) > 1:
            out.append(Problem("conflict", ids, f"one instruction, golds {golds} (F11): {text[:80]!r}"))
        else:
            out.append(Problem("duplicate", ids, f"one instruction {len(hits)} times: {text[:80]!r}"))
    return out


def check_ids(tasks: dict[str, list[Task]]) -> list[Problem]:
    where: dict[str, list[str]] = defaultdict(list)
    for split, items in tasks.items():
        for i, t in enumerate(items):
            where[t.task_id].append(f"{split}[{i}]")
    return [
        Problem("duplicate", tid, f"task_id used {len(w)} times: {', '.join(w)}")
        for tid, w in where.items()
        if len(w) > 1
    ]


def check_golds(tasks: dict[str, list[Task]]) -> list[Problem]:
    out = []
    for split, items in tasks.items():
        for i, t in enumerate(items):
            where = f"{split}[{i}] {t.task_id}"
            g = grade_answer(t.gold, t.gold, t.answer_type, t.atol, t.rtol, t.field_tolerances)
            if not g.correct:
                out.append(
                    Problem(
                        "gold",
                        where,
                        f"the gold {t.gold[:40]!r} does not grade correct against itself as {t.answer_type}: {g.note}",
                    )
                )
            if t.answer_type == "number" and (span := expected_atol(t.instruction)) is not None:
                lo, hi = span
                if not lo - 1e-12 <= t.atol <= hi + 1e-12:
                    out.append(
                        Problem(
                            "tolerance",
                            where,
                            f"atol {t.atol:g} does not fit the rounding asked for (between {lo:g} and {hi:g})",
                        )
                    )
    return out


def check_oracle(
    suite_root: Path,
    tasks: dict[str, list[Task]],
    report: SuiteReport,
    *,
    backend: object = None,
    on_done: Callable[[object], None] | None = None,
) -> list[Problem]:
    """Run every reference program through the oracle agent (real sandboxes)."""
    if backend is None:
        backend = get_backend("local")
    suite = TaskSuite(splits=tasks, tables_root=suite_root / "tables", source=str(suite_root))
    out = []
    for split, items in tasks.items():
        for i, t in enumerate(items):
            if not t.solution.strip():
                report.oracle_skipped += 1
                continue
            rec = run_episode(suite, split, i, OracleAgent(), backend)
            report.oracle_run += 1
            if on_done is not None:
                on_done(rec)
            if rec.outcome != "correct":
                out.append(
                    Problem(
                        "oracle",
                        f"{split}[{i}] {t.task_id}",
                        f"reference program {rec.outcome}: {(rec.note or rec.cause or '')[:160]}",
                    )
                )
    return out


def validate_suite(
    root: Path | str, *, oracle: bool = False, backend: object = None, on_done: Callable[[object], None] | None = None
) -> SuiteReport:
    root = Path(root)
    report = SuiteReport(root)
    read_rows(root, report)
    tasks = report.tasks
    checks: Iterable[Sequence[Problem]] = (
        check_files(root, tasks),
        check_disjoint(tasks),
        check_duplicates(tasks),
        check_ids(tasks),
        check_golds(tasks),
    )
    for found in checks:
        report.problems.extend(found)
    if oracle and tasks:
        try:
            report.problems.extend(check_oracle(root, tasks, report, backend=backend, on_done=on_done))
        except Exception as e:  # noqa: BLE001 - e.g. duplicate instructions refuse a TaskSuite
            report.problems.append(Problem("oracle", str(root), f"could not run: {type(e).__name__}: {e}"))
    return report
