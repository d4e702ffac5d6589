"""The prepared GPU check (scripts/gpu_check.sh) runs its whole path on this CPU, as CI does before
any GPU session relies on it: SFT, white-box GRPO and the in-process engine, each passing its receipt."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_gpu_check_passes_its_receipts_on_cpu():
    r = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--device", "cpu"],
        capture_output=True,
        text=True,
        timeout=1200,
        env={**os.environ, "PYTHON": sys.executable},
        cwd=ROOT,
    )
    receipts = [
        json.loads(line.removeprefix("RECEIPT ")) for line in r.stdout.splitlines() if line.startswith("RECEIPT ")
    ]
    assert [x["stage"] for x in receipts] == ["sft", "grpo", "inprocess"], r.stdout[-2000:] + r.stderr[-2000:]
    assert all(x["ok"] for x in receipts), receipts
    assert r.returncode == 0
    assert receipts[0]["tensors_changed"] > 0 and receipts[1]["tensors_changed"] > 0
    assert receipts[2]["engine_ids_and_logprobs"] and receipts[2]["second_extends_first"]
