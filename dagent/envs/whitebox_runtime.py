"""The white-box environment: one registry (`dagent.tools`), three faces.

1. The TRL class (`white_box_env`): its PUBLIC METHODS are exactly the selected tools plus
   `reset(**row)` and `get_reward()`, because TRL's GRPOTrainer turns every public method of an
   environment into a tool. Tool selection therefore varies the CLASS, not a runtime flag.
2. The MCP server's tools (`mcp_server`), served by openenv through `WhiteBoxEnvironment`.
3. The HTTP client's methods (`dagent.envs.whitebox_client.white_box_client`).
All three are generated from `dagent.tools.Signatures` for the same selection; tests/envs/
test_faces.py asserts they agree in both directions for every selection (F25).

`WhiteBoxEnvironment` keeps no per-episode state (openenv builds and discards an instance per
HTTP request): episodes live in `dagent.tools.episode`'s module-level registry behind a lock, and the
suite, backend and settings in one module-level `Runtime`. That is what makes
`SUPPORTS_CONCURRENT_SESSIONS = True` true rather than declared. The price: one served runtime
per process (building a second app re-points the first); the TRL class carries its own.
"""

from __future__ import annotations

import functools
import operator
import threading
from contextlib import AbstractContextManager, asynccontextmanager, nullcontext
from functools import lru_cache
from pathlib import Path
from typing import Any

import anyio
from fastmcp import Client, FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.server.dependencies import get_context, get_http_headers
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.mcp_environment import MCPEnvironment, get_server_tools
from openenv.core.env_server.mcp_types import RESERVED_TOOL_NAMES
from openenv.core.env_server.types import EnvironmentMetadata, Observation, State
from pydantic import Field

from dagent.clock import PhaseClock
from dagent.core.suite import TaskSuite
from dagent.envs.contract import ENV_NAME, EPISODE_HEADER, REWARD_COLUMN, ROUTING_ARG
from dagent.envs.slot import RuntimeSlot
from dagent.errors import ConfigError, SplitError, TaskError
from dagent.sandbox.base import SandboxBackend
from dagent.sandbox.isolation import suite_paths
from dagent.sandbox.local import LocalBackend
from dagent.sandbox.timed import TimedBackend
from dagent.suites.sources import load_tasks
from dagent.tools import ToolResult, select, tool_function
from dagent.tools.episode import (
    Episode,
    EpisodeConfig,
    EpisodeError,
    active_episodes,
    close_episode,
    get_episode,
    open_episode,
)


class TaskMismatchError(TaskError):
    """The trainer's row names a different task than the server holds at (split, index)."""


class Runtime:
    """The suite, the sandbox backend and the episode settings one server (or trainer) uses."""

    def __init__(
        self,
        suite: TaskSuite,
        *,
        backend: SandboxBackend | None = None,
        config: EpisodeConfig | None = None,
        max_episodes: int | None = None,
        clock: PhaseClock | None = None,
    ) -> None:
        self.suite, self.config, self.max_episodes = suite, config or EpisodeConfig(), max_episodes
        self._backend = backend
        self._backend_lock = threading.Lock()
        self.clock = clock  # when set: env methods and sandbox calls report their seconds to it

    @property
    def backend(self) -> SandboxBackend:
        with self._backend_lock:
            if self._backend is None:
                self._backend = LocalBackend(hidden=suite_paths(self.suite.tables_root.parent))  # never in reach
            if self.clock is not None and not isinstance(self._backend, TimedBackend):
                self._backend = TimedBackend(self._backend, self.clock)
            return self._backend

    def phase(self, name: str) -> AbstractContextManager[None]:
        return self.clock.phase(name) if self.clock is not None else nullcontext()

    def start(self, split: Any, index: Any, *, task_id: str | None = None, episode_id: str | None = None) -> Episode:
        """Start the episode a dataset row names. Unknown split / bad index: SplitError with the range."""
        if split is None or index is None:
            raise SplitError(
                "reset needs the row's `split` and `index`; splits: " + ", ".join(self.suite.split_names())
            )
        if isinstance(index, str) and index.strip().lstrip("-").isdigit():
            index = int(index)
        elif hasattr(index, "__index__") and not isinstance(index, bool):
            index = operator.index(index)  # numpy / torch integers from a dataset column
        task = self.suite.task_at(str(split), index)
        if task_id is not None and task_id != task.task_id:
            raise TaskMismatchError(
                f"the row names task {task_id!r} but {split}[{index}] on this server is {task.task_id!r}: "
                "the trainer's dataset and the server's suite differ; rebuild the rows from the served suite"
            )
        return open_episode(
            task,
            self.suite.files_for(task),
            self.backend,
            split=str(split),
            index=index,
            config=self.config,
            max_episodes=self.max_episodes,
            episode_id=episode_id,
        )

    def call(self, episode_id: str | None, name: str, arguments: Any) -> ToolResult:
        if not episode_id:
            return ToolResult(False, f"missing {ROUTING_ARG}: call reset first")
        try:
            episode = get_episode(episode_id)
        except EpisodeError as e:
            return ToolResult(False, str(e))
        return episode.call(name, arguments)


_SLOT: RuntimeSlot[Runtime] = RuntimeSlot(
    "the white-box server has no task suite configured: build the app with "
    "dagent.envs.whitebox_server.create_app(suite=...) "
    "or set DAGENT_SUITE for server/app.py"
)
configure, current = _SLOT.configure, _SLOT.current


# ------------------------------------------------------------------ face 2: MCP server + openenv env


def _serve(name: str, arguments: Any, episode_id: str | None) -> dict[str, Any]:
    result = current().call(episode_id, name, arguments)
    return {"ok": result.ok, "output": result.output}


@lru_cache(maxsize=None)
def mcp_server(tools: tuple[str, ...]) -> FastMCP:
    """The FastMCP server whose registered tools are exactly `tools`, each plus an optional
    `episode_id` (sessionless callers must send it; an openenv session fills in its own)."""
    reserved = set(tools) & set(RESERVED_TOOL_NAMES)
    if reserved:
        raise ConfigError(f"tool names {sorted(reserved)} are reserved by openenv")
    server = FastMCP(ENV_NAME)
    for name in tools:
        server.tool(tool_function(name, _serve, routing=ROUTING_ARG, routing_optional=True))
    return server


# ------------------------------------------------------------------ face 2b: MCP sessions (the SDK's clients)

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
    return _serve(name, arguments, episode_id)


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


class _EpisodeClient(Client):
    """The in-memory client of one openenv session's environment: a tool call without `episode_id`
    acts on the episode that session's `reset` started (OpenEnv's clients never send one)."""

    def __init__(self, server: FastMCP, env: WhiteBoxEnvironment) -> None:
        super().__init__(server)
        self._env = env

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None, *args: Any, **kw: Any) -> Any:
        arguments = dict(arguments or {})
        if self._env.episode_id:  # the session's episode, whatever a model wrote there
            arguments[ROUTING_ARG] = self._env.episode_id
        return await super().call_tool(name, arguments, *args, **kw)


class WhiteBoxObservation(Observation):
    """What `POST /reset` returns: the reworded instruction and the id that routes tool calls."""

    instruction: str = Field(default="", description="The task, submission sentence reworded (F28).")
    episode_id: str | None = Field(default=None, description="Pass as `episode_id` with every tool call.")
    split: str | None = None
    index: int | None = None
    task_id: str | None = None
    tools: list[dict[str, Any]] = Field(
        default_factory=list,
        description=("The tools this server serves, as OpenEnv's clients parse them: name, description, input_schema."),
    )
    ungraded: str | None = Field(default=None, description="Why the episode cannot be graded, if so.")


class WhiteBoxEnvironment(MCPEnvironment):
    """openenv environment over the module-level runtime; one subclass per tool selection."""

    # True because nothing per-episode lives on an instance: episodes are in a module registry
    # behind a lock, each with its own sandbox and lock.
    SUPPORTS_CONCURRENT_SESSIONS = True
    TOOLS: tuple[str, ...] = select()

    def __init__(self) -> None:
        super().__init__(mcp_server(self.TOOLS))
        self.mcp_client = _EpisodeClient(self.mcp_server, self)
        self.episode_id: str | None = None  # the episode this instance's reset started
        self._session_scoped = False  # an openenv session (WebSocket, production MCP) holds this instance

    def _validate_tool_names(self, mcp_server: Any) -> None:
        """Checked once in `mcp_server()`; repeating it per HTTP request spawns a thread and a loop."""

    @asynccontextmanager
    async def mcp_session(self) -> Any:
        self._session_scoped = True  # only an openenv session opens one before any reset
        async with super().mcp_session() as client:
            yield client

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        split: Any = None,
        index: Any = None,
        task_id: str | None = None,
        **row: Any,
    ) -> WhiteBoxObservation:
        if self._session_scoped:
            self._finish_own()
        episode = current().start(split, index, task_id=task_id, episode_id=episode_id)
        self.episode_id = episode.episode_id
        return WhiteBoxObservation(
            instruction=episode.instruction,
            episode_id=episode.episode_id,
            split=episode.split,
            index=episode.index,
            task_id=episode.task.task_id,
            tools=tool_specs(self.TOOLS),
            ungraded=episode.start_cause,
            # what OpenEnv's MCPToolClient keeps of a reset observation that lists tools
            metadata={
                "instruction": episode.instruction,
                "episode_id": episode.episode_id,
                "task_id": episode.task.task_id,
                "ungraded": episode.start_cause,
            },
        )

    def close(self) -> None:
        """An openenv session ends: finish its episode (graded; the summary stays readable). A
        stateless `POST /reset` closes its instance at once and leaves the episode running."""
        if self._session_scoped:
            self._finish_own()
        super().close()

    def _finish_own(self) -> None:
        if self.episode_id is not None:
            try:
                close_episode(self.episode_id)
            except EpisodeError:
                pass
            self.episode_id = None

    def _step_impl(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        return Observation(
            metadata={"error": "this environment takes MCP tool calls only (POST /mcp tools/call with an episode_id)"}
        )

    @property
    def state(self) -> State:
        return State(active_episodes=active_episodes())

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(
            name=ENV_NAME,
            version="0.1.0",
            description=f"Data-agent tasks over real tables; tools: {', '.join(self.TOOLS)}",
        )

    # Task API (openenv serves these under /data_agent/...). The public view only: no gold (F14).
    def list_splits(self) -> list[str]:
        return current().suite.split_names()

    def num_tasks(self, split: str) -> int:
        return len(current().suite.tasks(split))

    def _public(self, split: str, index: int) -> dict[str, Any]:
        return {"index": index, **current().suite.task_at(split, index).public().model_dump(mode="json")}

    def get_task(self, split: str, index: int) -> dict[str, Any]:
        return self._public(split, index)

    def get_task_range(self, split: str, start: int | None = None, stop: int | None = None) -> list[dict[str, Any]]:
        n = self.num_tasks(split)
        return [self._public(split, i) for i in range(n)[slice(start, stop)]]

    def list_tasks(self, split: str) -> list[dict[str, Any]]:
        return self.get_task_range(split, 0, 1000)  # a bounded preview; num_tasks has the total


def tool_specs(tools: tuple[str, ...]) -> list[dict[str, Any]]:
    """The served tools as OpenEnv's `Tool` (name, description, input_schema)."""
    return [dict(t) for t in _tool_specs(tools)]


@lru_cache(maxsize=None)
def _tool_specs(tools: tuple[str, ...]) -> tuple[dict[str, Any], ...]:
    return tuple(
        {"name": t.name, "description": t.description or "", "input_schema": t.parameters or {}}
        for t in get_server_tools(mcp_server(tools)).values()
    )


@lru_cache(maxsize=None)
def environment_class(tools: tuple[str, ...]) -> type[WhiteBoxEnvironment]:
    """The openenv environment class serving exactly `tools`."""
    return type(WhiteBoxEnvironment.__name__, (WhiteBoxEnvironment,), {"TOOLS": tuple(tools)})


assert issubclass(WhiteBoxEnvironment, Environment)


# ------------------------------------------------------------------ face 1: the TRL class (in process)


class _InProcessEnv:
    """Base of the TRL class. Only `reset` and `get_reward` are public besides the tools."""

    _runtime: Runtime
    _tools: tuple[str, ...]

    def __init__(self) -> None:
        self._episode_id: str | None = None

    def reset(self, split: Any = None, index: Any = None, task_id: str | None = None, **row: Any) -> str:
        """Start the episode the dataset row names by `split` and `index`; returns its instruction."""
        with self._runtime.phase("env"):
            self._release()
            episode = self._runtime.start(split, index, task_id=task_id)
            self._episode_id = episode.episode_id
            return episode.instruction

    def get_reward(self) -> float | None:
        """The episode's reward; None when it could not be graded (dropped from the baseline, F32)."""
        if self._episode_id is None:
            return None
        with self._runtime.phase("env"):
            return close_episode(self._episode_id)["reward"]

    def _call(self, name: str, arguments: Any) -> str:
        with self._runtime.phase("env"):
            return self._runtime.call(self._episode_id, name, arguments).render()

    def _release(self) -> None:
        if self._episode_id is not None:
            try:
                close_episode(self._episode_id)
            except EpisodeError:
                pass
            self._episode_id = None


def white_box_env(
    suite: TaskSuite | str | Path | Runtime | None = None,
    tools: Any = None,
    *,
    backend: SandboxBackend | None = None,
    config: EpisodeConfig | None = None,
    clock: PhaseClock | None = None,
) -> type:
    """The environment class for `GRPOTrainer(environment_factory=white_box_env(...))`, in process.

    Its public methods are exactly the tools of `tools` (default bash + seta, plus
    submit_solution), `reset(**row)` and `get_reward()`.
    """
    names = select(tools)
    if isinstance(suite, Runtime):
        runtime = suite
    else:
        if not isinstance(suite, TaskSuite):
            suite = load_tasks(suite)
        base = config or EpisodeConfig()
        runtime = Runtime(
            suite,
            backend=backend,
            config=EpisodeConfig(
                tools=names,
                max_steps=base.max_steps,
                output_chars=base.output_chars,
                command_timeout_s=base.command_timeout_s,
                reward=base.reward,
                idle_timeout_s=base.idle_timeout_s,
            ),
            clock=clock,
        )
    if set(runtime.config.tools) != set(names):
        raise ConfigError(f"the runtime serves {runtime.config.tools} but the class was asked for {names}")
    namespace: dict[str, Any] = {"_runtime": runtime, "_tools": names, "__module__": __name__}
    for name in names:
        namespace[name] = tool_function(name, _InProcessEnv._call, receiver=True)
    return type(REWARD_COLUMN, (_InProcessEnv,), namespace)
