"""One observed model call (`CapturedTurn`) and the structured `Finding`s said about calls. Pure.

A turn keeps the ENGINE's ids exactly as the capture proxy recorded them. Token ids are stored as
`array('I')` (4 bytes an id, the proxy's own storage, so handing a session over costs a memcpy,
not an int object per token; prefix compares run over machine words). Treat them as read-only:
a turn is a record. Logprobs, messages and tools are tuples.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any, Literal

from dagent.errors import TrajectoryError

Level = Literal["info", "warn", "fatal"]


@dataclass(frozen=True)
class Finding:
    """One structured observation. `fatal` means the rollout must not be trained."""

    level: Level
    code: str
    detail: str

    def __str__(self) -> str:
        return f"[{self.level.upper()}] {self.code}: {self.detail}"


def token_ids(values: Any, what: str = "token ids") -> array:
    """`values` as `array('I')`; an array('I') is returned as is (not copied)."""
    if type(values) is array and values.typecode == "I":
        return values
    try:
        return array("I", values)
    except (TypeError, OverflowError, ValueError) as exc:
        raise TrajectoryError(
            f"{what}: expected non-negative integer token ids below 2**32 ({type(exc).__name__}: {exc})"
        ) from None


@dataclass(frozen=True)
class CapturedTurn:
    """One observed model call, with the engine's own token ids (`array('I')`, module docstring)."""

    turn_id: str  # unique within the trajectory
    session_id: str  # the capture session (= rollout) it was recorded under
    seq: int  # order of arrival at the proxy
    prompt_token_ids: array | None  # None: the engine returned none
    completion_token_ids: array  # the sampled ids
    logprobs: tuple[float, ...] | None  # one per completion token; None: none returned
    messages: tuple[dict[str, Any], ...] = ()  # the request's messages, plain JSON
    tools_offered: int = 0  # tools in the request; 0 = tool-less
    finish_reason: str | None = None
    role_hint: str | None = None  # a harness's own label: "title", "summary", "agent", ...
    metadata: dict[str, Any] = field(default_factory=dict)
    tools: tuple[dict[str, Any], ...] | None = None  # the request's tool schemas (for audits)

    def __post_init__(self) -> None:
        for name in ("prompt_token_ids", "completion_token_ids"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, token_ids(value, f"turn {self.turn_id}: {name}"))
        if self.completion_token_ids is None:
            object.__setattr__(self, "completion_token_ids", array("I"))
        for name in ("logprobs", "messages", "tools"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(value))
        if type(self.tools_offered) is not int or self.tools_offered < 0:
            raise TrajectoryError(f"turn {self.turn_id}: tools_offered must be a non-negative int")

    @classmethod
    def from_openenv(cls, item: Any, *, session_id: str = "", seq: int | None = None) -> "CapturedTurn":
        """Convert OpenEnv's `TurnNode` (a capture session's graph node) or a `TraceEntry` dict
        (`/sessions/{id}/trace_entries`, `to_trace_entries`). OpenEnv writes missing ids as `[]`
        and rejected logprobs as `None`/`[]`; both become `None` here, so they are reported."""
        if isinstance(item, dict):
            meta = dict(item.get("metadata") or {})
            request = item.get("request") or {}
            choice = ((item.get("response") or {}).get("choices") or [{}])[0]
            if choice.get("message"):  # the answer the agent received, as a live capture keeps it
                meta.setdefault("response_message", dict(choice["message"]))
            fields = (
                meta.get("node_id") or f"{session_id}:{seq}",
                meta.get("index", 0),
                item.get("prompt_token_ids"),
                item.get("completion_token_ids"),
                item.get("per_token_logps"),
                request.get("messages"),
                request.get("tools"),
                meta.get("n_tools"),
                choice.get("finish_reason"),
                meta,
            )
        else:
            meta = {
                "model": item.model,
                "harness_session_id": item.harness_session_id,
                "sampling_params": dict(item.sampling_params or {}),
                "response_message": dict(item.response_message or {}),
            }
            fields = (
                item.node_id,
                item.index,
                item.prompt_ids,
                item.sampled_ids,
                item.sampled_logprobs,
                item.request_messages,
                item.request_tools,
                item.n_tools,
                item.finish_reason,
                meta,
            )
        turn_id, index, prompt, completion, logprobs, messages, tools, n_tools, finish, meta = fields
        completion = completion or array("I")
        hint = meta.get("role_hint") if isinstance(item, dict) else None
        return cls(
            turn_id=str(turn_id),
            session_id=session_id,
            seq=int(index if seq is None else seq),
            prompt_token_ids=prompt or None,
            completion_token_ids=completion,
            logprobs=tuple(logprobs or ()) if logprobs or not completion else None,
            messages=tuple(messages or ()),
            finish_reason=finish,
            metadata=meta,
            tools_offered=int(len(tools or ()) if n_tools is None else n_tools),
            tools=tuple(tools) if tools else None,
            role_hint=hint,
        )


def turns_from_openenv(source: Any, *, session_id: str = "") -> list[CapturedTurn]:
    """Every turn of an OpenEnv capture: a `RolloutGraph` (`server.registry.get(sid).graph`), a
    list of `TraceEntry` dicts, or the `{"entries": [...]}` body of `/trace_entries`."""
    if hasattr(source, "nodes"):
        return [CapturedTurn.from_openenv(n, session_id=session_id) for n in source.nodes()]
    if isinstance(source, dict):
        session_id = session_id or str(source.get("session_id") or "")
        source = source.get("entries") or []
    return [CapturedTurn.from_openenv(e, session_id=session_id, seq=i) for i, e in enumerate(source)]
