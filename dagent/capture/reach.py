"""How an agent in a sandbox reaches the capture proxy, and nothing else.

The proxy listens on this host's loopback. Healthy there proves nothing about whether a sandbox
can reach it: a sandbox that cannot makes zero model calls, files no answer, and (before F07 was
caught) scored a flat zero that read like a policy that cannot do the task. So the URL an agent
is handed is resolved ONCE, at start-up, by `Publisher.start()`, in this order:

1. `public_url` (DAGENT_CAPTURE_PUBLIC_URL): an explicit, already published URL always wins, so a
   deployment that is published gets no second tunnel in front of it.
2. `mode="gradio"`: one Gradio share tunnel to the proxy, started once with a BOUNDED start-up
   (`tunnel_timeout_s`): a tunnel that hangs is worse than one that fails, because rollouts queue
   behind it looking healthy (F09). `stop()` stops it BEFORE the caller stops the proxy, or a
   live tunnel points at a closed port, which from outside reads as a healthy service.
3. `mode="direct"`: valid only for sandboxes on THIS host. A remote backend (e2b, hf) with a
   loopback or private URL is refused at start-up with the fix named (F08).
   - local bubblewrap sandboxes have their own network namespace with only `lo`: the proxy is
     exposed through a Unix socket in a private directory (`SocketBridge`), that DIRECTORY is
     bound read-only into every sandbox (`LocalBackend(ro_binds=...)`), and a ~30-line forwarder
     started
     inside (`FORWARDER_SOURCE`) listens on the sandbox's own 127.0.0.1:`SANDBOX_PORT` and
     connects to the socket. The sandbox keeps `--unshare-all` (no host loopback, no outside
     address, no DNS, no abstract sockets); its one way out is this socket, which leads to the
     proxy and nothing else. The proxy's admin routes stay behind its admin token.
   - the local `cwd` tier shares the host network: the proxy's loopback URL is used as it is
     (bubblewrap and `mountns` sandboxes have loopback only and take the bridge).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import secrets
import shlex
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

import httpx

from dagent.errors import ConfigError, DagentError
from dagent.sandbox.base import Resources, SandboxBackend

_LOG = logging.getLogger(__name__)
PublishMode = Literal["direct", "gradio"]
MODES: tuple[str, ...] = ("direct", "gradio")
SANDBOX_SOCKET_DIR = "/run/dagent-capture"  # where the bridge directory appears inside a sandbox
SOCKET_NAME = "capture.sock"
SANDBOX_PORT = 18080  # the in-sandbox forwarder's port (each sandbox has its own loopback)
DEFAULT_TUNNEL_TIMEOUT_S = 30.0


class PublishError(DagentError):
    """The capture proxy could not be published to the sandboxes."""


class TunnelStartTimeout(PublishError):
    """The tunnel did not come up within its bound (F09)."""


@dataclass(frozen=True)
class Reach:
    """What an agent in a sandbox is given: the proxy's OpenAI base URL and, for a bridged local
    sandbox, the socket the in-sandbox forwarder must connect to (None: call `base_url` directly)."""

    base_url: str
    how: str  # "public_url" | "gradio" | "bridge" | "loopback"
    socket_path: str | None = None
    port: int | None = None


def is_private_url(url: str) -> bool:
    """True when `url` names this machine or a private network (unreachable from another host)."""
    host = (urlsplit(url).hostname or "").lower()
    if host in ("", "localhost") or host.endswith(".localhost") or host.endswith(".local"):
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return ip.is_loopback or ip.is_private or ip.is_link_local or ip.is_unspecified


def check_reachable(url: str, backend: SandboxBackend) -> None:
    """Refuse a URL a remote backend's sandboxes cannot reach (F08)."""
    if backend.remote and is_private_url(url):
        raise ConfigError(
            f"the capture proxy would be advertised as {url} to {backend.name} sandboxes, which run on "
            "another machine and cannot reach this host's loopback or private network: every rollout "
            "would make zero model calls. Set DAGENT_CAPTURE_PUBLIC_URL (publish=...public_url) to a "
            "URL those sandboxes can reach, or use publish mode 'gradio' for a tunnel (F08)"
        )


# --------------------------------------------------------------------------- the socket bridge


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (OSError, asyncio.IncompleteReadError):
        writer.close()


async def _splice(
    r1: asyncio.StreamReader, w1: asyncio.StreamWriter, r2: asyncio.StreamReader, w2: asyncio.StreamWriter
) -> None:
    try:
        await asyncio.gather(_pipe(r1, w2), _pipe(r2, w1))
    finally:
        for w in (w1, w2):
            w.close()


class SocketBridge:
    """Host side: a Unix socket in a private directory whose every connection is spliced to
    `host:port` (the capture proxy). One bridge serves every sandbox; the session key in each
    request keeps rollouts apart."""

    def __init__(self, host: str, port: int, directory: str | Path | None = None, *, other_uids: bool = False) -> None:
        """`other_uids`: sandboxes connect as uids other than this process's (the local backend's
        `mountns` tier): the directory becomes 0711 (enter, not list) and the socket 0666."""
        self.host, self.port, self.other_uids = host, port, other_uids
        self._own_dir = directory is None
        self.directory = Path(directory or tempfile.mkdtemp(prefix="dagent-bridge-"))
        self.socket_path = self.directory / SOCKET_NAME
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.base_events.Server | None = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection(self.host, self.port)
        except OSError:
            writer.close()
            return
        await _splice(reader, writer, up_r, up_w)

    def start(self, timeout_s: float = 10.0) -> SocketBridge:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.socket_path.unlink(missing_ok=True)
        loop = self._loop = asyncio.new_event_loop()
        ready = threading.Event()

        async def serve() -> None:
            self._server = await asyncio.start_unix_server(self._handle, path=str(self.socket_path))
            os.chmod(self.socket_path, 0o666 if self.other_uids else 0o600)
            if self.other_uids:
                os.chmod(self.directory, 0o711)
            ready.set()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(serve())
            loop.run_forever()

        self._thread = threading.Thread(target=run, name="capture-bridge", daemon=True)
        self._thread.start()
        if not ready.wait(timeout_s):
            raise PublishError(f"the capture bridge did not start at {self.socket_path}")
        return self

    def stop(self) -> None:
        loop = self._loop
        if loop is not None and loop.is_running():

            async def close() -> None:
                if self._server is not None:
                    self._server.close()
                for task in asyncio.all_tasks():
                    if task is not asyncio.current_task():
                        task.cancel()

            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(close(), loop).result(5)
            loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._loop = self._thread = self._server = None
        if self._own_dir:
            shutil.rmtree(self.directory, ignore_errors=True)


#: Runs INSIDE a sandbox: `python3 forward.py SOCKET PORT READY_FILE`. Listens on the sandbox's
#: own 127.0.0.1:PORT and splices each connection to the bound Unix socket.
#: The shell side of the forwarder, shared by every harness's launch script (the script has set
#: `$ctl`, where forward.py was staged): start it when `DAGENT_FORWARD_SOCKET` is set, wait for its
#: ready file (exit 97 naming its log if it dies or takes over 2 minutes); after the agent, stop it and
#: exit with the agent's code.
FORWARD_START = r"""fwd=
if [ -n "${DAGENT_FORWARD_SOCKET:-}" ]; then
  python3 "$ctl/forward.py" "$DAGENT_FORWARD_SOCKET" "$DAGENT_FORWARD_PORT" "$ctl/forward.ready" \
    2>"$ctl/forward.log" &
  fwd=$!
  # at least 2 minutes (2,400 x 50 ms): a loaded machine can take seconds to start a Python; a dead one ends at once
  i=0
  while [ ! -e "$ctl/forward.ready" ]; do
    i=$((i + 1))
    if [ "$i" -gt 2400 ] || ! kill -0 "$fwd" 2>/dev/null; then
      echo "dagent: the capture forwarder did not start (after $i waits of 50 ms):" >&2
      cat "$ctl/forward.log" >&2
      exit 97
    fi
    sleep 0.05
  done
fi"""
FORWARD_STOP = r"""rc=$?
if [ -n "$fwd" ]; then kill "$fwd" 2>/dev/null; fi
exit $rc
"""

FORWARDER_SOURCE = """\
import asyncio, sys
SOCK, PORT, READY = sys.argv[1], int(sys.argv[2]), sys.argv[3]
async def pipe(r, w):
    try:
        while True:
            data = await r.read(65536)
            if not data:
                break
            w.write(data)
            await w.drain()
        if w.can_write_eof():
            w.write_eof()
    except OSError:
        w.close()
async def handle(r, w):
    try:
        ur, uw = await asyncio.open_unix_connection(SOCK)
    except OSError:
        w.close()
        return
    try:
        await asyncio.gather(pipe(r, uw), pipe(ur, w))
    finally:
        w.close()
        uw.close()
async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", PORT)
    open(READY, "w").close()
    async with server:
        await server.serve_forever()
asyncio.run(main())
"""


# --------------------------------------------------------------------------- tunnels


class Tunnel(Protocol):
    def start(self, host: str, port: int) -> str: ...  # returns the public base URL

    def stop(self) -> None: ...


class GradioTunnel:
    """A Gradio share link to `host:port` (needs the network; `pip install gradio`)."""

    def __init__(self) -> None:
        self._tunnel: Any = None

    def start(self, host: str, port: int) -> str:
        try:
            from gradio import networking, tunneling
        except ImportError as e:
            raise PublishError(
                "gradio is not installed: `pip install gradio`, or set DAGENT_CAPTURE_PUBLIC_URL to a URL you published"
            ) from e
        payload = httpx.get(networking.GRADIO_API_SERVER, timeout=10).json()[0]
        cert = Path(tempfile.gettempdir(), f"dagent-gradio-{os.getpid()}", "certificate.pem")
        cert.parent.mkdir(parents=True, exist_ok=True)
        cert.write_text(payload["root_ca"])
        self._tunnel = tunneling.Tunnel(
            payload["host"], int(payload["port"]), host, port, secrets.token_urlsafe(32), str(cert)
        )
        return self._tunnel.start_tunnel()

    def stop(self) -> None:
        if self._tunnel is not None:
            self._tunnel.kill()
            self._tunnel = None


def start_bounded(tunnel: Tunnel, host: str, port: int, timeout_s: float) -> str:
    """`tunnel.start(host, port)` in a thread, given at most `timeout_s` (F09)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["url"] = tunnel.start(host, port)
        except BaseException as e:  # noqa: BLE001 - carried to the caller
            box["error"] = e

    thread = threading.Thread(target=run, name="capture-tunnel-start", daemon=True)
    started = time.monotonic()
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        with contextlib.suppress(Exception):
            tunnel.stop()
        raise TunnelStartTimeout(
            f"the {type(tunnel).__name__} tunnel to {host}:{port} did not start within {timeout_s:.0f}s "
            "(tunnel_start_timeout): rollouts would queue behind it. Set DAGENT_CAPTURE_PUBLIC_URL to a "
            "URL you published, or use publish mode 'direct' for local sandboxes (F09)"
        )
    if "error" in box:
        raise PublishError(
            f"the {type(tunnel).__name__} tunnel to {host}:{port} failed after "
            f"{time.monotonic() - started:.1f}s (tunnel_start_failed): {box['error']}. Set "
            "DAGENT_CAPTURE_PUBLIC_URL to a URL you published instead"
        ) from box["error"]
    url = str(box.get("url") or "")
    if not url.startswith(("http://", "https://")):
        raise PublishError(f"the tunnel returned no URL ({url!r})")
    return url


# --------------------------------------------------------------------------- the publisher


class Publisher:
    """Resolves, once, the URL `backend`'s sandboxes reach the proxy at `host:port` by."""

    def __init__(
        self,
        backend: SandboxBackend,
        host: str,
        port: int,
        *,
        mode: str = "direct",
        public_url: str | None = None,
        tunnel: Tunnel | None = None,
        tunnel_timeout_s: float = DEFAULT_TUNNEL_TIMEOUT_S,
        bridge_dir: str | Path | None = None,
    ) -> None:
        if mode not in MODES:
            raise ConfigError(
                f"unknown publish mode {mode!r}: use one of {', '.join(MODES)} "
                "(an explicit public_url wins over either); set DAGENT_CAPTURE_PUBLISH"
            )
        self.backend, self.host, self.port, self.mode = backend, host, port, mode
        self.public_url = public_url or None
        self.tunnel_timeout_s = tunnel_timeout_s
        self._tunnel = tunnel if tunnel is not None else (GradioTunnel() if mode == "gradio" else None)
        self._tunnel_live = False
        self.bridge: SocketBridge | None = None
        self._bridge_dir = bridge_dir
        self.reach: Reach | None = None

    @staticmethod
    def _v1(url: str) -> str:
        url = url.rstrip("/")
        return url if url.endswith("/v1") else url + "/v1"

    def bridge_directory(self) -> Path | None:
        """The host directory to bind into local sandboxes, when the bridge is used."""
        return self.bridge.directory if self.bridge is not None else None

    def needs_bridge(self) -> bool:
        return (
            self.public_url is None
            and self.mode == "direct"
            and not self.backend.remote
            and getattr(self.backend, "loopback_only", False)
        )

    def start(self) -> Reach:
        if self.public_url:
            check_reachable(self.public_url, self.backend)
            self.reach = Reach(self._v1(self.public_url), "public_url")
        elif self.mode == "gradio":
            assert self._tunnel is not None  # __init__ makes a GradioTunnel for gradio mode
            url = start_bounded(self._tunnel, self.host, self.port, self.tunnel_timeout_s)
            self._tunnel_live = True
            self.reach = Reach(self._v1(url), "gradio")
        elif self.backend.remote:
            check_reachable(f"http://{self.host}:{self.port}", self.backend)  # raises (F08)
            self.reach = Reach(self._v1(f"http://{self.host}:{self.port}"), "loopback")
        elif self.needs_bridge():
            self.bridge = SocketBridge(
                self.host, self.port, self._bridge_dir, other_uids=getattr(self.backend, "agent_uid_isolation", False)
            ).start()
            self.reach = Reach(
                f"http://127.0.0.1:{SANDBOX_PORT}/v1", "bridge", f"{SANDBOX_SOCKET_DIR}/{SOCKET_NAME}", SANDBOX_PORT
            )
        else:
            self.reach = Reach(self._v1(f"http://{self.host}:{self.port}"), "loopback")
        if getattr(self.backend, "loopback_only", False) and not self.backend.remote and self.reach.how != "bridge":
            url, self.reach = self.reach.base_url, None
            self.stop()
            raise ConfigError(
                f"local bubblewrap sandboxes have loopback only: they cannot reach {url}, and every "
                "rollout would make zero model calls. Use publish mode 'direct' (the socket bridge) "
                "and no public URL for local sandboxes (F08)"
            )
        _LOG.info(
            "capture proxy published to %s sandboxes as %s (%s)", self.backend.name, self.reach.base_url, self.reach.how
        )
        return self.reach

    def stop(self, *, on_stop: Callable[[str], None] | None = None) -> None:
        """Stop the tunnel first, then the bridge; the caller stops the proxy afterwards (F09)."""
        if self._tunnel is not None and self._tunnel_live:
            self._tunnel.stop()
            self._tunnel_live = False
            if on_stop:
                on_stop("tunnel")
        if self.bridge is not None:
            self.bridge.stop()
            self.bridge = None
            if on_stop:
                on_stop("bridge")


class EgressError(PublishError):
    """A remote sandbox cannot reach the capture URL the publisher resolved (F45)."""


# From inside a sandbox: GET <base_url>/models; any HTTP answer means the proxy is reachable.
_REACH_PROBE = (
    "import sys, urllib.request, urllib.error\n"
    "try:\n"
    "    urllib.request.urlopen(sys.argv[1] + '/models', timeout=15)\n"
    "except urllib.error.HTTPError:\n"
    "    pass\n"
    "print('reached')\n"
)


def allow_egress(backend: SandboxBackend, base_url: str) -> None:
    """Let a remote backend's sandboxes reach `base_url`'s host: decided AFTER the publisher resolved
    the URL (a tunnel's is known only once it starts; F45). Backends without an egress policy
    (no `allow_out`) are left as they are."""
    host = urlsplit(base_url).hostname
    allowed = getattr(backend, "allow_out", None)
    if host and allowed is not None and host not in allowed:
        backend.allow_out = (*allowed, host)  # type: ignore[attr-defined]


def verify_reach(backend: SandboxBackend, reach: Reach, timeout_s: float = 60.0) -> None:
    """From inside one sandbox of `backend`, ask the capture proxy at `reach.base_url` for its models:
    refuse (EgressError, F45) before any rollout when it does not answer, since every rollout would
    then make zero model calls."""
    with backend.create(Resources(timeout_s=timeout_s)) as sandbox:
        r = sandbox.exec(f"python3 -c {shlex.quote(_REACH_PROBE)} {shlex.quote(reach.base_url)}", timeout_s=timeout_s)
    if r.exit_code != 0 or "reached" not in r.stdout:
        raise EgressError(
            f"a {backend.name} sandbox cannot reach the capture proxy at {reach.base_url} ({reach.how}): "
            f"{(r.stderr or r.stdout).strip()[-200:]}; allow the sandbox's egress to that host (and check "
            "the URL answers from outside this machine), or every rollout makes zero model calls (F45)"
        )
