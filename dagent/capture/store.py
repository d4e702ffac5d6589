"""The capture proxy's sessions: budget, counters, and the captured calls, stored compactly.

A `TurnRecord` is one engine answer the agent received. It is first stored as parsed (so a reader
sees it the moment the agent can), then `SessionState.compact` turns its ids into `array('I')`
(4 bytes an id; OpenEnv's Python int lists hold about 40) and keeps of its prompt only the tail
past the longest prefix it shares with one of the session's last few records: an appending
agent's prompt k is prompt k-1 + completion k-1 + a tool result, so a session costs about its final
length once, not the sum of its prompts. Messages equal to the previous record's are shared.

INVARIANT: `full_prompts` rebuilds every record's prompt exactly as the engine sent it, whatever
was compacted when; `SessionState.turns()` hands them over as `CapturedTurn`s in arrival order.
The proxy's event loop is the only writer; every update replaces one attribute or appends to one
list, so a reader on another thread sees the old or the new form of the same ids, never a mix.
"""

from __future__ import annotations

import time
from array import array
from dataclasses import dataclass, field
from typing import Any

from dagent.capture.wire import EngineCall, Prepared
from dagent.core.sampling import Sampling
from dagent.trajectory.turn import CapturedTurn, Finding

BASE_CANDIDATES = 4  # earlier records a new prompt is compared with when compacting
MIN_SHARED = 64  # a shorter shared prefix is not worth a reference


def _ids(values: Any) -> array | None:
    if values is None or isinstance(values, array):
        return values
    try:
        return array("I", values)
    except (TypeError, OverflowError, ValueError):
        return None  # not token ids: the record keeps none and the analysis says so


def _lcp(a: array, b: array) -> int:
    """Common prefix length of two id arrays: C-level compares in galloping chunks."""
    n = min(len(a), len(b))
    if not n or a[0] != b[0]:
        return 0
    if a[:n] == b[:n]:
        return n
    lo, step = 0, 256
    while lo < n:
        hi = min(n, lo + step)
        if a[lo:hi] != b[lo:hi]:
            while hi - lo > 1:  # a[:lo] matches, a mismatch lies in [lo, hi)
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if a[lo:mid] == b[lo:mid] else (lo, mid)
            return lo
        lo, step = hi, step * 2
    return n


@dataclass(eq=False)
class TurnRecord:
    """One captured call. `prompt` is `(base, base_len, tail)`: the first `base_len` ids of the
    earlier record `base`'s prompt + completion, then `tail`; with no base, `tail` is the whole
    prompt (None: the engine sent none)."""

    seq: int
    prompt: tuple[Any, int, Any]
    completion: Any
    logprobs: Any
    finish_reason: str | None
    messages: list[Any]
    tools: list[Any] | None
    metadata: dict[str, Any] = field(default_factory=dict)


def full_prompts(records: list[TurnRecord]) -> list[array | None]:
    """Every record's whole prompt, rebuilt exactly from the shared prefixes (no recursion)."""
    memo: dict[int, array | None] = {}

    def resolve(rec: TurnRecord) -> array | None:
        chain, node = [], rec
        while id(node) not in memo:
            chain.append(node)
            base = node.prompt[0]
            if base is None:
                break
            node = base
        for node in reversed(chain):
            base, n, tail = node.prompt
            if tail is None:
                memo[id(node)] = None
            elif base is None:
                memo[id(node)] = _ids(tail)
            else:
                head, more, rest = memo[id(base)], _ids(base.completion), _ids(tail)
                # `compact` shares a prefix only with a record whose prompt and completion it stored as arrays
                assert head is not None and more is not None and rest is not None
                if n > len(head):
                    head = head + more[: n - len(head)]
                memo[id(node)] = head[:n] + rest
        return memo[id(rec)]

    return [resolve(rec) for rec in records]


class SessionState:
    """One capture session: its budget, its counters and its records. Mutated on the proxy's event
    loop only; other threads read it (each update is one attribute or list operation)."""

    def __init__(self, session_id: str, max_model_calls: int | None, metadata: dict[str, Any]) -> None:
        self.session_id, self.max_model_calls, self.metadata = session_id, max_model_calls, metadata
        self.created = self.last_activity = time.time()
        self.requests = 0  # chat requests with this key, answered any way
        self.model_calls = 0  # of those, forwarded to the engine (the budget counts these)
        self.budget_stops = 0  # answered by the proxy itself, the engine never called (F10)
        self.context_stops = 0  # the engine refused a context overflow; the proxy answered a stop
        self.rejected_bodies = 0  # requests over max_body_bytes: answered 413, never forwarded
        self.engine_errors: list[dict[str, Any]] = []  # {"seq", "type", "status", "message"}
        self.overridden: dict[str, Any] = {}  # sampling values agents sent that were replaced (F05)
        self.records: list[TurnRecord] = []  # completion order; `turns` sorts by seq
        self.journal: Any = None  # dagent.capture.journal.Journal of a durable proxy
        self._recent: list[tuple[TurnRecord, array]] = []  # last compacted records, prompt+completion

    def next_seq(self) -> int:
        self.requests += 1
        self.last_activity = time.time()
        return self.requests - 1

    @property
    def over_budget(self) -> bool:
        return self.max_model_calls is not None and self.model_calls >= self.max_model_calls

    def add(self, seq: int, call: EngineCall, prepared: Prepared, metadata: dict[str, Any]) -> TurnRecord:
        """Record one engine answer as it came (cheap); `compact` it once the agent has its answer."""
        rec = TurnRecord(
            seq,
            (None, 0, call.prompt_ids),
            call.completion_ids,
            call.logprobs,
            call.finish_reason,
            prepared.messages,
            prepared.tools,
            metadata,
        )
        self.records.append(rec)
        if self.journal is not None:  # durable before the agent can read its answer
            self.journal.recorded(self.session_id, rec)
        self.last_activity = time.time()
        pinned = metadata.get("sampling_params") or {}
        for key, value in prepared.requested_sampling.items():
            if pinned.get(key) != value:
                self.overridden.setdefault(key, value)
        return rec

    def compact(self, rec: TurnRecord) -> None:
        """Ids into arrays, the prompt into a tail after the longest prefix it shares with one of
        the last few records, messages and tools shared with the previous record where equal."""
        completion = _ids(rec.completion)
        rec.completion = completion if completion is not None else array("I")
        if rec.logprobs is not None:
            rec.logprobs = array("d", rec.logprobs)
        prompt = _ids(rec.prompt[2])
        if self._recent:
            prev = self._recent[-1][0]
            rec.messages = [
                p if i < len(prev.messages) and (p := prev.messages[i]) == m else m for i, m in enumerate(rec.messages)
            ]
            if rec.tools is not None and rec.tools == prev.tools:
                rec.tools = prev.tools
        if prompt is None:
            rec.prompt = (None, 0, None)
            self._recent = [*self._recent[-BASE_CANDIDATES + 1 :], (rec, array("I"))]
            return
        best, best_len = None, 0
        for base, held in self._recent:
            n = _lcp(held, prompt)
            if n > best_len:
                best, best_len = base, n
        rec.prompt = (best, best_len, prompt[best_len:]) if best_len >= MIN_SHARED else (None, 0, prompt)
        self._recent = [*self._recent[-BASE_CANDIDATES + 1 :], (rec, prompt + rec.completion)]

    def turns(self) -> list[CapturedTurn]:
        """Every recorded call as a `CapturedTurn`, in arrival order."""
        records = list(self.records)
        sid = self.session_id
        out = []
        for rec, prompt in zip(records, full_prompts(records)):
            tools = rec.tools
            out.append(
                CapturedTurn(
                    turn_id=f"{sid}:{rec.seq}",
                    session_id=sid,
                    seq=rec.seq,
                    prompt_token_ids=prompt,  # array('I'): handed over as stored, no int objects
                    completion_token_ids=_ids(rec.completion) or array("I"),
                    logprobs=tuple(rec.logprobs) if rec.logprobs is not None else None,
                    messages=tuple(rec.messages),
                    tools_offered=len(tools) if tools else 0,
                    finish_reason=rec.finish_reason,
                    metadata=dict(rec.metadata),
                    tools=tuple(tools) if tools else None,
                )
            )
        out.sort(key=lambda t: t.seq)
        return out


def session_findings(state: SessionState, sampling: Sampling) -> list[Finding]:
    """What the proxy itself saw of a session: budget stops, engine failures, replaced sampling."""
    out = []
    if state.budget_stops:
        out.append(
            Finding(
                "warn",
                "budget_exhausted",
                f"{state.budget_stops} call(s) past the budget "
                f"of {state.max_model_calls} model calls were answered by the proxy with a "
                "terminal stop; the engine was not called (F10)",
            )
        )
    if state.context_stops:
        out.append(
            Finding(
                "warn",
                "context_exhausted",
                f"{state.context_stops} call(s) overflowed the "
                "engine's context window (prompt + max_tokens); the proxy answered a terminal "
                "stop so the agent ends and is graded on what it has. If it happens on early "
                "calls, lower CaptureServer(max_output_tokens=...) to fit the engine",
            )
        )
    if state.rejected_bodies:
        out.append(
            Finding(
                "warn",
                "request_too_large",
                f"{state.rejected_bodies} request(s) were over the "
                "proxy's body limit and answered 413; the engine was not called. A real agent "
                "never sends that much: raise CaptureServer(max_body_bytes=...) only if it does",
            )
        )
    if state.engine_errors:
        last_ok = max((r.seq for r in state.records), default=-1)
        last_bad = max(e["seq"] for e in state.engine_errors)
        kinds = ", ".join(sorted({e["type"] for e in state.engine_errors}))
        fatal = last_bad > last_ok
        out.append(
            Finding(
                "fatal" if fatal else "warn",
                "engine_error",
                f"{len(state.engine_errors)} call(s) failed at the engine ({kinds}; last: "
                f"{state.engine_errors[-1]['message']:.200})"
                + (
                    ": the agent's loop ended on an infrastructure failure, so its answer is UNGRADED, never 0.0 (F07)"
                    if fatal
                    else "; a later call succeeded"
                ),
            )
        )
    if state.overridden:
        asked = ", ".join(f"{k}={v!r}" for k, v in sorted(state.overridden.items()))
        out.append(
            Finding(
                "info",
                "sampling_pinned",
                f"the agent asked for {asked}; the engine was "
                f"sent {sampling.as_request()} from dagent.core.sampling (F05)",
            )
        )
    return out
