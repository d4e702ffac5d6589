"""Local sandboxes: one host directory per sandbox, seen inside as `/workdir`.

Isolation tiers, chosen once per backend and named by `describe()`:
- `bwrap`: bubblewrap with every namespace unshared (user, pid, net, ipc, uts, cgroup), caps
  dropped, a read-only system and interpreter, private `/tmp`, loopback-only network.
- `mountns` (no usable bubblewrap, e.g. a host without user namespaces, and this process is root):
  private mount, network (loopback only) and pid namespaces, the sandbox at `/workdir` and its home
  at `/root` (the host's `/root` hidden by it), `hidden` paths covered by an empty tmpfs, and every
  command run as an UNPRIVILEGED uid of its own (one per sandbox, no capabilities, no new
  privileges): it cannot read what the server's uid owns with mode 0700 (the suite, other
  sandboxes under the 0700 base directory, the server's /proc entries). `check_isolation` proves it
  from inside a sandbox; the servers refuse to start when it fails.
- `landlock` (no namespaces at all and not root, e.g. a container under Docker's default runtime as
  uid 1000, a hosted Space): every command is started by `dagent.sandbox.confine`, which confines it
  with Landlock (read-only system and interpreter, read-write only the sandbox's own directories,
  TCP connect only to `tcp_connect` ports, signals scoped) and a seccomp filter (plain TCP only, no
  other sockets, io_uring, SysV IPC, ptrace or metadata changes). No mount: `/workdir` resolves
  per process where it is the link `/workdir -> /proc/self/fd/1023` (the images make it; root makes
  it here when `/workdir` is absent); commands start in the sandbox's host directory either way. The
  sandbox shares the server's uid; memory is the summed resident size of its processes (a watchdog)
  besides RLIMIT_AS, processes RLIMIT_NPROC over what the uid already runs. `/tmp` is not writable
  (TMPDIR is the sandbox's own), and chmod / touch of times fail (EPERM) by design.
- `cwd` (no bubblewrap and not root): resource limits only, with a loud warning; commands run with
  cwd = the host directory (`/workdir` does not resolve) and the server's view of the filesystem
  and network. `check_isolation` fails there, so no server serves an agent from it.

Limits, every tier: a per-sandbox cgroup v1 (memory, pids, cpu) when this process may create
one, else RLIMIT_AS for memory; RLIMIT_CPU (from the timeout), RLIMIT_FSIZE, RLIMIT_NOFILE.
RLIMIT_NPROC is not used: the kernel never enforces it for uid 0 (bwrap maps root to root), and
for other users it counts every process they own on the machine. Limits are set by a `/bin/sh`
wrapper, not `preexec_fn`, which forces fork() (a full copy of a large parent per exec).

Invariants (tests/sandbox/test_local.py): two sandboxes never see each other's files; staged
inputs are read-only inside and nothing but the given files is staged; command failures come
back as data, with exit 0 as 0 (F17), a memory kill as `oom_killed` (F18), and the caller's
`env` reaching the command without ever appearing in an argv (F22).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import posixpath
import re
import resource
import select
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Literal

from dagent.errors import ConfigError, SandboxError, StagingError
from dagent.sandbox import confine
from dagent.sandbox.base import INPUT_DIR, WORKDIR, ExecResult, Resources, Sandbox, SandboxBackend
from dagent.sandbox.cgroups import _cgroup_parents, _Cgroups
from dagent.sandbox.etc import ETC_ENTRIES, etc_copy
from dagent.sandbox.staging import check_inputs

__all__ = ["ISOLATIONS", "OUTPUT_CAP", "LocalBackend", "LocalSandbox"]

_LOG = logging.getLogger(__name__)
OUTPUT_CAP = 1 << 20  # bytes of stdout / stderr kept per exec
_NOFILE = 4096
_HOME = "/root"
_SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_OOM_TEXT = re.compile(r"MemoryError|cannot allocate|bad_alloc|out of memory|memory exhausted",
                       re.IGNORECASE)  # what a program prints when RLIMIT_AS refuses it memory
_SETUP_FAILED = "dagent-sandbox: setup failed"
# mountns tier: private mount, network and pid namespaces (root needs no user namespace for these)
_UNSHARE = ("unshare", "--mount", "--net", "--pid", "--fork", "--mount-proc", "--propagation", "private")
_LOOPBACK_UP = ("import fcntl, socket, struct\n"  # SIOCGIFFLAGS / SIOCSIFFLAGS | IFF_UP, no iproute2 needed
                "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                "flags = struct.unpack('16sH', fcntl.ioctl(s, 0x8913, struct.pack('16sH', b'lo', 0)))[1]\n"
                "fcntl.ioctl(s, 0x8914, struct.pack('16sH', b'lo', flags | 1))\n")
_AGENT_UIDS = range(200_000, 300_000)  # no account on the host; one per live sandbox of this process
_UIDS_IN_USE: set[int] = set()
ISOLATIONS = ("auto", "bwrap", "landlock", "rlimits")  # what isolation= and DAGENT_ISOLATION take
_LAUNCHER = str(Path(confine.__file__).resolve())
_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
_UID_LOCK = threading.Lock()
_MOUNTNS_WORKDIR = "/run/dagent-workdir"  # mountns with the /workdir link: the mount point behind the fd
_MOUNTNS_STAGE = "/run/dagent-stage"  # mountns: where interpreter trees wait while their closed parent is covered
_REOPEN_WORKDIR = f'[ -e /proc/self/fd/{confine.WORKDIR_FD} ] || exec {confine.WORKDIR_FD}<"$DAGENT_WORKDIR"\n'


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


def _workdir_link() -> bool:
    """`/workdir` is the per-process link every sandboxed process resolves to its own directory
    through fd 1023 (the landlock tier needs it; `mountns` then opens the fd instead of mounting)."""
    return os.path.islink(WORKDIR) and os.readlink(WORKDIR) == confine.WORKDIR_LINK


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


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root + "/")


def _home_side(path: str, home: str) -> str:
    """Where a `mountns` sandbox mounts what it must see at `path`: under /root, at the same place in
    the sandbox's home directory `home` (which is mounted over /root after it), elsewhere at `path`."""
    return home + path[len(_HOME):] if _under(path, _HOME) else path


def _prefixes(python: str | Path | None = None) -> list[str]:
    """An interpreter's trees (venv, then base) that the sandbox sees read-only: this one's, or
    those of `python` (another venv's interpreter, such as the one a Harbor image stands for)."""
    trees = (sys.prefix, sys.base_prefix)
    if python is not None:
        r = subprocess.run([str(python), "-c", "import sys; print(sys.prefix); print(sys.base_prefix)"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise ConfigError(f"cannot run the sandbox interpreter {python}: {r.stderr.strip()[:200]}")
        trees = tuple(r.stdout.split("\n")[:2])
    out: list[str] = []
    for p in map(os.path.realpath, trees):
        if p not in out and not _under(p, "/usr"):
            out.append(p)
    return out


class LocalBackend(SandboxBackend):
    """Sandboxes on this machine; see the module docstring for what each tier isolates."""

    name = "local"
    remote = False
    home = _HOME

    def __init__(self, base_dir: str | Path | None = None,
                 isolation: Literal["auto", "bwrap", "landlock", "rlimits"] = "auto", *,
                 ro_binds: Sequence[tuple[str | Path, str | Path]] = (),
                 python: str | Path | None = None, hidden: Sequence[str | Path] = (),
                 tcp_connect: Sequence[int] = ()) -> None:
        """`ro_binds`: (host path, sandbox path) pairs every sandbox also sees, read-only (a tool
        install, the capture bridge's socket directory); on the `cwd` tier the host filesystem is
        visible anyway, so they add nothing there; on `landlock` the host path is readable where it
        is (no mounts). `python`: the interpreter commands get (its trees read-only, its bin first on
        PATH); default: this one. `hidden`: host directories covered by an empty tmpfs in `mountns`
        sandboxes (the suite; bubblewrap and Landlock never show them). `isolation`: `auto` (or what
        DAGENT_ISOLATION says) takes the first tier that works, bwrap -> mountns -> landlock -> cwd;
        a named one is that tier or an error naming why not. `tcp_connect`: the TCP ports a `landlock`
        sandbox may connect to (the capture proxy's); the namespace tiers have no host network."""
        if isolation == "auto":
            isolation = os.environ.get("DAGENT_ISOLATION", "auto")  # type: ignore[assignment]
        if isolation not in ISOLATIONS:
            raise ConfigError(f"unknown isolation {isolation!r} (DAGENT_ISOLATION?): use one of {', '.join(ISOLATIONS)}")
        self.ro_binds = tuple((str(src), str(dst)) for src, dst in ro_binds)
        for src, dst in self.ro_binds:
            if not os.path.exists(src):
                raise ConfigError(f"cannot bind {src} into sandboxes: it does not exist")
            if not os.path.isabs(dst):
                raise ConfigError(f"sandbox bind target {dst!r} must be an absolute path")
        self.tcp_connect = tuple(int(port) for port in tcp_connect)
        self.base_dir = Path(base_dir or Path(tempfile.gettempdir(), "dagent-sandboxes"))
        self.base_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.cache_dir = self.base_dir / ".stage-cache"
        self.cache_dir.mkdir(exist_ok=True)
        self.bash = shutil.which("bash") or "/bin/bash"
        self.cgroups = _cgroup_parents()
        self.prefixes = _prefixes(python)
        self.python = str(python or sys.executable)
        self.path = ":".join([str(Path(p, "bin")) for p in self.prefixes] + [_SYSTEM_PATH])
        self.bwrap = shutil.which("bwrap")
        self.hidden = tuple(os.path.realpath(h) for h in hidden if os.path.isdir(h))
        self.landlock_why = ""
        if isolation == "landlock":
            self.tier, why = "landlock", "forced by isolation='landlock'"
            self._require_landlock(self._probe_landlock())
        else:
            why = "forced by isolation='rlimits'" if isolation == "rlimits" else self._probe_bwrap()
            if why and isolation == "bwrap":
                raise SandboxError(f"bubblewrap is unusable ({why}): install the `bubblewrap` "
                                   "package and allow user namespaces, or pass isolation='rlimits'")
            if not why:
                self.tier = "bwrap"
            elif self._probe_mountns():
                self.tier = "mountns"
            elif isolation == "auto" and not (landlock := self._probe_landlock()):
                self.tier = "landlock"
                self._require_landlock("")
            else:
                self.tier = "cwd"
                if isolation == "auto":
                    self.landlock_why = landlock
        self.bwrap_base = self._bwrap_base() if self.tier == "bwrap" else []
        self.landlock_paths = self._landlock_paths() if self.tier == "landlock" else {}
        # mountns: interpreter trees and bound tools under a directory its uids cannot pass (not
        # /root: the home mapping covers it, and they are mounted into the home instead), by the
        # closed directory: there a tmpfs, the trees bound back in place
        self.covers: dict[str, list[str]] = {}
        self.trees = (*self.prefixes, *(dst for _, dst in self.ro_binds))  # what every sandbox sees in place
        if self.tier == "mountns":
            for _, dst in self.ro_binds:  # mount points (on the host; they stay empty there)
                if not _under(dst, _HOME):
                    os.makedirs(dst, exist_ok=True)
            for tree in self.trees:
                closed = None if _under(tree, _HOME) else _closed_ancestor(tree)
                if closed:
                    self.covers.setdefault(closed, []).append(tree)
            if self.covers:
                os.makedirs(_MOUNTNS_STAGE, exist_ok=True)
        if self.tier not in ("bwrap", "landlock"):
            _LOG.warning("%s (bubblewrap: %s%s)", self.describe(), why,
                         f"; landlock: {self.landlock_why}" if self.landlock_why else "")
        elif self.tier == "landlock" or not self.cgroups:
            _LOG.warning("%s", self.describe())

    def allow_tcp(self, port: int) -> None:
        """Let `landlock` sandboxes connect to `port` (the capture proxy's, known once it listens); the
        namespace tiers reach it through the bridge instead, and `cwd` reaches everything anyway."""
        if int(port) not in self.tcp_connect:
            self.tcp_connect = (*self.tcp_connect, int(port))

    # -- the landlock tier --------------------------------------------------------------------

    def _landlock_paths(self) -> dict[str, list[str]]:
        """What every landlock sandbox may read (and execute), and the devices it may write."""
        system = [d for d in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/sys")
                  if os.path.exists(d)]
        etc = [f"/etc/{n}" for n in ETC_ENTRIES if os.path.lexists(f"/etc/{n}")]
        return {"read_only": [*system, *etc, *self.prefixes, *(src for src, _ in self.ro_binds)],
                "devices": [d for d in _DEVICES if os.path.exists(d)]}

    def _probe_landlock(self) -> str:
        """"" when the tier works here end to end (a confined `true`), else why not."""
        try:
            confine.landlock_abi()
            confine.seccomp_program()
        except confine.ConfineError as e:
            return e.strerror
        with tempfile.TemporaryDirectory(dir=self.base_dir) as d:
            spec = {**self._landlock_paths(), "read_write": [d], "workdir": d}
            r = subprocess.run([self.python, "-I", "-S", _LAUNCHER, json.dumps(spec), "--", "true"],
                               capture_output=True, text=True, cwd=d)
        return "" if r.returncode == 0 else f"the confined probe exited {r.returncode}: {r.stderr.strip()[-300:]}"

    def _require_landlock(self, why: str) -> None:
        if why:
            raise SandboxError(f"the landlock tier is unusable here ({why}); use a kernel with Landlock "
                               f"ABI >= {confine.MIN_ABI} (Linux 6.12) enabled, or bubblewrap where user "
                               "namespaces are allowed")
        if _workdir_link():
            return
        with contextlib.suppress(OSError):  # absent, or the empty mount point an earlier tier made
            if os.path.isdir(WORKDIR) and not os.path.islink(WORKDIR) and not os.path.ismount(WORKDIR):
                os.rmdir(WORKDIR)  # fails unless empty
            if not os.path.lexists(WORKDIR):
                os.symlink(confine.WORKDIR_LINK, WORKDIR)
                return
        self.landlock_why = (f"{WORKDIR} is not the link to {confine.WORKDIR_LINK}: absolute {WORKDIR} paths do "
                             f"not resolve in its sandboxes (commands still start in their own directory); "
                             f"make it with `ln -s {confine.WORKDIR_LINK} {WORKDIR}` as root")
        _LOG.warning("landlock tier: %s", self.landlock_why)

    def _probe_bwrap(self) -> str:
        if not self.bwrap:
            return "`bwrap` not found on PATH"
        try:  # the same flags every sandbox runs with (/proc, /dev, the /etc copy): fewer could pass where
            argv = [*self._bwrap_base(), "true"]  # a real sandbox then fails (`Can't mount proc`)
        except OSError as e:
            return f"the sandbox's /etc copy could not be made ({e})"
        r = subprocess.run(argv, capture_output=True, text=True)
        return "" if r.returncode == 0 else f"bwrap exited {r.returncode}: {r.stderr.strip()[:200]}"

    @property
    def loopback_only(self) -> bool:
        """Sandboxes have a network of their own with loopback only (reach a host service through
        the capture bridge); False on `cwd`, which shares the host's network."""
        return self.tier in ("bwrap", "mountns")

    @property
    def agent_uid_isolation(self) -> bool:
        """Commands run as a per-sandbox unprivileged uid (the `mountns` tier)."""
        return self.tier == "mountns"

    def _probe_mountns(self) -> bool:
        if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("setpriv"):
            return False
        try:
            link = _workdir_link()
            os.makedirs(_MOUNTNS_WORKDIR if link else WORKDIR, exist_ok=True)  # the mount point; empty on the host
            with tempfile.TemporaryDirectory(dir=self.base_dir) as d:
                Path(d, "probe").touch()
                target = '"$1"' if link else WORKDIR  # with the link, sandboxes get fd 1023 instead
                script = f'mount --bind "$1" {target} && test -e {target}/probe'
                r = subprocess.run([*_UNSHARE, "sh", "-c", script, "sh", d], capture_output=True)
            return r.returncode == 0
        except OSError:
            return False

    def _bwrap_base(self) -> list[str]:
        """Namespaces, the read-only system, private /proc, /dev and /tmp: the same every exec."""
        a = [self.bwrap or "bwrap", "--unshare-all", "--die-with-parent", "--cap-drop", "ALL",
             "--new-session", "--ro-bind", "/usr", "/usr"]
        for d in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
            if os.path.islink(d):
                a += ["--symlink", os.readlink(d), d]
            elif os.path.isdir(d):
                a += ["--ro-bind", d, d]
        etc = str(etc_copy(self.base_dir))
        return a + ["--ro-bind", etc, "/etc", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]

    def describe(self) -> str:
        mem = "cgroup v1 memory/pids/cpu" if self.cgroups else "RLIMIT_AS memory (no cgroup)"
        if self.tier == "bwrap":
            return (f"local: bubblewrap (user/pid/net/ipc/uts namespaces, read-only system, "
                    f"loopback-only network), {mem}, rlimits cpu/fsize/nofile")
        if self.tier == "landlock":
            ports = ", ".join(map(str, self.tcp_connect)) or "none"
            return (f"local: no namespaces; Landlock (read-only system and interpreter, read-write only the "
                    f"sandbox's own directories, TCP connect to port(s) {ports}, signals scoped) and seccomp "
                    f"(plain TCP only, no other sockets, io_uring, SysV IPC, ptrace or chmod), as this uid; "
                    f"RLIMIT_AS + a summed-RSS watchdog for memory, rlimits cpu/fsize/nofile/nproc")
        if self.tier == "mountns":
            return (f"local: no user namespaces; private mount/network (loopback only)/pid namespaces as root, "
                    f"commands as an unprivileged uid per sandbox (no capabilities, no new privileges), "
                    f"{len(self.hidden)} host path(s) hidden; {mem}, rlimits cpu/fsize/nofile")
        return (f"local: rlimits only, MISSING filesystem isolation, network isolation and pid "
                f"namespace; NO /workdir: commands run in the host directory; {mem}")

    def create(self, resources: Resources | None = None) -> LocalSandbox:
        return LocalSandbox(self, resources or Resources())


class LocalSandbox(Sandbox):
    """Host directories `<root>/workdir` and `<root>/home`, seen inside as /workdir and /root."""

    def __init__(self, backend: LocalBackend, resources: Resources) -> None:
        self.backend, self.resources = backend, resources
        self.root = Path(tempfile.mkdtemp(prefix="sb-", dir=backend.base_dir))
        self.host_workdir, self.host_home = self.root / "workdir", self.root / "home"
        self.host_workdir.mkdir()
        self.host_home.mkdir(mode=0o700)
        self.home = str(self.host_home) if backend.tier in ("cwd", "landlock") else _HOME
        self.host_tmp = self.root / "tmp"  # TMPDIR on the landlock tier (the host's /tmp is shared)
        if backend.tier == "landlock":
            self.host_tmp.mkdir(mode=0o700)
            # a harness that closes inherited fds (opencode) starts `bash -c`: bash reads BASH_ENV
            # first, which reopens fd 1023, so /workdir resolves in its commands too
            (self.root / "bash_env").write_text(_REOPEN_WORKDIR)
        elif backend.tier == "mountns" and _workdir_link():  # written once, before the agent owns the home
            (self.host_home / ".dagent_bash_env").write_text(_REOPEN_WORKDIR)
        self.uid = _take_uid() if backend.agent_uid_isolation else None  # who commands run as
        if self.uid is not None:
            for d in (self.host_workdir, self.host_home):
                os.chown(d, self.uid, self.uid)
        # sandbox path -> host directory, bound writable in every exec (bubblewrap only): the
        # further top-level directories a Harbor environment uses (/logs, /tests, /solution, /tmp)
        self.binds: dict[str, Path] = {}
        self._closed, self._cg = False, None
        try:
            if backend.cgroups:
                self._cg = _Cgroups(backend.cgroups, f"dagent-{self.root.name}", resources)
            # mount points for the interpreter and the bound tools under the new /root (a checkout
            # in root's home: its node_modules would be hidden by the home otherwise)
            for p in backend.trees:
                if backend.tier == "mountns" and _under(p, _HOME) and p != _HOME:
                    (self.host_home / p[len(_HOME) + 1:]).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            self.close()
            raise SandboxError(f"could not set up sandbox {self.root} (cgroups?): {e}") from e

    # -- running commands ---------------------------------------------------------------------

    def _argv(self, command: str, cwd: str, timeout_s: float, status_fd: int,
              uid: int | None = None) -> list[str]:
        res, steps = self.resources, []
        if self._cg:  # join the cgroups, then set the rlimits, for everything exec'd after
            steps += [f"echo $$ > {shlex.quote(str(d / 'cgroup.procs'))}" for d in self._cg.dirs]
        limits = [("n", _NOFILE, resource.RLIMIT_NOFILE, 1),
                  ("t", math.ceil(timeout_s * max(res.cpus, 1)) + 1, resource.RLIMIT_CPU, 1),
                  ("f", res.max_file_mb * 2048, resource.RLIMIT_FSIZE, 512)]
        if not self._cg:
            limits.append(("v", (res.memory_mb + res.runtime_address_space_mb) * 1024, resource.RLIMIT_AS, 1024))
        for flag, value, rlim, unit in limits:
            hard = resource.getrlimit(rlim)[1]  # an unprivileged caller cannot raise these
            steps.append(f"ulimit -{flag} {value if hard < 0 else min(value, hard // unit)}")
        setup = f"{{ {' && '.join(steps)}; }} || {{ echo '{_SETUP_FAILED}' >&2; exit 125; }}"
        run = [self.backend.bash, "-c", command]
        wd, has_input = str(self.host_workdir), (self.host_workdir / "input").is_dir()
        if self.backend.tier == "bwrap":
            a = list(self.backend.bwrap_base)
            for dst, host in sorted(self.binds.items()):  # first: what follows mounts on top of them
                a += ["--bind", str(host), dst]  # (a /tmp bind must not hide a venv under /tmp)
            a += ["--bind", str(self.host_home), _HOME]
            for p in self.backend.prefixes:
                a += ["--ro-bind", p, p]
            a += ["--bind", wd, WORKDIR]
            if has_input:  # staged files are hardlinks into the backend's cache: never writable
                a += ["--ro-bind", f"{wd}/input", INPUT_DIR]
            for src, dst in self.backend.ro_binds:
                a += ["--ro-bind", src, dst]
            if uid is not None:  # the user namespace maps this process to `uid` (no capabilities)
                a += ["--uid", str(uid), "--gid", str(uid)]
            a += ["--remount-ro", "/", "--chdir", cwd, "--json-status-fd", str(status_fd)]
            return ["/bin/sh", "-c", f'{setup}; exec "$@"', "sh", *a, *run]
        if self.backend.tier == "landlock":
            cwd = wd + cwd[len(WORKDIR):] if _under(cwd, WORKDIR) else cwd
            paths = self.backend.landlock_paths
            spec = {**paths, "read_only": [*paths["read_only"], str(self.root / "bash_env")], "workdir": wd,
                    "read_write": [wd, str(self.host_home), str(self.host_tmp)],
                    "tcp_connect": list(self.backend.tcp_connect), "memory_mb": res.memory_mb,
                    "disk_mb": res.max_file_mb * 4, "max_processes": res.max_processes,
                    # RLIMIT_NPROC counts every task of this uid: over what already runs (F54)
                    "nproc": _tasks_of_uid() + res.max_processes, "parent": os.getpid()}
            return ["/bin/sh", "-c", f'{setup}; cd "$1" && shift && exec "$@"', "sh", cwd,
                    self.backend.python, "-I", "-S", _LAUNCHER, json.dumps(spec), "--", *run]
        if self.backend.tier == "cwd":
            cwd = wd + cwd[len(WORKDIR):] if _under(cwd, WORKDIR) else cwd
            return ["/bin/sh", "-c", f'{setup}; cd "$1" && shift && exec "$@"', "sh", cwd, *run]
        q, home = shlex.quote, str(self.host_home)
        mounts = [f"mount -t tmpfs -o size=4k,mode=000 dagent-hidden {q(h)}" for h in self.backend.hidden]
        if _workdir_link():  # /workdir -> /proc/self/fd/1023: the sandbox's directory, mounted where
            # its uid can reach it (the host path is under the 0700 base), on that fd
            mounts += [f"mount --bind {q(wd)} {_MOUNTNS_WORKDIR}", f"exec 1023<{_MOUNTNS_WORKDIR}"]
        else:
            mounts.append(f"mount --bind {q(wd)} {WORKDIR}")
        if has_input:
            mounts += [f"mount --bind {q(wd + '/input')} {INPUT_DIR}",
                       f"mount -o remount,bind,ro {INPUT_DIR}"]
        for src, dst in self.backend.ro_binds:  # under /root: into the home, which is mounted there below
            at = q(_home_side(dst, home))
            mounts += [f"mount --bind {q(src)} {at}", f"mount -o remount,bind,ro {at}"]
        mounts += [f"mount --bind {q(p)} {q(_home_side(p, home))}" for p in self.backend.prefixes if _under(p, _HOME)]
        mounts.append(f"mount --rbind {q(home)} {_HOME}")
        # the new network's lo starts down: iproute2 where present (3 ms), else Python's ioctl (30 ms)
        mounts.append(f"{{ ip link set lo up 2>/dev/null || {q(sys.executable)} -c {q(_LOOPBACK_UP)}; }}")
        if self.backend.covers:  # last: what is mounted above was reached through these directories
            mounts.append(f"mount -t tmpfs -o size=64k,mode=0755 dagent-stage {_MOUNTNS_STAGE}")
            staged = []
            for closed, trees in self.backend.covers.items():
                for tree in trees:
                    n = len(staged)
                    mounts += [f"mkdir {_MOUNTNS_STAGE}/{n}", f"mount --bind {q(tree)} {_MOUNTNS_STAGE}/{n}"]
                    staged.append((n, tree))
                mounts.append(f"mount -t tmpfs -o size=64k,mode=0755 dagent-cover {q(closed)}")
            for n, tree in staged:
                mounts += [f"mkdir -p {q(tree)}", f"mount --move {_MOUNTNS_STAGE}/{n} {q(tree)}",
                           f"mount -o remount,bind,ro {q(tree)}"]
        drop = (f"setpriv --reuid={self.uid} --regid={self.uid} --clear-groups --no-new-privs "
                "--inh-caps=-all --bounding-set=-all -- ") if self.uid is not None else ""
        script = f'{setup}; {" && ".join(mounts)} && cd "$1" && shift && exec {drop}"$@"'
        return [*_UNSHARE, self.backend.bash, "-c", script, "sh", cwd, *run]  # bash: fds past 9

    def exec(self, command: str, *, timeout_s: float | None = None,
             env: Mapping[str, str] | None = None, cwd: str | None = None,
             uid: int | None = None) -> ExecResult:
        """`uid`: run as that user id inside (bubblewrap only; default: root, capabilities dropped)."""
        if self._closed:
            raise SandboxError("exec on a closed sandbox: create a new one with backend.create()")
        if (uid is not None or self.binds) and self.backend.tier != "bwrap":
            raise SandboxError(f"running as uid {uid} or with extra binds needs bubblewrap; this "
                               f"backend is {self.backend.tier!r}: install bubblewrap")
        timeout = self.resources.timeout_s if timeout_s is None else timeout_s
        full_env = {"PATH": self.backend.path, "HOME": self.home, "LANG": "C.UTF-8"}
        if self.backend.tier == "landlock":
            full_env.update(TMPDIR=str(self.host_tmp), BASH_ENV=str(self.root / "bash_env"),
                            DAGENT_WORKDIR=str(self.host_workdir))
        elif self.backend.tier == "mountns" and (self.host_home / ".dagent_bash_env").is_file():
            full_env.update(BASH_ENV=f"{_HOME}/.dagent_bash_env", DAGENT_WORKDIR=_MOUNTNS_WORKDIR)
        full_env.update(env or {})  # through the environment, never an argv (F22)
        cwd = posixpath.normpath(posixpath.join(WORKDIR, cwd or WORKDIR))
        if _under(cwd, WORKDIR) and not self._host_path(cwd).is_dir():
            raise SandboxError(f"cwd {cwd} is not a directory in the sandbox: create it first")
        oom_before = self._cg.oom_kills() if self._cg else None
        start, timed_out = time.monotonic(), False
        with tempfile.TemporaryFile(dir=self.root) as out, \
                tempfile.TemporaryFile(dir=self.root) as err, \
                tempfile.TemporaryFile(dir=self.root) as status:  # bwrap: did the command run?
            argv = self._argv(command, cwd, timeout, status.fileno(), uid)
            try:
                proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                        env=full_env, start_new_session=True,
                                        pass_fds=(status.fileno(),))
            except (OSError, ValueError) as e:
                raise SandboxError(f"could not start a command in sandbox {self.root}: {e}") from e
            try:
                code: int | None = _wait(proc, timeout)
            except subprocess.TimeoutExpired:
                timed_out, code = True, None
                self._kill(proc)
                proc.wait()
            self._kill(proc)  # background processes left in the group (rlimits tiers)
            duration = time.monotonic() - start
            stdout, stderr = _read_capped(out), _read_capped(err)
            status.seek(0)
            ran = self.backend.tier != "bwrap" or b'"exit-code"' in status.read()
        if code is not None and code < 0:
            code = 128 - code  # killed by signal N: 128+N, as a shell reports it
        if (code == 1 and not ran) or (code, stderr[:28]) == (125, _SETUP_FAILED):
            raise SandboxError(f"sandbox setup failed in {self.root}: {stderr.strip()[:500]}")
        if oom_before is not None and self._cg is not None:  # the kernel's own count of kills
            oom = (self._cg.oom_kills() or 0) > oom_before
        else:  # RLIMIT_AS: allocations fail inside the program, or something SIGKILLed it
            oom = code == 137 or (code not in (0, None) and bool(_OOM_TEXT.search(stderr[-8192:])))
        return ExecResult(exit_code=code, stdout=stdout, stderr=stderr, timed_out=timed_out,
                          oom_killed=oom, duration_s=duration)

    def _kill(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.returncode is None and self.backend.tier == "landlock":
            # the launcher kills its whole domain (what was daemonised too) when told to stop
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=2)
        if proc.returncode is None and self.backend.tier == "bwrap":
            # Inside out: killing the namespace's init ends everything in it and leaves bwrap to
            # reap it; killing bwrap first orphans that init to a host init that may never reap.
            children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
            with contextlib.suppress(OSError, ValueError):
                for pid in children.read_text().split():
                    os.kill(int(pid), signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=1)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        if self._cg and proc.returncode is None:
            self._cg.kill_all()

    # -- files ----------------------------------------------------------------------------------

    def _host_path(self, path: str) -> Path:
        p = posixpath.normpath(posixpath.join(WORKDIR, path))
        if not _under(p, WORKDIR):
            raise SandboxError(f"{path!r} is outside {WORKDIR}: sandbox files live under {WORKDIR}")
        host = self.host_workdir / p[len(WORKDIR) + 1:]
        if not _under(os.path.realpath(host), str(self.host_workdir)):
            raise SandboxError(f"{path!r} resolves outside {WORKDIR} (a symlink?): refusing")
        return host

    def write_file(self, path: str, data: bytes | str) -> None:
        host = self._host_path(path)
        host.parent.mkdir(parents=True, exist_ok=True)
        self._host_path(path)  # a parent may be a symlink planted inside
        tmp = host.parent / f".{host.name}.dagent-tmp"
        tmp.write_bytes(data.encode() if isinstance(data, str) else data)
        if self.uid is not None:  # the agent's own file, as if it had written it
            os.chown(tmp, self.uid, self.uid)
            for d in (host.parent, *host.parent.parents):
                if not _under(str(d), str(self.host_workdir)) or d == self.host_workdir:
                    break
                if d.stat().st_uid != self.uid:
                    os.chown(d, self.uid, self.uid)
        os.replace(tmp, host)  # never writes through a hardlink into the staging cache

    def read_file(self, path: str) -> bytes | None:
        host = self._host_path(path)
        try:
            return host.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise SandboxError(f"could not read {path!r} in sandbox {self.root}: {e}") from e

    def stage(self, files: Mapping[str, Path]) -> None:
        inp = self.host_workdir / "input"
        for rel, src in check_inputs(files):  # names inside the input dir, files that exist
            try:
                cached = self._cached(src)
            except FileNotFoundError as e:
                raise StagingError(f"input file {rel!r} not found on the host: {src}") from e
            except OSError as e:
                raise StagingError(f"could not stage input {rel!r} from {src}: {e}") from e
            dest = inp / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.unlink(missing_ok=True)
            if self.backend.tier == "cwd":  # no read-only mount protects the cache here: copy
                shutil.copyfile(cached, dest)
            else:
                os.link(cached, dest)
        if not inp.is_dir() or not any(inp.iterdir()):
            raise StagingError(f"directory empty: nothing arrived in {INPUT_DIR}")

    def _cached(self, src: Path) -> Path:
        """The backend's read-only copy of `src`, keyed by path, inode, size and mtime."""
        st = src.stat()
        key = f"{os.path.realpath(src)}\0{st.st_dev}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}"
        cached = self.backend.cache_dir / hashlib.sha256(key.encode()).hexdigest()
        if not cached.exists():
            fd, tmp = tempfile.mkstemp(dir=self.backend.cache_dir, prefix=".tmp-")
            os.close(fd)
            shutil.copyfile(src, tmp)
            os.chmod(tmp, 0o444)
            os.replace(tmp, cached)
        return cached

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.uid is not None:
            _UIDS_IN_USE.discard(self.uid)
        if self._cg:
            self._cg.remove()
        try:
            shutil.rmtree(self.root)
        except OSError:  # directories the command made read-only
            subprocess.run(["chmod", "-R", "u+rwX", str(self.root)], capture_output=True)
            shutil.rmtree(self.root, ignore_errors=True)


def _tasks_of_uid(uid: int | None = None) -> int:
    """Tasks (threads count: RLIMIT_NPROC counts them) this real uid runs now."""
    uid, total = os.getuid() if uid is None else uid, 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fields = dict(line.split(":", 1) for line in Path(f"/proc/{name}/status").read_text().splitlines()
                          if line.startswith(("Uid:", "Threads:")))
            if int(fields["Uid"].split()[0]) == uid:
                total += int(fields["Threads"])
        except (OSError, ValueError, KeyError):
            continue
    return total


def _wait(proc: subprocess.Popen[bytes], timeout: float) -> int:
    """Popen.wait(timeout) polls with doubling sleeps (up to +50% latency); a pidfd does not."""
    try:
        fd = os.pidfd_open(proc.pid)
    except OSError:
        return proc.wait(timeout=timeout)
    try:
        poller = select.poll()  # not select.select: it fails for fds above 1024 (many sandboxes)
        poller.register(fd, select.POLLIN)
        if not poller.poll(max(0.0, timeout) * 1000):
            raise subprocess.TimeoutExpired(proc.args, timeout)
    finally:
        os.close(fd)
    return proc.wait()


def _read_capped(f: IO[bytes]) -> str:
    size = f.seek(0, os.SEEK_END)
    f.seek(0)
    text = f.read(OUTPUT_CAP).decode(errors="replace")
    if size > OUTPUT_CAP:
        text += f"\n[dagent: output truncated: {size - OUTPUT_CAP} more bytes]"
    return text
