"""A Harbor environment provider on dagent's local sandbox: exported tasks run here without Docker.

    harbor run -p CATALOG -a oracle -e dagent.harbor.provider:SandboxEnvironment

Each Harbor environment (the agent's, and the separate verifier's) is one bubblewrap sandbox of
`dagent.sandbox.local` (its namespaces, read-only system, cgroup memory/CPU limits from the
task's `cpus`/`memory_mb`). What differs from `docker build` + `docker run`, exactly:

- The image is not built. Its Python is an interpreter on this machine (option `python`, default
  the dagent venv's), bound read-only. The Dockerfile is read, not run: `FROM` is recorded;
  `RUN pip install NAME==V ...` is CHECKED against that interpreter's installed versions (a
  mismatch fails the start, naming the package, unless `strict_pins=false`); `RUN useradd
  --uid N NAME` declares a user; other `RUN` lines (chmod/chown) are skipped, the sandbox already
  keeps the input read-only; `COPY` copies (`COPY input/ /workdir/input/` STAGES the tables as
  the flat suite does: read-only hard links into the backend's cache); `WORKDIR`, `USER`, `ENV`
  apply. Any other instruction fails the start, naming it.
- Users: root is uid 0 without capabilities; a declared user runs as its uid in the sandbox's
  user namespace. Files the sandbox made are owned by this host's user either way.
- Network: every exec has its own network namespace with only loopback, so `no-network` holds,
  and an `allowlist` is enforced more strictly than asked: nothing is reachable except, when the
  options `capture_host`/`capture_port` name one, that single endpoint (a capture proxy on this
  host), exposed inside at 127.0.0.1:18080 through dagent's socket bridge (dagent.capture.reach).
- Tools: `ro_binds` (comma-separated host directories) are seen read-only at the same paths (an
  agent binary such as opencode, which `dagent.harbor.agent` runs).
- Paths: /workdir is the sandbox's work directory; /root its home; every other top-level
  directory Harbor writes (/logs, /tests, /solution, /tmp, /installed-agent, ...) is a host
  directory of this environment bound writable into each exec. System directories cannot be
  written.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import posixpath
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from harbor.environments.base import BaseEnvironment, ExecResult
from harbor.environments.capabilities import EnvironmentCapabilities
from harbor.environments.options import EnvironmentOptions

from dagent.capture.reach import FORWARDER_SOURCE, SANDBOX_PORT, SANDBOX_SOCKET_DIR, SOCKET_NAME, SocketBridge
from dagent.core.task import INPUT_DIR, WORKDIR
from dagent.harbor.job import HarborError
from dagent.sandbox.base import Resources
from dagent.sandbox.local import LocalBackend, LocalSandbox


class ProviderError(HarborError, RuntimeError):
    """The dagent sandbox provider cannot do what a task's environment asks (a Dockerfile instruction
    it does not emulate, a path outside the environment or in its read-only system, an environment
    that is not running); the message names which. A RuntimeError still, as Harbor expects."""


_READ_ONLY = frozenset("usr bin sbin lib lib32 lib64 libx32 etc proc dev sys run".split())
_PIN = re.compile(r"^([A-Za-z0-9_.\-\[\]]+)==([^\s=]+)$")
_DEFAULT_TIMEOUT_S = 3600.0
_BOUND_AT_START = ("/logs", "/tests", "/solution", "/tmp", "/installed-agent")
_BACKENDS: dict[tuple, LocalBackend] = {}


def _default_python() -> str:
    """The dagent venv's interpreter: `.venv/bin/python` next to this checkout, else this one."""
    here = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "python"
    return str(here) if here.exists() else sys.executable


class SandboxOptions(EnvironmentOptions):
    """`--ek key=value` options of the dagent sandbox provider."""

    python: str | None = None  # the interpreter standing for the image's Python
    strict_pins: bool = True  # fail when the Dockerfile's pinned packages differ from it
    capture_host: str | None = None  # a capture proxy on this host the agent may reach
    capture_port: int | None = None
    sandboxes_dir: str | None = None
    ro_binds: str | None = None  # host directories, comma-separated, seen read-only at the same path (a tool)


class SandboxEnvironment(BaseEnvironment):
    """Harbor's environment interface over one `dagent.sandbox.local` sandbox (see the module doc)."""

    options_model = SandboxOptions
    options: SandboxOptions

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._python = self.options.python or _default_python()
        self._sb: LocalSandbox | None = None
        self._fs: Path | None = None
        self._bridge: Any = None
        self._bridge_dir: str | None = None
        self._users: dict[str, int] = {"root": 0}
        self._image_user: str | None = None
        self._image_env: dict[str, str] = {}
        self._cwd = self.task_env_config.workdir or WORKDIR
        self.image: str | None = None

    @staticmethod
    def type() -> str:
        return "dagent-sandbox"

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        # each exec is a fresh network namespace, so a policy change applies from the next exec
        return EnvironmentCapabilities(
            disable_internet=True,
            network_allowlist=True,
            network_allowlist_hostnames=True,
            network_allowlist_ipv4_addresses=True,
            dynamic_network_policy=True,
        )

    async def _apply_network_policy(self, network_policy: Any) -> None:
        self._network_policy = network_policy  # read by exec: the bridge only under an allowlist

    def _validate_definition(self) -> None:
        if not (self.environment_dir / "Dockerfile").is_file():
            raise FileNotFoundError(
                f"{self.environment_dir}/Dockerfile is missing: the dagent "
                "sandbox provider reads the task's Dockerfile (docker_image "
                "alone names nothing it can run)"
            )

    # -- lifecycle ------------------------------------------------------------------------------

    def _backend(self) -> LocalBackend:
        ro: tuple = tuple((p, p) for p in (self.options.ro_binds or "").split(",") if p)
        if self.options.capture_host and self.options.capture_port:
            self._bridge_dir = tempfile.mkdtemp(prefix="dagent-harbor-bridge-")
            self._bridge = SocketBridge(
                self.options.capture_host, self.options.capture_port, Path(self._bridge_dir)
            ).start()
            ro += ((self._bridge_dir, SANDBOX_SOCKET_DIR),)
        if self._bridge is not None:  # its own bridge directory: a backend of its own
            return LocalBackend(self.options.sandboxes_dir, isolation="bwrap", python=self._python, ro_binds=ro)
        key = (self._python, self.options.sandboxes_dir, ro)
        if key not in _BACKENDS:  # one per process and kind: probes, /etc copy and cgroups once
            _BACKENDS[key] = LocalBackend(
                self.options.sandboxes_dir, isolation="bwrap", python=self._python, ro_binds=ro
            )
        return _BACKENDS[key]

    async def start(self, force_build: bool) -> None:
        backend = await asyncio.to_thread(self._backend)
        cfg = self.task_env_config
        memory = self._override_memory_mb or cfg.memory_mb or 2048
        cpus = int(max(1, round(self._override_cpus or cfg.cpus or 1)))
        self._sb = backend.create(Resources(cpus=cpus, memory_mb=memory, timeout_s=_DEFAULT_TIMEOUT_S))
        self._fs = self._sb.root / "fs"
        self._fs.mkdir()
        for top in _BOUND_AT_START:  # so commands can make directories under them
            self._host(top)
        try:
            await asyncio.to_thread(self._apply_dockerfile, self.environment_dir / "Dockerfile")
            await self.ensure_dirs(self._mount_targets(writable_only=True))
        except BaseException:
            await self.stop(delete=True)
            raise

    async def stop(self, delete: bool) -> None:
        if self._sb is not None:
            await asyncio.to_thread(self._sb.close)
            self._sb = None
        if self._bridge is not None:
            with contextlib.suppress(Exception):
                self._bridge.stop()
            self._bridge = None
        if self._bridge_dir:
            shutil.rmtree(self._bridge_dir, ignore_errors=True)
            self._bridge_dir = None

    # -- the Dockerfile, read ------------------------------------------------------------------

    def _apply_dockerfile(self, path: Path) -> None:
        pins: dict[str, str] = {}
        for op, value in _instructions(path.read_text()):
            if op == "FROM":
                self.image = value
            elif op == "RUN":
                self._run_line(value, pins)
            elif op in ("COPY", "ADD"):
                *sources, dest = shlex.split(value)
                if any(s.startswith("--") for s in sources):
                    raise ProviderError(f"{path}: COPY flags are not emulated ({value!r})")
                self._copy(sources, dest)
            elif op == "WORKDIR":
                self._cwd = posixpath.join(self._cwd, value)
                self._host(self._cwd).mkdir(parents=True, exist_ok=True)
            elif op == "USER":
                self._image_user = value.split(":")[0]
            elif op == "ENV":
                for part in shlex.split(value):
                    key, _, val = part.partition("=")
                    self._image_env[key] = val
            elif op not in ("LABEL", "COMMENT", "ARG", "EXPOSE"):
                raise ProviderError(
                    f"{path}: the dagent sandbox provider does not emulate {op} "
                    "(it reads FROM, RUN pip/useradd, COPY, WORKDIR, USER, ENV)"
                )
        self._check_pins(pins)

    def _run_line(self, line: str, pins: dict[str, str]) -> None:
        words = shlex.split(line)
        for i, word in enumerate(words):
            if word in ("&&", ";", "||"):
                continue
            if word == "install" and i and words[i - 1] in ("pip", "pip3"):
                for arg in words[i + 1 :]:
                    if arg in ("&&", ";"):
                        break
                    if m := _PIN.match(arg):
                        pins[m[1]] = m[2]
            if word == "useradd":
                args = words[i + 1 :]
                uid = next((int(args[j + 1]) for j, a in enumerate(args[:-1]) if a in ("--uid", "-u")), 1000)
                name = next(a for a in reversed(args) if not a.startswith("-"))
                self._users[name] = uid

    def _check_pins(self, pins: dict[str, str]) -> None:
        if not pins:
            return
        program = (
            "import importlib.metadata as m, json, sys\nout = {}\nfor n in sys.argv[1:]:\n"
            "    try: out[n] = m.version(n)\n    except m.PackageNotFoundError: out[n] = None\n"
            "print(json.dumps(out))"
        )
        r = subprocess.run([self._python, "-c", program, *pins], capture_output=True, text=True)
        have = json.loads(r.stdout) if r.returncode == 0 else {}
        wrong = {n: (v, have.get(n)) for n, v in pins.items() if have.get(n) != v}
        if wrong:
            detail = ", ".join(f"{n} pinned {v}, found {h}" for n, (v, h) in sorted(wrong.items()))
            message = (
                f"the image pins packages {self._python} does not have ({detail}): pass "
                "--ek python=INTERPRETER with those versions, or --ek strict_pins=false"
            )
            if self.options.strict_pins:
                raise ProviderError(message)
            self.logger.warning(message)

    def _copy(self, sources: list[str], dest: str) -> None:
        dest = posixpath.join(self._cwd, dest)
        assert self._sb is not None
        for src in sources:
            host_src = (self.environment_dir / src).resolve()
            if not host_src.is_relative_to(self.environment_dir.resolve()) or not host_src.exists():
                raise ProviderError(f"COPY {src}: not a path inside {self.environment_dir}")
            if posixpath.normpath(dest) == INPUT_DIR:  # the tables: staged, read-only (F21)
                files = (
                    {p.relative_to(host_src).as_posix(): p for p in sorted(host_src.rglob("*")) if p.is_file()}
                    if host_src.is_dir()
                    else {host_src.name: host_src}
                )
                self._sb.stage(files)  # an empty input directory fails here, not in the agent
            elif host_src.is_dir():
                shutil.copytree(host_src, self._host(dest), dirs_exist_ok=True)
            else:
                target = self._host(dest.rstrip("/") + "/" + host_src.name if dest.endswith("/") else dest)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(host_src, target)

    # -- paths ---------------------------------------------------------------------------------

    def _host(self, path: str) -> Path:
        """The host path behind an absolute environment path (binding its top directory)."""
        if self._sb is None or self._fs is None:
            raise ProviderError(f"{path}: the environment is not running (start failed or it stopped)")
        norm = posixpath.normpath(posixpath.join("/", path))
        parts = norm.strip("/").split("/")
        top, rest = parts[0], parts[1:]
        if top == "":
            raise ProviderError("the environment's / itself cannot be written")
        if top == WORKDIR.strip("/"):
            return self._sb.host_workdir.joinpath(*rest)
        if top == "root":
            return self._sb.host_home.joinpath(*rest)
        if top in _READ_ONLY:
            raise ProviderError(f"{norm} is in the read-only system of the dagent sandbox")
        host = self._fs / top
        host.mkdir(exist_ok=True)
        self._sb.binds[f"/{top}"] = host
        return host.joinpath(*rest)

    # -- exec and files --------------------------------------------------------------------------

    def _uid(self, user: str | int | None) -> int | None:
        user = self._resolve_user(user)
        if user is None:
            user = self._image_user
        if user is None:
            return None
        if isinstance(user, int) or str(user).isdigit():
            uid = int(user)
        elif str(user) in self._users:
            uid = self._users[str(user)]
        else:
            raise ProviderError(f"user {user!r} is not declared in the image (RUN useradd)")
        return None if uid == 0 else uid

    async def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: int | None = None,
        user: str | int | None = None,
    ) -> ExecResult:
        if self._sb is None:
            raise ProviderError("the environment is not started")
        cwd = cwd or self._cwd
        with contextlib.suppress(ProviderError):
            self._host(cwd).mkdir(parents=True, exist_ok=True)
        merged = {**self._image_env, **(self._merge_env(env) or {})}
        if self._bridge is not None and self._network_policy.network_mode == "allowlist":
            command = _with_forwarder(command)
        result = await asyncio.to_thread(
            self._sb.exec,
            command,
            timeout_s=float(timeout_sec or _DEFAULT_TIMEOUT_S),
            env=merged,
            cwd=cwd,
            uid=self._uid(user),
        )
        code = result.exit_code
        stderr = result.stderr
        if result.timed_out:
            code, stderr = 124, stderr + f"\n[dagent sandbox: timed out after {timeout_sec} s]"
        elif result.oom_killed:
            stderr += "\n[dagent sandbox: killed for memory (cgroup limit)]"
        return ExecResult(stdout=result.stdout, stderr=stderr, return_code=137 if code is None else code)

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        target = self._host(target_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(shutil.copyfile, source_path, target)

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        await asyncio.to_thread(shutil.copytree, source_dir, self._host(target_dir), dirs_exist_ok=True)

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        Path(target_path).parent.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(shutil.copyfile, self._host(source_path), target_path)

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        source = self._host(source_dir)
        if not source.is_dir():
            raise FileNotFoundError(f"{source_dir} is not a directory in the environment")
        await asyncio.to_thread(shutil.copytree, source, target_dir, dirs_exist_ok=True)


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, value) per Dockerfile line: continuations joined, comments dropped."""
    out, pending = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        op, _, value = (pending + line).partition(" ")
        out.append((op.upper(), value.strip()))
        pending = ""
    return out


def _with_forwarder(command: str) -> str:
    """Run the capture forwarder for the length of one command (each exec is its own namespace);
    the command does not start until the forwarder listens, and a forwarder that cannot start
    fails the command (exit 97), naming it."""
    return (
        f"__ready=$(mktemp -u /tmp/.dagent-forward.XXXXXX)\n"
        f"python3 -c {shlex.quote(FORWARDER_SOURCE)} {SANDBOX_SOCKET_DIR}/{SOCKET_NAME} {SANDBOX_PORT} "
        f'"$__ready" 2>"$__ready.log" & __fwd=$!\n'
        f'__i=0; while [ ! -e "$__ready" ]; do __i=$((__i + 1)); '
        f'if [ "$__i" -gt 400 ] || ! kill -0 "$__fwd" 2>/dev/null; then '
        f'echo "dagent: the capture forwarder did not start:" >&2; cat "$__ready.log" >&2; exit 97; fi; '
        f"sleep 0.05; done\n"
        f'( {command}\n)\n__rc=$?; kill $__fwd 2>/dev/null; rm -f "$__ready" "$__ready.log"; exit $__rc'
    )
