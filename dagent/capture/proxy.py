"""The capture proxy's data plane: one authenticated chat call from an agent to the engine and back.

`Forwarder.chat` pins the request (`dagent.capture.wire.prepare`), answers past-budget calls itself (F10),
forwards over `dagent.capture.upstream.EngineClient`, and records the engine's answer before the agent can
read it: a non-streaming answer is parsed, then sent as the engine's bytes; a stream is passed on
piece by piece as it arrives and collected on the way (`StreamCapture`), so time to first token is
the engine's (replaying a non-streaming answer as SSE, as OpenEnv does, makes it the whole
generation; benchmarks/capture_overhead.py). Failures reach the agent as named errors
(502 `engine_unreachable`/`engine_error`/`engine_bad_response`, or the engine's own 4xx) and are
recorded (F07); a context overflow ends the agent's loop with the terminal stop, as OpenEnv does.
"""

from __future__ import annotations

from typing import Any

from dagent.capture import wire
from dagent.capture.store import SessionState, TurnRecord
from dagent.capture.upstream import EngineClient, Response
from dagent.core.sampling import Sampling, call_seed
from dagent.errors import EngineError

CONTEXT_OVERFLOW = (  # lower-cased markers of an engine refusing a call that does not fit its window
    b"maximum context length",  # vLLM (prompt too long), OpenAI, dagent's local engine
    b"context_length_exceeded",  # OpenAI's error code
    b"longer than the maximum model length",  # vLLM 0.32 input processor
    b"cannot be greater than max_model_len",  # vLLM 0.32: max_tokens > max_model_len (measured)
)


class Forwarder:
    """The data plane: one authenticated chat call from an agent to the engine and back, recorded.
    Lives on the serving event loop (the engine connection pool is made there on first use)."""

    def __init__(
        self,
        upstream: str,
        sampling: Sampling,
        *,
        model: str | None,
        max_output_tokens: int | None,
        max_connections: int,
        timeout_s: float,
    ) -> None:
        self.upstream, self.sampling, self.model = upstream, sampling, model
        self.max_output_tokens, self.max_connections, self.timeout_s = (max_output_tokens, max_connections, timeout_s)
        self._engine: EngineClient | None = None

    def engine(self) -> EngineClient:
        if self._engine is None:
            self._engine = EngineClient(self.upstream, max_connections=self.max_connections, timeout_s=self.timeout_s)
        return self._engine

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None

    async def models(self, send: Any) -> None:
        try:
            response = await self.engine().request("GET", "/models")
            content = await response.read()
        except EngineError as e:
            await wire.respond(send, 502, wire.error_body(str(e), "engine_unreachable", 502))
            return
        await wire.respond(send, response.status, content)

    async def chat(self, state: SessionState, headers: list[tuple[bytes, bytes]], raw: bytes, send: Any) -> None:
        seq = state.next_seq()
        base = state.metadata.get(wire.SAMPLING_SEED)
        seed = call_seed(base, seq) if type(base) is int else None
        try:
            prepared = wire.prepare(
                raw, self.sampling, model=self.model, max_output_tokens=self.max_output_tokens, seed=seed
            )
        except wire.WireError as e:
            await wire.respond(send, e.status, wire.error_body(str(e), e.err_type, e.status))
            return
        if state.over_budget:  # answered here: the engine is never called, nothing is recorded
            state.budget_stops += 1
            await self._stop(prepared, send)
            return
        state.model_calls += 1
        meta = {
            "harness_session_id": wire.header(headers, b"x-session-id") or prepared.harness_session_id,
            "sampling_params": {**self.sampling.as_request(), **({"seed": seed} if seed is not None else {})},
            "requested_sampling_params": prepared.requested_sampling,
            "stream": prepared.stream,
        }
        try:
            response = await self.engine().request("POST", "/chat/completions", prepared.body)
        except EngineError as e:
            await self._failed(state, seq, send, "engine_unreachable", str(e))
            return
        if prepared.stream:
            await self._stream(state, seq, prepared, meta, response, send)
            return
        try:
            content = await response.read()
        except EngineError as e:
            await self._failed(state, seq, send, "engine_unreachable", str(e))
            return
        if response.status != 200:
            await self._engine_status(state, seq, prepared, send, response.status, content)
            return
        try:
            call = wire.parse_completion(content)
        except wire.WireError as e:
            await self._failed(state, seq, send, e.err_type, str(e))
            return
        meta["response_message"] = call.message
        record = state.add(seq, call, prepared, meta)  # before the agent can read its answer
        await wire.respond(send, 200, content)  # the engine's bytes, verbatim
        state.compact(record)

    async def _stream(
        self,
        state: SessionState,
        seq: int,
        prepared: wire.Prepared,
        meta: dict[str, Any],
        response: Response,
        send: Any,
    ) -> None:
        capture, started, record = wire.StreamCapture(), False, None
        try:
            if response.status != 200:
                await self._engine_status(state, seq, prepared, send, response.status, await response.read())
                return
            async for piece in response.stream():
                if not started:
                    await send({"type": "http.response.start", "status": 200, "headers": wire.SSE_HEADERS})
                    started = True
                capture.feed(piece)
                if capture.done and record is None:  # the end: record before the agent reads it
                    record = self._record(state, seq, capture, prepared, meta)
                await send({"type": "http.response.body", "body": piece, "more_body": True})
            if record is None:  # no [DONE]: complete only if the stream reached a finish_reason
                record = self._record(state, seq, capture, prepared, meta)
        except (EngineError, wire.WireError) as e:
            err_type, message = getattr(e, "err_type", "engine_unreachable"), str(e)
            if not started:
                await self._failed(state, seq, send, err_type, message)
                return
            state.engine_errors.append({"seq": seq, "type": err_type, "status": 502, "message": message})
            event = b"data: " + wire.error_body(message, err_type, 502) + b"\n\n"
            await send({"type": "http.response.body", "body": event, "more_body": True})
        finally:
            await response.aclose()
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        if record is not None:
            state.compact(record)

    @staticmethod
    def _record(
        state: SessionState, seq: int, capture: wire.StreamCapture, prepared: wire.Prepared, meta: dict[str, Any]
    ) -> TurnRecord:
        call = capture.call()
        meta["response_message"] = call.message
        return state.add(seq, call, prepared, meta)

    @staticmethod
    async def _failed(
        state: SessionState,
        seq: int,
        send: Any,
        err_type: str,
        message: str,
        status: int = 502,
        body: bytes | None = None,
    ) -> None:
        """Record a failed call and give the agent its named error."""
        state.engine_errors.append({"seq": seq, "type": err_type, "status": status, "message": message})
        await wire.respond(send, status, body or wire.error_body(message, err_type, status))

    async def _stop(self, prepared: wire.Prepared, send: Any) -> None:
        """The terminal answer the proxy gives itself, in the shape the agent asked for."""
        await wire.respond(
            send,
            200,
            wire.budget_stop(prepared.model or self.model or "capture", prepared.stream),
            wire.SSE_HEADERS if prepared.stream else wire.JSON_HEADERS,
        )

    async def _engine_status(
        self, state: SessionState, seq: int, prepared: wire.Prepared, send: Any, status: int, content: bytes
    ) -> None:
        """A non-200 engine answer. A context overflow ends the agent's loop with the terminal stop
        (OpenEnv's rule: the rollout is graded on what it has, not lost); another 4xx (about the
        agent's request) goes to it as it is; a 5xx becomes 502 `engine_error`."""
        detail = content[:300].decode("utf-8", "replace")
        if status == 400 and any(marker in content.lower() for marker in CONTEXT_OVERFLOW):
            state.context_stops += 1
            await self._stop(prepared, send)
        elif 400 <= status < 500:
            await self._failed(
                state,
                seq,
                send,
                "engine_rejected",
                f"the engine refused the call ({status}): {detail}",
                status,
                content or None,
            )
        else:
            await self._failed(state, seq, send, "engine_error", f"the engine failed ({status}): {detail}")
