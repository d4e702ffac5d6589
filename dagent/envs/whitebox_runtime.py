"""The white-box environment: one registry (`dagent.tools`), three faces.

1. The TRL class (`white_box_env`): its PUBLIC METHODS are exactly the selected tools plus
   `reset(**row)` and `get_reward()`, because TRL's GRPOTrainer turns every public method of an
   environment into a tool. Tool selection therefore varies the CLASS, not a runtime flag.
2. The MCP server's tools (`mcp_server`), served by openenv through `WhiteBoxEnvironment`; MCP
   sessions get the same tools from `dagent.envs.whitebox_session`.
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

import operator
import threading
from contextlib import AbstractContextManager, asynccontextmanager, nullcontext
from functools import lru_cache
from pathlib import Path
from typing import Any

from fastmcp import Client, FastMCP
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.mcp_environment import MCPEnvironment, get_server_tools
from openenv.core.env_server.mcp_types import RESERVED_TOOL_NAMES
from openenv.core.env_server.types import EnvironmentMetadata, Observation, State
from pydantic import Field

from dagent.clock import PhaseClock
from dagent.core.suite import TaskSuite
from dagent.envs.contract import ENV_NAME, REWARD_COLUMN, ROUTING_ARG
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


def serve_call(name: str, arguments: Any, episode_id: str | None) -> dict[str, Any]:
    """One tool call on `episode_id`'s episode, as the MCP tools answer it."""
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
        server.tool(tool_function(name, serve_call, routing=ROUTING_ARG, routing_optional=True))
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
