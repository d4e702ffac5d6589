"""The soak's exit code judges what it exists for (nothing lost or mis-scored, memory flat), and
latency only when a target is asked for: a healthy run at saturation (its p99 over direct exec is
queueing for a core) exits 0, as measured here before (0 lost, 0 mis-scored, RSS flat, and rc 1)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("httpx")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def soak():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location("soak_under_test", ROOT / "benchmarks" / "soak.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def test_a_healthy_saturated_run_passes_and_each_real_failure_fails(soak):
    healthy = dict(lost=0, misscored=0, flat=True, overhead_p99_ms=180.0)  # the measured healthy run's shape
    assert soak.verdict(**healthy) == 0
    assert soak.verdict(**{**healthy, "lost": 1}) == 1
    assert soak.verdict(**{**healthy, "misscored": 2}) == 1
    assert soak.verdict(**{**healthy, "flat": False}) == 1
    assert soak.verdict(**healthy, max_p99_overhead_ms=50) == 1  # a target asked for is judged
    assert soak.verdict(**healthy, max_p99_overhead_ms=500) == 0


def test_the_option_reaches_the_verdict(soak, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["soak.py", "--max-p99-overhead-ms", "75"])
    assert soak.parse().max_p99_overhead_ms == 75.0
    monkeypatch.setattr(sys, "argv", ["soak.py"])
    assert soak.parse().max_p99_overhead_ms is None
