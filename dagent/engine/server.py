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

import signal
import threading
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from dagent.core.sampling import DEFAULT_SAMPLING, Sampling
from dagent.engine.generation import DEFAULT_PREFIX_CACHE_BYTES, LocalEngine
from dagent.engine.models import load_model
from dagent.engine.openai_wire import (
    ChatRequest,
    CompletionRequest,
    RequestError,
    TokenizeRequest,
    error_body,
    model_card,
)
from dagent.engine.packing import pack_linears
from dagent.engine.service import ChatService
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
