"""vLLM's OpenAI-compatible wire format: request fields, chat parsing, tool calls, logprobs.

Invariant: everything here mirrors what vLLM does to the same request, field names included, so
a capture proxy in front of the local engine records what it would record in front of vLLM:
- messages are parsed in vLLM's "string" content format (text parts joined with "\\n", a missing
  content becomes ""), assistant tool-call arguments given as JSON strings are parsed into dicts
  before the template renders them, `reasoning_content` is also passed as `reasoning`;
- tools reach the template as vLLM dumps them ({"type", "function": {"name", "description",
  "parameters", ...extra}});
- tool calls are read from `<tool_call>{"name": ..., "arguments": ...}</tool_call>` like vLLM's
  hermes parser (arguments re-serialised with json.dumps(ensure_ascii=False)); the Qwen3.5 XML
  form `<tool_call><function=NAME><parameter=K>V</parameter></function></tool_call>` is read too;
- logprobs are `{"content": [{"token", "logprob", "bytes", "top_logprobs"}]}` with vLLM's quirks:
  values clamped at -9999.0, the sampled token listed first in `top_logprobs`, tokens spelled
  `token_id:N` under `return_tokens_as_token_ids`.
Pure functions over plain data: no model, no server.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from dagent.errors import RequestRejected

MAX_TOP_LOGPROBS = 20
TOOL_CALL_START, TOOL_CALL_END = "<tool_call>", "</tool_call>"
_TOOL_CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", re.DOTALL)
_XML_FUNCTION_RE = re.compile(r"<function=([^>\n]+)>(.*?)(?:</function>|$)", re.DOTALL)
_XML_PARAM_RE = re.compile(r"<parameter=([^>\n]+)>\n?(.*?)\n?</parameter>", re.DOTALL)


class RequestError(RequestRejected):
    """A request vLLM would refuse; becomes an OpenAI-style error body with this status."""

    def __init__(
        self, message: str, status: int = 400, err_type: str = "BadRequestError", param: str | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.err_type, self.param = status, err_type, param


def error_body(
    message: str, err_type: str = "BadRequestError", status: int = 400, param: str | None = None
) -> dict[str, Any]:
    """vLLM's ErrorResponse: {"error": {"message", "type", "param", "code": <HTTP status>}}."""
    return {"error": {"message": message, "type": err_type, "param": param, "code": status}}


def random_id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex}"


class _GenerationFields(BaseModel):
    """Fields shared by /v1/chat/completions and /v1/completions (unknown fields are ignored,
    as vLLM ignores them; supported-by-vLLM features we do not implement are refused)."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    n: int | None = 1
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    stream: bool | None = False
    stream_options: dict[str, Any] | None = None
    return_token_ids: bool | None = None
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    # vLLM features the local engine does not implement: refused unless left at their defaults.
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    min_p: float | None = None
    logit_bias: dict[str, float] | None = None
    min_tokens: int = 0
    use_beam_search: bool = False
    prompt_logprobs: int | None = None
    echo: bool = False

    def refuse_unsupported(self) -> None:
        neutral = {
            "presence_penalty": (None, 0.0),
            "frequency_penalty": (None, 0.0),
            "repetition_penalty": (None, 1.0),
            "min_p": (None, 0.0),
            "logit_bias": (None, {}),
            "min_tokens": (0,),
            "use_beam_search": (False,),
            "prompt_logprobs": (None,),
            "echo": (False,),
            "n": (None, 1),
        }
        for name, allowed in neutral.items():
            if getattr(self, name) not in allowed:
                raise RequestError(
                    f"`{name}` is not supported by dagent's local engine: leave it unset (or use a real vLLM engine)",
                    param=name,
                )

    def stop_strings(self) -> tuple[str, ...]:
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())


class ChatRequest(_GenerationFields):
    messages: list[dict[str, Any]] = Field(min_length=1)
    max_completion_tokens: int | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    logprobs: bool | None = False
    top_logprobs: int | None = 0
    return_tokens_as_token_ids: bool | None = None
    return_prompt_text: bool | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    add_special_tokens: bool = False
    chat_template: str | None = None
    response_format: dict[str, Any] | None = None

    def checked_tool_choice(self) -> Literal["auto", "none"]:
        """ "auto" when tools are given and tool_choice is omitted (vLLM's rule)."""
        choice = self.tool_choice if self.tool_choice is not None else ("auto" if self.tools else "none")
        if choice not in ("auto", "none"):
            raise RequestError(
                "tool_choice 'required' or a named function needs guided decoding, "
                "which dagent's local engine does not do: use 'auto' or 'none'",
                param="tool_choice",
            )
        return choice  # type: ignore[return-value]

    def validate_extras(self) -> None:
        self.refuse_unsupported()
        if self.chat_template is not None:
            raise RequestError(
                "a per-request chat_template is refused (vLLM needs "
                "--trust-request-chat-template): choose the template when building the model",
                param="chat_template",
            )
        if self.response_format not in (None, {"type": "text"}):
            raise RequestError(
                "response_format needs guided decoding, which dagent's local engine does not do: leave it unset",
                param="response_format",
            )
        if self.add_generation_prompt and self.continue_final_message:
            raise RequestError("Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
        top = self.top_logprobs or 0
        if top and not self.logprobs:
            raise RequestError("when using `top_logprobs`, `logprobs` must be set to true.", param="top_logprobs")
        if not 0 <= top <= MAX_TOP_LOGPROBS:
            raise RequestError(f"`top_logprobs` must be between 0 and {MAX_TOP_LOGPROBS}", param="top_logprobs")


class CompletionRequest(_GenerationFields):
    prompt: str | list[int]
    logprobs: int | None = None


class TokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    add_special_tokens: bool | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    return_token_strs: bool | None = False


# -- chat parsing ---------------------------------------------------------------------------
def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and part.get("type", "text") in (
                "text",
                "input_text",
                "output_text",
                "refusal",
                "thinking",
            ):
                if part.get("text") is not None:
                    texts.append(str(part["text"]))
            else:
                raise RequestError("only text content parts are supported by dagent's local engine")
        return "\n".join(texts)
    raise RequestError(f"message content must be a string or a list of parts, got {type(content).__name__}")


def parse_messages(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation as vLLM hands it to the chat template."""
    out: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if not isinstance(role, str):
            raise RequestError("every message needs a string `role`", param="messages")
        parsed: dict[str, Any] = {"role": role, "content": _content_text(message.get("content"))}
        reasoning = message.get("reasoning", message.get("reasoning_content"))
        if role == "assistant":
            if message.get("tool_calls") is not None:
                parsed["tool_calls"] = [_parse_tool_call(tc) for tc in message["tool_calls"]]
                if not parsed["tool_calls"]:
                    parsed.pop("tool_calls")
            if reasoning is not None:
                parsed["reasoning"] = parsed["reasoning_content"] = reasoning
        elif role == "tool" and "tool_call_id" in message:
            parsed["tool_call_id"] = message["tool_call_id"]
        if isinstance(message.get("name"), str):
            parsed["name"] = message["name"]
        out.append(parsed)
    return out


def _parse_tool_call(call: Any) -> dict[str, Any]:
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        raise RequestError("assistant tool_calls must be objects with a `function`", param="messages")
    call = {**call, "function": dict(call["function"])}
    arguments = call["function"].get("arguments")
    if not arguments:
        call["function"]["arguments"] = {}
    elif not isinstance(arguments, (dict, list)):
        try:
            call["function"]["arguments"] = json.loads(arguments)
        except json.JSONDecodeError as e:
            raise RequestError(f"tool call arguments are not valid JSON: {e}", param="messages") from e
    return call


def dump_tools(tools: Sequence[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Tools as vLLM's ChatCompletionToolsParam.model_dump() gives them to the template."""
    if tools is None:
        return None
    dumped = []
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise RequestError("each tool needs a `function` with a `name`", param="tools")
        extra_fn = {k: v for k, v in function.items() if k not in ("name", "description", "parameters")}
        extra = {k: v for k, v in tool.items() if k not in ("type", "function", "defer_loading")}
        dumped.append(
            {
                "type": tool.get("type", "function"),
                "function": {
                    "name": function["name"],
                    "description": function.get("description"),
                    "parameters": function.get("parameters"),
                    **extra_fn,
                },
                **extra,
            }
        )
    return dumped


# -- tool calls -----------------------------------------------------------------------------
def _xml_call(body: str) -> dict[str, Any]:
    match = _XML_FUNCTION_RE.search(body)
    if match is None:
        raise RequestError("no <function=...> block")
    arguments: dict[str, Any] = {}
    for key, raw in _XML_PARAM_RE.findall(match.group(2)):
        try:
            arguments[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            arguments[key.strip()] = raw
    return {"name": match.group(1).strip(), "arguments": arguments}


def parse_tool_calls(text: str) -> tuple[str | None, list[dict[str, Any]]]:
    """(content, tool_calls) from model text, like vLLM's hermes parser; no calls -> (text, [])."""
    if TOOL_CALL_START not in text:
        return text, []
    calls = []
    try:
        for closed, unclosed in _TOOL_CALL_RE.findall(text):
            body = (closed or unclosed).strip()
            call = json.loads(body) if body.startswith("{") else _xml_call(body)
            calls.append(
                {
                    "id": random_id("chatcmpl-tool-"),
                    "type": "function",
                    "function": {
                        "name": call["name"],
                        "arguments": json.dumps(call.get("arguments", {}), ensure_ascii=False),
                    },
                }
            )
    except (ValueError, KeyError, TypeError, AttributeError):
        return text, []  # vLLM returns the raw text as content when a call does not parse
    content = text[: text.find(TOOL_CALL_START)]
    return (content or None), calls


# -- logprobs -------------------------------------------------------------------------------
def _clamp(value: float) -> float:
    return max(value, -9999.0)


def chat_logprobs(
    steps: Sequence[Any], num_top: int, decode: Callable[[int], str], as_token_ids: bool
) -> dict[str, Any]:
    """`choices[].logprobs` for these steps, as vLLM's _create_chat_logprobs builds it."""
    content = []
    for step in steps:
        text = decode(step.token_id)
        token = f"token_id:{step.token_id}" if as_token_ids else text
        tops = []
        for token_id, logprob in step.top[:num_top]:
            top_token = f"token_id:{token_id}" if as_token_ids else decode(token_id)
            tops.append(
                {
                    "token": top_token,
                    "logprob": _clamp(logprob),
                    "bytes": list(top_token.encode("utf-8", errors="replace")),
                }
            )
        content.append(
            {
                "token": token,
                "logprob": _clamp(step.logprob),
                "bytes": list(text.encode("utf-8", errors="replace")),
                "top_logprobs": tops,
            }
        )
    return {"content": content}


def completion_logprobs(steps: Sequence[Any], num_top: int, decode: Callable[[int], str]) -> dict[str, Any]:
    """The legacy /v1/completions logprobs object (tokens, token_logprobs, top_logprobs, text_offset)."""
    tokens, values, tops, offsets, offset = [], [], [], [], 0
    for step in steps:
        text = decode(step.token_id)
        tokens.append(text)
        values.append(_clamp(step.logprob))
        tops.append({decode(i): _clamp(lp) for i, lp in step.top[: num_top + 1]})
        offsets.append(offset)
        offset += len(text)
    return {"text_offset": offsets, "token_logprobs": values, "tokens": tokens, "top_logprobs": tops}


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": None,
    }


def model_card(name: str, root: str, max_model_len: int) -> dict[str, Any]:
    created = int(time.time())
    return {
        "id": name,
        "object": "model",
        "created": created,
        "owned_by": "vllm",
        "root": root,
        "parent": None,
        "max_model_len": max_model_len,
        "permission": [
            {
                "id": random_id("modelperm-"),
                "object": "model_permission",
                "created": created,
                "allow_create_engine": False,
                "allow_sampling": True,
                "allow_logprobs": True,
                "allow_search_indices": False,
                "allow_view": True,
                "allow_fine_tuning": False,
                "organization": "*",
                "group": None,
                "is_blocking": False,
            }
        ],
    }
