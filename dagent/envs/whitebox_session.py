"""The white-box MCP session face: the FastMCP server MCP clients talk to over `/mcp` (the `mcp`
SDK's sessions, an IDE, an agent framework), where a session carries its episode.

`start_episode` starts an episode and makes it the session's, the selected tools act on it without
`episode_id` (or on the one the `Dagent-Episode-Id` header names), `finish_episode` returns the
reward, and a session that ends (DELETE) finishes the episode it carried. The episodes and the
runtime are `dagent.envs.whitebox_runtime`'s; this module keeps only which session carries which.
"""

from __future__ import annotations

import functools
import threading
from functools import lru_cache
from typing import Any

import anyio
from fastmcp import FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.server.dependencies import get_context, get_http_headers

from dagent.envs.contract import ENV_NAME, EPISODE_HEADER, ROUTING_ARG
from dagent.envs.whitebox_runtime import current, serve_call
from dagent.errors import TaskError
from dagent.tools import tool_function
from dagent.tools.episode import EpisodeError, close_episode

NO_EPISODE = (
    "no episode in this MCP session: call start_episode first (split and index, or task_id), "
    f"send the {EPISODE_HEADER} header with an episode_id from POST /reset, or pass episode_id"
)

_SESSIONS: dict[str, str] = {}  # MCP session id -> the episode it carries
_SESSIONS_LOCK = threading.Lock()


def _mcp_session_id() -> str | None:
    try:
        return get_context().session_id
    except RuntimeError:
        return None


def session_episode() -> str | None:
    """The episode the current MCP request acts on: the one its session started (start_episode), else
    the one its `Dagent-Episode-Id` header names."""
    sid = _mcp_session_id()
    with _SESSIONS_LOCK:
        started = _SESSIONS.get(sid) if sid else None
    return started or get_http_headers().get(EPISODE_HEADER) or None


def end_session(session_id: str) -> dict[str, Any] | None:
    """An MCP session ended (DELETE): finish the episode it carried; its summary, or None."""
    with _SESSIONS_LOCK:
        episode_id = _SESSIONS.pop(session_id, None)
    if episode_id is None:
        return None
    try:
        return close_episode(episode_id)
    except EpisodeError:
        return None


def _serve_in_session(name: str, arguments: Any, episode_id: str | None) -> dict[str, Any]:
    episode_id = episode_id or session_episode()
    if not episode_id:
        return {"ok": False, "output": NO_EPISODE}
    return serve_call(name, arguments, episode_id)


def _start_episode(split: str | None = None, index: int | None = None, task_id: str | None = None) -> dict[str, Any]:
    """Start an episode on one task and make it this session's: the other tools then act on it without
    `episode_id`. Name the task by `split` and `index`, or by `task_id` alone. A second call finishes
    the session's previous episode first.

    Args:
        split: The suite split, e.g. "train" or "test:easy".
        index: The task's index within the split.
        task_id: The task's id; alone it names the task, with split and index it checks them.
    """
    runtime = current()
    try:
        if task_id is not None and index is None:
            found_split, index, _ = runtime.suite.find(task_id)
            split = split or found_split.split(":")[0]
            index = runtime.suite.tasks(split).index(runtime.suite.task_at(found_split, index))
        episode = runtime.start(split, index, task_id=task_id)
    except (TaskError, ValueError) as e:
        raise ToolError(str(e)) from e
    sid = _mcp_session_id()
    if sid:
        end_session(sid)
        with _SESSIONS_LOCK:
            _SESSIONS[sid] = episode.episode_id
    return {
        "instruction": episode.instruction,
        "episode_id": episode.episode_id,
        "split": episode.split,
        "index": episode.index,
        "task_id": episode.task.task_id,
        "tools": list(runtime.config.tools),
        "ungraded": episode.start_cause,
    }


def _finish_episode(episode_id: str | None = None) -> dict[str, Any]:
    """Finish this session's episode (or `episode_id`): grade it if it never submitted, free its sandbox,
    and return its summary with the reward (null when it could not be graded).

    Args:
        episode_id: Another episode to finish; by default the one this session carries.
    """
    episode_id = episode_id or session_episode()
    if not episode_id:
        raise ToolError(NO_EPISODE)
    sid = _mcp_session_id()
    with _SESSIONS_LOCK:
        if sid and _SESSIONS.get(sid) == episode_id:
            del _SESSIONS[sid]
    try:
        return close_episode(episode_id)
    except EpisodeError as e:
        raise ToolError(str(e)) from e


SESSION_TOOLS = ("start_episode", "finish_episode")


def _threaded(fn: Any, limiter: anyio.CapacityLimiter) -> Any:
    """`fn` as an async tool run in a worker thread of `limiter` (contextvars, and so the MCP request's
    session and headers, go with it). anyio's default limiter would cap every session's tool calls
    together at 40 threads; a call mostly waits on its sandbox process."""

    async def run(*args: Any, **kwargs: Any) -> Any:
        return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs), limiter=limiter)

    return functools.update_wrapper(run, fn)  # the name, docstring and signature FastMCP reads


@lru_cache(maxsize=None)
def session_server(tools: tuple[str, ...], workers: int = 64) -> FastMCP:
    """The FastMCP server MCP sessions talk to (`/mcp` over Streamable HTTP): `start_episode`, the
    `tools` (each with an optional `episode_id`: the session, or the `Dagent-Episode-Id` header,
    carries it) and `finish_episode`, which returns the reward; at most `workers` calls at once."""
    server = FastMCP(
        ENV_NAME,
        instructions=(
            "Data-agent tasks over real tables. start_episode gives you a task's instruction; solve it with "
            "the tools in the episode's sandbox (the tables are under /workdir/input), submit_solution with "
            "the answer, then finish_episode returns the grade."
        ),
    )
    limiter = anyio.CapacityLimiter(workers)
    server.tool(_threaded(_start_episode, limiter), name="start_episode")
    for name in tools:
        server.tool(
            _threaded(tool_function(name, _serve_in_session, routing=ROUTING_ARG, routing_optional=True), limiter)
        )
    server.tool(_threaded(_finish_episode, limiter), name="finish_episode")
    return server
