"""The request handling behind the local engine's routes (`dagent.engine.server`), kept free of
FastAPI: chat (whole or streamed as SSE chunks), completions and the tokenizer endpoints, each
answered in vLLM's shape. The invariants it keeps are the server's (its module docstring).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from dagent.core.sampling import Sampling
from dagent.engine.generation import Generation, GenerationRequest, LocalEngine
from dagent.engine.openai_wire import (
    TOOL_CALL_START,
    ChatRequest,
    CompletionRequest,
    RequestError,
    TokenizeRequest,
    chat_logprobs,
    completion_logprobs,
    dump_tools,
    error_body,
    parse_messages,
    parse_tool_calls,
    random_id,
    usage,
)
from dagent.errors import ConfigError, EngineError


class ChatService:
    """The request handling behind the routes, kept free of FastAPI for direct use and tests."""

    def __init__(self, engine: LocalEngine, served_model_name: str, sampling: Sampling) -> None:
        self.engine, self.served, self.sampling = engine, served_model_name, sampling

    # -- shared ------------------------------------------------------------------------------
    def check_model(self, model: str | None) -> None:
        if model is not None and model != self.served:
            raise RequestError(
                f"The model `{model}` does not exist.", status=404, err_type="NotFoundError", param="model"
            )

    def generation_request(
        self, req: Any, prompt_ids: list[int], num_top: int, max_tokens: int | None
    ) -> GenerationRequest:
        limit, n_prompt = self.engine.max_model_len, len(prompt_ids)
        if n_prompt == 0:
            raise RequestError("the prompt is empty: send at least one token")
        if n_prompt >= limit:
            raise RequestError(
                f"This model's maximum context length is {limit} tokens. However, your "
                f"request has {n_prompt} input tokens. Please reduce the length of the "
                "input messages."
            )
        if max_tokens is None:
            max_tokens = limit - n_prompt
        elif max_tokens < 1:
            raise RequestError("max_tokens must be at least 1", param="max_tokens")
        elif max_tokens > limit - n_prompt:
            raise RequestError(
                f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This "
                f"model's maximum context length is {limit} tokens and your request has "
                f"{n_prompt} input tokens ({max_tokens} > {limit} - {n_prompt}).",
                param="max_tokens",
            )
        try:
            sampling = self.sampling.merged(req.temperature, req.top_p, req.top_k)
        except ConfigError as e:
            raise RequestError(str(e)) from e
        return GenerationRequest(
            prompt_ids=tuple(prompt_ids),
            max_tokens=max_tokens,
            sampling=sampling,
            seed=req.seed,
            stop=req.stop_strings(),
            stop_token_ids=tuple(req.stop_token_ids or ()),
            ignore_eos=req.ignore_eos,
            num_top_logprobs=num_top,
            skip_special_tokens=req.skip_special_tokens,
            include_stop_str_in_output=req.include_stop_str_in_output,
        )

    def render_prompt(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        add_generation_prompt: bool,
        continue_final_message: bool,
        chat_template_kwargs: dict[str, Any] | None,
        add_special_tokens: bool,
    ) -> tuple[str, list[int]]:
        try:
            text = self.engine.render(
                parse_messages(messages),
                dump_tools(tools),
                add_generation_prompt,
                continue_final_message,
                chat_template_kwargs,
            )
        except RequestError:
            raise
        except ValueError as e:
            raise RequestError(str(e)) from e
        return text, self.engine.encode(text, add_special_tokens=add_special_tokens)

    # -- chat --------------------------------------------------------------------------------
    def prepare_chat(self, req: ChatRequest) -> tuple[str, list[int], GenerationRequest, bool]:
        req.validate_extras()
        self.check_model(req.model)
        parse_tools = bool(req.tools) and req.checked_tool_choice() == "auto"
        text, ids = self.render_prompt(
            req.messages,
            req.tools,
            req.add_generation_prompt,
            req.continue_final_message,
            req.chat_template_kwargs,
            req.add_special_tokens,
        )
        max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
        num_top = (req.top_logprobs or 0) if req.logprobs else 0
        return text, ids, self.generation_request(req, ids, num_top, max_tokens), parse_tools

    def _logprobs(self, req: ChatRequest, steps: list[Any]) -> dict[str, Any] | None:
        if not req.logprobs:
            return None
        return chat_logprobs(
            steps, req.top_logprobs or 0, self.engine.decode_token, bool(req.return_tokens_as_token_ids)
        )

    def chat(self, req: ChatRequest) -> dict[str, Any]:
        prompt_text, ids, gen_req, parse_tools = self.prepare_chat(req)
        gen = self.engine.generate(gen_req).run()
        content, calls = parse_tool_calls(gen.text) if parse_tools else (gen.text, [])
        message: dict[str, Any] = {
            "role": "assistant",
            "content": content,
            "refusal": None,
            "annotations": None,
            "audio": None,
            "function_call": None,
        }
        if calls:
            message["tool_calls"] = calls
        message["reasoning"] = None
        choice = {
            "index": 0,
            "message": message,
            "logprobs": self._logprobs(req, gen.steps),
            "finish_reason": "tool_calls" if calls else gen.finish_reason,
            "stop_reason": gen.stop_reason,
            "token_ids": gen.token_ids if req.return_token_ids else None,
        }
        body = {
            "id": random_id("chatcmpl-"),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.served,
            "choices": [choice],
            "service_tier": None,
            "system_fingerprint": None,
            "usage": usage(len(ids), len(gen.steps)),
            "prompt_logprobs": None,
            "prompt_token_ids": ids if req.return_token_ids else None,
            "kv_transfer_params": None,
        }
        if req.return_prompt_text:
            body["prompt_text"] = prompt_text
        return body

    def chat_stream(self, req: ChatRequest) -> Iterator[str]:
        """Validate now (errors become HTTP errors), then return the SSE chunks lazily."""
        prompt_text, ids, gen_req, parse_tools = self.prepare_chat(req)
        return self._chat_chunks(req, prompt_text, ids, self.engine.generate(gen_req), parse_tools)

    def _chat_chunks(
        self, req: ChatRequest, prompt_text: str, ids: list[int], gen: Generation, parse_tools: bool
    ) -> Iterator[str]:
        rid, created = random_id("chatcmpl-"), int(time.time())

        def chunk(choices: list[dict[str, Any]], **extra: Any) -> str:
            data = {
                "id": rid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": self.served,
                "choices": choices,
                **extra,
            }
            return f"data: {json.dumps(data, ensure_ascii=False, separators=(',', ':'))}\n\n"

        first: dict[str, Any] = {"prompt_token_ids": ids if req.return_token_ids else None}
        if req.return_prompt_text:
            first["prompt_text"] = prompt_text
        yield chunk(
            [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}],
            **first,
        )
        tools = _ToolCallStream() if parse_tools else None
        # vLLM: usage is sent when stream_options is given (include_usage defaults to true there)
        include_usage = req.stream_options is not None and req.stream_options.get("include_usage", True) is not False
        continuous = include_usage and bool((req.stream_options or {}).get("continuous_usage_stats"))
        try:
            for n_tokens, step in enumerate(gen, start=1):
                finished = gen.finish_reason is not None
                delta = tools.feed(step.text_delta, finished) if tools else {"content": step.text_delta}
                logprobs = self._logprobs(req, [step])
                if delta is None:
                    if not finished and logprobs is None and not req.return_token_ids:
                        continue
                    delta = {}
                choice: dict[str, Any] = {
                    "index": 0,
                    "delta": delta,
                    "logprobs": logprobs,
                    "finish_reason": None,
                    "token_ids": [step.token_id] if req.return_token_ids else None,
                }
                if finished:
                    called = tools is not None and tools.called and gen.finish_reason == "stop"
                    choice["finish_reason"] = "tool_calls" if called else gen.finish_reason
                    choice["stop_reason"] = gen.stop_reason
                extra = {"usage": usage(len(ids), n_tokens)} if continuous else {}
                yield chunk([choice], **extra)
            if include_usage:
                final = {k: v for k, v in usage(len(ids), len(gen.steps)).items() if v is not None}
                yield chunk([], usage=final)
        except EngineError as e:
            yield f"data: {json.dumps(error_body(str(e), 'InternalServerError', 500))}\n\n"
        yield "data: [DONE]\n\n"

    # -- completions, tokenizer endpoints ---------------------------------------------------
    def completion(self, req: CompletionRequest) -> dict[str, Any]:
        req.refuse_unsupported()
        self.check_model(req.model)
        if req.stream:
            raise RequestError(
                "stream is not supported on /v1/completions by dagent's local engine: use /v1/chat/completions",
                param="stream",
            )
        if req.logprobs is not None and not 0 <= req.logprobs <= 20:
            raise RequestError("`logprobs` must be between 0 and 20", param="logprobs")
        ids = self.engine.encode(req.prompt, True) if isinstance(req.prompt, str) else list(req.prompt)
        gen = self.engine.generate(self.generation_request(req, ids, req.logprobs or 0, req.max_tokens)).run()
        logprobs = None
        if req.logprobs is not None:
            logprobs = completion_logprobs(gen.steps, req.logprobs, self.engine.decode_token)
        choice = {
            "index": 0,
            "text": gen.text,
            "logprobs": logprobs,
            "finish_reason": gen.finish_reason,
            "stop_reason": gen.stop_reason,
            "token_ids": gen.token_ids if req.return_token_ids else None,
            "prompt_logprobs": None,
            "prompt_token_ids": ids if req.return_token_ids else None,
        }
        return {
            "id": random_id("cmpl-"),
            "object": "text_completion",
            "created": int(time.time()),
            "model": self.served,
            "choices": [choice],
            "usage": usage(len(ids), len(gen.steps)),
            "system_fingerprint": None,
            "kv_transfer_params": None,
        }

    def tokenize(self, req: TokenizeRequest) -> dict[str, Any]:
        self.check_model(req.model)
        if req.messages is not None:
            _, ids = self.render_prompt(
                req.messages,
                req.tools,
                req.add_generation_prompt,
                req.continue_final_message,
                req.chat_template_kwargs,
                bool(req.add_special_tokens),
            )
        elif req.prompt is not None:
            add = True if req.add_special_tokens is None else req.add_special_tokens
            ids = self.engine.encode(req.prompt, add_special_tokens=add)
        else:
            raise RequestError("send `prompt` or `messages`")
        strs = self.engine.tokenizer.convert_ids_to_tokens(ids) if req.return_token_strs else None
        return {"count": len(ids), "max_model_len": self.engine.max_model_len, "tokens": ids, "token_strs": strs}


class _ToolCallStream:
    """Streams content until `<tool_call>` appears, then holds the rest until the end, where the
    whole text is parsed; the calls go out complete in the final chunk (OpenAI clients accept one
    delta per call; vLLM's hermes streamer splits name and arguments over several)."""

    def __init__(self) -> None:
        self.text, self.sent, self.called = "", 0, False

    def feed(self, delta: str, finished: bool) -> dict[str, Any] | None:
        self.text += delta
        if finished:
            content, calls = parse_tool_calls(self.text)
            if not calls:
                return {"content": self.text[self.sent :]}
            self.called = True
            out: dict[str, Any] = {"tool_calls": [{"index": i, **call} for i, call in enumerate(calls)]}
            if content and content[self.sent :]:
                out["content"] = content[self.sent :]
            return out
        at = self.text.find(TOOL_CALL_START)
        if at < 0:  # hold back a tail that may be the start of "<tool_call>"
            at = len(self.text)
            for k in range(min(len(TOOL_CALL_START) - 1, len(self.text)), 0, -1):
                if TOOL_CALL_START.startswith(self.text[-k:]):
                    at -= k
                    break
        if at <= self.sent:
            return None
        out_text, self.sent = self.text[self.sent : at], at
        return {"content": out_text}
