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
