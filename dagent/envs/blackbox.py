"""The black-box environment: the AGENT owns its loop (opencode), we observe its model calls.

A rollout (`BlackBoxRuntime.run_rollout`) is one run of the episode skeleton
(`dagent.runner.play`) with `OpencodeAgent`: a sandbox sized by the task, its tables staged at
/workdir/input, a capture session opened, opencode launched against it (the URL
`dagent.capture.reach` resolved at start-up), /workdir/answer.txt graded server side with the FULL
task (F14), the session's turns analysed (opencode's title/summary calls labelled auxiliary by
role, F03); a frozen `Rollout` composes the evaluation record with the trajectory and gate.

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
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dagent.capture import CaptureServer
from dagent.capture.reach import SANDBOX_SOCKET_DIR, Publisher, Reach, Tunnel
from dagent.errors import ConfigError
from dagent.evaluation import EvalRecord
from dagent.harness.opencode import (
    OpencodeAgent, OpencodeConfig, OpencodeHarness, check_rendered, check_version, find_opencode, render_config,
    rendered_agent,
)
from dagent.reward import RewardConfig
from dagent.runner import play
from dagent.sampling import DEFAULT_SAMPLING, Sampling
from dagent.sandbox.base import SandboxBackend
from dagent.sandbox.isolation import suite_paths
from dagent.sandbox.local import LocalBackend
from dagent.suite import TaskSuite
from dagent.trajectory.analysis import Trajectory, analyse
from dagent.trajectory.export import to_trace_entries
from dagent.trajectory.gate import GateVerdict, gate
from dagent.trajectory.linking import DEFAULT_FORK_THRESHOLD
from dagent.trajectory.turn import CapturedTurn, Finding

ENV_NAME = "data_agent_blackbox"


@dataclass(frozen=True)
class Rollout:
    """One black-box rollout: its evaluation record (graded, or not, server side by the episode
    skeleton) plus what capture recorded. The record's fields read through (`rollout.outcome`)."""

    record: EvalRecord
    turns: tuple[CapturedTurn, ...]  # every captured call, arrival order
    findings: tuple[Finding, ...]  # the proxy's, then the trajectory's
    gate: GateVerdict  # the trainability gate's verdict
    trajectory: Trajectory = field(repr=False)
    budget_stops: int = 0
    session_id: str = ""
    metadata: dict[str, Any] = field(default_factory=dict, repr=False)

    def __getattr__(self, name: str) -> Any:
        if name in EvalRecord.model_fields:  # only reached for names the dataclass lacks
            return getattr(self.record, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def model_calls(self) -> int:
        """Calls the proxy forwarded to the engine (0 when the agent never started)."""
        return self.record.model_calls or 0

    @property
    def wall_s(self) -> float:
        return self.record.duration_s

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
        out = self.record.model_dump(mode="json")
        out.update(budget_stops=self.budget_stops, session_id=self.session_id, wall_s=self.wall_s,
                   turns=len(self.turns), agent_turns=self.agent_turns, roles=list(self.trajectory.roles),
                   findings=[str(f) for f in self.findings], gate=asdict(self.gate), metadata=self.metadata)
        return out

    def lines(self) -> list[str]:
        """The printout of one rollout: outcome (and cause), turns with their roles, drift, findings."""
        head = f"{self.outcome.upper()}  reward {self.reward}"
        if self.cause:
            head += f"  cause {self.cause}"
        out = [f"task {self.task_id} ({self.split} #{self.index}, {self.difficulty_tier})",
               head + f"  ({self.method}: {self.note})" if self.note else head,
               f"answer {self.answer!r}  {self.agent} exit {self.exit_code}  wall {self.wall_s:.1f}s",
               f"turns {len(self.turns)}: " + ", ".join(
                   f"{t.seq}:{role}({len(t.prompt_token_ids or ())}+{len(t.completion_token_ids)})"
                   for t, role in zip(self.turns, self.trajectory.roles)),
               f"model calls {self.model_calls}  tool calls {self.tool_calls}  budget stops {self.budget_stops}",
               self.gate.report()]
        out += ["findings:"] + [f"  {f}" for f in self.findings] if self.findings else ["findings: none"]
        return out


class BlackBoxRuntime:
    """The suite, the capture proxy, its publisher, the sandbox backend and the opencode harness."""

    def __init__(self, suite: TaskSuite, engine_url: str, *, model: str = "tiny-qwen3",
                 backend: str | SandboxBackend = "local", opencode: OpencodeConfig | None = None,
                 reward_config: RewardConfig = RewardConfig(), sampling: Sampling = DEFAULT_SAMPLING,
                 publish: str = "direct", public_url: str | None = None, tunnel: Tunnel | None = None,
                 tunnel_timeout_s: float = 30.0, timeout_s: float = 600.0,
                 fork_threshold_tokens: int = DEFAULT_FORK_THRESHOLD, sandbox_dir: str | Path | None = None,
                 harbor_catalog: str | Path | None = None, isolation: str = "auto",
                 capture_journal: str | Path | None = None, harness: str = "opencode",
                 pi: Any = None) -> None:
        """`harbor_catalog`: run each rollout as `harbor run` of the task's exported directory there
        (`dagent export harbor`), opencode as a Harbor agent against this runtime's capture, the
        verifier's verdict the grade (see `run_harbor_rollout`). `isolation`: the local backend's
        (`auto`: bubblewrap where usable; `rlimits` forces the no-user-namespace path).
        `capture_journal`: a SQLite file that makes capture sessions durable across a proxy
        restart (`dagent.capture.journal`; default `$DAGENT_CAPTURE_JOURNAL`, else in memory).
        `harness`: the agent that owns the loop, `opencode` (default) or `pi`
        (`dagent.harness.pi`, configured by `pi`, a `PiConfig`; local sandboxes only)."""
        self.suite, self.engine_url, self.model = suite, engine_url, model
        self.opencode = opencode or OpencodeConfig(model=model)
        if harness == "opencode":
            self.harness: Any = OpencodeHarness(self.opencode)  # F35, before anything starts
            max_output = self.opencode.max_output_tokens
        elif harness == "pi":
            from dagent.harness.pi import PiConfig, PiHarness

            self.harness = PiHarness(pi or PiConfig(model=model))
            max_output = self.harness.config.max_output_tokens
        else:
            raise ConfigError(f"unknown harness {harness!r}: use opencode or pi")
        self.reward_config, self.sampling, self.timeout_s = reward_config, sampling, timeout_s
        self.fork_threshold_tokens = fork_threshold_tokens
        self._backend_spec, self._sandbox_dir, self._isolation = backend, sandbox_dir, isolation
        self._publish = dict(mode=publish, public_url=public_url, tunnel=tunnel, tunnel_timeout_s=tunnel_timeout_s)
        self.capture = CaptureServer(engine_url, sampling=sampling, model=model, max_output_tokens=max_output,
                                     journal=capture_journal or os.environ.get("DAGENT_CAPTURE_JOURNAL") or None)
        self.backend: SandboxBackend | None = None
        self.publisher: Publisher | None = None
        self.reach: Reach | None = None
        self._bridge_dir: str | None = None
        self.harbor_catalog = Path(harbor_catalog) if harbor_catalog else None

    # -- lifecycle ------------------------------------------------------------------------------
    def _make_backend(self, bridge_dir: str) -> SandboxBackend:
        spec = self._backend_spec
        remote = (isinstance(spec, SandboxBackend) and spec.remote) or spec in ("e2b", "hf")
        if self.harness.name != "opencode":
            if remote:
                raise ConfigError(f"the {self.harness.name} harness runs on local sandboxes only (bound from this "
                                  "host): use backend='local', or the opencode harness on e2b/hf")
            binds = [*self.harness.prepare(), (bridge_dir, SANDBOX_SOCKET_DIR)]  # version and F31 checks
            if spec != "local":
                raise ConfigError(f"the {self.harness.name} harness needs backend='local' (dagent binds pi and the bridge)")
            return LocalBackend(self._sandbox_dir, self._isolation, ro_binds=binds,  # type: ignore[arg-type]
                                hidden=suite_paths(self.suite.tables_root.parent))
        if remote:
            if isinstance(spec, SandboxBackend):
                return spec
            from urllib.parse import urlsplit

            from dagent.sandbox import get_backend

            # remote: opencode comes with the image (E2B) or is installed at run time (HF). E2B
            # sandboxes start with no internet: the agent may reach only the capture URL's host.
            url = self._publish["public_url"]
            kwargs = {"allow_out": [urlsplit(url).hostname]} if spec == "e2b" and url else {}
            return get_backend(spec, **kwargs)
        binary = find_opencode()
        check_version(binary)
        # F31: what opencode RESOLVES from our config, not what we wrote, decides the tools
        check_rendered(rendered_agent(binary, render_config(self.opencode, "http://127.0.0.1:1/v1", "probe")),
                       self.opencode)
        self.harness.binary = str(binary)  # local sandboxes run the host's binary, bound read-only
        if isinstance(spec, SandboxBackend):
            targets = {dst for _, dst in getattr(spec, "ro_binds", ())}
            if getattr(spec, "loopback_only", False) and SANDBOX_SOCKET_DIR not in targets:
                raise ConfigError("this LocalBackend's sandboxes cannot see opencode or the capture bridge: "
                                  "pass backend='local' (dagent binds both), or build it with "
                                  f"ro_binds=[(opencode's directory, same), (bridge dir, {SANDBOX_SOCKET_DIR!r})]")
            return spec
        if spec != "local":
            raise ConfigError(f"unknown sandbox backend {spec!r}: use local, e2b or hf")
        binds = [(str(binary.parent), str(binary.parent)), (bridge_dir, SANDBOX_SOCKET_DIR)]
        return LocalBackend(self._sandbox_dir, self._isolation, ro_binds=binds,  # type: ignore[arg-type]
                            hidden=suite_paths(self.suite.tables_root.parent))

    def start(self) -> BlackBoxRuntime:
        """Start the proxy and publish it; refuse what would fail every rollout (F08, F09, F31)."""
        self._bridge_dir = tempfile.mkdtemp(prefix="dagent-bridge-")
        try:
            self.backend = self._make_backend(self._bridge_dir)
            if not self.backend.remote:  # from inside a sandbox: no gold within reach
                from dagent.sandbox.isolation import require_isolation

                require_isolation(self.backend, suite_dir=self.suite.tables_root.parent)
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
    def agent(self) -> OpencodeAgent:
        """The Agent the episode skeleton runs: opencode against this runtime's capture and reach."""
        if self.reach is None or self.backend is None:
            raise ConfigError("the black-box runtime is not started: call start() (or use it as a context manager)")
        return OpencodeAgent(self.harness, self.capture, self.reach, fork_threshold_tokens=self.fork_threshold_tokens)

    def run_rollout(self, split: str, index: int, *, task_id: str | None = None,
                    timeout_s: float | None = None, memory_mb: int | None = None) -> Rollout:
        """Run, grade and analyse one rollout through the episode skeleton (`dagent.runner.play`).
        Infrastructure failures come back as UNGRADED data."""
        agent = self.agent()
        task = self.suite.task_at(split, index)
        if task_id is not None and task_id != task.task_id:
            raise ConfigError(f"the row names task {task_id!r} but {split}[{index}] is {task.task_id!r}: "
                              "rebuild the rows from the served suite")
        if self.harbor_catalog is not None:
            return self.run_harbor_rollout(split, index, timeout_s=timeout_s)
        played = play(self.suite, split, index, agent, self.backend,
                      timeout_s=self.timeout_s if timeout_s is None else timeout_s, memory_mb=memory_mb,
                      reward_config=self.reward_config)
        captured = played.run.captured if played.run is not None else None
        trajectory = captured.trajectory if captured is not None else analyse([], self.fork_threshold_tokens)
        return Rollout(record=played.record, turns=trajectory.turns,
                       findings=captured.findings if captured is not None else (),
                       gate=gate(trajectory), trajectory=trajectory,
                       budget_stops=captured.budget_stops if captured is not None else 0,
                       session_id=captured.session_id if captured is not None else "",
                       metadata={} if played.run is None else played.run.metadata)

    def run_harbor_rollout(self, split: str, index: int, *, timeout_s: float | None = None) -> Rollout:
        """One rollout as a Harbor run of the task's exported directory: opencode
        (`dagent.harbor.agent`) in dagent's Harbor provider, pointed at a capture session of this
        runtime through the provider's socket bridge; Harbor's separate verifier (dagent's grader)
        decides. The same receipts as `run_rollout`: the captured turns, findings, gate, and a
        record whose reward is `dagent.reward` of the verifier's verdict and the captured tool
        calls (F34). An infrastructure cause (no model call answered, F07; a timeout) voids the
        grade as in `settle`; a verifier that wrote no reward leaves the rollout ungraded (F32)."""
        import time

        from dagent.capture.reach import SANDBOX_PORT
        from dagent.evaluation import cause_head, outcome_of, settle
        from dagent.grading import Grade
        from dagent.harbor.job import run_harbor
        from dagent.harness.base import AgentRun
        from dagent.harness.opencode import EXTRA_CALLS, count_tool_calls, end_session, infra_cause
        from dagent.reward import reward
        from dagent.runner import clip_answer
        from dagent.sandbox.base import ExecResult

        assert self.harbor_catalog is not None
        task = self.suite.task_at(split, index)
        task_dir = self.harbor_catalog / task.task_id
        if not (task_dir / "task.toml").is_file():
            raise ConfigError(f"no exported Harbor task at {task_dir}: run `dagent export harbor --split "
                              f"{split.split(':')[0]} --out {self.harbor_catalog}`")
        binary = Path(self.harness.binary)
        started = time.monotonic()
        session = self.capture.open_session(self.opencode.steps + EXTRA_CALLS, metadata={"task_id": task.task_id})
        try:
            with tempfile.TemporaryDirectory(prefix="dagent-harbor-jobs-") as jobs:
                (trial,) = run_harbor(task_dir, jobs, agent="dagent.harbor.agent:OpencodeAgent", concurrency=1,
                                      agent_kwargs={"capture_url": f"http://127.0.0.1:{SANDBOX_PORT}/v1",
                                                    "api_key": session.api_key, "model": self.opencode.model,
                                                    "opencode_bin": str(binary), "steps": str(self.opencode.steps),
                                                    "max_output_tokens": str(self.opencode.max_output_tokens),
                                                    "context_tokens": str(self.opencode.context_tokens),
                                                    "timeout_s": str(timeout_s or self.timeout_s)},
                                      env_kwargs={"capture_host": self.capture.host,
                                                  "capture_port": str(self.capture.port),
                                                  "ro_binds": str(binary.parent),
                                                  **({"sandboxes_dir": str(self._sandbox_dir)} if self._sandbox_dir else {})})
                answer = trial.file("artifacts/workdir/answer.txt")
                ran = json.loads(trial.file("agent/dagent-run.json") or b"null")
                verdict = json.loads(trial.file("verifier/grade.json") or b"null")
        finally:  # no session left open, whatever happened
            proxy, stats, turns = end_session(self.capture, session.session_id)
        trajectory = analyse(turns, self.fork_threshold_tokens)
        findings = (*proxy, *trajectory.findings)
        timed_out = bool(trial.error and "Timeout" in trial.error)
        result = ExecResult(exit_code=None if ran is None else ran["exit_code"], stdout="",
                            stderr="" if ran is None else ran["stderr"], timed_out=timed_out)
        run = AgentRun(exec_result=result if ran is not None or timed_out else None, model_calls=stats.model_calls,
                       tool_calls=count_tool_calls(trajectory))
        cause = infra_cause(run, turns, list(findings), answer) if ran is not None or timed_out else "harness_crash"
        grade = settle(task, answer, infra_cause=cause, model_calls=stats.model_calls)  # F07 / F18 voids first
        ours = grade.correct
        if grade.correct is not None:  # graded: Harbor's verifier decides
            if trial.correct is None or verdict is None:
                grade = Grade(reward=None, correct=None, method="ungraded",
                              note=f"sandbox_error: Harbor's verifier wrote no reward ({trial.error})")
            else:
                grade = Grade(reward=trial.reward, correct=bool(trial.correct), method=verdict["method"],
                              note=verdict["note"])
        record = EvalRecord(
            task_id=task.task_id, split=split, index=index, difficulty_tier=task.difficulty_tier,
            agent="harbor:opencode", model=self.model, outcome=outcome_of(grade),
            reward=reward(grade.correct, run.tool_calls or 0, self.reward_config), correct=grade.correct,
            method=grade.method, note=grade.note, cause=cause_head(grade.note) if grade.correct is None else None,
            answer=clip_answer(answer), exit_code=result.exit_code, model_calls=stats.model_calls,
            tool_calls=run.tool_calls, duration_s=round(time.monotonic() - started, 4))
        return Rollout(record=record, turns=trajectory.turns, findings=findings, gate=gate(trajectory),
                       trajectory=trajectory, budget_stops=stats.budget_stops, session_id=session.session_id,
                       metadata={"harbor": {"trial": trial.trial, "error": trial.error, "verifier": verdict,
                                            "grader_agrees": ours is None or ours == grade.correct},
                                 **({} if ran is None else {"opencode": ran["opencode"]})})


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


def probe_engine(engine_url: str, timeout_s: float = 20.0) -> dict[str, Any]:
    """GET {engine}/v1/models from this host: reachable, and the model ids it serves."""
    import httpx

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

    from dagent.errors import DagentError

    configure(runtime)
    app = openenv_create_app(environment_class(), CallToolAction, CallToolObservation, env_name=ENV_NAME,
                             max_concurrent_envs=max_concurrent)

    from dagent.envs.health import replace_health, sandbox_health

    def published() -> dict[str, Any]:
        reach = runtime.reach
        return {"capture": None if reach is None else {"url": reach.base_url, "how": reach.how}}

    replace_health(app, lambda: {"sandbox": sandbox_health(runtime.backend), **published()})

    @app.get(f"/{ENV_NAME}/info", tags=["Rollouts"])
    async def info() -> dict[str, Any]:
        return {"describe": runtime.describe(), "sampling": runtime.sampling.as_request(),
                "steps": runtime.harness.config.steps, "harness": runtime.harness.name,
                "reward": asdict(runtime.reward_config), "sandbox": sandbox_health(runtime.backend), **published()}

    @app.get(f"/{ENV_NAME}/engine", tags=["Rollouts"], summary="Reach this server's engine from this host")
    async def engine() -> dict[str, Any]:
        """What a trainer asks before it trains against this server: can capture, from HERE, reach the
        engine it forwards to, and which models does that engine serve (identity, F36)."""
        return await asyncio.to_thread(probe_engine, runtime.engine_url)

    @app.post(f"/{ENV_NAME}/rollout", tags=["Rollouts"], summary="Run one rollout; the trace when asked")
    async def rollout(body: dict = Body(...)) -> Any:
        try:
            return await asyncio.to_thread(rollout_payload, body.get("split") or "train", body.get("index"),
                                           body.get("task_id"), body.get("timeout_s"),
                                           bool(body.get("include_trace")), body.get("instruction"))
        except (DagentError, TypeError, ValueError) as e:
            return JSONResponse(status_code=400, content={"detail": str(e)})

    return app


def capture_public_url(environ: Any) -> str | None:
    """Where sandboxes on OTHER machines reach this Space's capture proxy: an explicit PUBLIC_URL
    wins; else a Space's own public URL (`https://$SPACE_HOST`), since a Space is already public
    (no second tunnel in front of it); both with `/capture`, where the proxy is mounted. None for
    local sandboxes (the socket bridge) and for EXPOSE=gradio (the tunnel's URL, found at start)."""
    if environ.get("DAGENT_SANDBOX", "local") == "local" or environ.get("EXPOSE", "direct") == "gradio":
        return None
    public = environ.get("PUBLIC_URL") or (f"https://{environ['SPACE_HOST']}" if environ.get("SPACE_HOST") else None)
    if public is None:
        raise ConfigError("remote sandboxes need a URL of this server they can reach: set PUBLIC_URL, run it as a "
                          "Space (SPACE_HOST), or EXPOSE=gradio for a tunnel (F08)")
    return public.rstrip("/") + "/capture"


def space_app(environ: Any) -> Any:
    """The black-box Space's app from its settings (spaces/data-agent-blackbox/server/app.py lists
    them): the runtime started, the capture proxy also mounted at `/capture` so that the Space's
    own public URL serves it (an explicit PUBLIC_URL wins; EXPOSE=gradio starts a tunnel instead)."""
    import httpx

    from dagent.hub import load_tasks
    from dagent.harness.opencode import OpencodeConfig
    from dagent.harness.pi import PiConfig

    engine_url = environ.get("DAGENT_ENGINE_URL")
    if not engine_url:
        raise ConfigError("DAGENT_ENGINE_URL is not set: name the OpenAI-compatible engine capture forwards to "
                          "(the training job's exposed vLLM), as a Space secret or variable")
    model = environ.get("DAGENT_MODEL")
    if not model:
        try:
            listed = httpx.get(engine_url.rstrip("/").removesuffix("/v1") + "/v1/models", timeout=30).json()
            model = listed["data"][0]["id"]
        except (httpx.HTTPError, ValueError, KeyError, IndexError) as e:
            raise ConfigError(f"DAGENT_MODEL is not set and {engine_url} does not list a model ({e}): set "
                              "DAGENT_MODEL to the model id the engine serves") from e
    steps = int(environ.get("DAGENT_STEPS", "15"))
    max_output = int(environ.get("DAGENT_MAX_OUTPUT_TOKENS", "4096"))
    expose = environ.get("EXPOSE", "direct")
    sandbox = environ.get("DAGENT_SANDBOX", "local")
    runtime = BlackBoxRuntime(
        load_tasks(environ.get("DAGENT_SUITE") or None), engine_url, model=model, backend=sandbox,
        harness=environ.get("DAGENT_HARNESS", "opencode"),
        opencode=OpencodeConfig(model=model, steps=steps, max_output_tokens=max_output),
        pi=PiConfig(model=model, steps=steps, max_output_tokens=max_output),
        publish="gradio" if expose == "gradio" else "direct", public_url=capture_public_url(environ))
    runtime.start()
    app = create_app(runtime, max_concurrent=int(environ.get("DAGENT_MAX_ROLLOUTS", "16")))
    app.mount("/capture", runtime.capture)  # the same proxy, on the Space's own URL
    import atexit

    atexit.register(runtime.stop)  # the tunnel, the bridge and the proxy, when the server process exits
    return app
