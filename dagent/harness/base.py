"""What every agent returns after working in a sandbox."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from dagent.sandbox.base import ExecResult, Sandbox
from dagent.task import Task


@dataclass(frozen=True)
class AgentRun:
    """What an agent's run left besides the answer file."""

    exec_result: ExecResult | None = None  # the agent process (None if it never started)
    model_calls: int | None = None  # None: not an LLM agent (the oracle); 0 is F07
    tool_calls: int | None = None
    cause: str | None = None  # an infrastructure cause the agent itself detected
    metadata: dict = field(default_factory=dict)

    @property
    def infra_cause(self) -> str | None:
        if self.cause is not None:
            return self.cause
        if self.exec_result is not None and (self.exec_result.timed_out or self.exec_result.oom_killed):
            return self.exec_result.failure_cause
        return None


class Agent(Protocol):
    name: str

    def run(self, task: Task, sandbox: Sandbox, *, timeout_s: float | None = None) -> AgentRun: ...
