"""Token generation on CPU that reports the engine's own token ids and logprobs.

Invariant: for every generated position t, the reported logprob of token_ids[t] equals
`log_softmax(model(prompt_ids + token_ids[:t]).logits[-1])[token_ids[t]]` (mode "raw_logprobs",
vLLM's default: before temperature and top-k/top-p), or the log-softmax of the logits after
temperature and truncation (mode "processed_logprobs"; truncated tokens get -inf). The ids are
the sampled ids, stop/EOS token included, exactly as vLLM returns them.

Sampling follows vLLM's sampler: greedy (argmax) below temperature 1e-5; otherwise
logits / temperature, then top-k, then top-p (ascending-cumsum rule), then one inverse-CDF draw
from a per-request `torch.Generator` seeded with the request's seed, so a seeded request is
repeatable (the draws are not vLLM's: the same seed gives other tokens than vLLM would).
One generation runs at a time (a lock); others queue.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from dagent.errors import ConfigError, EngineError, RequestRejected
from dagent.sampling import Sampling

LOGPROBS_MODES = ("raw_logprobs", "processed_logprobs")


@dataclass(frozen=True)
class GenerationRequest:
    """One completion to generate from already-tokenized prompt ids."""

    prompt_ids: tuple[int, ...]
    max_tokens: int
    sampling: Sampling
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    num_top_logprobs: int = 0
    """Alternatives to compute per position (the sampled token is always reported too)."""
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False


@dataclass(frozen=True)
class TokenStep:
    """One generated token, as the engine saw it."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...]
    """(id, logprob) pairs in vLLM's order: the sampled token first, then the most likely others."""
    text_delta: str
    """The output text this token released (may be empty while a UTF-8 char or stop string is pending)."""


@dataclass
class Generation:
    """An in-progress completion: iterate it for `TokenStep`s; afterwards read the outcome."""

    steps: list[TokenStep] = field(default_factory=list)
    text: str = ""
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    _iterator: Iterator[TokenStep] | None = None

    def __iter__(self) -> Iterator[TokenStep]:
        assert self._iterator is not None
        for step in self._iterator:
            self.steps.append(step)
            yield step

    def run(self) -> Generation:
        """Consume the whole generation; return self."""
        for _ in self:
            pass
        return self

    @property
    def token_ids(self) -> list[int]:
        return [s.token_id for s in self.steps]


def choose_token(logits: Any, sampling: Sampling, generator: Any, mode: str) -> tuple[int, Any]:
    """Pick the next token from 1-D float32 logits; return it and the logprob vector to report."""
    import torch

    raw = torch.log_softmax(logits, dim=-1)
    if sampling.greedy:
        return int(torch.argmax(logits)), raw
    x = logits / sampling.temperature
    if sampling.top_k > 0 and sampling.top_k < x.numel():
        kth = torch.topk(x, sampling.top_k).values[-1]
        x = x.masked_fill(x < kth, float("-inf"))
    if sampling.top_p < 1.0:
        sorted_x, order = torch.sort(x, descending=False)
        cumulative = torch.softmax(sorted_x, dim=-1).cumsum(dim=-1)
        drop = cumulative <= 1.0 - sampling.top_p
        drop[-1] = False
        x = x.clone()
        x[order[drop]] = float("-inf")
    processed = torch.log_softmax(x, dim=-1)
    cdf = processed.double().exp().cumsum(dim=-1)  # inverse-CDF draw: one uniform per token
    u = torch.rand((), generator=generator, dtype=torch.float64) * cdf[-1]
    token = min(int(torch.searchsorted(cdf, u, right=True)), cdf.numel() - 1)
    return token, raw if mode == "raw_logprobs" else processed


class LocalEngine:
    """A causal LM + tokenizer that renders chat prompts and generates like vLLM does."""

    def __init__(self, model: Any, tokenizer: Any, *, eos_token_ids: tuple[int, ...],
                 max_model_len: int, logprobs_mode: str = "raw_logprobs", dtype: str = "float32",
                 name: str = "local") -> None:
        if logprobs_mode not in LOGPROBS_MODES:
            raise ConfigError(f"unknown logprobs_mode {logprobs_mode!r}: use {' or '.join(LOGPROBS_MODES)}")
        self.model = model
        self.tokenizer = tokenizer
        self.eos_token_ids = tuple(eos_token_ids)
        self.max_model_len = max_model_len
        self.logprobs_mode = logprobs_mode
        self.dtype = dtype
        self.name = name
        self.lock = threading.Lock()

    # -- prompts ---------------------------------------------------------------------------
    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
               add_generation_prompt: bool = True, continue_final_message: bool = False,
               chat_template_kwargs: dict[str, Any] | None = None) -> str:
        """The chat template's text for these messages (vLLM renders text, then tokenizes it)."""
        kwargs = dict(chat_template_kwargs or {})
        try:
            return self.tokenizer.apply_chat_template(
                messages, tools=tools, add_generation_prompt=add_generation_prompt,
                continue_final_message=continue_final_message, tokenize=False, **kwargs)
        except Exception as e:  # jinja errors, raise_exception() in the template
            raise RequestRejected(f"the chat template could not render these messages: {e}") from e

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=add_special_tokens))

    def decode_token(self, token_id: int) -> str:
        """One token's text on its own, as vLLM's logprobs report it."""
        return self.tokenizer.decode([token_id]) or ""

    # -- generation ------------------------------------------------------------------------
    def generate(self, request: GenerationRequest) -> Generation:
        """Start a generation; nothing runs until it is iterated (or `.run()`)."""
        gen = Generation()
        gen._iterator = self._steps(request, gen)
        return gen

    def _forward(self, ids: list[int], cache: Any) -> tuple[Any, Any]:
        import torch

        # inference_mode is thread-local: enter it per forward, since a streamed generation may
        # resume in a different server thread at each token
        with torch.inference_mode():
            out = self.model(input_ids=torch.tensor([ids]), cache=cache, use_cache=True, logits_to_keep=1)
            return out.logits[0, -1].float(), out.cache

    def _steps(self, req: GenerationRequest, gen: Generation) -> Iterator[TokenStep]:
        import torch

        stops = set(req.stop_token_ids) | (set() if req.ignore_eos else set(self.eos_token_ids))
        generator = torch.Generator()
        if req.seed is not None:
            generator.manual_seed(req.seed)
        else:
            generator.seed()
        detok = _Detokenizer(self.tokenizer, req)
        with self.lock:  # a plain Lock: it may be released by another thread than took it
            try:
                logits, cache = self._forward(list(req.prompt_ids), None)
            except Exception as e:
                raise EngineError(f"the model failed on the prompt: {e}") from e
            for n in range(1, req.max_tokens + 1):
                token, logprobs = choose_token(logits, req.sampling, generator, self.logprobs_mode)
                top = self._top(logprobs, token, req.num_top_logprobs)
                if token in stops:
                    gen.finish_reason = "stop"
                    gen.stop_reason = token if token not in self.eos_token_ids else None
                    delta = detok.finish(token)
                else:
                    delta, hit = detok.add(token)
                    if hit is not None:
                        gen.finish_reason, gen.stop_reason = "stop", hit
                    elif n == req.max_tokens:
                        gen.finish_reason = "length"
                        delta += detok.flush()
                gen.text = detok.text
                yield TokenStep(token, float(logprobs[token]), top, delta)
                if gen.finish_reason is not None:
                    return
                try:
                    logits, cache = self._forward([token], cache)
                except Exception as e:
                    raise EngineError(f"the model failed after {n} generated tokens: {e}") from e
            gen.finish_reason = "length"

    @staticmethod
    def _top(logprobs: Any, token: int, k: int) -> tuple[tuple[int, float], ...]:
        import torch

        pairs = [(token, float(logprobs[token]))]
        if k > 0:
            values, ids = torch.topk(logprobs, min(k, logprobs.numel()))
            pairs += [(int(i), float(v)) for i, v in zip(ids, values, strict=True) if int(i) != token]
        return tuple(pairs)


class _Detokenizer:
    """Incremental text for a growing list of ids, holding back partial UTF-8 and stop strings."""

    def __init__(self, tokenizer: Any, req: GenerationRequest) -> None:
        self.tokenizer = tokenizer
        self.skip = req.skip_special_tokens
        self.stop = tuple(s for s in req.stop if s)
        self.include_stop = req.include_stop_str_in_output
        self.hold = max((len(s) for s in self.stop), default=1) - 1
        self.ids: list[int] = []
        self.text = ""  # the output text so far (what has been released)
        self.full = ""

    def _decode(self) -> str:
        return self.tokenizer.decode(self.ids, skip_special_tokens=self.skip)

    def add(self, token: int) -> tuple[str, str | None]:
        """Add a token; return the newly released text and the stop string hit, if any."""
        self.ids.append(token)
        full = self._decode()
        if full.endswith("\ufffd"):
            return "", None  # an incomplete UTF-8 sequence: wait for the next token
        self.full = full
        for stop in self.stop:
            at = full.find(stop, max(0, len(self.text) - len(stop)))
            if at >= 0:
                return self._release(full[: at + (len(stop) if self.include_stop else 0)]), stop
        return self._release(full[: max(len(self.text), len(full) - self.hold)]), None

    def finish(self, token: int) -> str:
        """The generation ended on a stop/EOS token: its own text is not part of the output."""
        self.ids.append(token)
        self.full = self.tokenizer.decode(self.ids[:-1], skip_special_tokens=self.skip)
        return self._release(self.full)

    def flush(self) -> str:
        return self._release(self._decode())

    def _release(self, upto: str) -> str:
        if len(upto) < len(self.text):  # never take back text already released
            return ""
        delta = upto[len(self.text):]
        self.text = upto
        return delta
