"""The trainer as several processes (dagent.launch.processes): how many, which accelerate config,
the command a job relaunches itself as, and when it does not. The relaunch itself trains one GRPO
step over gloo in tests/train/test_distributed.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dagent.errors import ConfigError
from dagent.launch.processes import (
    TRL_CONFIGS,
    accelerate_command,
    config_file,
    relaunch,
    this_command,
    trainer_processes,
)
from dagent.train.blackbox.args import BlackboxArgs
from dagent.train.blackbox.async_engine import trainer_devices
from dagent.train.blackbox.trainer import train_blackbox

ROOT = Path(__file__).resolve().parents[2]


def test_how_many_processes():
    assert trainer_processes(0, gpus=4) == 4  # an a100x4 flavour: one per GPU
    assert trainer_processes(0, gpus=0) == 1  # a CPU: this process
    assert trainer_processes(2, gpus=0) == 2  # asked for: gloo on a CPU
    with pytest.raises(ConfigError, match="one per visible GPU"):
        trainer_processes(-1)


def test_trl_configs_by_name_and_a_users_file(tmp_path):
    for name in TRL_CONFIGS:
        assert "distributed_type:" in config_file(name).read_text()
    own = tmp_path / "mine.yaml"
    own.write_text("distributed_type: MULTI_GPU\n")
    assert config_file(str(own)) == own
    with pytest.raises(ConfigError, match="zero2"):
        config_file("zero4")


def test_the_command_a_job_relaunches_itself_as():
    command = accelerate_command(
        4, "zero2", ["jobs/train_whitebox.py", "--preset", "gpu"], mixed_precision="bf16", port=29555
    )
    assert command[:3] == [sys.executable, "-m", "accelerate.commands.launch"]
    flags = dict(zip(command[3:15:2], command[4:15:2], strict=True))
    assert flags == {
        "--config_file": str(config_file("zero2")),
        "--num_processes": "4",
        "--num_machines": "1",
        "--machine_rank": "0",
        "--mixed_precision": "bf16",
        "--main_process_port": "29555",
    }
    assert command[15:] == ["jobs/train_whitebox.py", "--preset", "gpu"]
    # what was started: a job script as itself, the module and the entry point as the module
    assert this_command(["jobs/train_whitebox.py", "--x"]) == ["jobs/train_whitebox.py", "--x"]
    assert this_command([str(ROOT / "dagent/cli/app.py"), "train", "whitebox"]) == [
        "-m",
        "dagent.cli.app",
        "train",
        "whitebox",
    ]
    assert this_command(["/venv/bin/dagent", "train", "whitebox"]) == ["-m", "dagent.cli.app", "train", "whitebox"]


def test_relaunch_only_when_several_processes_and_no_launcher(monkeypatch):
    for name in ("LOCAL_RANK", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    calls = []

    def execv(path, argv):
        calls.append(argv)

    argv = ["jobs/train_whitebox.py", "--preset", "gpu"]
    relaunch(0, "multi_gpu", mixed_precision="bf16", argv=argv, gpus=1, execv=execv, echo=lambda _: None)
    assert calls == []  # one GPU: train here
    relaunch(0, "multi_gpu", mixed_precision="bf16", argv=argv, gpus=8, execv=execv, echo=lambda _: None)
    (command,) = calls
    assert command[command.index("--num_processes") + 1] == "8" and command[-3:] == argv
    monkeypatch.setenv("LOCAL_RANK", "3")  # a process accelerate (or torchrun, or Slurm) started
    relaunch(0, "multi_gpu", mixed_precision="bf16", argv=argv, gpus=8, execv=execv, echo=lambda _: None)
    assert len(calls) == 1


def test_black_box_training_is_one_trainer_process():
    with pytest.raises(ConfigError, match="ONE trainer process"):
        train_blackbox(BlackboxArgs(processes=2))
    assert trainer_devices(2, "0") == ["1"]  # h200x2: engine on 0, the trainer on 1
    assert trainer_devices(4, "0,1,2") == ["3"]
    # the engine's replicas follow --engine-devices: tests/train/test_blackbox_async.py
    with pytest.raises(ConfigError, match="--engine-devices 0,1,2"):
        trainer_devices(4, "0")  # three idle trainer GPUs: the engine takes them instead
    with pytest.raises(ConfigError, match="not one of this machine's 2 GPUs"):
        trainer_devices(2, "5")
    with pytest.raises(ConfigError, match="leaves 0 of 1"):
        trainer_devices(1, "0")
