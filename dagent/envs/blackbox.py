"""The black-box environment: the AGENT owns its loop (opencode), we observe its model calls.

A rollout (`BlackBoxRuntime.run_rollout`): open a capture session; create a sandbox sized by the
task; stage the task's tables at /workdir/input; launch opencode pointed at the session (the URL
`dagent.publish` resolved at start-up); wait; read /workdir/answer.txt; grade it server side with
the FULL task (F14); close the session and analyse its turns (opencode's title/summary calls
labelled auxiliary by role, F03); return a frozen `Rollout`.

INVARIANTS (tests/envs/test_blackbox.py):
- Outcomes are three-way. UNGRADED (reward None, never 0.0, F32) with a cause when the
  infrastructure failed: `sandbox_oom` / `sandbox_timeout` (F18), `zero_model_calls` (no engine
  answer reached the agent, F07: an empty answer would grade exactly like a wrong one),
  `engine_unreachable` (the agent's loop ended on an engine failure), `staging_failed`,
  `sandbox_unavailable`, `harness_crash` (opencode died without an answer). Otherwise graded:
  correct, or wrong with reward 0.0 (no answer file counts as wrong).
- The reward is `dagent.reward.reward(correct, tool_calls)` with `tool_calls` counted from the
  captured agent chain (F34), never from a file.
- Start-up refuses what would fail every rollout silently: a remote backend with a loopback proxy
  URL (F08), a tunnel that does not come up within its bound (F09), a step cap above the reward's
  budget (F35), a missing or wrong opencode, a config whose RENDERED form (`opencode debug agent
  build`) enables a tool meant off (F31). Shutdown stops the tunnel before the proxy (F09).

Served over openenv like the white-box env: the Task API under `/data_agent_blackbox/...`, an MCP
tool `run_rollout`, and `POST /data_agent_blackbox/rollout` (what `dagent.envs.trl_session` calls).
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dagent.capture import CaptureServer
from dagent.errors import ConfigError, SandboxError, StagingError
from dagent.evaluation import Outcome, outcome_of, settle
from dagent.export import to_trace_entries
from dagent.gate import GateVerdict, gate
from dagent.harness.opencode import (
    OpencodeConfig, OpencodeHarness, check_rendered, check_version, find_opencode, opencode_role_hints,
    render_config, rendered_agent,
)
from dagent.publish import SANDBOX_SOCKET_DIR, Publisher, Reach, Tunnel
from dagent.reward import RewardConfig, reward
from dagent.sampling import DEFAULT_SAMPLING, Sampling
from dagent.sandbox.base import Resources, SandboxBackend
from dagent.sandbox.local import LocalBackend
from dagent.suite import TaskSuite
from dagent.task import ANSWER_PATH
from dagent.trajectory import DEFAULT_FORK_THRESHOLD, CapturedTurn, Finding, Trajectory, analyse

ENV_NAME = "data_agent_blackbox"
ANSWER_CLIP = 500
PROXY_CODES = frozenset({"budget_exhausted", "engine_error", "sampling_pinned"})
EXTRA_CALLS = 3  # beyond the step limit: the title call, a summary, the forced last step


@dataclass(frozen=True)
class Rollout:
    """One black-box rollout, graded (or not) server side, with its captured trajectory."""

    task_id: str
    split: str
    index: int
    difficulty_tier: str
    outcome: Outcome  # correct | wrong | ungraded
    reward: float | None  # None when ungraded, never 0.0 (F32)
    correct: bool | None
    method: str  # the grader's deciding rule, or "ungraded"
    cause: str | None  # why ungraded
    note: str
    answer: str | None  # what /workdir/answer.txt held, clipped
    exit_code: int | None  # opencode's
    turns: tuple[CapturedTurn, ...]  # every captured call, arrival order
    model_calls: int  # calls the proxy forwarded to the engine
    tool_calls: int  # tool calls in the agent chain, counted from the trace (F34)
    budget_stops: int
    findings: tuple[Finding, ...]  # the proxy's, then the trajectory's
    gate: GateVerdict  # the trainability gate's verdict
    trajectory: Trajectory = field(repr=False)
    session_id: str = ""
    wall_s: float = 0.0
    metadata: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def agent_turns(self) -> int:
        return len(self.trajectory.agent_chain)

    def trace_entries(self) -> list[dict[str, Any]]:
        """The agent chain as OpenEnv TraceEntry dicts; empty when ungraded or not exportable."""
        if self.outcome == "ungraded" or self.trajectory.fatal:
            return []
        return to_trace_entries(self.trajectory)

    def summary(self) -> dict[str, Any]:
        """JSON-safe view without token ids (what the MCP tool and the CLI show)."""
        keys = ("task_id", "split", "index", "difficulty_tier", "outcome", "reward", "correct", "method",
                "cause", "note", "answer", "exit_code", "model_calls", "tool_calls", "budget_stops",
                "session_id", "wall_s")
        out = {k: getattr(self, k) for k in keys}
        out.update(turns=len(self.turns), agent_turns=self.agent_turns,
                   roles=list(self.trajectory.roles), findings=[str(f) for f in self.findings],
                   gate=asdict(self.gate), metadata=self.metadata)
        return out


def count_tool_calls(trajectory: Trajectory) -> int:
    """Tool calls the agent made, read off the engine answers in its chain (F34)."""
    return sum(len((t.metadata.get("response_message") or {}).get("tool_calls") or [])
               for t in trajectory.chain_turns())


def infra_cause(run: Any, turns: list[CapturedTurn], findings: list[Finding], answer: bytes | None) -> str | None:
    """The infrastructure cause of a rollout, in order of precedence (module docstring)."""
    result = run.exec_result
    if result is not None and result.oom_killed:
        return "sandbox_oom"
    if result is not None and result.timed_out:
        return "sandbox_timeout"
    if not turns:
        return "zero_model_calls"
    if any(f.code == "engine_error" and f.level == "fatal" for f in findings):
        return "engine_unreachable"
    if run.cause:
        return run.cause
    if answer is None and (result is None or result.exit_code != 0):
        return "harness_crash"
    return None


class BlackBoxRuntime:
    """The suite, the capture proxy, its publisher, the sandbox backend and the opencode harness."""

    def __init__(self, suite: TaskSuite, engine_url: str, *, model: str = "tiny-qwen3",
                 backend: str | SandboxBackend = "local", opencode: OpencodeConfig | None = None,
                 reward_config: RewardConfig = RewardConfig(), sampling: Sampling = DEFAULT_SAMPLING,
                 publish: str = "direct", public_url: str | None = None, tunnel: Tunnel | None = None,
                 tunnel_timeout_s: float = 30.0, timeout_s: float = 600.0,
                 fork_threshold_tokens: int = DEFAULT_FORK_THRESHOLD, sandbox_dir: str | Path | None = None) -> None:
        self.suite, self.engine_url, self.model = suite, engine_url, model
        self.opencode = opencode or OpencodeConfig(model=model)
        self.harness = OpencodeHarness(self.opencode, reward=reward_config)  # F35, before anything starts
        self.reward_config, self.sampling, self.timeout_s = reward_config, sampling, timeout_s
        self.fork_threshold_tokens = fork_threshold_tokens
        self._backend_spec, self._sandbox_dir = backend, sandbox_dir
        self._publish = dict(mode=publish, public_url=public_url, tunnel=tunnel, tunnel_timeout_s=tunnel_timeout_s)
        self.capture = CaptureServer(engine_url, sampling=sampling, model=model,
                                     max_output_tokens=self.opencode.max_output_tokens)
        self.backend: SandboxBackend | None = None
        self.publisher: Publisher | None = None
        self.reach: Reach | None = None
        self._bridge_dir: str | None = None

    # -- lifecycle ------------------------------------------------------------------------------
    def _make_backend(self, bridge_dir: str) -> SandboxBackend:
        spec = self._backend_spec
        if (isinstance(spec, SandboxBackend) and spec.remote) or spec in ("e2b", "hf"):
            if isinstance(spec, SandboxBackend):
                return spec
            from dagent.sandbox import get_backend

            return get_backend(spec)  # remote: opencode comes with the sandbox image, on PATH
        binary = find_opencode()
        check_version(binary)
        # F31: what opencode RESOLVES from our config, not what we wrote, decides the tools
        check_rendered(rendered_agent(binary, render_config(self.opencode, "http://127.0.0.1:1/v1", "probe")),
                       self.opencode)
        self.harness.binary = str(binary)  # local sandboxes run the host's binary, bound read-only
        if isinstance(spec, SandboxBackend):
            targets = {dst for _, dst in getattr(spec, "ro_binds", ())}
            if getattr(spec, "tier", None) == "bwrap" and SANDBOX_SOCKET_DIR not in targets:
                raise ConfigError("this LocalBackend's sandboxes cannot see opencode or the capture bridge: "
                                  "pass backend='local' (dagent binds both), or build it with "
                                  f"ro_binds=[(opencode's directory, same), (bridge dir, {SANDBOX_SOCKET_DIR!r})]")
            return spec
        if spec != "local":
            raise ConfigError(f"unknown sandbox backend {spec!r}: use local, e2b or hf")
        binds = [(str(binary.parent), str(binary.parent)), (bridge_dir, SANDBOX_SOCKET_DIR)]
        return LocalBackend(self._sandbox_dir, ro_binds=binds)

    def start(self) -> BlackBoxRuntime:
        """Start the proxy and publish it; refuse what would fail every rollout (F08, F09, F31)."""
        self._bridge_dir = tempfile.mkdtemp(prefix="dagent-bridge-")
        try:
            self.backend = self._make_backend(self._bridge_dir)
            self.capture.start()
            self.publisher = Publisher(self.backend, self.capture.host, self.capture.port,
                                       bridge_dir=self._bridge_dir, **self._publish)
            self.reach = self.publisher.start()  # F08 refusal, bounded tunnel (F09), the bridge
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """The tunnel (and bridge) first, then the proxy (F09)."""
        if self.publisher is not None:
            self.publisher.stop()
        self.capture.stop()
        if self._bridge_dir:
            shutil.rmtree(self._bridge_dir, ignore_errors=True)
        self.reach = None

    def __enter__(self) -> BlackBoxRuntime:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def describe(self) -> str:
        backend = self.backend.describe() if self.backend else str(self._backend_spec)
        reach = f"{self.reach.base_url} ({self.reach.how})" if self.reach else "unpublished"
        return f"engine {self.engine_url} ({self.model}); capture -> sandboxes at {reach}; sandbox: {backend}"

    # -- one rollout ----------------------------------------------------------------------------
    def run_rollout(self, split: str, index: int, *, task_id: str | None = None,
                    timeout_s: float | None = None, memory_mb: int | None = None) -> Rollout:
        """Run, grade and analyse one rollout. Infrastructure failures come back as UNGRADED data."""
        if self.reach is None or self.backend is None:
            raise ConfigError("the black-box runtime is not started: call start() (or use it as a context manager)")
        started = time.monotonic()
        task = self.suite.task_at(split, index)
        if task_id is not None and task_id != task.task_id:
            raise ConfigError(f"the row names task {task_id!r} but {split}[{index}] is {task.task_id!r}: "
                              "rebuild the rows from the served suite")
        timeout = self.timeout_s if timeout_s is None else timeout_s
        session = self.capture.open_session(self.opencode.steps + EXTRA_CALLS,
                                            metadata={"task_id": task.task_id, "split": split, "index": index})
        resources = Resources(cpus=task.cpus, memory_mb=memory_mb or task.memory_mb, timeout_s=timeout)
        run, answer, pre_cause, note = None, None, None, ""
        try:
            with self.backend.create(resources) as sandbox:
                try:
                    sandbox.stage(self.suite.files_for(task))
                except StagingError as e:
                    pre_cause, note = "staging_failed", str(e)
                else:
                    run = self.harness.run(task.instruction, sandbox, self.reach, session.api_key, timeout_s=timeout)
                    answer = sandbox.read_file(ANSWER_PATH)
        except SandboxError as e:
            pre_cause, note = "sandbox_unavailable", str(e)
        except BaseException:
            self.capture.close_session(session.session_id)  # a bug or Ctrl-C: no session left open
            raise
        proxy = [f for f in self.capture.findings(session.session_id) if f.code in PROXY_CODES]
        stats = self.capture.stats(session.session_id)
        turns = opencode_role_hints(self.capture.close_session(session.session_id))
        trajectory = analyse(turns, self.fork_threshold_tokens)
        findings = (*proxy, *trajectory.findings)
        cause = pre_cause or infra_cause(run, turns, list(findings), answer)
        # an answer left behind by a loop that ended on an engine failure, or by a shell before any
        # model call (F19), says nothing about the policy: ungraded either way (F07)
        grade = settle(task, None if cause == "engine_unreachable" else answer, infra_cause=cause,
                       model_calls=0 if cause == "zero_model_calls" else None)
        tool_calls = count_tool_calls(trajectory)
        result = run.exec_result if run is not None else None
        return Rollout(
            task_id=task.task_id, split=split, index=index, difficulty_tier=task.difficulty_tier,
            outcome=outcome_of(grade), reward=reward(grade.correct, tool_calls, self.reward_config),
            correct=grade.correct, method=grade.method, cause=grade.note if grade.correct is None else None,
            note=note or grade.note,
            answer=None if answer is None else answer[: ANSWER_CLIP * 4].decode("utf-8", "replace")[:ANSWER_CLIP],
            exit_code=None if result is None else result.exit_code, turns=trajectory.turns,
            model_calls=stats.model_calls, tool_calls=tool_calls, budget_stops=stats.budget_stops,
            findings=tuple(findings), gate=gate(trajectory), trajectory=trajectory,
            session_id=session.session_id, wall_s=round(time.monotonic() - started, 3),
            metadata={} if run is None else {**run.metadata, "engine_errors": stats.engine_errors},
        )


# ------------------------------------------------------------------ the openenv face

_RUNTIME: BlackBoxRuntime | None = None


def configure(runtime: BlackBoxRuntime) -> BlackBoxRuntime:
    global _RUNTIME
    _RUNTIME = runtime
    return runtime


def current() -> BlackBoxRuntime:
    if _RUNTIME is None:
        raise ConfigError("the black-box server has no runtime: build it with dagent.envs.blackbox.create_app(runtime)")
    return _RUNTIME


def rollout_payload(split: str, index: int | None, task_id: str | None = None, timeout_s: float | None = None,
                    include_trace: bool = False, instruction: str | None = None) -> dict[str, Any]:
    """One rollout as plain JSON: the summary, plus the trace entries when asked (for training).
    Without an index the task is the one whose instruction is exactly `instruction` (F11, F12)."""
    runtime = current()
    if index is None:
        if instruction is None:
            raise ConfigError("name the task: send `index` (and `split`), or the prompt's `instruction`")
        index, _ = runtime.suite.resolve_prompt(split, instruction)
    rollout = runtime.run_rollout(split, int(index), task_id=task_id, timeout_s=timeout_s)
    out = rollout.summary()
    if include_trace:
        out["trace_entries"] = rollout.trace_entries()
    return out


def mcp_server() -> Any:
    from fastmcp import FastMCP

    server = FastMCP(ENV_NAME)

    @server.tool
    async def run_rollout(split: str, index: int, task_id: str | None = None,
                          timeout_s: float | None = None) -> dict[str, Any]:
        """Run one black-box rollout of task (split, index): opencode in a sandbox, graded server side."""
        return await asyncio.to_thread(rollout_payload, split, index, task_id, timeout_s)

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
            return EnvironmentMetadata(name=ENV_NAME, version="0.1.0",
                                       description="Data-agent tasks; opencode owns the loop; capture observes")

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


def create_app(runtime: BlackBoxRuntime, *, max_concurrent: int = 8) -> Any:
    """The HTTP server for a STARTED runtime: openenv's app plus `POST /<env>/rollout`."""
    from fastapi import Body
    from fastapi.responses import JSONResponse
    from openenv.core.env_server import CallToolAction, CallToolObservation
    from openenv.core.env_server import create_app as openenv_create_app

    from dagent.errors import DagentError

    configure(runtime)
    app = openenv_create_app(environment_class(), CallToolAction, CallToolObservation, env_name=ENV_NAME,
                             max_concurrent_envs=max_concurrent)

    @app.get(f"/{ENV_NAME}/info", tags=["Rollouts"])
    async def info() -> dict[str, Any]:
        return {"describe": runtime.describe(), "sampling": runtime.sampling.as_request(),
                "steps": runtime.opencode.steps, "reward": asdict(runtime.reward_config)}

    @app.post(f"/{ENV_NAME}/rollout", tags=["Rollouts"], summary="Run one rollout; the trace when asked")
    async def rollout(body: dict = Body(...)) -> Any:
        try:
            return await asyncio.to_thread(rollout_payload, body.get("split") or "train", body.get("index"),
                                           body.get("task_id"), body.get("timeout_s"),
                                           bool(body.get("include_trace")), body.get("instruction"))
        except (DagentError, TypeError, ValueError) as e:
            return JSONResponse(status_code=400, content={"detail": str(e)})

    return app
