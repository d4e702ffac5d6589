"""The agent that owns its loop, observed through capture: ONE generic `CapturedAgent` over any
`Harness` (opencode and pi are thin harness definitions beside this module).

Per run it opens a capture session with the harness's step limit plus `EXTRA_CALLS`, has the
harness write its control files into the sandbox and launch against the session's URL, then
closes the session: the proxy findings a rollout keeps, the counters, and the turns with the
harness's auxiliary calls labelled by role (F03). `infra_cause` decides, in one place, why a run
that the infrastructure broke is ungraded (F07, F18); the black-box server reads the same three
functions.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from dagent.capture.reach import Reach
from dagent.capture.wire import SAMPLING_SEED
from dagent.core.task import Task
from dagent.harness.base import AgentRun, Captured
from dagent.sandbox.base import WORKDIR, Sandbox
from dagent.sandbox.remote import RemoteSandbox
from dagent.trajectory.analysis import Trajectory, analyse
from dagent.trajectory.linking import DEFAULT_FORK_THRESHOLD
from dagent.trajectory.turn import CapturedTurn, Finding

if TYPE_CHECKING:
    from dagent.capture.server import CaptureServer

PROXY_CODES = frozenset(
    {"budget_exhausted", "engine_error", "sampling_pinned", "request_too_large"}
)  # proxy findings kept
EXTRA_CALLS = 3  # beyond the step limit: the title call, a summary, the forced last step


class Harness(Protocol):
    """A loop-owning agent program run in a sandbox (`OpencodeHarness`, `PiHarness`)."""

    name: str
    config: Any  # its own config record; `config.steps` is its step limit (F35)

    def ensure_installed(self, sandbox: Sandbox) -> str | None:
        """None when the harness answers in `sandbox`, else the `harness_install_failed: ...` cause."""

    def launch(
        self, instruction: str, sandbox: Sandbox, reach: Reach, api_key: str, *, timeout_s: float | None = None
    ) -> AgentRun:
        """Write the control files, run the harness against the capture session, wait."""

    def role_hints(self, turns: Iterable[CapturedTurn]) -> list[CapturedTurn]:
        """The turns with the harness's auxiliary calls labelled by role (F03)."""


def write_stage(sandbox: Sandbox, files: dict[str, str]) -> str:
    """Write a run's control files into a fresh stage directory under the work directory; its path."""
    stage = f"{WORKDIR}/.dagent-{secrets.token_hex(6)}"
    for name, text in files.items():
        sandbox.write_file(f"{stage}/{name}", text)
    return stage


def end_session(
    capture: CaptureServer, session_id: str, hints: Callable[[Iterable[CapturedTurn]], list[CapturedTurn]]
) -> tuple[list[Finding], Any, list[CapturedTurn]]:
    """Close a rollout's capture session: the proxy findings a rollout keeps (PROXY_CODES), its
    counters (`CaptureStats`) and its turns, the harness's auxiliary calls labelled by role by
    `hints`, the harness's labeller (F03)."""
    proxy = [f for f in capture.findings(session_id) if f.code in PROXY_CODES]
    stats = capture.stats(session_id)
    return proxy, stats, hints(capture.close_session(session_id))


def count_tool_calls(trajectory: Trajectory) -> int:
    """Tool calls the agent made, read off the engine answers in its chain (F34)."""
    return sum(
        len((t.metadata.get("response_message") or {}).get("tool_calls") or []) for t in trajectory.chain_turns()
    )


def infra_cause(run: AgentRun, turns: list[CapturedTurn], findings: list[Finding], answer: bytes | None) -> str | None:
    """The infrastructure cause of a black-box run, in order of precedence: killed for memory or
    time (F18), no model call answered (F07), the loop ended on an engine failure, the harness's own
    crash, a non-zero exit without an answer."""
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


class CapturedAgent:
    """A loop-owning harness as an `Agent`: one capture session per run, the harness pointed at
    it, the session's turns analysed (auxiliary calls labelled by the harness's role hints, F03)
    and handed back with the run."""

    # Where a sandbox's memory is bounded by RLIMIT_AS (no cgroup: a container's unprivileged user),
    # the limit counts ADDRESS SPACE, and the agents' JavaScript runtimes reserve far more than they
    # use (measured in the black-box image under a 1 GB task's limit: opencode's Bun aborts with
    # "MemoryExhaustion"; pi's Node reserves about 10 GB per WebAssembly instance: a rollout failed
    # with "Connection error." at 16 GB and was graded correct at 32 GB). So the agent's runtime gets
    # this much on top of the task's memory; there the limit bounds a runaway allocation, not the
    # working set (docs/sandboxes.md).
    runtime_address_space_mb = 32768

    def __init__(
        self,
        harness: Harness,
        capture: CaptureServer,
        reach: Reach,
        *,
        fork_threshold_tokens: int = DEFAULT_FORK_THRESHOLD,
    ) -> None:
        self.harness, self.capture, self.reach = harness, capture, reach
        self.model: str | None = capture.model
        self.fork_threshold_tokens = fork_threshold_tokens

    @property
    def name(self) -> str:
        return self.harness.name

    def run(self, task: Task, sandbox: Sandbox, *, timeout_s: float | None = None, seed: int | None = None) -> AgentRun:
        # seed: the harnesses send none of their own; sampling is pinned by the proxy (dagent.core.sampling,
        # F05) and, given a seed (an evaluation's per-sample seed), so are its random numbers: each call
        # gets `dagent.core.sampling.call_seed(seed, call number)`, so arms evaluated on the same sample share them
        if isinstance(sandbox, RemoteSandbox):  # the image may lack it (HF sandboxes): before any model call
            failed = self.harness.ensure_installed(sandbox)
            if failed is not None:
                return AgentRun(model_calls=0, cause=failed, metadata={"install": failed})
        seeded = {} if seed is None else {SAMPLING_SEED: seed}
        session = self.capture.open_session(
            self.harness.config.steps + EXTRA_CALLS, metadata={"task_id": task.task_id, **seeded}
        )
        try:
            launched = self.harness.launch(task.instruction, sandbox, self.reach, session.api_key, timeout_s=timeout_s)
        finally:  # a sandbox failure, a bug or Ctrl-C: no session is left open
            proxy, stats, turns = end_session(self.capture, session.session_id, self.harness.role_hints)
        trajectory = analyse(turns, self.fork_threshold_tokens)
        findings = (*proxy, *trajectory.findings)
        return AgentRun(
            exec_result=launched.exec_result,
            model_calls=stats.model_calls,
            tool_calls=count_tool_calls(trajectory),
            cause=infra_cause(launched, turns, list(findings), None),
            captured=Captured(
                session_id=session.session_id,
                trajectory=trajectory,
                findings=findings,
                budget_stops=stats.budget_stops,
                engine_errors=stats.engine_errors,
            ),
            metadata={**launched.metadata, "engine_errors": stats.engine_errors},
        )
