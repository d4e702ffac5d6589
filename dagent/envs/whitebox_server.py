"""The white-box HTTP server: openenv's `create_app`, extended where it falls short.

Used from openenv as is: the FastAPI app, `/health`, `/metadata`, `/schema`, `POST /reset` (runs
`WhiteBoxEnvironment.reset` in its thread pool), the Task API under `/data_agent/...`, the MCP
WebSocket, and the concurrency declaration (`max_concurrent_envs`, which openenv refuses above 1
unless the class declares `SUPPORTS_CONCURRENT_SESSIONS`, F23).

Extended, each for a reason benchmarks/env_load.py measures:
- HTTP `/mcp` speaks three dialects (`dagent.envs.mcp_route`): MCP's Streamable HTTP transport for
  MCP clients (FastMCP's app over `session_server`: an MCP session carries an episode), openenv's
  own handler for `openenv/session/*` and its session-scoped tools calls, and a lean handler for
  the sessionless `tools/list` / `tools/call` with `episode_id` that trainers send. openenv's
  handler builds an environment and opens an in-memory FastMCP client session for every request;
  the lean one calls the SAME registered FastMCP tool functions (so the served set is still the
  FastMCP server's) in a thread pool of one worker per allowed episode (a call mostly waits on its
  sandbox process), and answers in MCP's CallToolResult shape.
- Errors become 4xx that name the fix: an unknown split or out-of-range index (400, listing the
  valid splits / range), a row whose task_id differs from the server's task (409), capacity (503).
- Episode routes under the environment's name: `GET /data_agent/capacity`,
  `GET|DELETE /data_agent/episodes/{id}` (DELETE grades an unsubmitted episode, frees the sandbox
  and returns the summary with the reward, `null` when ungraded).
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from openenv.core.env_server import CallToolAction, CallToolObservation
from openenv.core.env_server import create_app as openenv_create_app
from openenv.core.env_server.mcp_environment import get_server_tools

from dagent.core.suite import TaskSuite
from dagent.envs import mcp_route
from dagent.envs.contract import ENV_NAME, ROUTING_ARG, task_api
from dagent.envs.status import replace_health, sandbox_health
from dagent.envs.whitebox_runtime import (
    Runtime,
    TaskMismatchError,
    WhiteBoxObservation,
    configure,
    environment_class,
    mcp_server,
)
from dagent.envs.whitebox_session import end_session, session_server
from dagent.errors import ConfigError, SplitError, TaskError
from dagent.harness.readiness import check_image
from dagent.sandbox import get_backend
from dagent.sandbox.base import SandboxBackend
from dagent.sandbox.isolation import require_isolation
from dagent.settings import WhiteboxServerSettings
from dagent.suites.sources import load_tasks
from dagent.tools import select
from dagent.tools.episode import (
    CapacityError,
    EpisodeConfig,
    EpisodeError,
    EpisodeNotFoundError,
    active_episodes,
    close_episode,
    episode_summary,
)

_LOG = logging.getLogger(__name__)
DEFAULT_MAX_EPISODES = 64

#: uvicorn settings every deployment of the server uses (the Space's `main`, the load tests). Idle
#: connections are kept well past a client's own keep-alive (httpx: 5 s): with uvicorn's default of
#: 5 s both sides expire together and a request sent on a connection the server is closing dies as
#: a bare ReadError / connection reset (F24: 4 of 64 long rollouts excluded that way under load).
SERVE_SETTINGS = {"timeout_keep_alive": 75, "backlog": 4096}


def create_app(
    suite: TaskSuite | str | Path | None = None,
    *,
    tools: Any = None,
    max_episodes: int = DEFAULT_MAX_EPISODES,
    config: EpisodeConfig | None = None,
    backend: SandboxBackend | None = None,
    tool_workers: int | None = None,
    mcp_handler: str = "lean",
    isolation_check: bool = True,
) -> FastAPI:
    """Build the server for `suite` serving the `tools` selection, with at most `max_episodes` at once.

    Before serving, a local backend's sandboxes are probed from inside (`dagent.sandbox.isolation`):
    if an agent could read the suite or gold, reach the server's network or the outside, start-up
    fails with `IsolationError` naming the check and the fix; a remote backend's image must run one
    task's oracle to a correct grade (F51, `SandboxImageError`). `isolation_check=False` skips both:
    for a backend whose sandboxes never run a policy.

    `mcp_handler="openenv"` keeps openenv's own `POST /mcp` (for measuring it; see the docstring).
    """
    if mcp_handler not in ("lean", "openenv"):
        raise ConfigError(f"mcp_handler must be 'lean' or 'openenv' (got {mcp_handler!r}); set DAGENT_MCP_HANDLER")
    if max_episodes < 1:
        raise ConfigError(f"max_episodes must be >= 1 (got {max_episodes}); set DAGENT_MAX_EPISODES")
    names = select(tools)
    base = config or EpisodeConfig()
    config = EpisodeConfig(
        tools=names,
        max_steps=base.max_steps,
        output_chars=base.output_chars,
        command_timeout_s=base.command_timeout_s,
        reward=base.reward,
        idle_timeout_s=base.idle_timeout_s,
    )
    if not isinstance(suite, TaskSuite):
        suite = load_tasks(suite)
    runtime = configure(Runtime(suite, backend=backend, config=config, max_episodes=max_episodes))
    _ = runtime.backend  # probe the sandbox backend now: a broken one fails at start-up, not mid-rollout
    if isolation_check and not runtime.backend.remote:  # from inside a sandbox: no gold within reach
        _LOG.info("sandbox %s", require_isolation(runtime.backend, suite_dir=suite.tables_root.parent).summary())
    if isolation_check:  # the sandboxes run the tasks at all, local tiers too (F51)
        _LOG.info("sandbox runs the oracle of %s", check_image(suite, runtime.backend).task_id)
    env_cls = environment_class(names)
    app = openenv_create_app(
        env_cls,
        CallToolAction,
        CallToolObservation,
        env_name=ENV_NAME,
        max_concurrent_envs=max_episodes,
        reset_observation_cls=WhiteBoxObservation,
    )
    # One worker per episode that may be running: a tool call mostly WAITS on its sandbox process,
    # so a smaller pool caps throughput at pool / exec latency, which grows under load.
    workers = tool_workers or min(max_episodes, 512)
    fast = None
    if mcp_handler == "lean":
        fast = _fast_mcp(names, ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dagent-tool"))
    mcp_route.install(app, session_server(names, workers), fast=fast, on_session_end=end_session)
    _install_episode_routes(app, names, max_episodes, config)
    _install_error_handlers(app)

    replace_health(app, lambda: {"sandbox": sandbox_health(runtime.backend)})
    return app


def _rpc(request_id: Any, result: Any = None, error: tuple[int, str] | None = None) -> dict[str, Any]:
    if error:
        return {"jsonrpc": "2.0", "id": request_id, "error": {"code": error[0], "message": error[1]}}
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def _tool_result(ok: bool, output: str) -> dict[str, Any]:
    """MCP's CallToolResult shape; the client unwraps it (F29)."""
    return {
        "content": [{"type": "text", "text": output}],
        "structuredContent": {"ok": ok, "output": output},
        "isError": not ok,
    }


def _fast_mcp(names: tuple[str, ...], pool: ThreadPoolExecutor) -> Any:
    """The sessionless `tools/list` and `tools/call` (with episode_id) a trainer sends (`mcp_route`)."""
    served = get_server_tools(mcp_server(names))  # the registered FastMCP tools ARE the served set
    listing = [
        {"name": t.name, "description": t.description or "", "inputSchema": t.parameters or {}} for t in served.values()
    ]

    async def fast(body: dict[str, Any]) -> dict[str, Any]:
        rid, method, params = body.get("id"), body["method"], body.get("params") or {}
        if method == "tools/list":
            return _rpc(rid, {"tools": listing})
        if not isinstance(params, dict):
            return _rpc(rid, error=(-32602, 'params must be an object: {"name": ..., "arguments": {...}}'))
        name, arguments = params.get("name"), params.get("arguments") or {}
        tool = served.get(name) if isinstance(name, str) else None
        if tool is None:
            return _rpc(rid, _tool_result(False, f"unknown tool {name!r}; the tools are: {', '.join(names)}"))
        if not isinstance(arguments, dict):
            return _rpc(rid, _tool_result(False, f"arguments must be a JSON object ({ROUTING_ARG} included)"))
        if not arguments.get(ROUTING_ARG):
            return _rpc(
                rid,
                error=(
                    -32602,
                    f"tools/call without an MCP session needs `{ROUTING_ARG}` in the "
                    "arguments (from POST /reset); or send `initialize` first and "
                    "call start_episode in that session",
                ),
            )
        loop = asyncio.get_running_loop()
        try:
            out = await loop.run_in_executor(pool, lambda: tool.fn(**arguments))
        except Exception as e:  # noqa: BLE001 - a tool call never takes the server down
            _LOG.exception("tool %s raised", name)
            out = {"ok": False, "output": f"internal error in {name}: {type(e).__name__}: {e}"}
        return _rpc(rid, _tool_result(bool(out["ok"]), str(out["output"])))

    return fast


def _install_episode_routes(app: FastAPI, names: tuple[str, ...], max_episodes: int, config: EpisodeConfig) -> None:
    @app.get(task_api("capacity"), tags=["Episodes"], summary="Running episodes and the configured maximum")
    async def capacity() -> dict[str, Any]:
        return {
            "active": active_episodes(),
            "max": max_episodes,
            "tools": list(names),
            "episode": {"max_steps": config.max_steps, "output_chars": config.output_chars},
        }

    @app.get(task_api("episodes/{episode_id}"), tags=["Episodes"], summary="An episode's state and reward")
    async def episode(episode_id: str) -> dict[str, Any]:
        return episode_summary(episode_id)

    @app.delete(
        task_api("episodes/{episode_id}"),
        tags=["Episodes"],
        summary="Finish an episode, free its sandbox, return its reward (null when ungraded)",
    )
    async def finish(episode_id: str) -> dict[str, Any]:
        return await asyncio.get_running_loop().run_in_executor(None, close_episode, episode_id)


def _install_error_handlers(app: FastAPI) -> None:
    def handler(status: int):
        async def respond(request: Request, exc: Exception) -> JSONResponse:
            return JSONResponse(status_code=status, content={"detail": str(exc)})

        return respond

    app.add_exception_handler(SplitError, handler(400))
    app.add_exception_handler(TaskMismatchError, handler(409))
    app.add_exception_handler(TaskError, handler(400))
    app.add_exception_handler(CapacityError, handler(503))
    app.add_exception_handler(EpisodeNotFoundError, handler(404))
    app.add_exception_handler(EpisodeError, handler(409))
    app.add_exception_handler(ConfigError, handler(500))


def space_app(settings: WhiteboxServerSettings) -> FastAPI:
    """The white-box Space's app from its settings (`dagent.settings.WhiteboxServerSettings`, read
    once from the environment; docs/settings.md lists them); unset ones take `create_app`'s and
    `EpisodeConfig`'s defaults."""
    defaults = EpisodeConfig()
    return create_app(
        settings.suite,
        tools=settings.tools,
        max_episodes=settings.max_episodes or DEFAULT_MAX_EPISODES,
        config=EpisodeConfig(
            max_steps=settings.max_steps or defaults.max_steps,
            output_chars=settings.output_chars or defaults.output_chars,
            command_timeout_s=settings.command_timeout_s or defaults.command_timeout_s,
            idle_timeout_s=settings.idle_timeout_s or defaults.idle_timeout_s,
        ),
        tool_workers=settings.tool_workers,
        mcp_handler=settings.mcp_handler,
        backend=None if settings.sandbox == "local" else get_backend(settings.sandbox),
    )
