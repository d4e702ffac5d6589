"""One error root, one subclass per boundary. Every message names the fix.

Errors about a bad VALUE (a setting, a task field, a request body, token ids) also derive from
`ValueError`, so pydantic validators and `except ValueError` callers keep working.
"""

from __future__ import annotations


class DagentError(Exception):
    """Root of every error dagent raises on purpose."""


class ConfigError(DagentError, ValueError):
    """A setting is missing or wrong; the message names the setting and what to set."""


class TaskError(DagentError, ValueError):
    """A task source, split name or index is unusable."""


class SplitError(TaskError):
    """An unknown split name, a double-tiered name, or an index out of range."""


class SuiteBuildError(DagentError):
    """Building the task suite failed (a reference program crashed, a table is missing)."""


class SandboxError(DagentError):
    """A sandbox could not be created, reached or used."""


class IsolationError(SandboxError):
    """A sandbox can reach what an agent must never see (gold, the suite, the server, the outside)."""


class StagingError(SandboxError):
    """A task's tables could not be put into the sandbox's input directory."""


class GraderError(DagentError):
    """The grader was called with something it cannot grade (never for a bad answer)."""


class EngineError(DagentError):
    """The inference engine is unreachable or answered something unusable."""


class CaptureError(DagentError):
    """The capture proxy refused or lost a model call."""


class RequestRejected(DagentError, ValueError):
    """A request to one of dagent's servers (engine, capture proxy) is malformed; it becomes a 4xx
    answer with this message."""


class TrajectoryError(DagentError, ValueError):
    """A captured call or trace is malformed (token ids, logprobs, tool counts)."""


class ToolRefused(DagentError, ValueError):
    """A tool call turned down for what it asks (a path outside /workdir, a read-only input); the
    episode hands the message to the agent as the tool's result."""


class HarnessError(DagentError):
    """An agent harness could not be configured or started."""


class MissingDependencyError(DagentError):
    """An optional dependency is not installed; the message says what to install."""

    def __init__(self, package: str, extra: str | None = None, purpose: str = "") -> None:
        hint = f"pip install 'dagent[{extra}]'" if extra else f"pip install {package}"
        what = f" (needed for {purpose})" if purpose else ""
        super().__init__(f"{package} is not installed{what}: run `{hint}`")
        self.package = package
