"""Serving from this process: an ASGI app on uvicorn in a daemon thread on a loopback port (the
in-process engine, the capture proxy, `dagent reproduce`'s local servers, the async trainer's
environment server, the benchmarks and the tests), a free loopback port, and stopping a child
process so that it cannot keep holding its port."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from typing import Any

from dagent.errors import DagentError


def free_port(prefer: int = 0) -> int:
    """A port nothing listens on now, on 127.0.0.1: `prefer` where it is free, else the kernel's pick."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", prefer))
        except OSError:
            s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ThreadedServer:
    """`with ThreadedServer(app) as s: httpx.get(s.url + "/health")`; uvicorn settings pass through."""

    def __init__(
        self,
        app: Any,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        log_level: str = "warning",
        sock: socket.socket | None = None,
        **settings: Any,
    ) -> None:
        """`sock`: a socket the caller bound already (its own options, its own bind error); the
        server listens on it instead of binding host:port."""
        self.app, self.host, self.port, self.sock = app, host, port or 0, sock
        self.settings = {"log_level": log_level, **settings}
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        if not self.port or self._server is None:
            raise DagentError("the server is not serving: call start()")
        return (
            f"http://127.0.0.1:{self.port}"
            if self.host in ("0.0.0.0", "127.0.0.1")
            else f"http://{self.host}:{self.port}"
        )

    def start(self, timeout_s: float = 60.0) -> ThreadedServer:
        import uvicorn

        self.port = self.sock.getsockname()[1] if self.sock is not None else self.port or free_port()
        self._server = uvicorn.Server(uvicorn.Config(self.app, host=self.host, port=self.port, **self.settings))
        run = {"sockets": [self.sock]} if self.sock is not None else {}
        self._thread = threading.Thread(target=self._server.run, kwargs=run, name=f"serve-{self.port}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise DagentError(f"the server did not start on {self.host}:{self.port}")
            time.sleep(0.01)
        return self

    def join(self) -> None:
        """Wait until the server's thread ends (it stopped, or uvicorn gave up)."""
        if self._thread is not None:
            self._thread.join()

    def stop(self, timeout_s: float = 30.0) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)
        self._server = self._thread = None

    def __enter__(self) -> ThreadedServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def stop_process(proc: Any, timeout_s: float = 30.0) -> None:
    """SIGTERM a child process, wait up to `timeout_s`, then SIGKILL it: a survivor would hold its port."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
