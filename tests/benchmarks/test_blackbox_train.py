"""benchmarks/blackbox_train.py reads arms and counts what it reports from the run's own files:
rollouts trained per hour = rows with a trained token / the steps' seconds, ratios against the first arm."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location(
        "blackbox_train_under_test", ROOT / "benchmarks" / "blackbox_train.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def test_arms_name_their_options_and_source_tree(bench, tmp_path):
    before = bench.Arm.parse("before, 4 groups=--src before --groups-per-step 4", tmp_path)
    assert (before.name, before.args, before.src) == ("before, 4 groups", ["--groups-per-step", "4"], tmp_path)
    now = bench.Arm.parse("now=", tmp_path)
    assert (now.args, now.src) == ([], bench.ROOT)
    with pytest.raises(SystemExit, match="--before-src"):
        bench.Arm.parse("x=--src before", None)


def test_per_hour_counts_trained_rows_over_step_seconds_and_the_report_says_so(bench):
    a = bench.Arm(
        "a",
        [],
        bench.ROOT,
        steps=[{"step_time": 30.0, "rollouts": 20.0}] * 2,
        receipts=[{"trained_tokens": 5, "outcome": "correct"}] * 3 + [{"trained_tokens": 0}],
    )
    b = bench.Arm(
        "b",
        [],
        bench.ROOT,
        steps=[{"step_time": 15.0, "rollouts": 5.0}] * 2,
        receipts=[{"trained_tokens": 5, "outcome": "correct"}] * 4,
    )
    assert a.trained == 3 and a.per_hour == pytest.approx(3600 * 3 / 60)  # the untrained row does not count
    assert b.per_hour == pytest.approx(3600 * 4 / 30)
    rows = bench.report([a, b]).splitlines()
    assert rows[1].split()[-2:] == ["180", "1.00"] and rows[2].split()[-2:] == ["480", "2.67"]


def test_an_arm_may_run_any_source_tree_but_not_a_directory_without_dagent(bench, tmp_path):
    (tmp_path / "patched" / "dagent").mkdir(parents=True)
    arm = bench.Arm.parse("patched=--src %s --num-generations 8" % (tmp_path / "patched"), None)
    assert (arm.src, arm.args) == ((tmp_path / "patched").resolve(), ["--num-generations", "8"])
    with pytest.raises(SystemExit, match="not a dagent source tree"):
        bench.Arm.parse("x=--src %s" % tmp_path, None)


def test_copied_groups_counts_groups_of_one_draw_copied(bench):
    """F61: a group whose rollouts match in outcome, prompt and completion length is one draw copied;
    the column shows it beside the speed it bought (a copied group's later turns hit the cache)."""

    def r(task, tokens, outcome="wrong"):
        return {"task_id": task, "prompt_tokens": 900, "completion_tokens": tokens, "outcome": outcome}

    copied = [r("a", 170)] * 4
    drawn = [r("b", 170), r("b", 805), r("b", 170, "correct"), r("b", 300)]
    half = [r("c", 170)] * 3 + [r("c", 171)]
    arm = bench.Arm("x", [], bench.ROOT, receipts=copied + drawn + half + [r("a", 170)] * 4)
    assert arm.copied_groups == (2, 4)  # the first and last groups (same task, two steps), not b or c
    assert "2/4" in bench.report([arm]).splitlines()[1].split()
