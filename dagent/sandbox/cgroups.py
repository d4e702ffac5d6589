"""Per-sandbox cgroups v1 (memory, pids, cpu) for the local sandbox: where this process may
create them, and one sandbox's set (limits, its kernel-counted OOM kills, kill-all, removal)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from dagent.sandbox.base import Resources

_LEFTOVER_CGROUPS: list[Path] = []
_LEFTOVER_LOCK = threading.Lock()


def _cgroup_parents() -> dict[str, Path]:
    """This process's own cgroup v1 dirs (memory, pids, cpu) in which it may create children."""
    found: dict[str, Path] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        _, controllers, rel = line.split(":", 2)
        for ctl in set(controllers.split(",")) & {"memory", "pids", "cpu"}:
            for mount in (controllers, ctl):
                probe = Path("/sys/fs/cgroup", mount, rel.lstrip("/"), f"dagent-{os.getpid()}")
                try:
                    probe.mkdir()
                    probe.rmdir()
                except OSError:
                    continue
                found[ctl] = probe.parent
                break
    return found if "memory" in found else {}


class _Cgroups:
    """One sandbox's cgroups: memory (kills are counted in memory.oom_control), pids, cpu."""

    def __init__(self, parents: Mapping[str, Path], name: str, res: Resources) -> None:
        self.memory = parents["memory"] / name
        self.dirs: list[Path] = []
        settings = {
            "memory": [
                ("memory.limit_in_bytes", res.memory_mb << 20),
                ("memory.memsw.limit_in_bytes", res.memory_mb << 20),
            ],
            "pids": [("pids.max", res.max_processes)],
            "cpu": [("cpu.cfs_period_us", 100_000), ("cpu.cfs_quota_us", max(res.cpus, 1) * 100_000)],
        }
        try:
            for ctl, parent in parents.items():
                self.dirs.append(parent / name)
                self.dirs[-1].mkdir()
                for fname, value in settings[ctl]:  # memsw exists only with swap accounting
                    if (parent / name / fname).exists():
                        (parent / name / fname).write_text(str(value))
        except OSError:
            self.remove()
            raise

    def oom_kills(self) -> int | None:
        for line in (self.memory / "memory.oom_control").read_text().splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
        return None

    def kill_all(self) -> None:
        procs = self.memory / "cgroup.procs"
        for _ in range(200):
            pids = procs.read_text().split() if procs.exists() else []
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
            time.sleep(0.005)

    def remove(self) -> None:
        """Remove the cgroups; one still busy (a zombie reparented to an init that is slow to
        reap it counts in pids/cpu) is retried at the next removal instead of blocking close()."""
        self.kill_all()
        with _LEFTOVER_LOCK:
            _LEFTOVER_CGROUPS.extend(self.dirs)
            for _ in range(10):
                for d in list(_LEFTOVER_CGROUPS):
                    with contextlib.suppress(OSError):
                        d.rmdir()
                    if not d.exists():
                        _LEFTOVER_CGROUPS.remove(d)
                if not any(d in _LEFTOVER_CGROUPS for d in self.dirs):
                    return
                time.sleep(0.005)
