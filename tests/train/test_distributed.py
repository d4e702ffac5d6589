"""The trainer as several processes, as the Slurm script starts it on a GPU node (`accelerate launch
--num_processes N`, whose multi-GPU launcher is torchrun): here 2 CPU processes over gloo, started
by torchrun itself (accelerate launches a single process when asked for the CPU; its multi-CPU mode
needs MPI), run one white-box GRPO step end to end: each rank its own sandboxes, rewards gathered
across processes for the group statistics TRL logs, `final/` written once, and every rank exits
cleanly (the process group closed). The checkpoint says how many processes trained it. Not
covered: NCCL, DeepSpeed ZeRO on GPUs."""

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
    from dagent.serving import free_port

    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
            "-m", "dagent.cli.app", "train", "whitebox",
            "--preset", "cpu", "--model", "tiny-qwen3", "--suite", str(suite_dir), "--split", "train",
            "--max-steps", "1", "--num-generations", "2", "--save-steps", "1", "--warmup-steps", "0",
            "--max-completion-length", "336", "--report-to", "none", "--force", "--out", str(tmp_path / "out")]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=1200, cwd=tmp_path,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    ckpt = Path(tmp_path / "out" / "checkpoint-1")
    stamp = json.loads((ckpt / "provenance.json").read_text())
    assert stamp["world_size"] == 2 and stamp["global_step"] == 1  # both processes trained this step
    state = json.loads((ckpt / "trainer_state.json").read_text())
    logged = state["log_history"][0]
    assert "rewards/WhiteBoxEnv/mean" in logged and "frac_reward_zero_std" in logged  # over the gathered rewards
    assert (tmp_path / "out" / "final" / "config.json").is_file()
