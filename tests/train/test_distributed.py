"""The trainer as several processes, as a job starts it on a multi-GPU HF Jobs flavour or a Slurm
node: `--processes N` (0, the default, means one per visible GPU) makes the job relaunch itself
under `accelerate launch` with TRL's DDP config (dagent.launch.processes). Here `--processes 2` on a
CPU takes that same path: accelerate's multi-GPU launcher (torchrun) starts 2 processes, which
train over gloo because the cpu preset asks for the CPU. One white-box GRPO step end to end: each
rank its own sandboxes, rewards gathered across processes for the group statistics TRL logs,
`final/` written once, and every rank exits cleanly (the process group closed). The checkpoint
says how many processes trained it. Not covered: NCCL, DeepSpeed ZeRO on GPUs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_two_processes_over_gloo_train_one_grpo_step(suite_dir, tmp_path):
    pytest.importorskip("torch")
    argv = [
        sys.executable,
        "-m",
        "dagent.cli.app",
        "train",
        "whitebox",
        "--processes",
        "2",
        "--preset",
        "cpu",
        "--model",
        "tiny-qwen3",
        "--suite",
        str(suite_dir),
        "--split",
        "train",
        "--max-steps",
        "1",
        "--num-generations",
        "2",
        "--save-steps",
        "1",
        "--warmup-steps",
        "0",
        "--max-completion-length",
        "336",
        "--report-to",
        "none",
        "--force",
        "--out",
        str(tmp_path / "out"),
    ]
    r = subprocess.run(
        argv, capture_output=True, text=True, timeout=1200, cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    assert r.returncode == 0, r.stderr[-3000:]
    said = " ".join((r.stdout + r.stderr).split())  # the console wraps long lines
    assert "2 trainer processes (multi_gpu): -m accelerate.commands.launch" in said  # the job relaunched itself
    ckpt = Path(tmp_path / "out" / "checkpoint-1")
    stamp = json.loads((ckpt / "provenance.json").read_text())
    assert stamp["world_size"] == 2 and stamp["global_step"] == 1  # both processes trained this step
    state = json.loads((ckpt / "trainer_state.json").read_text())
    logged = state["log_history"][0]
    assert "rewards/WhiteBoxEnv/mean" in logged and "frac_reward_zero_std" in logged  # over the gathered rewards
    assert (tmp_path / "out" / "final" / "config.json").is_file()
