"""A stage of `dagent reproduce` (dagent.reproduce.pipeline) as recorded in `stages.json`: its status,
time, the command that ran and its receipt; and the error a failed stage stops the run with."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dagent.errors import DagentError


class StageError(DagentError):
    """A stage failed; the message names the cause."""


@dataclass
class Stage:
    name: str
    status: str = "pending"  # ok | failed | skipped | pending
    seconds: float = 0.0
    command: str = ""
    receipt: dict[str, Any] = field(default_factory=dict)
    cause: str | None = None
