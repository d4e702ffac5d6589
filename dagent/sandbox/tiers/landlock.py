"""The `landlock` tier (no namespaces at all and not root: a container under Docker's default
runtime as uid 1000, a hosted Space): every command is started by `dagent.sandbox.confine`, which
confines it with Landlock (read-only system and interpreter, read-write only the sandbox's own
directories, TCP connect only to `tcp_connect` ports, signals scoped) and a seccomp filter (plain
TCP only, no other sockets, io_uring, SysV IPC, ptrace or metadata changes). No mount: `/workdir`
resolves per process where it is the link `/workdir -> /proc/self/fd/1023` (the images make it;
root makes it here when `/workdir` is absent); commands start in the sandbox's host directory
either way. The sandbox shares the server's uid; memory is the summed resident size of its
processes (a watchdog) besides RLIMIT_AS, processes RLIMIT_NPROC over what the uid already runs.
`/tmp` is not writable (TMPDIR is the sandbox's own), and chmod / touch of times fail (EPERM) by
design."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from dagent.errors import SandboxError
from dagent.sandbox import confine
from dagent.sandbox.base import WORKDIR
from dagent.sandbox.etc import ETC_ENTRIES
from dagent.sandbox.tiers import REOPEN_WORKDIR, LocalBackend, LocalSandbox, Tier, on_host, workdir_link

__all__ = ["LandlockTier", "tasks_of_uid"]

_LOG = logging.getLogger(__name__)
LAUNCHER = str(Path(confine.__file__).resolve())
_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")


def allowed_paths(backend: LocalBackend) -> dict[str, list[str]]:
    """What every landlock sandbox may read (and execute), and the devices it may write."""
    system = [
        d
        for d in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/sys")
        if os.path.exists(d)
    ]
    etc = [f"/etc/{n}" for n in ETC_ENTRIES if os.path.lexists(f"/etc/{n}")]
    return {
        "read_only": [*system, *etc, *backend.prefixes, *(src for src, _ in backend.ro_binds)],
        "devices": [d for d in _DEVICES if os.path.exists(d)],
    }


def tasks_of_uid(uid: int | None = None) -> int:
    """Tasks (threads count: RLIMIT_NPROC counts them) this real uid runs now."""
    uid, total = os.getuid() if uid is None else uid, 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fields = dict(
                line.split(":", 1)
                for line in Path(f"/proc/{name}/status").read_text().splitlines()
                if line.startswith(("Uid:", "Threads:"))
            )
            if int(fields["Uid"].split()[0]) == uid:
                total += int(fields["Threads"])
        except (OSError, ValueError, KeyError):
            continue
    return total


class LandlockTier(Tier):
    name = "landlock"
    home_inside = False

    def __init__(self, backend: LocalBackend, why: str = "") -> None:
        """Refuses (naming the fix) when `why` says the probe failed; makes the `/workdir` link
        where it can, else records in `backend.landlock_why` why absolute /workdir paths fail."""
        super().__init__(backend)
        if why:
            raise SandboxError(
                f"the landlock tier is unusable here ({why}); use a kernel with Landlock "
                f"ABI >= {confine.MIN_ABI} (Linux 6.12) enabled, or bubblewrap where user "
                "namespaces are allowed"
            )
        self.paths = allowed_paths(backend)
        if workdir_link():
            return
        with contextlib.suppress(OSError):  # absent, or the empty mount point an earlier tier made
            if os.path.isdir(WORKDIR) and not os.path.islink(WORKDIR) and not os.path.ismount(WORKDIR):
                os.rmdir(WORKDIR)  # fails unless empty
            if not os.path.lexists(WORKDIR):
                os.symlink(confine.WORKDIR_LINK, WORKDIR)
                return
        backend.landlock_why = (
            f"{WORKDIR} is not the link to {confine.WORKDIR_LINK}: absolute {WORKDIR} paths "
            f"do not resolve in its sandboxes (commands still start in their own directory); "
            f"make it with `ln -s {confine.WORKDIR_LINK} {WORKDIR}` as root"
        )
        _LOG.warning("landlock tier: %s", backend.landlock_why)

    @classmethod
    def probe(cls, backend: LocalBackend) -> str:
        """ "" when the tier works here end to end (a confined `true`), else why not."""
        try:
            confine.landlock_abi()
            confine.seccomp_program()
        except confine.ConfineError as e:
            return e.strerror
        with tempfile.TemporaryDirectory(dir=backend.base_dir) as d:
            spec = {**allowed_paths(backend), "read_write": [d], "workdir": d}
            r = subprocess.run(
                [backend.python, "-I", "-S", LAUNCHER, json.dumps(spec), "--", "true"],
                capture_output=True,
                text=True,
                cwd=d,
            )
        return "" if r.returncode == 0 else f"the confined probe exited {r.returncode}: {r.stderr.strip()[-300:]}"

    def prepare(self, sandbox: LocalSandbox) -> None:
        sandbox.host_tmp.mkdir(mode=0o700)  # TMPDIR (the host's /tmp is shared)
        # a harness that closes inherited fds (opencode) starts `bash -c`: bash reads BASH_ENV
        # first, which reopens fd 1023, so /workdir resolves in its commands too
        (sandbox.root / "bash_env").write_text(REOPEN_WORKDIR)

    def env(self, sandbox: LocalSandbox) -> dict[str, str]:
        return {
            "TMPDIR": str(sandbox.host_tmp),
            "BASH_ENV": str(sandbox.root / "bash_env"),
            "DAGENT_WORKDIR": str(sandbox.host_workdir),
        }

    def argv(
        self, sandbox: LocalSandbox, run: Sequence[str], *, setup: str, cwd: str, status_fd: int, uid: int | None
    ) -> list[str]:
        wd, res = str(sandbox.host_workdir), sandbox.resources
        spec = {
            **self.paths,
            "read_only": [*self.paths["read_only"], str(sandbox.root / "bash_env")],
            "workdir": wd,
            "read_write": [wd, str(sandbox.host_home), str(sandbox.host_tmp)],
            "tcp_connect": list(self.backend.tcp_connect),
            "memory_mb": res.memory_mb,
            "disk_mb": res.max_file_mb * 4,
            "max_processes": res.max_processes,
            # RLIMIT_NPROC counts every task of this uid: over what already runs (F54)
            "nproc": tasks_of_uid() + res.max_processes,
            "parent": os.getpid(),
        }
        return [
            "/bin/sh",
            "-c",
            f'{setup}; cd "$1" && shift && exec "$@"',
            "sh",
            on_host(cwd, wd),
            self.backend.python,
            "-I",
            "-S",
            LAUNCHER,
            json.dumps(spec),
            "--",
            *run,
        ]

    def describe(self, memory: str) -> str:
        ports = ", ".join(map(str, self.backend.tcp_connect)) or "none"
        return (
            f"local: no namespaces; Landlock (read-only system and interpreter, read-write only the "
            f"sandbox's own directories, TCP connect to port(s) {ports}, signals scoped) and seccomp "
            f"(plain TCP only, no other sockets, io_uring, SysV IPC, ptrace or chmod), as this uid; "
            f"RLIMIT_AS + a summed-RSS watchdog for memory, rlimits cpu/fsize/nofile/nproc"
        )

    def stop(self, proc: subprocess.Popen[bytes]) -> None:
        # the launcher kills its whole domain (what was daemonised too) when told to stop
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=2)
