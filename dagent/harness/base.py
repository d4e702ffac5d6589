"""The one agent protocol, and what every agent returns after working in a sandbox.

Every agent (the oracle, the built-in tool loop, opencode through capture) is an `Agent`: it is
handed a FULL task and a staged sandbox by the episode skeleton (`dagent.harness.play.play`) and leaves
its answer in /workdir/answer.txt. Whatever it needs to reach its engine (an engine URL, a capture
server and how the sandbox reaches it) is given at construction, so one skeleton runs them all.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from dagent.core.task import Task
from dagent.sandbox.base import ExecResult, Sandbox
from dagent.trajectory.analysis import Trajectory
from dagent.trajectory.messages import content_text
from dagent.trajectory.turn import CapturedTurn, Finding


@dataclass(frozen=True)
class Captured:
    """What a capture session recorded of one run (black-box agents)."""

    session_id: str
    trajectory: Trajectory  # every captured call, analysed (roles, agent chain, drift)
    findings: tuple[Finding, ...]  # the proxy's, then the trajectory's
    budget_stops: int = 0
    engine_errors: int = 0


@dataclass(frozen=True)
class AgentRun:
    """What an agent's run left besides the answer file."""

    exec_result: ExecResult | None = None  # the agent process (None if it never started)
    model_calls: int | None = None  # None: not an LLM agent (the oracle); 0 is F07
    tool_calls: int | None = None  # counted from the agent's own trace (F34)
    cause: str | None = None  # an infrastructure cause the agent itself detected
    captured: Captured | None = None
    metadata: dict = field(default_factory=dict)

    @property
    def cutoff(self) -> str | None:
        """Where the run was cut off (`dagent.core.outcome.CUTOFFS`), or None: read from what the
        agent's own records say (the environment's refused calls, the proxy's budget stops, the
        loop's stop reason, the process's timeout)."""
        if self.metadata.get("step_capped"):
            return "step_cap"
        if self.captured is not None and self.captured.budget_stops:
            return "call_budget"
        stop = self.metadata.get("stop")
        if stop in ("completion_budget", "context_overflow", "tool_iterations"):
            return stop
        if self.exec_result is not None and self.exec_result.timed_out:
            return "timeout"
        return None

    @property
    def infra_cause(self) -> str | None:
        if self.cause is not None:
            return self.cause
        if self.exec_result is not None and (self.exec_result.timed_out or self.exec_result.oom_killed):
            return self.exec_result.failure_cause
        return None


def sample_seed(task_id: str, sample: int) -> int:
    """The sampling seed of sample `sample` of a task: stable across runs, machines and arms."""
    digest = hashlib.blake2b(f"{task_id}#{sample}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") & 0x7FFFFFFF


class Agent(Protocol):
    name: str
    model: str | None  # the served model id; None for agents without one (the oracle)

    def run(
        self, task: Task, sandbox: Sandbox, *, timeout_s: float | None = None, seed: int | None = None
    ) -> AgentRun: ...


def json_events(stdout: str) -> Iterator[dict[str, Any]]:
    """The JSON objects a harness printed one a line (`--format json`, `--mode json`); other lines skipped."""
    for line in stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            yield event


def label_by_system_prompt(
    turns: Iterable[CapturedTurn], prompts: Sequence[tuple[str, str]], *, messages: int = 2, starts: bool = False
) -> list[CapturedTurn]:
    """Label a harness's auxiliary calls by their system prompt (F03): a call whose first `messages`
    system/developer messages hold (or, `starts`, open with) one of `prompts`' texts gets that role
    hint. Other calls are left for `dagent.trajectory.analyse` to place."""
    out = []
    for turn in turns:
        head = ""
        for message in turn.messages[:messages]:
            if not isinstance(message, dict) or message.get("role") not in ("system", "developer"):
                continue
            head += content_text(message.get("content"))[:200]
        hint = next((role for text, role in prompts if (head.startswith(text) if starts else text in head)), None)
        out.append(replace(turn, role_hint=hint) if hint and turn.role_hint is None else turn)
    return out
