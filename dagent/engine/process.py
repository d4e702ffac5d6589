"""The local engine as a subprocess (`python -m dagent.engine` on a free port), and what is asked of
any engine by URL: the model id it serves (identity, not reachability, F36)."""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

import httpx

from dagent.errors import EngineError

ENGINE_CONTEXT = 32_768  # opencode's system prompt and tools alone are ~6k tokens


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalEngineProcess:
    """`python -m dagent.engine` in a subprocess on a free port; a context manager."""

    def __init__(self, model: str = "tiny-qwen3", *, port: int | None = None,
                 max_model_len: int = ENGINE_CONTEXT, start_timeout_s: float = 300.0) -> None:
        self.model, self.port = model, port or free_port()
        self.max_model_len, self.start_timeout_s = max_model_len, start_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: Any = None
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self) -> LocalEngineProcess:
        cmd = [sys.executable, "-m", "dagent.engine", "--model", self.model, "--port", str(self.port),
               "--max-model-len", str(self.max_model_len), "--threads", "1"]
        self._log = tempfile.TemporaryFile()  # a file, not a pipe: a full pipe would stall the engine
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self._log)
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._log.seek(0)
                err = self._log.read().decode(errors="replace")
                raise EngineError(f"the local engine exited with {self.proc.returncode}: {err[-800:]}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise EngineError(f"the local engine ({self.model}) did not answer /health within "
                          f"{self.start_timeout_s:.0f}s on port {self.port}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> LocalEngineProcess:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def served_model(engine_url: str) -> str:
    """The model id the engine serves (identity, not just reachability: F36)."""
    try:
        data = httpx.get(f"{engine_url.rstrip('/')}/v1/models", timeout=10).json()["data"]
        return str(data[0]["id"])
    except (httpx.HTTPError, ValueError, KeyError, IndexError) as e:
        raise EngineError(f"could not read the served model from {engine_url}/v1/models: {e}; "
                          "check --engine-url") from e
