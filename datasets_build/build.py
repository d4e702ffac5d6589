"""Build the suite: write the tables, run every reference program in a sandbox, split, write.

Invariants (tests/datasets_build/test_build.py):
- A gold is what the task's reference program PRINTS when run in a sandbox on the staged files
  (F16), so the oracle and the gold cannot disagree. A program that fails, times out, prints
  nothing, prints several lines or prints nan is dropped and counted in the report, never kept.
- Every (primary table, template) pair belongs to exactly one split, chosen by a hash of the pair,
  so train, test and eval are disjoint by construction (F15).
- Instructions are unique: `dagent.core.suite.dedupe` keeps the first and the report counts conflicting
  golds (F11).
- Two builds give byte-identical files (fixed order, seeded choices, deterministic writers; the
  report carries no timings).

Programs run in batches: tasks that read the same files share one sandbox, where `runner.py`
imports pandas once and forks one child per program.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
import signal
import tempfile
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from dagent.core.suite import BASE_SPLITS, dedupe
from dagent.core.task import TIER_OF_LEVEL, TIERS, TableSource, Task
from dagent.errors import SuiteBuildError
from dagent.grading.fields import parse_gold
from dagent.sandbox.base import Resources, SandboxBackend
from datasets_build import instructions
from datasets_build.catalogue import catalogue
from datasets_build.handwritten import handwritten
from datasets_build.joins import joins
from datasets_build.runner import OUTPUT_LOST
from datasets_build.shapes import generic
from datasets_build.tables import Table, write_table
from datasets_build.templates import Candidate

Progress = Callable[[str, int, int], None]
RUNNER = Path(__file__).with_name("runner.py")
BUILD_DIR = "/workdir/.build"
PROGRAM_TIMEOUT_S = 120
WORKERS = 2
SPLIT_BOUNDS = (("train", 0.9), ("test", 0.95), ("eval", 1.0))
BAD_VALUES = {"", "nan", "-nan", "none", "<na>", "nat", "inf", "-inf", "null"}


def split_of(table_id: str, template_id: str) -> str:
    """The split of a (primary table, template) pair: a hash, so no pair can cross splits (F15)."""
    u = int(hashlib.sha256(f"{table_id}|{template_id}".encode()).hexdigest()[:12], 16) / 16**12
    return next(name for name, bound in SPLIT_BOUNDS if u < bound)


@dataclass(frozen=True)
class Job:
    """One reference program to run on some staged files."""

    id: str
    files: tuple[str, ...]  # under the tables dir
    source: str
    cpus: int
    memory_mb: int


@dataclass(frozen=True)
class Dropped:
    task_id: str
    reason: str
    detail: str = ""


# ---------------------------------------------------------------- running


def run_programs(
    jobs: Sequence[Job], tables_dir: Path, backend: SandboxBackend | None = None, progress: Progress | None = None
) -> dict[str, dict]:
    """Run each job's program in a sandbox; {job id: runner result}. Batches by staged files."""
    if backend is None:  # a private base dir: nothing else cleans it up under us
        from dagent.sandbox.local import LocalBackend

        with tempfile.TemporaryDirectory(prefix="dagent-suite-build-") as base:
            return run_programs(jobs, tables_dir, LocalBackend(base_dir=base), progress)
    if getattr(backend, "tier", None) == "cwd":  # runner.py and the programs live at /workdir, which it lacks
        raise SuiteBuildError(
            f"the suite build needs a sandbox with /workdir, and this machine gives only {backend.describe()}: "
            "install bubblewrap and allow user namespaces, or run as root where `unshare --mount` works; "
            "in a Docker container: --security-opt seccomp=unconfined --security-opt systempaths=unconfined "
            "(docs/sandboxes.md)"
        )
    groups: dict[tuple[str, ...], list[Job]] = {}
    for job in jobs:
        groups.setdefault(tuple(sorted(job.files)), []).append(job)
    chunks = []
    for files, members in groups.items():
        size = 100 if max(j.memory_mb for j in members) >= 4096 else 250
        chunks += [(files, members[i : i + size]) for i in range(0, len(members), size)]
    chunks.sort(key=lambda c: (-len(c[1]) * max(j.memory_mb for j in c[1]), c[0]))
    results: dict[str, dict] = {}
    done = 0
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        for out in pool.map(lambda c: _run_chunk(backend, tables_dir, *c), chunks):
            results.update(out)
            done += len(out)
            if progress:
                progress("reference programs", done, len(jobs))
    return results


def _run_chunk(
    backend: SandboxBackend, tables_dir: Path, files: tuple[str, ...], jobs: Sequence[Job]
) -> dict[str, dict]:
    res = Resources(
        cpus=max(j.cpus for j in jobs),
        memory_mb=max(j.memory_mb for j in jobs) + 1024,
        timeout_s=60 + PROGRAM_TIMEOUT_S * len(jobs),
    )
    manifest = {"timeout_s": PROGRAM_TIMEOUT_S, "programs": [{"id": j.id, "source": j.source} for j in jobs]}
    sb = backend.create(res)
    try:
        sb.stage({Path(f).name: tables_dir / f for f in files})
        sb.write_file(f"{BUILD_DIR}/runner.py", RUNNER.read_text())
        sb.write_file(f"{BUILD_DIR}/manifest.json", json.dumps(manifest))
        r = sb.exec(f"python {BUILD_DIR}/runner.py {BUILD_DIR}/manifest.json {BUILD_DIR}/results.json")
        raw = sb.read_file(f"{BUILD_DIR}/results.json")
    finally:
        sb.close()
    if raw is None:  # the runner itself died: an infrastructure failure, not a wrong program
        raise SuiteBuildError(
            f"the reference-program runner failed for {', '.join(files)} "
            f"({r.failure_cause or 'no results written'}): {r.stderr.strip()[-500:]}; check that "
            "`python -c 'import pandas, pyarrow'` succeeds inside a LocalBackend sandbox"
        )
    return {row["id"]: row for row in json.loads(raw)}


def judge(c: Candidate, instruction: str, result: dict | None) -> tuple[str | None, Dropped | None]:
    """The gold a result gives, or why the task must be dropped."""
    tid = c.task_id
    if result is None:
        return None, Dropped(tid, "not_run")
    last = (result.get("stderr") or "").strip().splitlines()[-1:] or [""]
    if result.get("signal") == signal.SIGALRM:
        return None, Dropped(tid, f"timeout_{PROGRAM_TIMEOUT_S}s", last[0][:200])
    if result.get("signal") is not None:  # SIGKILL: most often the sandbox's memory limit
        return None, Dropped(tid, f"killed_by_signal_{result['signal']}", last[0][:200])
    if result.get("exit_code") == OUTPUT_LOST:  # the machine failed, not the program: a suite never drops it
        raise SuiteBuildError(
            f"the reference program of {tid} could not write its output (a full disk?): free "
            "space and build again; a task dropped for it would change the suite's digest"
        )
    if result.get("exit_code") != 0:
        return None, Dropped(tid, f"exit_{result.get('exit_code')}", last[0][:200])
    gold = (result.get("stdout") or "").strip()
    if "\n" in gold:
        return None, Dropped(tid, "several_lines_printed", gold[:200])
    if gold.lower() in BAD_VALUES:
        return None, Dropped(tid, "no_value_printed" if not gold else "nan_printed", gold)
    if c.answer_type == "number":
        try:
            if not math.isfinite(float(gold)):
                raise ValueError(gold)
        except ValueError:
            return None, Dropped(tid, "not_a_number", gold[:200])
    if c.answer_type == "bool" and gold not in ("yes", "no"):
        return None, Dropped(tid, "not_yes_no", gold[:200])
    if c.answer_type == "list" and any(not item.strip() for item in gold.split(",")):
        return None, Dropped(tid, "empty_list_item", gold[:200])
    if c.answer_type == "record":
        fields = parse_gold(gold)
        if fields is None:
            return None, Dropped(tid, "not_a_record", gold[:200])
        if any(
            isinstance(v, float) and not math.isfinite(v) or v is None or str(v).lower() in BAD_VALUES
            for v in fields.values()
        ):
            return None, Dropped(tid, "nan_in_record", gold[:200])
        if any(
            gold_in_instruction(str(v), "string" if isinstance(v, str) else "number", instruction)
            for v in fields.values()
            if len(str(v)) >= 3
        ):
            return None, Dropped(tid, "gold_in_instruction", gold[:200])
        return gold, None
    if gold_in_instruction(gold, c.answer_type, instruction):
        return None, Dropped(tid, "gold_in_instruction", gold[:200])
    return gold, None


def gold_in_instruction(gold: str, answer_type: str, instruction: str) -> bool:
    """Whether the instruction states the answer (a whole token, same case; yes/no excluded)."""
    if answer_type == "bool" or len(gold) < 2:
        return False
    return re.search(rf"(?<![\w.]){re.escape(gold)}(?![\w]|\.\d)", instruction) is not None


# ---------------------------------------------------------------- building


def source_of(t: Table) -> TableSource:
    return TableSource(table_id=t.table_id, path=t.file, package=t.package, origin=t.origin, licence=t.licence)


def candidates(tables_dir: Path) -> list[Candidate]:
    """Every question, in a fixed order: generic ones table by table, the hand-written ones, joins."""
    out: list[Candidate] = []
    for t in catalogue():
        path = tables_dir / t.file
        df = pd.read_parquet(path) if t.fmt == "parquet" else pd.read_csv(path)
        out += generic(t, df)
    return out + handwritten(tables_dir) + joins(tables_dir)


def make_tasks(
    cands: Sequence[Candidate],
    tables_dir: Path,
    backend: SandboxBackend | None = None,
    progress: Progress | None = None,
) -> tuple[list[Task], list[Dropped]]:
    """Run every candidate's program in a sandbox and keep those that printed a usable gold."""
    ids = Counter(c.task_id for c in cands)
    if clash := [i for i, n in ids.items() if n > 1]:
        raise SuiteBuildError(
            f"task ids repeat ({clash[:3]}): a template yields the same parameters "
            "twice; make its parameter choice distinct"
        )
    rendered = {c.task_id: instructions.render(c) for c in cands}
    room = {c.task_id: instructions.measuring_room(c, tables_dir) for c in cands}
    jobs = [Job(c.task_id, tuple(t.file for t in c.tables), c.code, *room[c.task_id]) for c in cands]
    loads = {}
    for job in jobs:  # once per set of files: the agent's naive first program (read everything whole)
        key = tuple(sorted(job.files))
        if key not in loads:
            loads[key] = Job(
                f"{instructions.LOAD_ID}{'|'.join(key)}", key, instructions.load_program(key), job.cpus, job.memory_mb
            )
    results = run_programs([*jobs, *loads.values()], tables_dir, backend, progress)
    tasks, dropped = [], []
    for c in cands:
        gold, why = judge(c, rendered[c.task_id], results.get(c.task_id))
        if why:
            dropped.append(why)
            continue
        files = tuple(sorted(t.file for t in c.tables))
        load = results.get(f"{instructions.LOAD_ID}{'|'.join(files)}")
        if load is None or load.get("exit_code") != 0:
            raise SuiteBuildError(
                f"reading {', '.join(files)} whole failed in the sandbox "
                f"({(load or {}).get('stderr', 'not run')[-300:]}); the tables are unreadable"
            )
        cpus, memory_mb = instructions.sizing(results[c.task_id], load)
        tasks.append(
            Task(
                task_id=c.task_id,
                instruction=rendered[c.task_id],
                data_files=tuple(t.file for t in c.tables),
                answer_type=c.answer_type,
                difficulty_level=c.level,
                difficulty_tier=TIER_OF_LEVEL[c.level],
                cpus=cpus,
                memory_mb=memory_mb,
                sources=tuple(source_of(t) for t in c.tables),
                gold=gold,
                atol=c.atol,
                rtol=c.rtol,
                solution=c.code,
                template_id=c.template_id,
                field_tolerances={f: (a, r) for f, a, r in c.field_tolerances},
            )
        )
    return tasks, dropped


def split_tasks(tasks: Sequence[Task]) -> dict[str, list[Task]]:
    splits: dict[str, list[Task]] = {s: [] for s in BASE_SPLITS}
    for task in tasks:
        splits[split_of(task.sources[0].table_id, task.template_id)].append(task)
    for name, members in splits.items():
        missing = set(TIERS) - {t.difficulty_tier for t in members}
        if missing:
            raise SuiteBuildError(
                f"split {name!r} has no {sorted(missing)} tasks: add templates of that "
                "tier or more tables, so every split covers every tier"
            )
    return splits


def build_suite(out_dir: Path, *, progress: Progress | None = None) -> dict:
    """Build the whole suite under `out_dir` and return the build report (also written as JSON)."""
    from datasets_build import output

    out_dir = Path(out_dir)
    tables_dir = out_dir / "tables"
    for old in (tables_dir, out_dir / "data"):
        shutil.rmtree(old, ignore_errors=True)
    tables = []
    for i, t in enumerate(catalogue(), 1):
        try:
            path, rows = write_table(t, tables_dir)
        except (OSError, ImportError, ValueError) as e:
            raise SuiteBuildError(
                f"could not write table {t.table_id} from {t.package}: {e}; reinstall the project (`pip install -e .`)"
            ) from e
        tables.append(
            {
                "table_id": t.table_id,
                "package": t.package,
                "origin": t.origin,
                "licence": t.licence,
                "rows": rows,
                "file": t.file,
                "bytes": path.stat().st_size,
            }
        )
        if progress:
            progress("tables", i, len(catalogue()))
    cands = candidates(tables_dir)
    tasks, dropped = make_tasks(cands, tables_dir, progress=progress)
    kept, dedup = dedupe(tasks)
    splits = split_tasks(kept)
    report = output.report(tables, cands, dropped, dedup, splits)
    output.write(out_dir, splits, report, tables)
    if progress:
        progress("writing", 1, 1)
    return report
