"""The exported verifier IS dagent's grader: every grading table case, run through a task's
`tests/grader.py` as Harbor runs it (a subprocess on an answer file), gets the verdict, rule and
note `dagent.grading` gives; an ungraded case writes no reward (F32); a missing answer is wrong."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from dagent.grading.dispatch import grade_answer
from dagent.harbor.export import grader_files
from tests.grading.test_fields import GOLD, RECORD_CASES
from tests.grading.test_value import CASES

# (answer, gold, answer_type, atol, rtol): the grading table, then the record table
ALL_CASES = [c[:5] for c in CASES] + [(answer, GOLD, "record", 0.0, 0.0) for answer, _, _ in RECORD_CASES]


@pytest.fixture(scope="module")
def tests_dir(tmp_path_factory) -> Path:
    """A task's exported tests/ directory (grader.py + lib/dagent/), outside this checkout."""
    root = tmp_path_factory.mktemp("exported") / "tests"
    for rel, data in grader_files().items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def run_grader(
    tests_dir: Path, work: Path, answer, gold, answer_type, atol, rtol, field_tolerances=None
) -> tuple[int, dict | None, dict | None, str]:
    work.mkdir(parents=True)
    (work / "gold.json").write_text(
        json.dumps(
            {
                "gold": gold,
                "answer_type": answer_type,
                "atol": atol,
                "rtol": rtol,
                "field_tolerances": field_tolerances or {},
            }
        )
    )
    if answer is not None:
        (work / "answer.txt").write_bytes(answer if isinstance(answer, bytes) else answer.encode())
    r = subprocess.run(
        [
            sys.executable,
            "-I",
            str(tests_dir / "grader.py"),
            "--answer",
            str(work / "answer.txt"),
            "--gold",
            str(work / "gold.json"),
            "--out",
            str(work / "logs"),
        ],
        capture_output=True,
        text=True,
        cwd=work,
    )  # -I: nothing from this checkout
    read = lambda name: json.loads((work / "logs" / name).read_text()) if (work / "logs" / name).exists() else None  # noqa: E731
    return r.returncode, read("reward.json"), read("grade.json"), r.stderr


def test_every_table_case_gets_the_same_verdict_through_the_exported_grader(tests_dir, tmp_path):
    assert len(ALL_CASES) >= 160
    with ThreadPoolExecutor(4) as pool:
        results = list(
            pool.map(lambda ic: run_grader(tests_dir, tmp_path / f"{ic[0]:03d}", *ic[1]), enumerate(ALL_CASES))
        )
    mismatches = []
    for (answer, gold, answer_type, atol, rtol), (code, rewards, graded, err) in zip(ALL_CASES, results):
        want = grade_answer(answer, gold, answer_type, atol, rtol)
        got = (graded["correct"], graded["method"], graded["note"]) if graded else None
        if got != (want.correct, want.method, want.note):
            mismatches.append((answer, gold, answer_type, got, want, err[-300:]))
        elif want.correct is None:  # ungraded: exit 2 and NO reward, never 0.0 (F32)
            if code != 2 or rewards is not None:
                mismatches.append((answer, gold, "ungraded but", code, rewards))
        elif code != 0 or rewards != {
            "reward": float(want.correct),
            "correct": float(want.correct),
            "answer_present": float(answer is not None),
        }:
            mismatches.append((answer, gold, "reward", code, rewards))
    assert not mismatches, mismatches[:5]


def test_a_record_graded_field_by_field_with_its_own_tolerances(tests_dir, tmp_path):
    gold = '{"mean_fare": 34.65, "median_age": 28}'
    code, rewards, graded, _ = run_grader(
        tests_dir,
        tmp_path / "a",
        '{"mean_fare": 34.7, "median_age": 28}',
        gold,
        "record",
        0.0,
        0.0,
        {"mean_fare": [0.1, 0.0]},
    )
    assert code == 0 and rewards["correct"] == 1.0
    code, rewards, graded, _ = run_grader(
        tests_dir, tmp_path / "b", '{"mean_fare": 34.7, "median_age": 28}', gold, "record", 0.0, 0.0
    )
    assert rewards["correct"] == 0.0 and "mean_fare" in graded["note"]


@pytest.mark.failure_mode("F32")
def test_an_unreadable_gold_record_leaves_no_reward(tests_dir, tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    (work / "gold.json").write_text("{not json")
    r = subprocess.run(
        [
            sys.executable,
            "-I",
            str(tests_dir / "grader.py"),
            "--answer",
            str(work / "a"),
            "--gold",
            str(work / "gold.json"),
            "--out",
            str(work / "logs"),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "re-export" in r.stderr
    assert not (work / "logs" / "reward.json").exists()


def test_a_missing_answer_file_is_graded_wrong_not_skipped(tests_dir, tmp_path):
    code, rewards, graded, _ = run_grader(tests_dir, tmp_path / "w", None, "42", "number", 0.0, 0.0)
    assert code == 0 and rewards == {"reward": 0.0, "correct": 0.0, "answer_present": 0.0}
    assert graded["answer_present"] is False and graded["method"] == "reject"
