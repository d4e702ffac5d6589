"""Local sandboxes: one host directory per sandbox, seen inside as `/workdir`.

Isolation tiers, chosen once per backend (the first that works here, bwrap -> mountns -> landlock
-> cwd) and named by `describe()`; each is a module of `dagent.sandbox.tiers` behind one interface
(probe, prepare, limits, argv), where what it isolates is written:
- `bwrap`: bubblewrap with every namespace unshared, a read-only system, loopback-only network;
- `mountns` (root, no user namespaces): private mount, network and pid namespaces, every command
  as an unprivileged uid of its own;
- `landlock` (no namespaces, not root: a container under Docker's default runtime, a hosted Space):
  Landlock and seccomp around every command;
- `cwd`: resource limits only, with a loud warning; `check_isolation` fails there, so no server
  serves an agent from it.

Limits, every tier: `dagent.sandbox.limits` (a per-sandbox cgroup v1 where this process may create
one, else RLIMIT_AS; RLIMIT_CPU, RLIMIT_FSIZE, RLIMIT_NOFILE).

Invariants (tests/sandbox/test_local.py): two sandboxes never see each other's files; staged
inputs are read-only inside and nothing but the given files is staged; command failures come
back as data, with exit 0 as 0 (F17), a memory kill as `oom_killed` (F18), and the caller's
`env` reaching the command without ever appearing in an argv (F22).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import posixpath
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Literal

from dagent import settings
from dagent.errors import ConfigError, SandboxError, StagingError
from dagent.sandbox.base import INPUT_DIR, WORKDIR, ExecResult, Resources, Sandbox, SandboxBackend
from dagent.sandbox.cgroups import _cgroup_parents, _Cgroups
from dagent.sandbox.limits import SETUP_FAILED
from dagent.sandbox.staging import check_inputs
from dagent.sandbox.tiers import HOME, Tier, under
from dagent.sandbox.tiers.bwrap import BwrapTier
from dagent.sandbox.tiers.cwd import CwdTier
from dagent.sandbox.tiers.landlock import LandlockTier
from dagent.sandbox.tiers.mountns import MountnsTier

__all__ = ["ISOLATIONS", "OUTPUT_CAP", "LocalBackend", "LocalSandbox"]

_LOG = logging.getLogger(__name__)
OUTPUT_CAP = 1 << 20  # bytes of stdout / stderr kept per exec
_SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_OOM_TEXT = re.compile(
    r"MemoryError|cannot allocate|bad_alloc|out of memory|memory exhausted", re.IGNORECASE
)  # what a program prints when RLIMIT_AS refuses it memory
ISOLATIONS = ("auto", "bwrap", "landlock", "rlimits")  # what isolation= and DAGENT_ISOLATION take


def _prefixes(python: str | Path | None = None) -> list[str]:
    """An interpreter's trees (venv, then base) that the sandbox sees read-only: this one's, or
    those of `python` (another venv's interpreter, such as the one a Harbor image stands for)."""
    trees = (sys.prefix, sys.base_prefix)
    if python is not None:
        r = subprocess.run(
            [str(python), "-c", "import sys; print(sys.prefix); print(sys.base_prefix)"], capture_output=True, text=True
        )
        if r.returncode != 0:
            raise ConfigError(f"cannot run the sandbox interpreter {python}: {r.stderr.strip()[:200]}")
        trees = tuple(r.stdout.split("\n")[:2])
    out: list[str] = []
    for p in map(os.path.realpath, trees):
        if p not in out and not under(p, "/usr"):
            out.append(p)
    return out


class LocalBackend(SandboxBackend):
    """Sandboxes on this machine; `dagent.sandbox.tiers` says what each tier isolates."""

    name = "local"
    remote = False
    home = HOME

    def __init__(
        self,
        base_dir: str | Path | None = None,
        isolation: Literal["auto", "bwrap", "landlock", "rlimits"] = "auto",
        *,
        ro_binds: Sequence[tuple[str | Path, str | Path]] = (),
        python: str | Path | None = None,
        hidden: Sequence[str | Path] = (),
        tcp_connect: Sequence[int] = (),
    ) -> None:
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
            isolation = settings.read("DAGENT_ISOLATION") or "auto"  # type: ignore[assignment]
        if isolation not in ISOLATIONS:
            raise ConfigError(
                f"unknown isolation {isolation!r} (DAGENT_ISOLATION?): use one of {', '.join(ISOLATIONS)}"
            )
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
        self.trees = (*self.prefixes, *(dst for _, dst in self.ro_binds))  # what every sandbox sees in place
        self.landlock_why = ""
        self.isolator, why = self._choose(isolation)
        self.tier = self.isolator.name
        if self.tier not in ("bwrap", "landlock"):
            _LOG.warning(
                "%s (bubblewrap: %s%s)",
                self.describe(),
                why,
                f"; landlock: {self.landlock_why}" if self.landlock_why else "",
            )
        elif self.tier == "landlock" or not self.cgroups:
            _LOG.warning("%s", self.describe())

    def _choose(self, isolation: str) -> tuple[Tier, str]:
        """The tier `isolation` asks for, and why bubblewrap was not it ("" when it is)."""
        if isolation == "landlock":
            return LandlockTier(self, LandlockTier.probe(self)), "forced by isolation='landlock'"
        why = "forced by isolation='rlimits'" if isolation == "rlimits" else BwrapTier.probe(self)
        if why and isolation == "bwrap":
            raise SandboxError(
                f"bubblewrap is unusable ({why}): install the `bubblewrap` "
                "package and allow user namespaces, or pass isolation='rlimits'"
            )
        if not why:
            return BwrapTier(self), why
        if not MountnsTier.probe(self):
            return MountnsTier(self), why
        if isolation == "auto":
            self.landlock_why = LandlockTier.probe(self)
            if not self.landlock_why:
                return LandlockTier(self), why
        return CwdTier(self), why

    def allow_tcp(self, port: int) -> None:
        """Let `landlock` sandboxes connect to `port` (the capture proxy's, known once it listens); the
        namespace tiers reach it through the bridge instead, and `cwd` reaches everything anyway."""
        if int(port) not in self.tcp_connect:
            self.tcp_connect = (*self.tcp_connect, int(port))

    @property
    def loopback_only(self) -> bool:
        """Sandboxes have a network of their own with loopback only (reach a host service through
        the capture bridge); False on `cwd` and `landlock`, which share the host's network."""
        return self.isolator.loopback_only

    @property
    def agent_uid_isolation(self) -> bool:
        """Commands run as a per-sandbox unprivileged uid (the `mountns` tier)."""
        return self.isolator.agent_uid

    def describe(self) -> str:
        return self.isolator.describe("cgroup v1 memory/pids/cpu" if self.cgroups else "RLIMIT_AS memory (no cgroup)")

    def create(self, resources: Resources | None = None) -> LocalSandbox:
        return LocalSandbox(self, resources or Resources())


class LocalSandbox(Sandbox):
    """Host directories `<root>/workdir` and `<root>/home`, seen inside as /workdir and /root."""

    def __init__(self, backend: LocalBackend, resources: Resources) -> None:
        self.backend, self.resources, self.isolator = backend, resources, backend.isolator
        self.root = Path(tempfile.mkdtemp(prefix="sb-", dir=backend.base_dir))
        self.host_workdir, self.host_home = self.root / "workdir", self.root / "home"
        self.host_workdir.mkdir()
        self.host_home.mkdir(mode=0o700)
        self.home = HOME if self.isolator.home_inside else str(self.host_home)
        self.host_tmp = self.root / "tmp"  # TMPDIR on the landlock tier (the host's /tmp is shared)
        self.uid: int | None = None  # who commands run as (the mountns tier: one of its own)
        # sandbox path -> host directory, bound writable in every exec (bubblewrap only): the
        # further top-level directories a Harbor environment uses (/logs, /tests, /solution, /tmp)
        self.binds: dict[str, Path] = {}
        self._closed, self._cg = False, None
        try:
            self.isolator.prepare(self)
            if backend.cgroups:
                self._cg = _Cgroups(backend.cgroups, f"dagent-{self.root.name}", resources)
        except OSError as e:
            self.close()
            raise SandboxError(f"could not set up sandbox {self.root} (cgroups?): {e}") from e

    def cgroup_dirs(self) -> list[Path]:
        """The cgroups each command joins (none: RLIMIT_AS bounds its memory instead)."""
        return list(self._cg.dirs) if self._cg else []

    # -- running commands ---------------------------------------------------------------------

    def exec(
        self,
        command: str,
        *,
        timeout_s: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        uid: int | None = None,
    ) -> ExecResult:
        """`uid`: run as that user id inside (bubblewrap only; default: root, capabilities dropped)."""
        if self._closed:
            raise SandboxError("exec on a closed sandbox: create a new one with backend.create()")
        if (uid is not None or self.binds) and not self.isolator.binds:
            raise SandboxError(
                f"running as uid {uid} or with extra binds needs bubblewrap; this "
                f"backend is {self.isolator.name!r}: install bubblewrap"
            )
        timeout = self.resources.timeout_s if timeout_s is None else timeout_s
        full_env = {"PATH": self.backend.path, "HOME": self.home, "LANG": "C.UTF-8", **self.isolator.env(self)}
        full_env.update(env or {})  # through the environment, never an argv (F22)
        cwd = posixpath.normpath(posixpath.join(WORKDIR, cwd or WORKDIR))
        if under(cwd, WORKDIR) and not self._host_path(cwd).is_dir():
            raise SandboxError(f"cwd {cwd} is not a directory in the sandbox: create it first")
        oom_before = self._cg.oom_kills() if self._cg else None
        start, timed_out = time.monotonic(), False
        with (
            tempfile.TemporaryFile(dir=self.root) as out,
            tempfile.TemporaryFile(dir=self.root) as err,
            tempfile.TemporaryFile(dir=self.root) as status,
        ):  # bwrap: did the command run?
            argv = self.isolator.argv(
                self,
                [self.backend.bash, "-c", command],
                setup=self.isolator.limits(self, timeout),
                cwd=cwd,
                status_fd=status.fileno(),
                uid=uid,
            )
            try:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    env=full_env,
                    start_new_session=True,
                    pass_fds=(status.fileno(),),
                )
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
            ran = self.isolator.ran(status.read())
        if code is not None and code < 0:
            code = 128 - code  # killed by signal N: 128+N, as a shell reports it
        if (code == 1 and not ran) or (code, stderr[:28]) == (125, SETUP_FAILED):
            raise SandboxError(f"sandbox setup failed in {self.root}: {stderr.strip()[:500]}")
        if oom_before is not None and self._cg is not None:  # the kernel's own count of kills
            oom = (self._cg.oom_kills() or 0) > oom_before
        else:  # RLIMIT_AS: allocations fail inside the program, or something SIGKILLed it
            oom = code == 137 or (code not in (0, None) and bool(_OOM_TEXT.search(stderr[-8192:])))
        return ExecResult(
            exit_code=code, stdout=stdout, stderr=stderr, timed_out=timed_out, oom_killed=oom, duration_s=duration
        )

    def _kill(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.returncode is None:
            self.isolator.stop(proc)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        if self._cg and proc.returncode is None:
            self._cg.kill_all()

    # -- files ----------------------------------------------------------------------------------

    def _host_path(self, path: str) -> Path:
        p = posixpath.normpath(posixpath.join(WORKDIR, path))
        if not under(p, WORKDIR):
            raise SandboxError(f"{path!r} is outside {WORKDIR}: sandbox files live under {WORKDIR}")
        host = self.host_workdir / p[len(WORKDIR) + 1 :]
        if not under(os.path.realpath(host), str(self.host_workdir)):
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
                if not under(str(d), str(self.host_workdir)) or d == self.host_workdir:
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
            if self.isolator.copies_inputs:  # no read-only mount protects the cache here: copy
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
        self.isolator.release(self)
        if self._cg:
            self._cg.remove()
        try:
            shutil.rmtree(self.root)
        except OSError:  # directories the command made read-only
            subprocess.run(["chmod", "-R", "u+rwX", str(self.root)], capture_output=True)
            shutil.rmtree(self.root, ignore_errors=True)


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
