"""The isolation self-check: from INSIDE a sandbox, try what an agent must never manage.

A server that hands sandboxes to a policy under training must not let it read the answers: RL
rewards whatever works, and reading the gold works. Isolation depends on the host (bubblewrap
needs user namespaces; without them the local backend falls back to namespaces as root plus an
unprivileged uid, or, not root, to nothing), so it is checked where it runs, at start-up, by
running the probes an agent could run, as the agent:

    read_gold      read a file of the suite that holds gold answers (by its path, and by where a
                   link points: a Hub snapshot's files live in the cache's blob store)
    list_suite     list the suite's directory
    server_env     read the server process's environment (its secrets), recognised by its digest:
                   in a container without an init process the server is pid 1, and so is the
                   sandbox's own init, whose environment is no leak
    server_port    connect to a port the server's host listens on (a listener opened for the
                   check on the host's loopback; and the server's own port when given)
    server_port6   the same on the host's ::1 (where the host has IPv6)
    mptcp          the same listener over MPTCP (Landlock's TCP rules do not see it, F53)
    outside        find a route to an address outside the machine (default 1.1.1.1:443): a UDP
                   connect, a routing decision only, so no packet is ever sent, even where the
                   sandbox has the network (every probe here targets only what the check controls)
    netlink        list the host's network interfaces over netlink (more than `lo` is the host's)
    unix_abstract  connect to an abstract Unix socket the check listens on outside
    unix_path      connect to a pathname Unix socket the check listens on (in a 0700 directory, as
                   the server's own sockets are)
    link_gold      hard-link a gold file into the work directory (removed again if it worked)
    chmod_suite    chmod a gold file to the mode it already has (nothing changes either way; F54)
    write_outside  create a file in a directory of the server's (0700, outside the sandbox)
    rename_in      rename a file of the server's into the work directory (a decoy of the check's)
    server_mem     open the server's /proc/<pid>/mem
    signal         signal a process of the server's uid started outside (signal 0: a permission check)
    ptrace         attach to that process (PTRACE_SEIZE, detached at once)

Destructive probes (`kill -9 -1`, a fork bomb, memory past the limit) are not run at start-up;
tests/sandbox/test_landlock.py runs them on each tier.

`check_isolation(...)` returns the report; `require_isolation(...)` raises `IsolationError` naming
every probe that succeeded and the fix. Cloud backends are not probed here (the suite is not in
their sandboxes; their egress is their provider's setting).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shlex
import socket
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from dagent.errors import IsolationError, SandboxError
from dagent.sandbox.base import Resources, SandboxBackend

__all__ = ["OUTSIDE", "PROBES", "IsolationReport", "Probe", "check_isolation", "require_isolation", "suite_paths"]

OUTSIDE = ("1.1.1.1", 443)
_TIMEOUT_S = 3.0
# One program runs every probe and prints {name: detail-or-null}; null means the probe FAILED (good).
_PROBES = r"""
import ctypes, json, os, socket, sys
spec = json.loads(sys.argv[1])
out = {}
def attempt(name, fn):
    try:
        out[name] = str(fn())[:120]
    except Exception as e:
        out[name] = None
def read(path):
    with open(path, "rb") as f:
        return "read %d bytes of %s" % (len(f.read(64)), path)
def connect(family, host, port, proto=0):
    with socket.socket(family, socket.SOCK_STREAM, proto) as s:
        s.settimeout(spec["timeout"])
        s.connect((host, port))
        return "connected to %s:%d (protocol %d)" % (host, port, proto)
def route(host, port):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((host, port))  # a routing decision: UDP sends nothing until data is written
        return "a route to %s exists (nothing was sent)" % host
for path in spec["gold"]:
    if out.get("read_gold") is None:
        attempt("read_gold", lambda: read(path))
if spec["suite"]:
    attempt("list_suite", lambda: "listed %d entries of %s" % (len(os.listdir(spec["suite"])), spec["suite"]))
def environ(pid):  # the server's environment only when it IS the server's: without an init process
    import hashlib  # the server is pid 1, and so is the sandbox's own init
    with open("/proc/%d/environ" % pid, "rb") as f:
        if hashlib.sha256(f.read()).hexdigest() != spec["environ_sha256"]:
            raise OSError("not the server's environment")
    return "read the server's environment (/proc/%d/environ)" % pid
attempt("server_env", lambda: environ(spec["pid"]))
for port in spec["ports"]:
    if out.get("server_port") is None:
        attempt("server_port", lambda: connect(socket.AF_INET, "127.0.0.1", port))
if spec["port6"]:
    attempt("server_port6", lambda: connect(socket.AF_INET6, "::1", spec["port6"]))
attempt("mptcp", lambda: connect(socket.AF_INET, "127.0.0.1", spec["ports"][0], 262))
attempt("outside", lambda: route(*spec["outside"]))
def interfaces():
    names = [n for _, n in socket.if_nameindex() if n != "lo"]
    if not names:
        raise OSError("loopback only")
    return "listed the host's interfaces: %s" % ", ".join(names[:4])
attempt("netlink", interfaces)
def unix(address):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(spec["timeout"])
        s.connect(address)
        return "connected to %r" % address
attempt("unix_abstract", lambda: unix("\0" + spec["abstract"]))
attempt("unix_path", lambda: unix(spec["unix_path"]))
def link_gold(path):
    os.link(path, "dagent-probe-link")
    os.unlink("dagent-probe-link")
    return "hard-linked %s into the work directory" % path
for path in spec["gold"]:
    if out.get("link_gold") is None:
        attempt("link_gold", lambda: link_gold(path))
def chmod_same(path):
    os.chmod(path, os.stat(path).st_mode & 0o7777)
    return "changed the mode of %s (to the one it had)" % path
for path in spec["gold"]:
    if out.get("chmod_suite") is None:
        attempt("chmod_suite", lambda: chmod_same(path))
def write_outside():
    with open(os.path.join(spec["decoy_dir"], "written"), "w") as f:
        f.write("x")
    return "created a file in %s" % spec["decoy_dir"]
attempt("write_outside", write_outside)
def rename_in():
    os.rename(spec["decoy_file"], "dagent-probe-renamed")
    return "renamed %s into the work directory" % spec["decoy_file"]
attempt("rename_in", rename_in)
def mem(pid):  # the server's, recognised by its start time (pid 1 may be the sandbox's own init)
    with open("/proc/%d/stat" % pid) as f:
        if f.read().rsplit(")", 1)[1].split()[19] != spec["start_time"]:
            raise OSError("not the server")
    with open("/proc/%d/mem" % pid, "rb"):
        return "opened /proc/%d/mem" % pid
attempt("server_mem", lambda: mem(spec["pid"]))
def signal0(pid):
    os.kill(pid, 0)
    return "may signal pid %d" % pid
attempt("signal", lambda: signal0(spec["decoy_pid"]))
def seize(pid):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    if libc.ptrace(0x4206, pid, None, None) != 0:  # PTRACE_SEIZE: attaches without stopping it
        raise OSError(ctypes.get_errno(), "ptrace")
    libc.ptrace(17, pid, None, None)  # PTRACE_DETACH
    return "attached to pid %d" % pid
attempt("ptrace", lambda: seize(spec["decoy_pid"]))
print(json.dumps(out))
"""
PROBES = (
    "read_gold",
    "list_suite",
    "server_env",
    "server_port",
    "server_port6",
    "mptcp",
    "outside",
    "netlink",
    "unix_abstract",
    "unix_path",
    "link_gold",
    "chmod_suite",
    "write_outside",
    "rename_in",
    "server_mem",
    "signal",
    "ptrace",
)
_FIXES = {
    "read_gold": "the suite's files are readable from a sandbox",
    "list_suite": "the suite's directory is readable from a sandbox",
    "server_env": "the server's process environment is readable from a sandbox",
    "server_port": "sandboxes share the server's network",
    "outside": "sandboxes reach the outside",
    "server_port6": "sandboxes share the server's network (IPv6)",
    "mptcp": "MPTCP passes the sandbox's TCP rules (F53)",
    "netlink": "sandboxes see the host's network interfaces",
    "unix_abstract": "sandboxes reach the host's abstract Unix sockets",
    "unix_path": "sandboxes reach the server's Unix sockets",
    "link_gold": "gold can be hard-linked into a sandbox",
    "chmod_suite": "the suite's file modes can be changed from a sandbox (F54)",
    "write_outside": "sandboxes write into the server's directories",
    "rename_in": "the server's files can be renamed into a sandbox",
    "server_mem": "the server's memory is readable from a sandbox",
    "signal": "sandboxes can signal the server's processes (F54)",
    "ptrace": "sandboxes can trace the server's processes (F54)",
}
FIX = (
    "on a host, install bubblewrap where user namespaces are allowed (dagent's default isolation); in "
    "a container, allow them: `docker run --security-opt seccomp=unconfined --security-opt "
    "systempaths=unconfined` (Docker's default profile refuses them), or run it as root with "
    "`--cap-add SYS_ADMIN --cap-add NET_ADMIN` (private mount, network and pid namespaces, commands as an "
    "unprivileged uid); where the runtime allows neither (a Hugging Face Space), the landlock tier needs "
    "Linux >= 6.12 with Landlock enabled (`dagent sandbox check --isolation landlock` says why not), or "
    "use a remote sandbox: DAGENT_SANDBOX=e2b with E2B_API_KEY, or DAGENT_SANDBOX=hf with HF_TOKEN "
    "(docs/sandboxes.md)"
)


@dataclass(frozen=True)
class Probe:
    name: str
    escaped: bool  # the probe SUCCEEDED inside the sandbox: isolation failed
    detail: str


@dataclass(frozen=True)
class IsolationReport:
    backend: str  # backend.describe()
    probes: tuple[Probe, ...]

    @property
    def ok(self) -> bool:
        return not any(p.escaped for p in self.probes)

    def escapes(self) -> list[Probe]:
        return [p for p in self.probes if p.escaped]

    def summary(self) -> str:
        if self.ok:
            return f"isolation holds ({', '.join(p.name for p in self.probes)} all failed inside a sandbox)"
        return "; ".join(f"{p.name}: {_FIXES[p.name]} ({p.detail})" for p in self.escapes())


def suite_paths(suite_dir: str | Path) -> tuple[Path, ...]:
    """What must stay out of reach for a suite: its directory, and where its files really live
    (a Hub snapshot's files are links into the cache's blob store, readable by their own path)."""
    root = Path(suite_dir)
    real = {Path(os.path.realpath(f)).parent for f in root.rglob("*") if f.is_symlink()}
    return (root, *sorted(real - {root}))


def _gold_file(suite_dir: Path | None) -> Path | None:
    if suite_dir is None:
        return None
    files = sorted((suite_dir / "data").glob("*.parquet")) if (suite_dir / "data").is_dir() else []
    return files[0] if files else None


def _environ_digest(pid: int) -> str | None:
    """sha256 of the server's environment as /proc shows it: the probe recognises the server's by this,
    never by its content (a secret never leaves the server's process)."""
    try:
        return hashlib.sha256(Path(f"/proc/{pid}/environ").read_bytes()).hexdigest()
    except OSError:
        return None


def _start_time(pid: int) -> str | None:
    """The process's start time (clock ticks after boot, /proc/<pid>/stat field 22): with the pid, who it is."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def check_isolation(
    backend: SandboxBackend,
    *,
    suite_dir: str | Path | None = None,
    server_port: int | None = None,
    outside: tuple[str, int] = OUTSIDE,
    server_pid: int | None = None,
) -> IsolationReport:
    """Run the probes in a fresh sandbox of `backend` (module docstring) and report each."""
    suite = Path(suite_dir).resolve() if suite_dir else None
    gold = _gold_file(suite)
    with contextlib.ExitStack() as stack:
        listener = _listen(stack, socket.AF_INET, ("127.0.0.1", 0))
        listener6 = _listen(stack, socket.AF_INET6, ("::1", 0)) if socket.has_ipv6 else None
        abstract = f"dagent-probe-{os.getpid()}-{secrets.token_hex(4)}"
        _listen(stack, socket.AF_UNIX, "\0" + abstract)
        decoy = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="dagent-probe-")))  # 0700
        (decoy / "server-file").write_text("the server's\n")
        _listen(stack, socket.AF_UNIX, str(decoy / "server.sock"))
        sleeper = subprocess.Popen(["sleep", "120"], start_new_session=True)  # a process of the server's uid
        stack.callback(lambda: (sleeper.kill(), sleeper.wait()))
        golds = sorted({str(gold), os.path.realpath(gold)}) if gold else []  # by its path and where it really is
        pid = server_pid or os.getpid()
        spec = {
            "gold": golds,
            "suite": str(suite) if suite else None,
            "environ_sha256": _environ_digest(pid),
            "pid": pid,
            "ports": [listener.getsockname()[1], *([server_port] if server_port else [])],
            "port6": listener6.getsockname()[1] if listener6 else None,
            "abstract": abstract,
            "unix_path": str(decoy / "server.sock"),
            "decoy_dir": str(decoy),
            "decoy_file": str(decoy / "server-file"),
            "decoy_pid": sleeper.pid,
            "outside": list(outside),
            "timeout": _TIMEOUT_S,
            "start_time": _start_time(pid),
        }
        with backend.create(Resources(timeout_s=60)) as sandbox:
            r = sandbox.exec(f"python3 -c {shlex.quote(_PROBES)} {shlex.quote(json.dumps(spec))}", timeout_s=60)
    if r.exit_code != 0:
        raise SandboxError(
            f"the isolation self-check could not run in a sandbox (exit {r.exit_code}): {r.stderr.strip()[-300:]}"
        )
    seen = json.loads(r.stdout.strip().splitlines()[-1])
    probes = tuple(Probe(name, seen[name] is not None, seen[name] or "refused") for name in PROBES if name in seen)
    return IsolationReport(backend.describe(), probes)


def _listen(stack: contextlib.ExitStack, family: int, address: object) -> socket.socket | None:
    """A listener answering (accept, close) until the check ends; None where the family is unusable."""
    try:
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.bind(address)
    except OSError:
        return None
    sock.listen(8)
    sock.settimeout(0.2)
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
                conn.close()
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    stack.callback(sock.close)
    stack.callback(thread.join, 2)
    stack.callback(stop.set)
    return sock


def require_isolation(backend: SandboxBackend, **kwargs) -> IsolationReport:
    """`check_isolation`, raising `IsolationError` (each failed check, then the fix) unless it holds."""
    report = check_isolation(backend, **kwargs)
    if not report.ok:
        raise IsolationError(f"refusing to serve: {report.summary()}. The backend is {report.backend}. Fix: {FIX}")
    return report
