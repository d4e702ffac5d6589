"""The capture proxy's pure parts, without an engine: request preparation and pinned sampling,
the stream capture, the compact session store, and the engine connection pool."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dagent.capture import wire
from dagent.capture.store import SessionState, full_prompts
from dagent.capture.upstream import EngineClient
from dagent.errors import EngineError
from tests.capture.engines import PINNED, SYSTEM, TASK


def test_prepare_pins_sampling_and_refuses_what_it_cannot_capture() -> None:
    raw = json.dumps(
        {
            "model": "m",
            "messages": [TASK],
            "temperature": 0.1,
            "tools": [],
            "tool_choice": "auto",
            "stream_options": {"include_usage": True},
            "max_tokens": 32_000,
        }
    ).encode()
    prepared = wire.prepare(raw, PINNED, model="served", max_output_tokens=8192)
    sent = json.loads(prepared.body)
    assert sent["temperature"] == 0.7 and sent["model"] == "served" and prepared.model == "m"
    assert "tools" not in sent and "tool_choice" not in sent and "stream_options" not in sent
    assert sent["max_tokens"] == 8192 and prepared.requested_sampling == {"temperature": 0.1}
    for bad in (b"not json", b"[]", b'{"messages": []}', b'{"messages": [{}], "n": 2}'):
        with pytest.raises(wire.WireError):
            wire.prepare(bad, PINNED)


def test_stream_capture_rebuilds_the_message_and_refuses_broken_streams() -> None:
    events = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}], "prompt_token_ids": [1, 2, 3]},
        {
            "choices": [
                {"index": 0, "delta": {"content": "Hi"}, "token_ids": [7], "logprobs": {"content": [{"logprob": -0.5}]}}
            ]
        },
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [{"index": 0, "id": "c", "function": {"name": "bash", "arguments": '{"comm'}}]
                    },
                    "token_ids": [8],
                    "logprobs": {"content": [{"logprob": -0.25}]},
                }
            ]
        },
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "function": {"arguments": 'and": "ls"}'}}]},
                    "token_ids": [9],
                    "finish_reason": "tool_calls",
                    "logprobs": {"content": [{"logprob": -1.0}]},
                }
            ]
        },
        {"choices": [], "usage": {"prompt_tokens": 3}},
    ]
    raw = b"".join(b"data: " + json.dumps(e).encode() + b"\r\n\r\n" for e in events) + b"data: [DONE]\n\n"
    capture = wire.StreamCapture()
    for i in range(0, len(raw), 7):  # any split of the bytes
        capture.feed(raw[i : i + 7])
    call = capture.call()
    assert capture.done and call.prompt_ids == [1, 2, 3] and call.completion_ids == [7, 8, 9]
    assert call.logprobs == [-0.5, -0.25, -1.0] and call.finish_reason == "tool_calls"
    assert call.message["content"] == "Hi"
    assert call.message["tool_calls"][0]["function"] == {"name": "bash", "arguments": '{"command": "ls"}'}
    cut = wire.StreamCapture()
    cut.feed(raw[: raw.index(b'"finish_reason"')].rsplit(b"data:", 1)[0])
    with pytest.raises(wire.WireError, match="before a finish_reason"):
        cut.call()
    for bad in (b"<html>", b'{"choices": []}', b'{"error": "x"}'):
        with pytest.raises(wire.WireError):
            wire.parse_completion(bad)


def _record(state: SessionState, seq: int, prompt: list[int], completion: list[int]) -> Any:
    call = wire.EngineCall(prompt, completion, [-0.5] * len(completion), "stop", {})
    prepared = wire.Prepared(b"", False, "m", [SYSTEM, {"role": "user", "content": str(seq)}], None, {}, None)
    return state.add(seq, call, prepared, {})


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["append", "drift", "fresh", "missing"]), st.integers(1, 300)),
        min_size=1,
        max_size=14,
    ),
    st.randoms(),
)
def test_compact_store_rebuilds_every_prompt_exactly(steps: list, rng: random.Random) -> None:
    state, expected, held = SessionState("s", None, {}), [], [rng.randrange(2**32) for _ in range(100)]
    pending = []
    for seq, (kind, n) in enumerate(steps):
        extra = [rng.randrange(151_000) for _ in range(n)]
        prompt = {"append": held + extra, "drift": held[:-3] + extra, "fresh": extra, "missing": None}[kind]
        completion = [rng.randrange(151_000) for _ in range(rng.randrange(1, 40))]
        pending.append(_record(state, seq, prompt, completion))
        expected.append(prompt)
        if prompt is not None:
            held = prompt + completion
        if rng.random() < 0.6:  # compaction runs after the answer is sent, in any interleaving
            state.compact(pending.pop(rng.randrange(len(pending))))
    got = [None if p is None else list(p) for p in full_prompts(state.records)]
    order = [r.seq for r in state.records]
    assert got == [expected[s] for s in order]
    for rec in pending:
        state.compact(rec)
    turns = state.turns()
    assert [None if t.prompt_token_ids is None else list(t.prompt_token_ids) for t in turns] == expected


def test_appending_session_stores_about_its_final_length_once() -> None:
    state, prompt = SessionState("s", None, {}), list(range(1000, 5000))
    for seq in range(50):
        completion = list(range(seq * 200, seq * 200 + 128))
        state.compact(_record(state, seq, prompt, completion))
        prompt = prompt + completion + list(range(7, 257))
    stored = sum(len(r.prompt[2]) for r in state.records)
    assert stored < len(prompt) and all(r.prompt[2].typecode == "I" for r in state.records)
    assert list(state.turns()[-1].prompt_token_ids) == prompt[: len(prompt) - 378]


async def _stale_keepalive_engine() -> None:
    """An engine that answers one request per connection and drops the connection when the next
    arrives (its keep-alive timer fired as the request was sent): the client must send it once
    more on a fresh connection. Its answers are chunked, split mid-JSON."""

    async def handle(reader: Any, writer: Any) -> None:
        await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(2)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: "
            b'chunked\r\n\r\n3\r\n{"a\r\n4\r\n": 1\r\n1\r\n}\r\n0\r\n\r\n'
        )
        await writer.drain()
        await reader.readuntil(b"\r\n\r\n")
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = EngineClient(f"http://127.0.0.1:{port}/v1")
    for _ in range(3):
        response = await client.request("POST", "/chat/completions", b"{}")
        assert response.status == 200 and await response.read() == b'{"a": 1}'
    server.close()
    await server.wait_closed()
    client.close()
    with pytest.raises(EngineError, match="could not connect"):
        await client.request("POST", "/chat/completions", b"{}")

    async def silent(reader: Any, writer: Any) -> None:  # reads, never answers
        await reader.read(1 << 16)
        await asyncio.sleep(5)

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    wedged = EngineClient(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", timeout_s=0.2)
    with pytest.raises(EngineError, match="did not answer within"):
        await wedged.request("POST", "/chat/completions", b"{}")
    server.close()

    async def broken(reader: Any, writer: Any) -> None:  # chunk sizes that are not numbers
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n{}\r\n")
        await writer.drain()

    server = await asyncio.start_server(broken, "127.0.0.1", 0)
    response = await EngineClient(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}").request("GET", "/x")
    with pytest.raises(EngineError, match="malformed"):
        await response.read()
    server.close()


def test_engine_connection_survives_a_closed_keepalive_and_names_dead_or_wedged_engines() -> None:
    asyncio.run(_stale_keepalive_engine())
