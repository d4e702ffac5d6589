"""`dagent rollout --harness opencode --task ID`: one black-box rollout, end to end, printed.

Without `--engine-url` the local CPU engine is started as a subprocess (`python -m dagent.engine`)
on a free port and stopped afterwards; the capture proxy and its publisher start in process. The
printout: outcome (and the cause when ungraded), turns and their roles, the trainability gate's
drift/fork summary, and every finding.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import httpx

from dagent.errors import ConfigError, EngineError

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


def format_rollout(rollout: Any) -> list[str]:
    """The printout of one rollout (pure)."""
    head = f"{rollout.outcome.upper()}  reward {rollout.reward}"
    if rollout.cause:
        head += f"  cause {rollout.cause}"
    lines = [f"task {rollout.task_id} ({rollout.split} #{rollout.index}, {rollout.difficulty_tier})",
             head + f"  ({rollout.method}: {rollout.note})" if rollout.note else head,
             f"answer {rollout.answer!r}  opencode exit {rollout.exit_code}  wall {rollout.wall_s:.1f}s",
             f"turns {len(rollout.turns)}: " + ", ".join(
                 f"{t.seq}:{role}({len(t.prompt_token_ids or ())}+{len(t.completion_token_ids)})"
                 for t, role in zip(rollout.turns, rollout.trajectory.roles)),
             f"model calls {rollout.model_calls}  tool calls {rollout.tool_calls}  budget stops {rollout.budget_stops}",
             rollout.gate.report()]
    lines += ["findings:"] + [f"  {f}" for f in rollout.findings] if rollout.findings else ["findings: none"]
    return lines


def run_rollout_command(task: str, *, harness: str = "opencode", model: str = "tiny-qwen3",
                        engine_url: str | None = None, suite: Any = None, backend: str = "local",
                        publish: str = "direct", public_url: str | None = None, timeout_s: float = 600.0,
                        steps: int | None = None, max_output_tokens: int = 512,
                        echo: Callable[[str], None] = print) -> Any:
    """Run one rollout of task `task` (an id) and print it; returns the `Rollout`."""
    from dagent.envs.blackbox import BlackBoxRuntime
    from dagent.harness.opencode import DEFAULT_STEPS, OpencodeConfig
    from dagent.hub import load_tasks

    if harness != "opencode":
        raise ConfigError(f"unknown harness {harness!r}; available: opencode")
    tasks = suite if hasattr(suite, "task_at") else load_tasks(suite)  # a TaskSuite, or where to load one
    split, index, _ = tasks.find(task)
    engine = None if engine_url else LocalEngineProcess(model)
    try:
        if engine is not None:
            echo(f"starting the local engine ({model}) on port {engine.port} ...")
            engine_url = engine.start().url
        served = served_model(engine_url)
        config = OpencodeConfig(model=served, steps=steps or DEFAULT_STEPS, max_output_tokens=max_output_tokens)
        runtime = BlackBoxRuntime(tasks, engine_url, model=served, backend=backend, opencode=config,
                                  publish=publish, public_url=public_url or os.environ.get("DAGENT_CAPTURE_PUBLIC_URL"),
                                  timeout_s=timeout_s)
        with runtime:
            echo(runtime.describe())
            rollout = runtime.run_rollout(split, index)
    finally:
        if engine is not None:
            engine.stop()
    for line in format_rollout(rollout):
        echo(line)
    return rollout
