"""Bring your own suite: `dagent suite import QUESTIONS.jsonl --tables DIR --out SUITE`.

One JSON object per line:

    {"question": "What is the mean body mass in grams of the Adelie penguins? Round to one decimal place.",
     "files": ["penguins.csv"], "gold": 3700.7,
     "answer_type": "number", "atol": 0.1, "tier": "easy", "solution": "import pandas as pd ...",
     "id": "penguins.adelie_mass", "template": "group_mean", "licence": "CC0", "origin": "Palmer LTER"}

Required: `question`, `files` (paths under `--tables`), `gold`. Optional: `answer_type` (else from
the gold: a JSON object is a `record`, true/false a `bool`, a list a `list`, a number or numeric
text a `number`, other text a `string`), `atol` / `rtol` (else the rounding the question asks for,
e.g. "two decimal places" -> 0.01, else 0), `field_tolerances` (records), `tier` or `level` (else
inferred: several files or a record -> hard; grouping words or a program over 4 lines -> medium;
else easy), `solution` (without one the oracle is skipped for the task and validation says so),
`id`, `template`, `licence`, `origin`.

The instruction the agent gets is the question with the input files named before it and the
submission sentence after it, as the bundled suite words them. Splits are disjoint by table:
questions that share a file stay in one split; whole groups go to test and eval (about
`test_fraction` and `eval_fraction` of the questions each, chosen by a hash of their files, so the
split is deterministic), the rest to train. Every problem in the input is listed with its line
and nothing is written (`SuiteImportError`); the written suite is then checked by
`dagent.suites.check.validate_suite`.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dagent.core.suite import dedupe
from dagent.core.task import TIER_OF_LEVEL, TIERS, TableSource, Task
from dagent.errors import TaskError
from dagent.grading.fields import field_type
from dagent.suites.check import expected_atol, first_error

REQUIRED = ("question", "files", "gold")
KNOWN = {
    *REQUIRED,
    "answer_type",
    "atol",
    "rtol",
    "field_tolerances",
    "tier",
    "level",
    "solution",
    "id",
    "template",
    "licence",
    "origin",
}
_GROUPING = re.compile(r"\b(?:per|each|by|ratio|between|share|percentage|compared?|grouped?)\b", re.I)
SUBMIT = "Write only the value to /workdir/answer.txt."


class SuiteImportError(TaskError):
    """The questions file has problems; the message lists each with its line."""


@dataclass
class Imported:
    out: Path
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    without_solution: int = 0
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [f"imported suite at {self.out}"]
        for split, tiers in self.counts.items():
            out.append(f"  {split:<6} " + "  ".join(f"{t} {n}" for t, n in tiers.items()))
        if self.without_solution:
            out.append(f"  {self.without_solution} tasks have no reference program: the oracle skips them")
        return out + [f"  note: {n}" for n in self.notes]


def read_questions(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The questions and the problems found, each `line N: ...`."""
    problems: list[str] = []
    rows: list[dict[str, Any]] = []
    try:
        data = path.read_bytes()
    except OSError as e:
        return [], [f"{path}: cannot read: {e}"]
    for n, raw in enumerate(data.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            value = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            problems.append(f"line {n}: not UTF-8 (byte {e.start})")
            continue
        except ValueError as e:
            problems.append(f"line {n}: not JSON ({e})")
            continue
        if not isinstance(value, dict):
            problems.append(f"line {n}: not a JSON object")
            continue
        missing = [k for k in REQUIRED if k not in value]
        unknown = sorted(set(value) - KNOWN)
        if missing:
            problems.append(f"line {n}: missing {', '.join(missing)}")
        if unknown:
            problems.append(f"line {n}: unknown fields {unknown} (known: {sorted(KNOWN)})")
        if not missing and not unknown:
            rows.append({**value, "_line": n})
    return rows, problems


def answer_type_of(gold: Any) -> str:
    if isinstance(gold, dict):
        return "record"
    return field_type(gold)


def gold_text(gold: Any, answer_type: str) -> str:
    if answer_type == "record" or isinstance(gold, dict):
        return json.dumps(gold)
    if isinstance(gold, bool):
        return "yes" if gold else "no"
    if isinstance(gold, list):
        return ", ".join(map(str, gold))
    return str(gold)


def tier_of(row: dict[str, Any], answer_type: str) -> str:
    if "tier" in row:
        return str(row["tier"])
    if "level" in row:
        return TIER_OF_LEVEL.get(int(row["level"]), "?")
    program_lines = [x for x in str(row.get("solution") or "").splitlines() if x.strip()]
    if len(row["files"]) > 1 or answer_type == "record":
        return "hard"
    if _GROUPING.search(row["question"]) or len(program_lines) > 4:
        return "medium"
    return "easy"


def instruction_of(question: str, files: list[str], answer_type: str, gold: Any) -> str:
    names = [Path(f).name for f in files]
    holds = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    submit = SUBMIT
    if answer_type == "record":
        keys = ", ".join(f"`{k}`" for k in gold)
        submit = f"Answer with one JSON object with the keys {keys}. Write only that object to /workdir/answer.txt."
    return f"The directory /workdir/input/ holds {holds}. {question.strip()} {submit}"


def sizing(paths: list[Path]) -> tuple[int, int]:
    """(cpus, memory_mb) from the files' size: pandas holds a CSV at a few times its bytes (F18)."""
    mb = sum(p.stat().st_size for p in paths) / 1e6
    memory = max(1024, int(math.ceil((512 + 8 * mb) / 256.0)) * 256)
    return (2 if mb > 50 else 1), memory


def unsafe_path(path: str) -> str | None:
    """Why a data file path may not be used (it must stay under the tables directory), or None."""
    p = Path(path)
    if p.is_absolute() or ".." in p.parts or not p.parts:
        return f"{path!r} must be a relative path under the tables directory (no '..', not absolute)"
    return None


def to_task(row: dict[str, Any], tables: Path) -> tuple[Task | None, list[str]]:
    n = row["_line"]
    try:
        return _to_task(row, tables)
    except (TypeError, ValueError) as e:  # a field of the wrong type: pydantic, int(), float(), ...
        return None, [f"line {n}: {first_error(e)}"]


def _to_task(row: dict[str, Any], tables: Path) -> tuple[Task | None, list[str]]:
    n = row["_line"]
    problems: list[str] = []
    files = row["files"]
    if not isinstance(files, list) or not files or not all(isinstance(f, str) for f in files):
        return None, [f"line {n}: files must be a non-empty list of paths under the tables directory"]
    bad = [why for f in files if (why := unsafe_path(f))]
    if bad:
        return None, [f"line {n}: {b}" for b in bad]
    paths = [tables / f for f in files]
    for f, p in zip(files, paths):
        if not p.is_file():
            problems.append(f"line {n}: file {f} not found under {tables}")
    if problems:
        return None, problems
    answer_type = str(row.get("answer_type") or answer_type_of(row["gold"]))
    if answer_type == "record" and not (isinstance(row["gold"], dict) and row["gold"]):
        return None, [f"line {n}: a record's gold must be a non-empty JSON object of named values"]
    tier = tier_of(row, answer_type)
    if tier not in TIERS:
        return None, [f"line {n}: tier {tier!r} is not one of {TIERS}"]
    instruction = instruction_of(str(row["question"]), files, answer_type, row["gold"])
    span = expected_atol(instruction)
    atol = float(row["atol"]) if "atol" in row else (span[1] if span and answer_type in ("number", "record") else 0.0)
    stem = Path(files[0]).stem
    digest = hashlib.sha256(instruction.encode()).hexdigest()[:8]
    cpus, memory = sizing(paths)
    level = {t: lvl for lvl, t in TIER_OF_LEVEL.items()}[tier]
    task = Task(
        task_id=str(row.get("id") or f"{stem}.{digest}"),
        instruction=instruction,
        data_files=tuple(files),
        answer_type=answer_type,
        difficulty_level=level,
        difficulty_tier=tier,
        cpus=cpus,
        memory_mb=memory,
        sources=tuple(
            TableSource(
                table_id=f"user/{Path(f).with_suffix('')}",
                path=f,
                package="user",
                origin=str(row.get("origin") or "imported"),
                licence=str(row.get("licence") or "unknown"),
            )
            for f in files
        ),
        gold=gold_text(row["gold"], answer_type),
        atol=atol,
        rtol=float(row.get("rtol") or 0.0),
        solution=str(row.get("solution") or ""),
        template_id=str(row.get("template") or f"q{digest}"),
        field_tolerances=row.get("field_tolerances") or {},
    )
    return task, []


def assign_splits(
    tasks: list[Task], *, test_fraction: float = 0.1, eval_fraction: float = 0.1
) -> dict[str, list[Task]]:
    """Disjoint by table: connected groups of tasks sharing a file go to one split."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for t in tasks:
        for f in t.data_files[1:]:
            parent[find(f)] = find(t.data_files[0])
    groups: dict[str, list[Task]] = defaultdict(list)
    for t in tasks:
        groups[find(t.data_files[0])].append(t)
    order = sorted(groups, key=lambda g: hashlib.sha256(g.encode()).hexdigest())
    splits: dict[str, list[Task]] = {"train": [], "test": [], "eval": []}
    want = {"test": test_fraction * len(tasks), "eval": eval_fraction * len(tasks)}
    for i, g in enumerate(order):  # the first group trains; then test and eval fill up to their share
        target = "train" if i == 0 else next((s for s in ("test", "eval") if 0 < want[s] > len(splits[s])), "train")
        splits[target].extend(groups[g])
    return splits


def import_suite(
    questions: Path | str,
    tables: Path | str,
    out: Path | str,
    *,
    test_fraction: float = 0.1,
    eval_fraction: float = 0.1,
) -> Imported:
    """Write a suite (docs/suite.md layout) from a questions file and a tables directory."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    questions, tables, out = Path(questions), Path(tables), Path(out)
    rows, problems = read_questions(questions)
    if not tables.is_dir():
        problems.append(f"--tables {tables}: not a directory")
    tasks: list[Task] = []
    if tables.is_dir():
        for row in rows:
            task, found = to_task(row, tables)
            problems += found
            if task is not None:
                tasks.append(task)
    if not problems and not tasks:
        problems.append(f"{questions}: no questions")
    kept, dedup = dedupe(tasks)
    golds: dict[str, set[str]] = defaultdict(set)
    for t in tasks:
        golds[t.instruction].add(t.gold)
    problems += [f"one question with golds {sorted(g)} (F11): {text[:80]!r}" for text, g in golds.items() if len(g) > 1]
    ids: dict[str, int] = defaultdict(int)
    for t in kept:
        ids[t.task_id] += 1
    problems += [f"id {tid!r} is given to {k} questions" for tid, k in ids.items() if k > 1]
    if problems:
        raise SuiteImportError(f"{len(problems)} problems in {questions}, nothing written:\n  " + "\n  ".join(problems))
    if out.exists() and any(out.iterdir()):
        raise SuiteImportError(f"{out} exists and is not empty: pick a new --out")
    splits = assign_splits(kept, test_fraction=test_fraction, eval_fraction=eval_fraction)
    result_notes = (
        [f"{dedup.dropped_tasks} repeated questions dropped (same question, same gold)"] if dedup.dropped_tasks else []
    )
    result_notes += [
        f"no {s} tasks: every question shares a table with the train ones (splits are disjoint by table)"
        for s, frac in (("test", test_fraction), ("eval", eval_fraction))
        if frac > 0 and not splits[s]
    ]
    (out / "data").mkdir(parents=True, exist_ok=True)
    for f in sorted({f for t in kept for f in t.data_files}):
        (out / "tables" / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(tables / f, out / "tables" / f)
    result = Imported(out, without_solution=sum(not t.solution for t in kept), notes=result_notes)
    for split, items in splits.items():
        if items:
            pq.write_table(
                pa.Table.from_pylist([t.to_row() for t in items]), out / "data" / f"{split}-00000-of-00001.parquet"
            )
        result.counts[split] = {tier: sum(t.difficulty_tier == tier for t in items) for tier in TIERS}
    return result
