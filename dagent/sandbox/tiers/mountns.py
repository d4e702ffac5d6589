"""The `mountns` tier (no usable bubblewrap, e.g. a host without user namespaces, and this process
is root): private mount, network (loopback only) and pid namespaces, the sandbox at `/workdir` and
its home at `/root` (the host's `/root` hidden by it), `hidden` paths covered by an empty tmpfs,
and every command run as an UNPRIVILEGED uid of its own (one per sandbox, no capabilities, no new
privileges): it cannot read what the server's uid owns with mode 0700 (the suite, other sandboxes
under the 0700 base directory, the server's /proc entries). `check_isolation` proves it from inside
a sandbox; the servers refuse to start when it fails."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

from dagent.errors import SandboxError
from dagent.sandbox.base import INPUT_DIR, WORKDIR
from dagent.sandbox.tiers import HOME, REOPEN_WORKDIR, LocalBackend, LocalSandbox, Tier, under, workdir_link

__all__ = ["MountnsTier"]

# private mount, network and pid namespaces (root needs no user namespace for these)
UNSHARE = ("unshare", "--mount", "--net", "--pid", "--fork", "--mount-proc", "--propagation", "private")
_LOOPBACK_UP = (
    "import fcntl, socket, struct\n"  # SIOCGIFFLAGS / SIOCSIFFLAGS | IFF_UP, no iproute2 needed
    "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
    "flags = struct.unpack('16sH', fcntl.ioctl(s, 0x8913, struct.pack('16sH', b'lo', 0)))[1]\n"
    "fcntl.ioctl(s, 0x8914, struct.pack('16sH', b'lo', flags | 1))\n"
)
_AGENT_UIDS = range(200_000, 300_000)  # no account on the host; one per live sandbox of this process
_UIDS_IN_USE: set[int] = set()
_UID_LOCK = threading.Lock()
_WORKDIR_MOUNT = "/run/dagent-workdir"  # with the /workdir link: the mount point behind the fd
_STAGE = "/run/dagent-stage"  # where interpreter trees wait while their closed parent is covered
_BASH_ENV = ".dagent_bash_env"  # in the sandbox's home


def _take_uid() -> int:
    """A uid no live sandbox of this process runs as (starting at a per-process offset)."""
    with _UID_LOCK:
        start = (os.getpid() * 7919) % len(_AGENT_UIDS)
        for k in range(len(_AGENT_UIDS)):
            uid = _AGENT_UIDS[(start + k) % len(_AGENT_UIDS)]
            if uid not in _UIDS_IN_USE:
                _UIDS_IN_USE.add(uid)
                return uid
    raise SandboxError("every agent uid is in use: close sandboxes")


def _closed_ancestor(path: str) -> str | None:
    """The highest directory above `path` that other users cannot pass through (no o+x: a 0700
    `mktemp -d`, a home), which keeps a sandbox's own uid from the interpreter below it; or None."""
    parts = Path(path).parts
    for i in range(2, len(parts)):
        folder = os.path.join(*parts[:i])
        try:
            if not os.stat(folder).st_mode & 0o001:
                return folder
        except OSError:
            return None
    return None


def _home_side(path: str, home: str) -> str:
    """Where a sandbox mounts what it must see at `path`: under /root, at the same place in the
    sandbox's home directory `home` (which is mounted over /root after it), elsewhere at `path`."""
    return home + path[len(HOME) :] if under(path, HOME) else path


class MountnsTier(Tier):
    name = "mountns"
    loopback_only = True
    agent_uid = True

    def __init__(self, backend: LocalBackend) -> None:
        """Interpreter trees and bound tools under a directory the agent uids cannot pass (not
        /root: the home mapping covers it, and they are mounted into the home instead), by that
        closed directory: there a tmpfs, the trees bound back in place."""
        super().__init__(backend)
        self.covers: dict[str, list[str]] = {}
        for _, dst in backend.ro_binds:  # mount points (on the host; they stay empty there)
            if not under(dst, HOME):
                os.makedirs(dst, exist_ok=True)
        for tree in backend.trees:
            closed = None if under(tree, HOME) else _closed_ancestor(tree)
            if closed:
                self.covers.setdefault(closed, []).append(tree)
        if self.covers:
            os.makedirs(_STAGE, exist_ok=True)

    @classmethod
    def probe(cls, backend: LocalBackend) -> str:
        if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("setpriv"):
            return "not root, or no unshare / setpriv"
        try:
            link = workdir_link()
            os.makedirs(_WORKDIR_MOUNT if link else WORKDIR, exist_ok=True)  # the mount point; empty on the host
            with tempfile.TemporaryDirectory(dir=backend.base_dir) as d:
                Path(d, "probe").touch()
                target = '"$1"' if link else WORKDIR  # with the link, sandboxes get fd 1023 instead
                script = f'mount --bind "$1" {target} && test -e {target}/probe'
                r = subprocess.run([*UNSHARE, "sh", "-c", script, "sh", d], capture_output=True)
        except OSError as e:
            return f"the namespace probe could not run ({e})"
        return "" if r.returncode == 0 else f"the namespace probe exited {r.returncode}"

    def prepare(self, sandbox: LocalSandbox) -> None:
        if workdir_link():  # written once, before the agent owns the home
            (sandbox.host_home / _BASH_ENV).write_text(REOPEN_WORKDIR)
        sandbox.uid = _take_uid()
        for d in (sandbox.host_workdir, sandbox.host_home):
            os.chown(d, sandbox.uid, sandbox.uid)
        # mount points for the interpreter and the bound tools under the new /root (a checkout in
        # root's home: its node_modules would be hidden by the home otherwise)
        for p in self.backend.trees:
            if under(p, HOME) and p != HOME:
                (sandbox.host_home / p[len(HOME) + 1 :]).mkdir(parents=True, exist_ok=True)

    def release(self, sandbox: LocalSandbox) -> None:
        if sandbox.uid is not None:
            _UIDS_IN_USE.discard(sandbox.uid)

    def env(self, sandbox: LocalSandbox) -> dict[str, str]:
        if (sandbox.host_home / _BASH_ENV).is_file():
            return {"BASH_ENV": f"{HOME}/{_BASH_ENV}", "DAGENT_WORKDIR": _WORKDIR_MOUNT}
        return {}

    def argv(
        self, sandbox: LocalSandbox, run: Sequence[str], *, setup: str, cwd: str, status_fd: int, uid: int | None
    ) -> list[str]:
        backend, q = self.backend, shlex.quote
        wd, home = str(sandbox.host_workdir), str(sandbox.host_home)
        mounts = [f"mount -t tmpfs -o size=4k,mode=000 dagent-hidden {q(h)}" for h in backend.hidden]
        if workdir_link():  # /workdir -> /proc/self/fd/1023: the sandbox's directory, mounted where
            # its uid can reach it (the host path is under the 0700 base), on that fd
            mounts += [f"mount --bind {q(wd)} {_WORKDIR_MOUNT}", f"exec 1023<{_WORKDIR_MOUNT}"]
        else:
            mounts.append(f"mount --bind {q(wd)} {WORKDIR}")
        if (sandbox.host_workdir / "input").is_dir():
            mounts += [f"mount --bind {q(wd + '/input')} {INPUT_DIR}", f"mount -o remount,bind,ro {INPUT_DIR}"]
        for src, dst in backend.ro_binds:  # under /root: into the home, which is mounted there below
            at = q(_home_side(dst, home))
            mounts += [f"mount --bind {q(src)} {at}", f"mount -o remount,bind,ro {at}"]
        mounts += [f"mount --bind {q(p)} {q(_home_side(p, home))}" for p in backend.prefixes if under(p, HOME)]
        mounts.append(f"mount --rbind {q(home)} {HOME}")
        # the new network's lo starts down: iproute2 where present (3 ms), else Python's ioctl (30 ms)
        mounts.append(f"{{ ip link set lo up 2>/dev/null || {q(sys.executable)} -c {q(_LOOPBACK_UP)}; }}")
        if self.covers:  # last: what is mounted above was reached through these directories
            mounts.append(f"mount -t tmpfs -o size=64k,mode=0755 dagent-stage {_STAGE}")
            staged = []
            for closed, trees in self.covers.items():
                for tree in trees:
                    n = len(staged)
                    mounts += [f"mkdir {_STAGE}/{n}", f"mount --bind {q(tree)} {_STAGE}/{n}"]
                    staged.append((n, tree))
                mounts.append(f"mount -t tmpfs -o size=64k,mode=0755 dagent-cover {q(closed)}")
            for n, tree in staged:
                mounts += [
                    f"mkdir -p {q(tree)}",
                    f"mount --move {_STAGE}/{n} {q(tree)}",
                    f"mount -o remount,bind,ro {q(tree)}",
                ]
        drop = (
            (
                f"setpriv --reuid={sandbox.uid} --regid={sandbox.uid} --clear-groups --no-new-privs "
                "--inh-caps=-all --bounding-set=-all -- "
            )
            if sandbox.uid is not None
            else ""
        )
        script = f'{setup}; {" && ".join(mounts)} && cd "$1" && shift && exec {drop}"$@"'
        return [*UNSHARE, backend.bash, "-c", script, "sh", cwd, *run]  # bash: fds past 9

    def describe(self, memory: str) -> str:
        return (
            f"local: no user namespaces; private mount/network (loopback only)/pid namespaces as root, "
            f"commands as an unprivileged uid per sandbox (no capabilities, no new privileges), "
            f"{len(self.backend.hidden)} host path(s) hidden; {memory}, rlimits cpu/fsize/nofile"
        )
