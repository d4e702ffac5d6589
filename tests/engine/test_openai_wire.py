"""vLLM's wire format as pure functions: chat parsing, tool dumps, tool-call parsing, logprobs."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

pytest.importorskip("pydantic")
from dagent.engine.openai_wire import (  # noqa: E402
    ChatRequest,
    RequestError,
    chat_logprobs,
    completion_logprobs,
    dump_tools,
    parse_messages,
    parse_tool_calls,
)


def test_messages_are_parsed_as_vllm_parses_them() -> None:
    parsed = parse_messages(
        [
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {
                "role": "assistant",
                "content": None,
                "reasoning_content": "why",
                "tool_calls": [
                    {"id": "1", "type": "function", "function": {"name": "f", "arguments": '{"x":1}'}},
                    {"id": "2", "type": "function", "function": {"name": "g", "arguments": ""}},
                ],
            },
            {"role": "tool", "tool_call_id": "1", "content": "ok", "name": "f"},
        ]
    )
    assert parsed[0] == {"role": "user", "content": "a\nb"}
    assert parsed[1]["content"] == "" and parsed[1]["reasoning"] == parsed[1]["reasoning_content"] == "why"
    assert [c["function"]["arguments"] for c in parsed[1]["tool_calls"]] == [{"x": 1}, {}]
    assert parsed[2] == {"role": "tool", "content": "ok", "tool_call_id": "1", "name": "f"}
    with pytest.raises(RequestError):
        parse_messages([{"content": "no role"}])


def test_tools_are_dumped_with_vllm_field_order() -> None:
    [tool] = dump_tools([{"type": "function", "function": {"name": "f", "strict": True}}])
    assert json.dumps(tool) == (
        '{"type": "function", "function": {"name": "f", "description": null, "parameters": null, "strict": true}}'
    )


@pytest.mark.parametrize(
    ("text", "content", "calls"),
    [
        ("plain answer", "plain answer", []),
        ('<tool_call>\n{"name": "f", "arguments": {"q": "é"}}\n</tool_call>', None, [("f", '{"q": "é"}')]),
        (
            'pre <tool_call>{"name": "f", "arguments": {}}</tool_call>\n<tool_call>{"name": "g", "arguments": '
            '{"n": 2}}</tool_call>',
            "pre ",
            [("f", "{}"), ("g", '{"n": 2}')],
        ),
        ('<tool_call>{"name": "f", "arguments": {"a": 1}}', None, [("f", '{"a": 1}')]),  # unclosed, as vLLM
        (
            "<tool_call>\n<function=run_sql>\n<parameter=query>\nSELECT 1\n</parameter>\n<parameter=limit>\n5\n"
            "</parameter>\n</function>\n</tool_call>",
            None,
            [("run_sql", '{"query": "SELECT 1", "limit": 5}')],
        ),
        ("<tool_call>not json</tool_call>", "<tool_call>not json</tool_call>", []),
    ],
)
def test_tool_calls_are_parsed_like_the_hermes_parser(text: str, content: str | None, calls: list) -> None:
    got_content, got_calls = parse_tool_calls(text)
    assert got_content == content
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in got_calls] == calls
    assert all(c["type"] == "function" and c["id"].startswith("chatcmpl-tool-") for c in got_calls)


def test_logprobs_follow_vllm_quirks() -> None:
    steps = [SimpleNamespace(token_id=5, logprob=float("-inf"), top=((5, float("-inf")), (7, -0.1), (9, -2.0)))]
    decode = {5: "a", 7: "b", 9: "c"}.__getitem__
    [entry] = chat_logprobs(steps, 2, decode, as_token_ids=False)["content"]
    assert entry == {
        "token": "a",
        "logprob": -9999.0,
        "bytes": [97],
        "top_logprobs": [
            {"token": "a", "logprob": -9999.0, "bytes": [97]},
            {"token": "b", "logprob": -0.1, "bytes": [98]},
        ],
    }
    [as_ids] = chat_logprobs(steps, 0, decode, as_token_ids=True)["content"]
    assert as_ids["token"] == "token_id:5" and as_ids["bytes"] == [97] and as_ids["top_logprobs"] == []
    legacy = completion_logprobs(steps, 1, decode)
    assert legacy["tokens"] == ["a"] and legacy["top_logprobs"] == [{"a": -9999.0, "b": -0.1}]


def test_tool_choice_defaults_to_auto_only_with_tools() -> None:
    tools = [{"type": "function", "function": {"name": "f"}}]
    assert ChatRequest(messages=[{"role": "user", "content": "x"}]).checked_tool_choice() == "none"
    assert ChatRequest(messages=[{"role": "user", "content": "x"}], tools=tools).checked_tool_choice() == "auto"
    with pytest.raises(RequestError, match="tool_choice"):
        ChatRequest(
            messages=[{"role": "user", "content": "x"}],
            tools=tools,
            tool_choice={"type": "function", "function": {"name": "f"}},
        ).checked_tool_choice()
