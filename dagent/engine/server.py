"""An OpenAI-compatible server over the local CPU engine that answers as vLLM does.

Invariant: for a chat request, `prompt_token_ids` is the tokenization of
`apply_chat_template(messages, tools=..., add_generation_prompt=True)` (rendered as text, then
encoded without extra special tokens, as vLLM does), `choices[0].token_ids` are the sampled ids
(stop token included), and each `logprobs.content[t].logprob` is the engine's logprob of
`token_ids[t]` (see `dagent.engine.generation` for "raw_logprobs" vs "processed_logprobs").
Streaming returns the same ids, text and logprobs as a non-streamed request with the same seed.

Sampling values a request omits come from `dagent.core.sampling.DEFAULT_SAMPLING` (or the `sampling`
given to `create_app`), never from the model's generation_config: the trainer reads the same
object (F05). Endpoints: POST /v1/chat/completions, POST /v1/completions (not streamed),
GET /v1/models, GET /health, POST /tokenize, POST /detokenize.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from dagent.core.sampling import DEFAULT_SAMPLING, Sampling
from dagent.engine.generation import DEFAULT_PREFIX_CACHE_BYTES, Generation, GenerationRequest, LocalEngine
from dagent.engine.models import load_model
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
    model_card,
    parse_messages,
    parse_tool_calls,
    random_id,
    usage,
)
from dagent.engine.packing import pack_linears
from dagent.errors import ConfigError, EngineError, MissingDependencyError
from dagent.serving import ThreadedServer


def build_engine(
    model: str | Path,
    *,
    logprobs_mode: str = "raw_logprobs",
    max_model_len: int | None = None,
    dtype: str = "auto",
    max_num_seqs: int = 16,
    prefix_cache_gib: float = DEFAULT_PREFIX_CACHE_BYTES / 2**30,
    pack_weights: bool = True,
) -> LocalEngine:
    """Load a named model ("tiny-qwen3", "smollm2-135m", ...) or a local directory.

    max_num_seqs: sequences batched together; prefix_cache_gib: keys/values kept for prefix
    reuse (0 turns it off). See `LocalEngine`. pack_weights: pre-pack half-precision linear
    layers for oneDNN (`dagent.engine.packing`; the weights served here never change).
    """
    if prefix_cache_gib < 0:
        raise ConfigError("prefix_cache_gib must be 0 (off) or more")
    loaded = load_model(model, dtype=dtype)
    if pack_weights:
        pack_linears(loaded.model)
    return LocalEngine(
        loaded.model,
        loaded.tokenizer,
        eos_token_ids=loaded.eos_token_ids,
        max_model_len=max_model_len or loaded.max_model_len,
        logprobs_mode=logprobs_mode,
        dtype=loaded.dtype,
        name=str(loaded.path),
        max_num_seqs=max_num_seqs,
        prefix_cache_bytes=int(prefix_cache_gib * 2**30),
    )


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


def create_app(
    model: str | Path | LocalEngine = "tiny-qwen3",
    *,
    served_model_name: str | None = None,
    sampling: Sampling = DEFAULT_SAMPLING,
    logprobs_mode: str = "raw_logprobs",
    max_model_len: int | None = None,
    dtype: str = "auto",
    **engine_options: Any,
) -> Any:
    """The FastAPI app serving one model (a name, a local directory, or a ready LocalEngine);
    engine_options go to `build_engine` (max_num_seqs, prefix_cache_gib)."""
    try:
        from fastapi import Body, FastAPI, Response
        from fastapi.exceptions import RequestValidationError
        from fastapi.responses import JSONResponse, StreamingResponse
    except ImportError as e:
        raise MissingDependencyError("fastapi", purpose="the local engine server") from e
    engine = (
        model
        if isinstance(model, LocalEngine)
        else build_engine(
            model, logprobs_mode=logprobs_mode, max_model_len=max_model_len, dtype=dtype, **engine_options
        )
    )
    served = served_model_name or (Path(engine.name).name if isinstance(model, LocalEngine) else str(model))
    service = ChatService(engine, served, sampling)
    app = FastAPI(title="dagent local engine")
    app.state.service = service

    def parse(cls: Any, body: Any) -> Any:
        if not isinstance(body, dict):
            raise RequestError("the request body must be a JSON object")
        try:
            return cls.model_validate(body)
        except ValidationError as e:
            raise RequestError(str(e)) from e

    @app.exception_handler(RequestError)
    def _request_error(_: Any, exc: RequestError) -> JSONResponse:
        return JSONResponse(error_body(str(exc), exc.err_type, exc.status, exc.param), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    def _validation_error(_: Any, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(error_body(str(exc)), status_code=400)

    @app.exception_handler(EngineError)
    def _engine_error(_: Any, exc: EngineError) -> JSONResponse:
        return JSONResponse(error_body(str(exc), "InternalServerError", 500), status_code=500)

    @app.post("/v1/chat/completions")
    def chat_completions(body: Any = Body(None)) -> Any:
        req = parse(ChatRequest, body)
        if req.stream:
            return StreamingResponse(service.chat_stream(req), media_type="text/event-stream")
        return JSONResponse(service.chat(req))

    @app.post("/v1/completions")
    def completions(body: Any = Body(None)) -> Any:
        return JSONResponse(service.completion(parse(CompletionRequest, body)))

    @app.post("/tokenize")
    def tokenize(body: Any = Body(None)) -> Any:
        return JSONResponse(service.tokenize(parse(TokenizeRequest, body)))

    @app.post("/detokenize")
    def detokenize(body: Any = Body(None)) -> Any:
        tokens = body.get("tokens") if isinstance(body, dict) else None
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise RequestError("send `tokens`: a list of token ids", param="tokens")
        service.check_model(body.get("model"))
        return JSONResponse({"prompt": engine.tokenizer.decode(tokens)})

    @app.get("/v1/models")
    def models() -> Any:
        return JSONResponse({"object": "list", "data": [model_card(served, engine.name, engine.max_model_len)]})

    @app.get("/health")
    def health() -> Any:
        return Response(status_code=200)

    return app


def serve(
    model: str | Path = "tiny-qwen3",
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    served_model_name: str | None = None,
    sampling: Sampling = DEFAULT_SAMPLING,
    logprobs_mode: str = "raw_logprobs",
    max_model_len: int | None = None,
    dtype: str = "auto",
    threads: int | None = None,
    log_level: str = "info",
    **engine_options: Any,
) -> None:
    """Run the server in the foreground (uvicorn) until interrupted.

    threads sets torch's CPU thread count for this process (None keeps torch's default);
    engine_options go to `build_engine` (max_num_seqs, prefix_cache_gib).
    """
    try:
        import uvicorn  # noqa: F401  (present, or the error below names what to install)
    except ImportError as e:
        raise MissingDependencyError("uvicorn", purpose="serving the local engine") from e
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    app = create_app(
        model,
        served_model_name=served_model_name,
        sampling=sampling,
        logprobs_mode=logprobs_mode,
        max_model_len=max_model_len,
        dtype=dtype,
        **engine_options,
    )
    # The HTTP server runs in a thread and the model on this (main) thread: see Scheduler.serve_here.

    server = ThreadedServer(app, host=host, port=port, log_level=log_level).start()
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    threading.Thread(target=lambda: (server.join(), stopped.set()), daemon=True).start()
    try:
        app.state.service.engine.scheduler.serve_here(stopped)
    finally:
        server.stop(timeout_s=10)
