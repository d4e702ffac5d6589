"""The local sandbox's isolation tiers, one module each behind one small interface (`Tier`).

A `LocalBackend` takes the first tier that works here, bwrap -> mountns -> landlock -> cwd
(`dagent.sandbox.local`), and every sandbox it creates runs its commands through that tier:

- `probe(backend)`: "" when the tier works on this machine end to end, else why not;
- `prepare(sandbox)` / `release(sandbox)`: what a sandbox needs before its first command and gives
  back when it closes (a uid of its own, a bash start-up file);
- `limits(sandbox, timeout_s)`: the shell steps that confine what follows (cgroups, rlimits:
  `dagent.sandbox.limits`, the same for every tier);
- `argv(sandbox, run, ...)`: the command line that runs `run` inside the sandbox, and `env(sandbox)`
  what it adds to the command's environment (never its secrets: those travel in the environment
  the caller gives, F22);
- `describe(memory)`: what the tier isolates, in words, for logs and `dagent doctor`.

What differs between tiers and the sandbox must know is a class attribute: `loopback_only`,
`agent_uid`, `home_inside`, `copies_inputs`, `binds`.
"""

from __future__ import annotations

import os
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar, Protocol

from dagent.sandbox import confine, limits
from dagent.sandbox.base import WORKDIR, Resources

__all__ = ["HOME", "REOPEN_WORKDIR", "LocalBackend", "LocalSandbox", "Tier", "on_host", "under", "workdir_link"]

HOME = "/root"  # the sandbox's home inside, on the tiers that mount one
# bash reads BASH_ENV before a `bash -c` command: this reopens fd 1023, so /workdir resolves in the
# commands of a harness that closes inherited fds (opencode)
REOPEN_WORKDIR = f'[ -e /proc/self/fd/{confine.WORKDIR_FD} ] || exec {confine.WORKDIR_FD}<"$DAGENT_WORKDIR"\n'


def under(path: str, root: str) -> bool:
    return path == root or path.startswith(root + "/")


def on_host(cwd: str, host_workdir: str) -> str:
    """`cwd` with /workdir replaced by the sandbox's host directory (the tiers that mount nothing)."""
    return host_workdir + cwd[len(WORKDIR) :] if under(cwd, WORKDIR) else cwd


def workdir_link() -> bool:
    """`/workdir` is the per-process link every sandboxed process resolves to its own directory
    through fd 1023 (the landlock tier needs it; `mountns` then opens the fd instead of mounting)."""
    return os.path.islink(WORKDIR) and os.readlink(WORKDIR) == confine.WORKDIR_LINK


class LocalBackend(Protocol):
    """What a tier reads of `dagent.sandbox.local.LocalBackend` (written here, so the tiers import
    nothing of the module that chooses among them)."""

    base_dir: Path
    bash: str
    bwrap: str | None
    python: str
    prefixes: list[str]
    trees: tuple[str, ...]
    ro_binds: tuple[tuple[str, str], ...]
    hidden: tuple[str, ...]
    tcp_connect: tuple[int, ...]
    landlock_why: str


class LocalSandbox(Protocol):
    """What a tier reads and sets of `dagent.sandbox.local.LocalSandbox`."""

    root: Path
    host_workdir: Path
    host_home: Path
    host_tmp: Path
    resources: Resources
    binds: dict[str, Path]
    uid: int | None

    def cgroup_dirs(self) -> list[Path]: ...


class Tier(ABC):
    """One way of confining a local sandbox's commands, chosen once per backend."""

    name: ClassVar[str]
    loopback_only: ClassVar[bool] = False  # a network of its own with loopback only
    agent_uid: ClassVar[bool] = False  # commands run as a per-sandbox unprivileged uid
    home_inside: ClassVar[bool] = True  # the home is /root inside (else: the host directory itself)
    copies_inputs: ClassVar[bool] = False  # no read-only mount protects the staging cache: copy, never link
    binds: ClassVar[bool] = False  # exec(uid=...) and a sandbox's extra writable binds

    def __init__(self, backend: LocalBackend) -> None:
        self.backend = backend

    @classmethod
    def probe(cls, backend: LocalBackend) -> str:
        """ "" when this tier works here end to end, else why not."""
        return ""

    def prepare(self, sandbox: LocalSandbox) -> None:
        """What a new sandbox needs before its first command (its directories exist)."""

    def release(self, sandbox: LocalSandbox) -> None:
        """What a closing sandbox gives back."""

    def limits(self, sandbox: LocalSandbox, timeout_s: float) -> str:
        """The shell steps run before the command: join the sandbox's cgroups, set its rlimits."""
        return limits.setup_script(sandbox.resources, sandbox.cgroup_dirs(), timeout_s)

    def env(self, sandbox: LocalSandbox) -> dict[str, str]:
        """What this tier adds to a command's environment."""
        return {}

    @abstractmethod
    def argv(
        self, sandbox: LocalSandbox, run: Sequence[str], *, setup: str, cwd: str, status_fd: int, uid: int | None
    ) -> list[str]:
        """The command line that runs `run` in `sandbox`, starting in `cwd` (a path inside)."""

    @abstractmethod
    def describe(self, memory: str) -> str:
        """What this tier isolates, in words; `memory` says how memory is limited."""

    def stop(self, proc: subprocess.Popen[bytes]) -> None:
        """Before the process group is killed: end what the tier started its own way."""

    def ran(self, status: bytes) -> bool:
        """Whether the command itself started (bubblewrap reports it on a status fd)."""
        return True
