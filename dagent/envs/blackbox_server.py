"""The black-box environment's HTTP face: openenv's app over a started `BlackBoxRuntime`.

The Task API under `/data_agent_blackbox/...`, an MCP tool `run_rollout`, `POST
/data_agent_blackbox/rollout` (what `dagent.envs.blackbox_session` calls), `GET .../info`, `GET
.../engine` (this host's view of the engine capture forwards to, F36) and the Space's app built from
its settings (`space_app`). The runtime itself, what a rollout is and what it refuses, is
`dagent.runtime.blackbox`.
"""

from __future__ import annotations

import asyncio
import atexit
from dataclasses import asdict
from typing import Any

import httpx

from dagent.core.conditions import Conditions
from dagent.core.sampling import DEFAULT_SAMPLING, Sampling
from dagent.envs import mcp_route
from dagent.envs.slot import RuntimeSlot
from dagent.envs.status import replace_health, sandbox_health
from dagent.errors import ConfigError, DagentError
from dagent.harness.opencode import OpencodeConfig
from dagent.harness.pi import PiConfig
from dagent.runtime.blackbox import ENV_NAME, BlackBoxRuntime
from dagent.settings import BlackboxServerSettings
from dagent.suites.sources import load_tasks

_SLOT: RuntimeSlot[BlackBoxRuntime] = RuntimeSlot(
    "the black-box server has no runtime: build it with dagent.envs.blackbox_server.create_app(runtime)"
)
configure, current = _SLOT.configure, _SLOT.current


def rollout_payload(
    split: str,
    index: int | None,
    task_id: str | None = None,
    timeout_s: float | None = None,
    include_trace: bool = False,
    instruction: str | None = None,
    sample: int | None = None,
) -> dict[str, Any]:
    """One rollout as plain JSON: the summary, plus the trace entries when asked (for training).
    Without an index the task is the one whose instruction is exactly `instruction` (F11, F12).
    `sample`: seed the draws as that sample of the task; None (a trainer's rollouts): a fresh random
    sample, recorded, so a group's rollouts differ (F61)."""
    if sample is not None and type(sample) is not int:
        raise ConfigError(f"sample must be an integer or absent, not {sample!r}")
    runtime = current()
    if index is None:
        if instruction is None:
            raise ConfigError("name the task: send `index` (and `split`), or the prompt's `instruction`")
        index, _ = runtime.suite.resolve_prompt(split, instruction)
    rollout = runtime.run_rollout(split, int(index), task_id=task_id, timeout_s=timeout_s, sample=sample)
    out = rollout.summary()
    if include_trace:
        out["trace_entries"] = rollout.trace_entries()
    return out


def mcp_server() -> Any:
    from fastmcp import FastMCP

    server = FastMCP(ENV_NAME)

    @server.tool
    async def run_rollout(
        split: str, index: int, task_id: str | None = None, timeout_s: float | None = None, sample: int | None = None
    ) -> dict[str, Any]:
        """Run one black-box rollout of task (split, index): the harness in a sandbox, graded server
        side. `sample` seeds its draws as that sample of the task; without it, a fresh random sample."""
        return await asyncio.to_thread(rollout_payload, split, index, task_id, timeout_s, False, None, sample)

    return server


def environment_class() -> type:
    from openenv.core.env_server.mcp_environment import MCPEnvironment
    from openenv.core.env_server.types import EnvironmentMetadata, Observation, State

    class BlackBoxEnvironment(MCPEnvironment):
        """openenv environment over the module-level runtime (no per-instance state)."""

        SUPPORTS_CONCURRENT_SESSIONS = True
        _server = mcp_server()

        def __init__(self) -> None:
            super().__init__(self._server)

        def reset(self, seed: int | None = None, episode_id: str | None = None, **row: Any) -> Observation:
            return Observation(metadata={"describe": current().describe(), "sampling": current().sampling.as_request()})

        def _step_impl(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Observation:
            return Observation(metadata={"error": "call the MCP tool run_rollout (POST /mcp tools/call)"})

        @property
        def state(self) -> State:
            return State()

        def get_metadata(self) -> EnvironmentMetadata:
            return EnvironmentMetadata(
                name=ENV_NAME, version="0.1.0", description="Data-agent tasks; opencode owns the loop; capture observes"
            )

        def list_splits(self) -> list[str]:
            return current().suite.split_names()

        def num_tasks(self, split: str) -> int:
            return len(current().suite.tasks(split))

        def get_task(self, split: str, index: int) -> dict[str, Any]:
            return {"index": index, **current().suite.task_at(split, index).public().model_dump(mode="json")}

        def get_task_range(self, split: str, start: int | None = None, stop: int | None = None) -> list[dict[str, Any]]:
            return [self.get_task(split, i) for i in range(self.num_tasks(split))[slice(start, stop)]]

        def list_tasks(self, split: str) -> list[dict[str, Any]]:
            return self.get_task_range(split, 0, 1000)

    return BlackBoxEnvironment


def probe_engine(engine_url: str, timeout_s: float = 20.0) -> dict[str, Any]:
    """GET {engine}/v1/models from this host: reachable, and the model ids it serves."""

    base = engine_url.rstrip("/").removesuffix("/v1")
    try:
        r = httpx.get(f"{base}/v1/models", timeout=timeout_s)
        r.raise_for_status()
        served = [m.get("id") for m in (r.json().get("data") or [])]
    except (httpx.HTTPError, ValueError) as e:
        return {"engine_url": engine_url, "reachable": False, "served": [], "error": str(e)[:300]}
    return {"engine_url": engine_url, "reachable": True, "served": served, "error": None}


def create_app(runtime: BlackBoxRuntime, *, max_concurrent: int = 8) -> Any:
    """The HTTP server for a STARTED runtime: openenv's app plus `POST /<env>/rollout`."""
    from fastapi import Body
    from fastapi.responses import JSONResponse
    from openenv.core.env_server import CallToolAction, CallToolObservation
    from openenv.core.env_server import create_app as openenv_create_app

    configure(runtime)
    app = openenv_create_app(
        environment_class(), CallToolAction, CallToolObservation, env_name=ENV_NAME, max_concurrent_envs=max_concurrent
    )
    mcp_route.install(app, mcp_server())  # MCP's Streamable HTTP beside openenv's dialect (mcp_route)

    def published() -> dict[str, Any]:
        reach = runtime.reach
        return {"capture": None if reach is None else {"url": reach.base_url, "how": reach.how}}

    replace_health(app, lambda: {"sandbox": sandbox_health(runtime.backend), **published()})

    @app.get(f"/{ENV_NAME}/info", tags=["Rollouts"])
    async def info() -> dict[str, Any]:
        return {
            "describe": runtime.describe(),
            "sampling": runtime.sampling.as_request(),
            "steps": runtime.harness.config.steps,
            "harness": runtime.harness.name,
            "reward": asdict(runtime.reward_config),
            "sandbox": sandbox_health(runtime.backend),
            **published(),
        }

    @app.get(f"/{ENV_NAME}/engine", tags=["Rollouts"], summary="Reach this server's engine from this host")
    async def engine() -> dict[str, Any]:
        """What a trainer asks before it trains against this server: can capture, from HERE, reach the
        engine it forwards to, and which models does that engine serve (identity, F36)."""
        return await asyncio.to_thread(probe_engine, runtime.engine_url)

    @app.post(f"/{ENV_NAME}/rollout", tags=["Rollouts"], summary="Run one rollout; the trace when asked")
    async def rollout(body: dict = Body(...)) -> Any:
        try:
            return await asyncio.to_thread(
                rollout_payload,
                body.get("split") or "train",
                body.get("index"),
                body.get("task_id"),
                body.get("timeout_s"),
                bool(body.get("include_trace")),
                body.get("instruction"),
                body.get("sample"),
            )
        except (DagentError, TypeError, ValueError) as e:
            return JSONResponse(status_code=400, content={"detail": str(e)})

    return app


def capture_public_url(settings: BlackboxServerSettings) -> str | None:
    """Where sandboxes on OTHER machines reach this Space's capture proxy: an explicit PUBLIC_URL
    wins; else a Space's own public URL (`https://$SPACE_HOST`), since a Space is already public
    (no second tunnel in front of it); both with `/capture`, where the proxy is mounted. None for
    local sandboxes (the socket bridge) and for EXPOSE=gradio (the tunnel's URL, found at start)."""
    if settings.sandbox == "local" or settings.expose == "gradio":
        return None
    public = settings.public_url or (f"https://{settings.space_host}" if settings.space_host else None)
    if public is None:
        raise ConfigError(
            "remote sandboxes need a URL of this server they can reach: set PUBLIC_URL, run it as a "
            "Space (SPACE_HOST), or EXPOSE=gradio for a tunnel (F08)"
        )
    return public.rstrip("/") + "/capture"


def space_app(settings: BlackboxServerSettings, conditions: Conditions | None = None) -> Any:
    """The black-box Space's app from its settings (`dagent.settings.BlackboxServerSettings`, read
    once from the environment; docs/settings.md lists them): the runtime started, the capture proxy
    also mounted at `/capture` so that the Space's own public URL serves it (an explicit PUBLIC_URL
    wins; EXPOSE=gradio starts a tunnel instead). `conditions`: the training recipe's episode
    conditions (sampling pinned on every call, the step cap, tokens per call, the timeout), so
    rollouts served here are the ones training runs (F47); DAGENT_STEPS and DAGENT_MAX_OUTPUT_TOKENS
    override them by name."""
    engine_url, model = settings.engine_url, settings.model
    if not model:
        try:
            listed = httpx.get(engine_url.rstrip("/").removesuffix("/v1") + "/v1/models", timeout=30).json()
            model = listed["data"][0]["id"]
        except (httpx.HTTPError, ValueError, KeyError, IndexError) as e:
            raise ConfigError(
                f"DAGENT_MODEL is not set and {engine_url} does not list a model ({e}): set "
                "DAGENT_MODEL to the model id the engine serves"
            ) from e
    steps = settings.steps or (conditions and conditions.step_cap) or 15
    max_output = settings.max_output_tokens or (conditions and conditions.tokens_per_call) or 4096
    sampling = (
        Sampling(temperature=conditions.temperature, top_p=conditions.top_p, top_k=conditions.top_k)
        if conditions
        else DEFAULT_SAMPLING
    )
    runtime = BlackBoxRuntime(
        load_tasks(settings.suite),
        engine_url,
        model=model,
        backend=settings.sandbox,
        harness=settings.harness,
        opencode=OpencodeConfig(model=model, steps=steps, max_output_tokens=max_output),
        pi=PiConfig(model=model, steps=steps, max_output_tokens=max_output),
        publish="gradio" if settings.expose == "gradio" else "direct",
        public_url=capture_public_url(settings),
        sampling=sampling,
        timeout_s=(conditions and conditions.timeout_s) or 600.0,
    )
    runtime.start()
    app = create_app(runtime, max_concurrent=settings.max_rollouts)
    app.mount("/capture", runtime.capture)  # the same proxy, on the Space's own URL

    atexit.register(runtime.stop)  # the tunnel, the bridge and the proxy, when the server process exits
    return app
