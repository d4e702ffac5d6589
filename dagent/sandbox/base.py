"""The sandbox contract every backend implements (local, E2B, Hugging Face).

A backend creates sandboxes; a sandbox runs commands in its work directory and comes back with a
frozen `ExecResult`. Failures of the command are data (`exit_code`, `timed_out`, `oom_killed`),
never exceptions; only failing to reach or use the sandbox itself raises `SandboxError`.

`exit_code` is `None` only when there is no code (killed by timeout, or never started); 0 is
success and must never be truth-tested (`int(code or 1)` read every success as failure, F17).
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from dagent.core.task import INPUT_DIR, WORKDIR  # the instruction contract owns the paths

__all__ = ["INPUT_DIR", "WORKDIR", "ExecResult", "Resources", "Sandbox", "SandboxBackend"]


@dataclass(frozen=True)
class ExecResult:
    """The outcome of one command in a sandbox."""

    exit_code: int | None  # None: no code (timed out / never ran); 0 is success (F17)
    stdout: str
    stderr: str
    timed_out: bool = False
    oom_killed: bool = False  # killed for memory (exit 137 / SIGKILL under a memory limit, MemoryError) (F18)
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.oom_killed

    @property
    def failure_cause(self) -> str | None:
        """A short cause for an unsuccessful command, or None when it succeeded."""
        if self.timed_out:
            return "sandbox_timeout"
        if self.oom_killed:
            return "sandbox_oom"
        if self.exit_code is None:
            return "no_exit_code"
        if self.exit_code != 0:
            return f"exit_{self.exit_code}"
        return None


@dataclass(frozen=True)
class Resources:
    """What a task asks of its sandbox."""

    cpus: int = 1
    memory_mb: int = 2048
    timeout_s: float = 120.0  # default wall clock per exec
    max_processes: int = 256
    max_file_mb: int = 1024
    # address space beyond memory_mb for the agent's own runtime, granted only where memory is bounded
    # by RLIMIT_AS (no cgroup), which counts reservations a JavaScript runtime never touches
    runtime_address_space_mb: int = 0


class Sandbox(abc.ABC):
    """One isolated work directory (`/workdir`) with commands run inside it."""

    workdir: str = WORKDIR
    home: str = "/root"  # where the agent's home is for this backend (F20)

    @abc.abstractmethod
    def exec(
        self,
        command: str,
        *,
        timeout_s: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> ExecResult:
        """Run `command` with bash inside the sandbox. Secrets go in `env`, never in `command` (F22)."""

    @abc.abstractmethod
    def write_file(self, path: str, data: bytes | str) -> None:
        """Write a file at an absolute sandbox path (parents created)."""

    @abc.abstractmethod
    def read_file(self, path: str) -> bytes | None:
        """Read a file at an absolute sandbox path; None if it does not exist."""

    @abc.abstractmethod
    def stage(self, files: Mapping[str, Path]) -> None:
        """Put host files into /workdir/input under the given names. Raises StagingError."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the sandbox (idempotent)."""

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SandboxBackend(abc.ABC):
    """Creates sandboxes of one kind."""

    name: str = "base"
    remote: bool = False  # True when sandboxes run on another machine (loopback URLs unreachable, F08)
    home: str = "/root"  # the agent's home directory in this backend's sandboxes (F20)

    @abc.abstractmethod
    def create(self, resources: Resources | None = None) -> Sandbox:
        """Create a fresh sandbox sized by `resources`."""

    def describe(self) -> str:
        """One line saying what isolation this backend provides."""
        return self.name
