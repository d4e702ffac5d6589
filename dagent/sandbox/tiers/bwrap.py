"""The `bwrap` tier: bubblewrap with every namespace unshared (user, pid, net, ipc, uts, cgroup),
caps dropped, a read-only system and interpreter, private `/tmp`, loopback-only network."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

from dagent.sandbox.base import INPUT_DIR, WORKDIR
from dagent.sandbox.etc import etc_copy
from dagent.sandbox.tiers import HOME, LocalBackend, LocalSandbox, Tier

__all__ = ["BwrapTier", "base_argv"]


def base_argv(backend: LocalBackend) -> list[str]:
    """Namespaces, the read-only system, private /proc, /dev and /tmp: the same every exec."""
    a = [
        backend.bwrap or "bwrap",
        "--unshare-all",
        "--die-with-parent",
        "--cap-drop",
        "ALL",
        "--new-session",
        "--ro-bind",
        "/usr",
        "/usr",
    ]
    for d in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(d):
            a += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            a += ["--ro-bind", d, d]
    etc = str(etc_copy(backend.base_dir))
    return a + ["--ro-bind", etc, "/etc", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]


class BwrapTier(Tier):
    name = "bwrap"
    loopback_only = True
    binds = True

    def __init__(self, backend: LocalBackend) -> None:
        super().__init__(backend)
        self.base = base_argv(backend)

    @classmethod
    def probe(cls, backend: LocalBackend) -> str:
        if not backend.bwrap:
            return "`bwrap` not found on PATH"
        try:  # the same flags every sandbox runs with (/proc, /dev, the /etc copy): fewer could pass where
            argv = [*base_argv(backend), "true"]  # a real sandbox then fails (`Can't mount proc`)
        except OSError as e:
            return f"the sandbox's /etc copy could not be made ({e})"
        r = subprocess.run(argv, capture_output=True, text=True)
        return "" if r.returncode == 0 else f"bwrap exited {r.returncode}: {r.stderr.strip()[:200]}"

    def argv(
        self, sandbox: LocalSandbox, run: Sequence[str], *, setup: str, cwd: str, status_fd: int, uid: int | None
    ) -> list[str]:
        backend, wd = self.backend, str(sandbox.host_workdir)
        a = list(self.base)
        for dst, host in sorted(sandbox.binds.items()):  # first: what follows mounts on top of them
            a += ["--bind", str(host), dst]  # (a /tmp bind must not hide a venv under /tmp)
        a += ["--bind", str(sandbox.host_home), HOME]
        for p in backend.prefixes:
            a += ["--ro-bind", p, p]
        a += ["--bind", wd, WORKDIR]
        if (sandbox.host_workdir / "input").is_dir():  # staged files are hardlinks into the backend's cache:
            a += ["--ro-bind", f"{wd}/input", INPUT_DIR]  # never writable
        for src, dst in backend.ro_binds:
            a += ["--ro-bind", src, dst]
        if uid is not None:  # the user namespace maps this process to `uid` (no capabilities)
            a += ["--uid", str(uid), "--gid", str(uid)]
        a += ["--remount-ro", "/", "--chdir", cwd, "--json-status-fd", str(status_fd)]
        return ["/bin/sh", "-c", f'{setup}; exec "$@"', "sh", *a, *run]

    def describe(self, memory: str) -> str:
        return (
            f"local: bubblewrap (user/pid/net/ipc/uts namespaces, read-only system, "
            f"loopback-only network), {memory}, rlimits cpu/fsize/nofile"
        )

    def stop(self, proc: subprocess.Popen[bytes]) -> None:
        # Inside out: killing the namespace's init ends everything in it and leaves bwrap to reap
        # it; killing bwrap first orphans that init to a host init that may never reap.
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
        with contextlib.suppress(OSError, ValueError):
            for pid in children.read_text().split():
                os.kill(int(pid), signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=1)

    def ran(self, status: bytes) -> bool:
        return b'"exit-code"' in status
