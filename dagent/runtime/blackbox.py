"""The black-box environment: the AGENT owns its loop (opencode), we observe its model calls.

A rollout (`BlackBoxRuntime.run_rollout`) is one run of the episode skeleton
(`dagent.harness.play.play`) with `CapturedAgent`: a sandbox sized by the task, its tables staged at
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
- The reward is `dagent.core.reward.reward(correct, tool_calls)` with `tool_calls` counted from the
  captured agent chain (F34), never from a file.
- Start-up refuses what would fail every rollout silently: a remote backend with a loopback proxy
  URL (F08), a tunnel that does not come up within its bound (F09), a step cap above the reward's
  budget (F35), a missing or wrong opencode, a config whose RENDERED form (`opencode debug agent
  build`) enables a tool meant off (F31). Shutdown stops the tunnel before the proxy (F09).

Served over openenv like the white-box env by `dagent.envs.blackbox_server`: the Task API under
`/data_agent_blackbox/...`, an MCP tool `run_rollout`, and `POST /data_agent_blackbox/rollout`
(what `dagent.envs.blackbox_session` calls).
"""

from __future__ import annotations

import json
import secrets
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dagent import settings
from dagent.capture import CaptureServer
from dagent.capture.reach import (
    SANDBOX_PORT,
    SANDBOX_SOCKET_DIR,
    Publisher,
    Reach,
    Tunnel,
    allow_egress,
    verify_reach,
)
from dagent.core.outcome import EvalRecord, cause_head, outcome_of
from dagent.core.reward import RewardConfig, reward
from dagent.core.sampling import DEFAULT_SAMPLING, Sampling
from dagent.core.suite import TaskSuite
from dagent.errors import ConfigError
from dagent.grading.settle import settle
from dagent.grading.value import Grade
from dagent.harbor.job import run_harbor
from dagent.harness.base import AgentRun
from dagent.harness.captured import EXTRA_CALLS, CapturedAgent, count_tool_calls, end_session, infra_cause
from dagent.harness.opencode import (
    OpencodeConfig,
    OpencodeHarness,
    check_rendered,
    check_version,
    find_opencode,
    opencode_role_hints,
    render_config,
    rendered_agent,
)
from dagent.harness.pi import PiConfig, PiHarness
from dagent.harness.play import clip_answer, play
from dagent.harness.readiness import check_image
from dagent.sandbox import get_backend
from dagent.sandbox.base import ExecResult, SandboxBackend
from dagent.sandbox.isolation import require_isolation, suite_paths
from dagent.sandbox.local import LocalBackend
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
        out.update(
            budget_stops=self.budget_stops,
            session_id=self.session_id,
            wall_s=self.wall_s,
            turns=len(self.turns),
            agent_turns=self.agent_turns,
            roles=list(self.trajectory.roles),
            findings=[str(f) for f in self.findings],
            gate=asdict(self.gate),
            metadata=self.metadata,
        )
        return out

    def lines(self) -> list[str]:
        """The printout of one rollout: outcome (and cause), turns with their roles, drift, findings."""
        head = f"{self.outcome.upper()}  reward {self.reward}"
        if self.cause:
            head += f"  cause {self.cause}"
        out = [
            f"task {self.task_id} ({self.split} #{self.index}, {self.difficulty_tier})",
            head + f"  ({self.method}: {self.note})" if self.note else head,
            f"answer {self.answer!r}  {self.agent} exit {self.exit_code}  wall {self.wall_s:.1f}s",
            f"turns {len(self.turns)}: "
            + ", ".join(
                f"{t.seq}:{role}({len(t.prompt_token_ids or ())}+{len(t.completion_token_ids)})"
                for t, role in zip(self.turns, self.trajectory.roles)
            ),
            f"model calls {self.model_calls}  tool calls {self.tool_calls}  budget stops {self.budget_stops}",
            self.gate.report(),
        ]
        out += ["findings:"] + [f"  {f}" for f in self.findings] if self.findings else ["findings: none"]
        return out


class BlackBoxRuntime:
    """The suite, the capture proxy, its publisher, the sandbox backend and the opencode harness."""

    def __init__(
        self,
        suite: TaskSuite,
        engine_url: str,
        *,
        model: str = "tiny-qwen3",
        backend: str | SandboxBackend = "local",
        opencode: OpencodeConfig | None = None,
        reward_config: RewardConfig = RewardConfig(),
        sampling: Sampling = DEFAULT_SAMPLING,
        publish: str = "direct",
        public_url: str | None = None,
        tunnel: Tunnel | None = None,
        tunnel_timeout_s: float = 30.0,
        timeout_s: float = 600.0,
        fork_threshold_tokens: int = DEFAULT_FORK_THRESHOLD,
        sandbox_dir: str | Path | None = None,
        harbor_catalog: str | Path | None = None,
        isolation: str = "auto",
        capture_journal: str | Path | None = None,
        harness: str = "opencode",
        pi: Any = None,
    ) -> None:
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
            self.harness = PiHarness(pi or PiConfig(model=model))
            max_output = self.harness.config.max_output_tokens
        else:
            raise ConfigError(f"unknown harness {harness!r}: use opencode or pi")
        self.reward_config, self.sampling, self.timeout_s = reward_config, sampling, timeout_s
        self.fork_threshold_tokens = fork_threshold_tokens
        self._backend_spec, self._sandbox_dir, self._isolation = backend, sandbox_dir, isolation
        self._publish = dict(mode=publish, public_url=public_url, tunnel=tunnel, tunnel_timeout_s=tunnel_timeout_s)
        self.capture = CaptureServer(
            engine_url,
            sampling=sampling,
            model=model,
            max_output_tokens=max_output,
            journal=capture_journal or settings.read("DAGENT_CAPTURE_JOURNAL"),
        )
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
                raise ConfigError(
                    f"the {self.harness.name} harness runs on local sandboxes only (bound from this "
                    "host): use backend='local', or the opencode harness on e2b/hf"
                )
            binds = [*self.harness.prepare(), (bridge_dir, SANDBOX_SOCKET_DIR)]  # version and F31 checks
            if spec != "local":
                raise ConfigError(
                    f"the {self.harness.name} harness needs backend='local' (dagent binds pi and the bridge)"
                )
            return LocalBackend(
                self._sandbox_dir,
                self._isolation,
                ro_binds=binds,  # type: ignore[arg-type]
                hidden=suite_paths(self.suite.tables_root.parent),
            )
        if remote:
            if isinstance(spec, SandboxBackend):
                return spec
            # remote: opencode comes with the image (E2B) or is installed at run time (HF). E2B
            # sandboxes start with no internet; the capture URL's host is allowed once the publisher
            # has resolved it (start(): a tunnel's URL is known only then, F45).
            return get_backend(spec)
        binary = find_opencode()
        check_version(binary)
        # F31: what opencode RESOLVES from our config, not what we wrote, decides the tools
        check_rendered(
            rendered_agent(binary, render_config(self.opencode, "http://127.0.0.1:1/v1", "probe")), self.opencode
        )
        self.harness.binary = str(binary)  # local sandboxes run the host's binary, bound read-only
        if isinstance(spec, SandboxBackend):
            targets = {dst for _, dst in getattr(spec, "ro_binds", ())}
            if getattr(spec, "loopback_only", False) and SANDBOX_SOCKET_DIR not in targets:
                raise ConfigError(
                    "this LocalBackend's sandboxes cannot see opencode or the capture bridge: "
                    "pass backend='local' (dagent binds both), or build it with "
                    f"ro_binds=[(opencode's directory, same), (bridge dir, {SANDBOX_SOCKET_DIR!r})]"
                )
            return spec
        if spec != "local":
            raise ConfigError(f"unknown sandbox backend {spec!r}: use local, e2b or hf")
        binds = [(str(binary.parent), str(binary.parent)), (bridge_dir, SANDBOX_SOCKET_DIR)]
        return LocalBackend(
            self._sandbox_dir,
            self._isolation,
            ro_binds=binds,  # type: ignore[arg-type]
            hidden=suite_paths(self.suite.tables_root.parent),
        )

    def start(self) -> BlackBoxRuntime:
        """Start the proxy and publish it; refuse what would fail every rollout (F08, F09, F31)."""
        self._bridge_dir = tempfile.mkdtemp(prefix="dagent-bridge-")
        try:
            self.backend = self._make_backend(self._bridge_dir)
            if not self.backend.remote:  # from inside a sandbox: no gold within reach
                require_isolation(self.backend, suite_dir=self.suite.tables_root.parent)
            self.capture.start()
            if isinstance(self.backend, LocalBackend):  # landlock: TCP to this one port (the known gap: any address)
                self.backend.allow_tcp(self.capture.port)
            self.publisher = Publisher(
                self.backend, self.capture.host, self.capture.port, bridge_dir=self._bridge_dir, **self._publish
            )
            self.reach = self.publisher.start()  # F08 refusal, bounded tunnel (F09), the bridge
            if self.backend.remote:  # egress to the URL actually resolved, checked from a sandbox (F45)
                allow_egress(self.backend, self.reach.base_url)
                verify_reach(self.backend, self.reach)
            check_image(self.suite, self.backend)  # the sandboxes run the tasks at all, local tiers too (F51)
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
    def agent(self) -> CapturedAgent:
        """The Agent the episode skeleton runs: opencode against this runtime's capture and reach."""
        if self.reach is None or self.backend is None:
            raise ConfigError("the black-box runtime is not started: call start() (or use it as a context manager)")
        return CapturedAgent(self.harness, self.capture, self.reach, fork_threshold_tokens=self.fork_threshold_tokens)

    def run_rollout(
        self,
        split: str,
        index: int,
        *,
        task_id: str | None = None,
        timeout_s: float | None = None,
        memory_mb: int | None = None,
        sample: int | None = None,
    ) -> Rollout:
        """Run, grade and analyse one rollout through the episode skeleton (`dagent.harness.play.play`).
        Infrastructure failures come back as UNGRADED data. `sample`: seed the agent's draws as sample
        `sample` of the task (`dagent.harness.base.sample_seed`); None (the default): a fresh random
        sample number, recorded, so rollouts of one task differ (a GRPO group of one draw copied has
        no advantage, F61) and each can still be replayed."""
        agent = self.agent()
        task = self.suite.task_at(split, index)
        if task_id is not None and task_id != task.task_id:
            raise ConfigError(
                f"the row names task {task_id!r} but {split}[{index}] is {task.task_id!r}: "
                "rebuild the rows from the served suite"
            )
        if self.harbor_catalog is not None:
            return self.run_harbor_rollout(split, index, timeout_s=timeout_s)
        played = play(
            self.suite,
            split,
            index,
            agent,
            self.backend,
            timeout_s=self.timeout_s if timeout_s is None else timeout_s,
            memory_mb=memory_mb,
            sample=secrets.randbits(31) if sample is None else sample,
            reward_config=self.reward_config,
        )
        captured = played.run.captured if played.run is not None else None
        trajectory = captured.trajectory if captured is not None else analyse([], self.fork_threshold_tokens)
        return Rollout(
            record=played.record,
            turns=trajectory.turns,
            findings=captured.findings if captured is not None else (),
            gate=gate(trajectory),
            trajectory=trajectory,
            budget_stops=captured.budget_stops if captured is not None else 0,
            session_id=captured.session_id if captured is not None else "",
            metadata={} if played.run is None else played.run.metadata,
        )

    def run_harbor_rollout(self, split: str, index: int, *, timeout_s: float | None = None) -> Rollout:
        """One rollout as a Harbor run of the task's exported directory: opencode
        (`dagent.harbor.agent`) in dagent's Harbor provider, pointed at a capture session of this
        runtime through the provider's socket bridge; Harbor's separate verifier (dagent's grader)
        decides. The same receipts as `run_rollout`: the captured turns, findings, gate, and a
        record whose reward is `dagent.core.reward` of the verifier's verdict and the captured tool
        calls (F34). An infrastructure cause (no model call answered, F07; a timeout) voids the
        grade as in `settle`; a verifier that wrote no reward leaves the rollout ungraded (F32)."""

        assert self.harbor_catalog is not None
        task = self.suite.task_at(split, index)
        task_dir = self.harbor_catalog / task.task_id
        if not (task_dir / "task.toml").is_file():
            raise ConfigError(
                f"no exported Harbor task at {task_dir}: run `dagent export harbor --split "
                f"{split.split(':')[0]} --out {self.harbor_catalog}`"
            )
        binary = Path(self.harness.binary)
        started = time.monotonic()
        session = self.capture.open_session(self.opencode.steps + EXTRA_CALLS, metadata={"task_id": task.task_id})
        try:
            with tempfile.TemporaryDirectory(prefix="dagent-harbor-jobs-") as jobs:
                (trial,) = run_harbor(
                    task_dir,
                    jobs,
                    agent="dagent.harbor.agent:OpencodeAgent",
                    concurrency=1,
                    agent_kwargs={
                        "capture_url": f"http://127.0.0.1:{SANDBOX_PORT}/v1",
                        "api_key": session.api_key,
                        "model": self.opencode.model,
                        "opencode_bin": str(binary),
                        "steps": str(self.opencode.steps),
                        "max_output_tokens": str(self.opencode.max_output_tokens),
                        "context_tokens": str(self.opencode.context_tokens),
                        "timeout_s": str(timeout_s or self.timeout_s),
                    },
                    env_kwargs={
                        "capture_host": self.capture.host,
                        "capture_port": str(self.capture.port),
                        "ro_binds": str(binary.parent),
                        **({"sandboxes_dir": str(self._sandbox_dir)} if self._sandbox_dir else {}),
                    },
                )
                answer = trial.file("artifacts/workdir/answer.txt")
                ran = json.loads(trial.file("agent/dagent-run.json") or b"null")
                verdict = json.loads(trial.file("verifier/grade.json") or b"null")
        finally:  # no session left open, whatever happened
            proxy, stats, turns = end_session(self.capture, session.session_id, opencode_role_hints)
        trajectory = analyse(turns, self.fork_threshold_tokens)
        findings = (*proxy, *trajectory.findings)
        timed_out = bool(trial.error and "Timeout" in trial.error)
        result = ExecResult(
            exit_code=None if ran is None else ran["exit_code"],
            stdout="",
            stderr="" if ran is None else ran["stderr"],
            timed_out=timed_out,
        )
        run = AgentRun(
            exec_result=result if ran is not None or timed_out else None,
            model_calls=stats.model_calls,
            tool_calls=count_tool_calls(trajectory),
        )
        cause = infra_cause(run, turns, list(findings), answer) if ran is not None or timed_out else "harness_crash"
        grade = settle(task, answer, infra_cause=cause, model_calls=stats.model_calls)  # F07 / F18 voids first
        ours = grade.correct
        if grade.correct is not None:  # graded: Harbor's verifier decides
            if trial.correct is None or verdict is None:
                grade = Grade(
                    reward=None,
                    correct=None,
                    method="ungraded",
                    note=f"sandbox_error: Harbor's verifier wrote no reward ({trial.error})",
                )
            else:
                grade = Grade(
                    reward=trial.reward, correct=bool(trial.correct), method=verdict["method"], note=verdict["note"]
                )
        record = EvalRecord(
            task_id=task.task_id,
            split=split,
            index=index,
            difficulty_tier=task.difficulty_tier,
            agent="harbor:opencode",
            model=self.model,
            outcome=outcome_of(grade),
            reward=reward(grade.correct, run.tool_calls or 0, self.reward_config),
            correct=grade.correct,
            method=grade.method,
            note=grade.note,
            cause=cause_head(grade.note) if grade.correct is None else None,
            answer=clip_answer(answer),
            exit_code=result.exit_code,
            model_calls=stats.model_calls,
            tool_calls=run.tool_calls,
            duration_s=round(time.monotonic() - started, 4),
        )
        return Rollout(
            record=record,
            turns=trajectory.turns,
            findings=findings,
            gate=gate(trajectory),
            trajectory=trajectory,
            budget_stops=stats.budget_stops,
            session_id=session.session_id,
            metadata={
                "harbor": {
                    "trial": trial.trial,
                    "error": trial.error,
                    "verifier": verdict,
                    "grader_agrees": ours is None or ours == grade.correct,
                },
                **({} if ran is None else {"opencode": ran["opencode"]}),
            },
        )
