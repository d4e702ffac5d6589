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
    outside        find a route to an address outside the machine (default 1.1.1.1:443): a UDP
                   connect, a routing decision only, so no packet is ever sent, even where the
                   sandbox has the network (every probe here targets only what the check controls)

`check_isolation(...)` returns the report; `require_isolation(...)` raises `IsolationError` naming
every probe that succeeded and the fix. Cloud backends are not probed here (the suite is not in
their sandboxes; their egress is their provider's setting).
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import socket
import threading
from dataclasses import dataclass
from pathlib import Path

from dagent.errors import IsolationError, SandboxError
from dagent.sandbox.base import Resources, SandboxBackend

__all__ = ["OUTSIDE", "IsolationReport", "Probe", "check_isolation", "require_isolation", "suite_paths"]

OUTSIDE = ("1.1.1.1", 443)
_TIMEOUT_S = 3.0
# One program runs every probe and prints {name: detail-or-null}; null means the probe FAILED (good).
_PROBES = r'''
import json, os, socket, sys
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
def connect(host, port):
    with socket.create_connection((host, port), timeout=spec["timeout"]):
        return "connected to %s:%d" % (host, port)
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
        attempt("server_port", lambda: connect("127.0.0.1", port))
attempt("outside", lambda: route(*spec["outside"]))
print(json.dumps(out))
'''
_FIXES = {
    "read_gold": "the suite's files are readable from a sandbox",
    "list_suite": "the suite's directory is readable from a sandbox",
    "server_env": "the server's process environment is readable from a sandbox",
    "server_port": "sandboxes share the server's network",
    "outside": "sandboxes reach the outside",
}
FIX = ("on a host, install bubblewrap where user namespaces are allowed (dagent's default isolation); in "
       "a container, allow them: `docker run --security-opt seccomp=unconfined --security-opt "
       "systempaths=unconfined` (Docker's default profile refuses them), or run it as root with "
       "`--cap-add SYS_ADMIN --cap-add NET_ADMIN` (private mount, network and pid namespaces, commands as an "
       "unprivileged uid); where the runtime allows neither (a Hugging Face Space), use a remote sandbox: "
       "DAGENT_SANDBOX=e2b with E2B_API_KEY, or DAGENT_SANDBOX=hf with HF_TOKEN (docs/sandboxes.md)")


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


def check_isolation(backend: SandboxBackend, *, suite_dir: str | Path | None = None,
                    server_port: int | None = None, outside: tuple[str, int] = OUTSIDE,
                    server_pid: int | None = None) -> IsolationReport:
    """Run the probes in a fresh sandbox of `backend` (module docstring) and report each."""
    suite = Path(suite_dir).resolve() if suite_dir else None
    gold = _gold_file(suite)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    stop = threading.Event()

    def accept() -> None:  # answer connections until the check ends
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
                conn.close()
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    golds = sorted({str(gold), os.path.realpath(gold)}) if gold else []  # by its path and where it really is
    pid = server_pid or os.getpid()
    spec = {"gold": golds, "suite": str(suite) if suite else None, "environ_sha256": _environ_digest(pid),
            "pid": pid, "ports": [listener.getsockname()[1], *([server_port] if server_port else [])],
            "outside": list(outside), "timeout": _TIMEOUT_S}
    try:
        with backend.create(Resources(timeout_s=60)) as sandbox:
            r = sandbox.exec(f"python3 -c {shlex.quote(_PROBES)} {shlex.quote(json.dumps(spec))}", timeout_s=60)
    finally:
        stop.set()
        thread.join(timeout=2)
        listener.close()
    if r.exit_code != 0:
        raise SandboxError(f"the isolation self-check could not run in a sandbox (exit {r.exit_code}): "
                           f"{r.stderr.strip()[-300:]}")
    seen = json.loads(r.stdout.strip().splitlines()[-1])
    probes = tuple(Probe(name, seen[name] is not None, seen[name] or "refused")
                   for name in ("read_gold", "list_suite", "server_env", "server_port", "outside") if name in seen)
    return IsolationReport(backend.describe(), probes)


def require_isolation(backend: SandboxBackend, **kwargs) -> IsolationReport:
    """`check_isolation`, raising `IsolationError` (each failed check, then the fix) unless it holds."""
    report = check_isolation(backend, **kwargs)
    if not report.ok:
        raise IsolationError(f"refusing to serve: {report.summary()}. The backend is {report.backend}. Fix: {FIX}")
    return report
