"""The capture proxy's wire formats: an agent's request in, the engine's answer out. Pure: bytes and
dicts in and out, no network, no server, no tokenizer.

REQUEST. `prepare` rewrites an agent's chat request into the one the engine gets: sampling pinned
from `dagent.core.sampling` (temperature/top_p/top_k overwrite whatever the client sent or omitted, F05;
penalties, min_p and logit_bias are removed because the trainer models none of them), the capture
fields `return_token_ids` and `logprobs` (with `top_logprobs` at least 0, which vLLM needs to fill
`logprobs.content`), empty `tools` dropped with its companions (vLLM refuses `tools: []`), and
`stream_options` dropped from non-streaming calls (vLLM refuses it without `stream`). A session
opened with a sampling seed (an evaluation's per-sample seed) gives each call its own `seed`
(`dagent.core.sampling.call_seed`), overriding any the client sent: two evaluations of the same
weights on the same sample then draw the same random numbers, so a paired comparison's noise is
the weights' and not the dice's. The client's own sampling values are kept for the record.
Messages are never touched.

ANSWER. `parse_completion` reads a non-streaming answer, `StreamCapture` an SSE stream chunk by
chunk (ids and logprobs from every chunk, `prompt_token_ids` from the first, the message rebuilt
from the deltas). Both yield an `EngineCall` or raise `WireError("engine_bad_response")`: an answer
that is not a chat completion is a named error, never an empty success (F07). The ids and logprobs
are the engine's, kept as the engine sent them; nothing is decoded or re-encoded (F01).

CONTROL ANSWERS. `budget_stop` is the terminal completion the proxy gives itself past a session's
budget (F10); `error_body` the OpenAI-style error every refusal carries, with a named `type`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dagent.core.sampling import Sampling
from dagent.errors import RequestRejected

loads: Callable[[bytes | str], Any]
dumps: Callable[[Any], bytes]
try:  # orjson when installed (faster on engine answers); the stdlib is the fallback
    import orjson

    loads = orjson.loads
    dumps = orjson.dumps
except ImportError:  # pragma: no cover - exercised only where orjson is absent

    def _json_dumps(obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()

    loads = json.loads
    dumps = _json_dumps


BUDGET_STOP_MESSAGE = "Step budget exhausted; stopping."  # OpenEnv's contract.BUDGET_STOP_MESSAGE
SAMPLING_KEYS = ("temperature", "top_p", "top_k")
DISTORTING_KEYS = (
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "logit_bias",
    "allowed_token_ids",
    "bad_words",
    "min_tokens",
)
# ^ change the distribution (vLLM's extra sampling parameters included); the trainer's recompute
#   models none of them
MAX_TOKENS_KEYS = ("max_tokens", "max_completion_tokens")
JSON_HEADERS = [(b"content-type", b"application/json")]
SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]


class WireError(RequestRejected):
    """A request or answer the proxy cannot pass on; becomes an OpenAI-style error body."""

    def __init__(self, message: str, err_type: str, status: int) -> None:
        super().__init__(message)
        self.err_type, self.status = err_type, status


def error_body(message: str, err_type: str, status: int, code: str | int | None = None) -> bytes:
    """OpenAI's error shape: {"error": {"message", "type", "param", "code"}}."""
    return dumps(
        {"error": {"message": message, "type": err_type, "param": None, "code": status if code is None else code}}
    )


def header(headers: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key == name:
            return value.decode("latin-1")
    return None


async def read_body(
    receive: Any, limit: int | None = None, headers: list | None = None, setting: str = "max_body_bytes"
) -> bytes:
    """An ASGI request's whole body. Over `limit` bytes (a declared content-length, or what has
    arrived so far) it raises a 413 `WireError` naming `setting` and stops reading: nothing of it
    is kept or passed on."""

    def too_large(size: str) -> WireError:
        return WireError(
            f"request body of {size} bytes is over the capture proxy's limit of {limit} bytes: "
            f"send less, or raise {setting}",
            "invalid_request_error",
            413,
        )

    if limit is not None and headers is not None:
        declared = header(headers, b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise too_large(declared)
    chunks, size = [], 0
    while True:
        message = await receive()
        chunk = message.get("body", b"")
        size += len(chunk)
        if limit is not None and size > limit:
            raise too_large(f"more than {limit}")
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


async def respond(send: Any, status: int, body: bytes, headers: list = JSON_HEADERS) -> None:
    """One whole ASGI response."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*headers, (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


def api_key(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The caller's key, where every major SDK puts it (as OpenEnv's `extract_api_key`)."""
    other = None
    for name, value in headers:
        if name == b"authorization":
            if value[:7].lower() == b"bearer ":
                return value[7:].strip().decode("latin-1")
        elif name in (b"x-api-key", b"x-goog-api-key"):
            other = value.strip().decode("latin-1")
    return other


@dataclass
class Prepared:
    """An agent request rewritten for the engine, and what the record keeps of the original."""

    body: bytes
    stream: bool
    model: str  # the name the agent asked for (answers the proxy gives itself carry it)
    messages: list[Any]
    tools: list[Any] | None
    requested_sampling: dict[str, Any]
    harness_session_id: str | None


SAMPLING_SEED = "sampling_seed"  # the session metadata key that asks for seeded calls (an int)


def prepare(
    raw: bytes,
    sampling: Sampling,
    *,
    model: str | None = None,
    max_output_tokens: int | None = None,
    seed: int | None = None,
) -> Prepared:
    """The request the engine gets for an agent's `raw` chat request (module docstring)."""
    try:
        body = loads(raw)
    except ValueError as e:
        raise WireError(f"the request body is not JSON: {e}", "invalid_request_error", 400) from e
    if not isinstance(body, dict):
        raise WireError("the request body must be a JSON object", "invalid_request_error", 400)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise WireError("`messages` must be a non-empty list", "invalid_request_error", 400)
    if body.get("n", 1) not in (1, None):
        raise WireError("capture records exactly one completion per call: send n=1", "invalid_request_error", 400)
    requested = {k: v for k in (*SAMPLING_KEYS, *DISTORTING_KEYS) if (v := body.pop(k, None)) is not None}
    body.update(sampling.as_request())
    if seed is not None:
        if body.get("seed") is not None:
            requested["seed"] = body["seed"]
        body["seed"] = seed
    body["logprobs"] = True
    if not body.get("top_logprobs"):
        body["top_logprobs"] = 0
    body["return_token_ids"] = True
    stream = body.get("stream") is True
    if not stream:
        body.pop("stream", None)
        body.pop("stream_options", None)
    tools = body.get("tools")
    if not tools:
        for key in ("tools", "tool_choice", "parallel_tool_calls"):
            body.pop(key, None)
        tools = None
    if max_output_tokens:
        for key in MAX_TOKENS_KEYS:
            if type(body.get(key)) is int and body[key] > max_output_tokens:
                body[key] = max_output_tokens
    asked, user = body.get("model"), body.get("user")
    if model:
        body["model"] = model
    return Prepared(
        dumps(body),
        stream,
        asked if isinstance(asked, str) else "",
        messages,
        tools if isinstance(tools, list) else None,
        requested,
        user if isinstance(user, str) else None,
    )


@dataclass
class EngineCall:
    """What one engine answer carries for capture."""

    prompt_ids: list[int] | None
    completion_ids: list[int]
    logprobs: list[float] | None
    finish_reason: str | None
    message: dict[str, Any]


def _logprob_values(content: Any) -> list[float] | None:
    if not isinstance(content, list):
        return None
    try:
        values = [entry["logprob"] for entry in content]
    except (TypeError, KeyError):
        return None  # unusable: the analysis reports missing_logprobs, never a crash
    return values if all(type(v) is float or type(v) is int for v in values) else None


def _bad(message: str) -> WireError:
    return WireError(message, "engine_bad_response", 502)


def parse_completion(raw: bytes) -> EngineCall:
    """The capture of a non-streaming chat completion, or `WireError` for anything else."""
    try:
        body = loads(raw)
    except ValueError:
        raise _bad(f"the engine answered something that is not JSON ({len(raw)} bytes: {raw[:80]!r})") from None
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise _bad(f"the engine answered without choices: {raw[:160]!r}")
    choice = choices[0]
    prompt = body.get("prompt_token_ids") or choice.get("prompt_token_ids")  # vLLM | SGLang
    completion = choice.get("token_ids") or []
    logprobs = _logprob_values((choice.get("logprobs") or {}).get("content"))
    given = choice.get("message")
    message: dict[str, Any] = given if isinstance(given, dict) else {}
    return EngineCall(prompt or None, completion, logprobs, choice.get("finish_reason"), message)


class StreamCapture:
    """Collects an SSE chat stream as it passes through: feed raw bytes, read `done`, `call()`.

    Each event is parsed and folded in as it is fed, in the gaps between the engine's tokens, so
    the end of the stream (where the proxy holds `[DONE]` until the call is recorded) costs only
    the assembly, not a parse of the whole stream. The first broken event is kept
    and raised by `call()`; nothing raises while feeding, so the agent still gets every byte the
    engine sent."""

    def __init__(self) -> None:
        self._tail = b""
        self.done = False
        self._problem: str | None = None
        self._prompt: Any = None
        self._ids: list[int] = []
        self._lps: list[float] = []
        self._lps_ok = True
        self._parts: list[str] = []
        self._reasoning: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._finish: str | None = None

    def feed(self, data: bytes) -> None:
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n")
        events = (self._tail + data).split(b"\n\n") if self._tail else data.split(b"\n\n")
        self._tail = events.pop()
        for event in events:
            for line in event.split(b"\n"):
                if line.startswith(b"data:"):
                    payload = line[5:].strip()
                    if payload == b"[DONE]":
                        self.done = True
                    elif payload and self._problem is None:
                        self._fold(payload)

    def _fold(self, payload: bytes) -> None:
        try:
            chunk = loads(payload)
        except ValueError:
            self._problem = "the engine's stream carried an event that is not JSON"
            return
        if not isinstance(chunk, dict):
            self._problem = f"the engine's stream carried a non-object event: {chunk!r:.80}"
            return
        if "error" in chunk:
            self._problem = f"the engine's stream ended in an error: {chunk['error']!r:.300}"
            return
        choices = chunk.get("choices") or ()
        if self._prompt is None:
            self._prompt = chunk.get("prompt_token_ids") or (choices[0].get("prompt_token_ids") if choices else None)
        if not choices:
            return  # a usage-only chunk
        choice = choices[0]
        self._ids.extend(choice.get("token_ids") or ())
        content = (choice.get("logprobs") or {}).get("content")
        if content:
            values = _logprob_values(content)
            self._lps_ok = self._lps_ok and values is not None
            self._lps.extend(values or ())
        delta = choice.get("delta") or {}
        if delta.get("content"):
            self._parts.append(delta["content"])
        text = delta.get("reasoning_content") or delta.get("reasoning")
        if text:
            self._reasoning.append(text)
        for call in delta.get("tool_calls") or ():
            _merge_tool_call(self._calls, call)
        if choice.get("finish_reason"):
            self._finish = choice["finish_reason"]

    def call(self) -> EngineCall:
        """The captured call, or `WireError` naming the first broken event."""
        if self._problem is not None:
            raise _bad(self._problem)
        if self._finish is None:
            raise _bad("the engine's stream ended before a finish_reason (connection cut?)")
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self._parts) or None}
        if self._reasoning:
            message["reasoning_content"] = "".join(self._reasoning)
        if self._calls:
            message["tool_calls"] = [self._calls[k] for k in sorted(self._calls)]
        ids, lps = self._ids, self._lps
        return EngineCall(
            self._prompt or None, ids, lps if self._lps_ok and (lps or not ids) else None, self._finish, message
        )


def _merge_tool_call(calls: dict[int, dict[str, Any]], delta: dict[str, Any]) -> None:
    """OpenAI streaming: a call's fields arrive by `index`; name and arguments concatenate."""
    slot = calls.setdefault(
        delta.get("index", len(calls)), {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
    )
    if delta.get("id"):
        slot["id"] = delta["id"]
    function = delta.get("function") or {}
    slot["function"]["name"] += function.get("name") or ""
    slot["function"]["arguments"] += function.get("arguments") or ""


# -- control answers --------------------------------------------------------------------------
def budget_stop(model: str, stream: bool) -> bytes:
    """A terminal answer the proxy gives itself once a session's budget is spent: non-empty content
    and finish_reason "stop" end an agent's loop (an empty message reads as a failure and is retried;
    measured by OpenEnv with opencode). No token ids: it is never recorded as a turn."""
    rid = f"budget-{uuid.uuid4().hex[:12]}"
    if not stream:
        return dumps(
            {
                "id": rid,
                "object": "chat.completion",
                "created": 0,
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": BUDGET_STOP_MESSAGE},
                        "logprobs": None,
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
            }
        )
    head = {"id": rid, "object": "chat.completion.chunk", "created": 0, "model": model}
    deltas = [({"role": "assistant", "content": ""}, None), ({"content": BUDGET_STOP_MESSAGE}, None), ({}, "stop")]
    events = [
        dumps({**head, "choices": [{"index": 0, "delta": d, "logprobs": None, "finish_reason": f}]}) for d, f in deltas
    ]
    return b"".join(b"data: " + e + b"\n\n" for e in events) + b"data: [DONE]\n\n"
