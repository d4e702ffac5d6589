"""The trainer as several processes: `accelerate launch` with TRL's own configs.

HF Jobs runs a job as ONE process (`hf jobs uv run script.py ...`), whatever the flavour. On a
multi-GPU flavour (`a100x4`, `h200x8`, ...) a trainer left in that process trains on one GPU while
the others idle. So a training job relaunches itself, before it starts anything, as
`python -m accelerate.commands.launch --config_file <TRL's config> --num_processes N <the same
command>`: N data-parallel processes (DDP, or DeepSpeed ZeRO / FSDP through TRL's configs), each
playing its own episodes, rewards gathered across them by TRL. The relaunched processes carry
`LOCAL_RANK`, so they never relaunch again; a command already started by `accelerate launch` or
`torchrun` (the Slurm script, a user's own launcher) is left as it is.

    relaunch(processes=0, config="multi_gpu", mixed_precision="bf16")   # 0: one per visible GPU

On a CPU `--processes 2` runs the same launcher over gloo (tests/launch/test_processes.py trains
one GRPO step that way).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dagent.errors import ConfigError
from dagent.serving import free_port

__all__ = ["TRL_CONFIGS", "accelerate_command", "config_file", "relaunch", "trainer_processes"]

#: TRL's accelerate configs (`trl/accelerate_configs/*.yaml`): DDP, DeepSpeed ZeRO 1-3, FSDP 1-2.
TRL_CONFIGS = ("multi_gpu", "zero1", "zero2", "zero3", "fsdp1", "fsdp2")
#: Set in every process a launcher started (accelerate launch, torchrun, Slurm's srun with torchrun).
LAUNCHED = ("LOCAL_RANK", "RANK", "WORLD_SIZE")


def config_file(config: str) -> Path:
    """TRL's accelerate config by name, or a YAML file of the user's."""
    if config in TRL_CONFIGS:
        spec = importlib.util.find_spec("trl")
        if spec is None or not spec.submodule_search_locations:
            raise ConfigError(f"--accelerate-config {config} is TRL's, and TRL is not installed: install dagent[env]")
        path = Path(next(iter(spec.submodule_search_locations))) / "accelerate_configs" / f"{config}.yaml"
    else:
        path = Path(config)
    if not path.is_file():
        raise ConfigError(
            f"no accelerate config {config!r}: name one of TRL's ({', '.join(TRL_CONFIGS)}) "
            "or give the path of a YAML file written by `accelerate config`"
        )
    return path


def visible_gpus() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def trainer_processes(requested: int, gpus: int | None = None) -> int:
    """How many trainer processes: `requested`, or for 0 one per visible GPU (1 without a GPU)."""
    if requested < 0:
        raise ConfigError(f"--processes {requested}: give 0 (one per visible GPU) or a count of processes")
    if requested:
        return requested
    return max(visible_gpus() if gpus is None else gpus, 1)


def accelerate_command(
    processes: int, config: str, command: Sequence[str], *, mixed_precision: str, port: int | None = None
) -> list[str]:
    """`python -m accelerate.commands.launch ...` running `command` (a script path or `-m module`,
    then its arguments) as `processes` processes on this machine. The mixed precision is the
    recipe's (TRL's configs say bf16, which a CPU run must not get behind its back)."""
    return [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(config_file(config)),
        "--num_processes",
        str(processes),
        "--num_machines",
        "1",
        "--machine_rank",
        "0",
        "--mixed_precision",
        mixed_precision,
        "--main_process_port",
        str(port or free_port()),
        *command,
    ]


def this_command(argv: Sequence[str] | None = None) -> list[str]:
    """The running command as accelerate launches it: a script (`jobs/train_whitebox.py ...`) as
    itself, the `dagent` entry point as `-m dagent.cli.app ...`."""
    argv = list(sys.argv if argv is None else argv)
    package = Path(__file__).resolve().parents[1]
    if argv and argv[0].endswith(".py"):
        path = Path(argv[0]).resolve()
        if not path.is_relative_to(package):
            return argv
        # `python -m dagent.cli.app` (argv[0] is the module's file): launched as a module again, so
        # its folder never lands on sys.path ahead of the libraries
        module = ".".join(path.relative_to(package.parent).with_suffix("").parts)
        return ["-m", module, *argv[1:]]
    return ["-m", "dagent.cli.app", *argv[1:]]


def launched(environ: Any = None) -> bool:
    environ = os.environ if environ is None else environ
    return any(name in environ for name in LAUNCHED)


def relaunch(
    processes: int,
    config: str,
    *,
    mixed_precision: str,
    argv: Sequence[str] | None = None,
    echo: Any = print,
    execv: Any = os.execv,
    gpus: int | None = None,
) -> None:
    """Replace this process by `accelerate launch` of the same command when more than one trainer
    process is wanted and no launcher started this one; otherwise return and train here."""
    n = trainer_processes(processes, gpus)
    if n <= 1 or launched():
        return
    command = accelerate_command(n, config, this_command(argv), mixed_precision=mixed_precision)
    echo(f"{n} trainer processes ({config}): " + " ".join(command[1:]))
    sys.stdout.flush()
    sys.stderr.flush()
    execv(sys.executable, command)
