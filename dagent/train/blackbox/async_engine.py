"""The async job's vLLM engine: the command and environment it starts with, the wait for it to
answer, and the probes that refuse a job whose engine is not the one it needs (each refusal
an `EnginePreflightError` naming the fix).

Before training, the engine is probed (`preflight_engine`): `/server_info` answers (dev mode took
effect, F37) and names a weight-transfer engine and processed logprobs; `/v1/models` serves THIS
job's model (identity, not reachability, F36); its dtype equals the trainer's (F06). Against a
remote environment server the server itself is asked to probe the engine from ITS host
(`GET /data_agent_blackbox/engine`): a server that cannot reach the trainer's engine returns
rollouts with zero trainable turns that look healthy.
"""

from __future__ import annotations

import os
import subprocess
import time
from typing import Any

import httpx

from dagent.errors import ConfigError, DagentError
from dagent.runtime.blackbox import ENV_NAME
from dagent.train.preflight import Check, PreflightError

#: vLLM's dev mode (/server_info, /pause, the weight-transfer routes, F37) and TRL's sampler choice
ENGINE_ENV = {"VLLM_SERVER_DEV_MODE": "1", "VLLM_USE_FLASHINFER_SAMPLER": "0"}


class EnginePreflightError(PreflightError):
    """The engine this job would train against is not the one it needs; the message names the fix."""


def _dtype_name(d: str) -> str:
    return str(d).removeprefix("torch.").replace("bf16", "bfloat16").replace("fp32", "float32")


def check_dtype(trainer: str, engine: str) -> Check:
    """F06: the trainer computes in the engine's dtype, or the importance ratio is biased."""
    if _dtype_name(trainer) != _dtype_name(engine):
        raise PreflightError(
            f"dtype_mismatch: the trainer loads the model in {trainer} but the engine serves {engine}: a precision "
            "gap biases the importance ratio (arXiv 2510.26788); set the trainer's dtype to the engine's (F06)"
        )
    return Check("dtype", True, f"trainer and engine both {_dtype_name(engine)}")


# -- the engine ----------------------------------------------------------------------------------
def engine_command(
    model: str,
    port: int,
    *,
    served_name: str,
    max_model_len: int = 65_536,
    gpu_memory_utilization: float = 0.85,
    tensor_parallel_size: int = 1,
    data_parallel_size: int = 1,
) -> list[str]:
    """`vllm serve` as TRL's trainers need it (TRL's own builder: NCCL weight transfer, processed
    logprobs), plus what agents need: hermes tool calls, this job's served name, and sampling
    from the request only (`--generation-config vllm`: the capture proxy pins dagent.core.sampling on
    every call, F05)."""
    from trl.scripts.vllm_serve import ScriptArguments, build_command

    command = build_command(
        ScriptArguments(
            model=model,
            port=port,
            host="0.0.0.0",
            dtype="bfloat16",
            max_model_len=max_model_len,
            gpu_memory_utilization=gpu_memory_utilization,
            tensor_parallel_size=tensor_parallel_size,
            data_parallel_size=data_parallel_size,
        )
    )
    return command + [
        "--served-model-name",
        served_name,
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
        "--generation-config",
        "vllm",
    ]


def engine_env(gpus: str, environ: dict[str, str] | None = None) -> dict[str, str]:
    return {**(os.environ if environ is None else environ), **ENGINE_ENV, "CUDA_VISIBLE_DEVICES": gpus}


def _get(url: str, timeout: float = 10.0, **params: Any) -> httpx.Response:
    try:
        return httpx.get(url, params=params or None, timeout=timeout)
    except httpx.HTTPError as e:
        raise EnginePreflightError(
            f"engine_unreachable: {url} did not answer ({e}): is the engine up on this job's port?"
        ) from e


def preflight_engine(url: str, served_name: str, trainer_dtype: str) -> list[Check]:
    """F37 dev mode and the flags the trainer needs, F36 identity, F06 dtype (module docstring)."""
    url = url.rstrip("/")
    info = _get(f"{url}/server_info", config_format="json")
    if info.status_code == 404:
        raise EnginePreflightError(
            f"dev_mode_off: {url}/server_info answered 404: the engine runs without VLLM_SERVER_DEV_MODE=1, so "
            "/pause and /init_weight_transfer_engine are missing too; restart it with VLLM_SERVER_DEV_MODE=1 (F37)"
        )
    if info.status_code != 200:
        raise EnginePreflightError(f"server_info_failed: {url}/server_info answered {info.status_code} (F37)")
    config = info.json()
    config = config.get("vllm_config", config)
    if not config.get("weight_transfer_config"):
        raise EnginePreflightError(
            "no_weight_transfer: the engine has no weight-transfer engine, so the trainer cannot send it weights: "
            'restart it with --weight-transfer-config \'{"backend": "nccl"}\' (F37)'
        )
    mode = (config.get("model_config") or {}).get("logprobs_mode")
    if mode != "processed_logprobs":
        raise EnginePreflightError(
            f"raw_logprobs: the engine reports {mode!r} logprobs, taken before temperature; the importance ratio then "
            "compares different distributions: restart it with --logprobs-mode processed_logprobs (F37)"
        )
    served = [m.get("id") for m in (_get(f"{url}/v1/models").json().get("data") or [])]
    if served_name not in served:
        raise EnginePreflightError(
            f"wrong_engine: the engine on {url} serves {served}, not this job's {served_name!r}: another job's "
            "engine holds the port (two jobs on one host); derive ports from the job id (F36)"
        )
    engine_dtype = str((config.get("model_config") or {}).get("dtype", "?"))
    return [
        Check("dev_mode", True, f"{url}/server_info answers"),
        Check("weight_transfer", True, str(config.get("weight_transfer_config"))),
        Check("logprobs_mode", True, "processed_logprobs"),
        Check("identity", True, f"serves {served_name}"),
        check_dtype(trainer_dtype, engine_dtype),
    ]


def probe_from_server(env_url: str, served_name: str, engine_url: str | None = None) -> Check:
    """Ask a running black-box server to reach ITS engine from its own host (module docstring).
    `engine_url` (the job's --engine-url: where this job's vLLM answers as the server sees it): the
    server must forward to exactly that engine, or its rollouts would sample another policy (F36)."""
    r = _get(f"{env_url.rstrip('/')}/{ENV_NAME}/engine", timeout=60.0)
    if r.status_code != 200:
        raise EnginePreflightError(
            f"server_probe_failed: {env_url}/{ENV_NAME}/engine answered {r.status_code}: {r.text[:300]}"
        )
    probe = r.json()
    forwards = str(probe.get("engine_url") or "")
    if engine_url and _base(forwards) != _base(engine_url):
        raise EnginePreflightError(
            f"engine_url_mismatch: the server at {env_url} forwards to {forwards or 'no engine'}, not to this job's "
            f"engine {engine_url} (--engine-url): deploy the server with DAGENT_ENGINE_URL={engine_url} (F36)"
        )
    if not probe.get("reachable"):
        raise EnginePreflightError(
            f"engine_unreachable_from_server: the server at {env_url} cannot reach its engine "
            f"{probe.get('engine_url')} "
            f"({probe.get('error')}): every rollout would capture zero trainable turns and look healthy; expose the "
            "job's engine (the job's expose option or an explicit public URL) and deploy the server with it (F08)"
        )
    if served_name not in (probe.get("served") or []):
        raise EnginePreflightError(
            f"wrong_engine_from_server: the server's engine {probe.get('engine_url')} serves {probe.get('served')}, "
            f"not this job's {served_name!r} (F36)"
        )
    return Check("server_engine", True, f"{env_url} reaches {probe.get('engine_url')} serving {served_name}")


def _base(url: str) -> str:
    """An engine URL without its trailing slash and `/v1`, as the server's probe reads it."""
    return url.rstrip("/").removesuffix("/v1").rstrip("/")


def wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float = 1800.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise DagentError(f"the engine exited with {proc.returncode} before {url}/health answered")
        try:
            if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(2)
    raise DagentError(f"the engine did not answer {url}/health within {timeout_s:.0f} s")


def trainer_devices(gpus: int, engine_devices: str) -> list[str]:
    """The trainer's GPU: exactly one left over by the engine's. AsyncGRPOTrainer here is one
    process (it starts the engine and the environment servers it trains against), so a second
    leftover GPU would idle: the engine takes it instead (one more data-parallel replica)."""
    engine = [d.strip() for d in engine_devices.split(",") if d.strip()]
    unknown = [d for d in engine if not d.isdigit() or int(d) >= gpus]
    if unknown:
        raise ConfigError(
            f"--engine-devices {engine_devices}: {', '.join(unknown)} is not one of this machine's "
            f"{gpus} GPUs (0..{gpus - 1})"
        )
    left = [str(i) for i in range(gpus) if str(i) not in engine]
    if len(left) != 1:
        fix = ",".join(map(str, range(gpus - 1))) if gpus > 1 else "-"
        raise ConfigError(
            f"--engine-devices {engine_devices} leaves {len(left)} of {gpus} GPUs to the trainer, which "
            f"takes exactly one in async mode: give the engine the others (--engine-devices {fix})"
        )
    return left


def start_engine(
    command: list[str],
    port: int,
    served: str,
    procs: list[subprocess.Popen],
    *,
    engine_devices: str,
    env_url: str | None,
    engine_url: str | None,
    echo: Any,
) -> list[str]:  # pragma: no cover - needs GPUs and vLLM
    """Start vLLM on its devices (appended to `procs` at once, so a failure stops it), wait for it,
    probe it (and a running server's reach of its own engine, `--env-url`); the trainer's devices."""
    import torch

    if not torch.cuda.is_available():
        raise ConfigError(
            "--mode async needs GPUs (AsyncGRPOTrainer's attention is a CUDA kernel): use --mode sync on a CPU"
        )
    devices = trainer_devices(torch.cuda.device_count(), engine_devices)
    engine = subprocess.Popen(command, env=engine_env(engine_devices))
    procs.append(engine)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, engine)
    for check in preflight_engine(url, served, "bfloat16"):
        echo(f"preflight {check.name}: {check.detail}")
    if env_url:
        echo(f"preflight {probe_from_server(env_url, served, engine_url).detail}")
    return devices
