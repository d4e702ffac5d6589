"""Token generation on CPU that reports the engine's own token ids and logprobs.

Invariant: for every generated position t, the reported logprob of token_ids[t] equals
`log_softmax(model(prompt_ids + token_ids[:t]).logits[-1])[token_ids[t]]` (mode "raw_logprobs",
vLLM's default: before temperature and top-k/top-p), or the log-softmax of the logits after
temperature and truncation (mode "processed_logprobs"; truncated tokens get -inf). The ids are
the sampled ids, stop/EOS token included, exactly as vLLM returns them.

Sampling follows vLLM's sampler: greedy (argmax) below temperature 1e-5; otherwise
logits / temperature, then top-k, then top-p (ascending-cumsum rule), then one inverse-CDF draw
(`_draw`) from a per-request `torch.Generator` seeded with the request's seed, so a seeded request is
repeatable whatever else runs beside it (the draws are not vLLM's: the same seed gives other
tokens than vLLM would).

Concurrent generations share forward passes (`dagent.engine.batching` and `dagent.engine.scheduler`:
continuous batching, chunked prefill, prefix reuse) when the model allows it, else they run one at a time. Each
`Sequence` owns
its sampling, detokenizing and stop rules; the scheduler thread feeds it one row of logits per
step, and the consumer's iterator reads its steps from a queue, so batching changes when a token
is computed, never which.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from dagent.core.sampling import Sampling
from dagent.engine.batching import backend_for
from dagent.engine.scheduler import Scheduler
from dagent.errors import ConfigError, RequestRejected

LOGPROBS_MODES = ("raw_logprobs", "processed_logprobs")
DEFAULT_PREFIX_CACHE_BYTES = 1 << 30


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
    logits_processor: Any = None
    """Optional `(ids, logits) -> logits` applied before sampling, `ids` the prompt and the tokens
    sampled so far (a transformers `LogitsProcessor` over one row; `dagent.train.whitebox.engine_generation`
    passes `sequence_bias` this way). The reported logprobs are those of the processed logits."""


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
        try:
            for step in self._iterator:
                self.steps.append(step)
                yield step
        finally:
            self._iterator.close()  # a consumer that stops early cancels the generation now

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
    kept = None  # the ids top-k left finite (top-p only needs to sort those)
    if sampling.top_k > 0 and sampling.top_k < x.numel():
        kth = torch.topk(x, sampling.top_k).values[-1]
        x = x.masked_fill(x < kth, float("-inf"))
        kept = torch.nonzero(x >= kth).squeeze(1)
    if sampling.top_p < 1.0:
        values = x if kept is None else x[kept]
        sorted_x, order = torch.sort(values, descending=False)
        cumulative = torch.softmax(sorted_x, dim=-1).cumsum(dim=-1)
        drop = cumulative <= 1.0 - sampling.top_p
        drop[-1] = False
        x = x.clone()
        x[order[drop] if kept is None else kept[order[drop]]] = float("-inf")
    if mode == "raw_logprobs":
        return _draw(torch.softmax(x, dim=-1), generator), raw
    processed = torch.log_softmax(x, dim=-1)
    return _draw(processed.exp(), generator), processed


_BLOCK = 1024


def _draw(probs: Any, generator: Any) -> int:
    """One inverse-CDF draw (one uniform per token) from 1-D probabilities. Sums are float64,
    over 1,024-id blocks and then within the chosen block (a float64 cumsum of the whole vocabulary
    costs tens of times more at 152k ids). Zero-probability ids are never
    drawn: the first cumulative value above u is never that of an id adding nothing."""
    import torch

    n = probs.numel()
    full = n - n % _BLOCK
    sums = probs[:full].view(-1, _BLOCK).sum(dim=1, dtype=torch.float64)
    if full < n:
        sums = torch.cat([sums, probs[full:].sum(dtype=torch.float64).view(1)])
    cum = sums.cumsum(dim=0)
    u = torch.rand((), generator=generator, dtype=torch.float64) * cum[-1]
    b = min(int(torch.searchsorted(cum, u, right=True)), cum.numel() - 1)
    part = probs[b * _BLOCK : (b + 1) * _BLOCK]
    below = cum[b - 1] if b else torch.zeros((), dtype=torch.float64)
    i = int(torch.searchsorted(part.cumsum(dim=0, dtype=torch.float64), u - below, right=True))
    if i >= part.numel():  # u fell in the rounding gap between the two sums: the block's last live id
        i = int(torch.nonzero(part)[-1])
    return b * _BLOCK + i


def top_logprobs(logprobs: Any, token: int, k: int) -> tuple[tuple[int, float], ...]:
    """The sampled token's (id, logprob), then the k most likely (vLLM's order, no repeat)."""
    import torch

    pairs = [(token, float(logprobs[token]))]
    if k > 0:
        values, ids = torch.topk(logprobs, min(k, logprobs.numel()))
        pairs += [(int(i), float(v)) for i, v in zip(ids, values, strict=True) if int(i) != token]
    return tuple(pairs)


class LocalEngine:
    """A causal LM + tokenizer that renders chat prompts and generates like vLLM does.

    max_num_seqs bounds the sequences batched together (vLLM's name); prefix_cache_bytes bounds
    the keys/values kept for prefix reuse (0 turns reuse off). Both apply only to models the
    batched backend accepts (`dagent.engine.batching.RaggedBackend.for_model`).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        eos_token_ids: tuple[int, ...],
        max_model_len: int,
        logprobs_mode: str = "raw_logprobs",
        dtype: str = "float32",
        name: str = "local",
        max_num_seqs: int = 16,
        prefix_cache_bytes: int = DEFAULT_PREFIX_CACHE_BYTES,
    ) -> None:
        if logprobs_mode not in LOGPROBS_MODES:
            raise ConfigError(f"unknown logprobs_mode {logprobs_mode!r}: use {' or '.join(LOGPROBS_MODES)}")
        if max_num_seqs < 1:
            raise ConfigError("max_num_seqs must be at least 1")
        self.tokenizer = tokenizer
        self.eos_token_ids = tuple(eos_token_ids)
        self.max_model_len = max_model_len
        self.logprobs_mode = logprobs_mode
        self.dtype = dtype
        self.name = name
        self.max_num_seqs, self.prefix_cache_bytes = max_num_seqs, prefix_cache_bytes
        self.model = model

    @property
    def model(self) -> Any:
        return self._model

    @model.setter
    def model(self, model: Any) -> None:
        """Swapping the model (a test wrapping it, say) picks its backend afresh; generations
        already running finish on the previous one."""
        self._model = model
        self.backend = backend_for(model, self.prefix_cache_bytes)
        self.scheduler = Scheduler(self.backend, self.max_num_seqs)

    @property
    def batched(self) -> bool:
        """Whether concurrent generations share forward passes (else they run one at a time)."""
        return self.backend.batched

    # -- prompts ---------------------------------------------------------------------------
    def render(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        chat_template_kwargs: dict[str, Any] | None = None,
    ) -> str:
        """The chat template's text for these messages (vLLM renders text, then tokenizes it)."""
        kwargs = dict(chat_template_kwargs or {})
        try:
            return self.tokenizer.apply_chat_template(
                messages,
                tools=tools,
                add_generation_prompt=add_generation_prompt,
                continue_final_message=continue_final_message,
                tokenize=False,
                **kwargs,
            )
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

    def run_here(self, requests: list[GenerationRequest]) -> list[Generation]:
        """Run these generations to their end together, the model on the calling thread
        (`Scheduler.serve_here`: faster than a scheduler thread), each consumed on a thread of its
        own once this thread serves; the first error any of them raised is raised here."""
        generations = [self.generate(r) for r in requests]
        errors: list[BaseException] = []
        done, left, lock = threading.Event(), [len(generations)], threading.Lock()

        def consume(gen: Generation) -> None:
            try:
                self.scheduler.resident.wait(timeout=30)  # submitted to this thread, not a scheduler thread
                gen.run()
            except BaseException as e:  # noqa: BLE001 - raised on the calling thread below
                errors.append(e)
            finally:
                with lock:
                    left[0] -= 1
                    if left[0] == 0:
                        done.set()

        if generations:
            threads = [threading.Thread(target=consume, args=(g,), daemon=True) for g in generations]
            for t in threads:
                t.start()
            self.scheduler.serve_here(done)
            for t in threads:
                t.join()
        if errors:
            raise errors[0]
        return generations

    def _steps(self, req: GenerationRequest, gen: Generation) -> Iterator[TokenStep]:
        seq = Sequence(self, req)
        self.scheduler.submit(seq)
        try:
            while True:
                item = seq.out.get()
                if isinstance(item, BaseException):
                    raise item
                step, gen.text, gen.finish_reason, gen.stop_reason = item
                yield step
                if gen.finish_reason is not None:
                    return
        finally:
            seq.cancelled = True  # a consumer that stops early (a closed stream) frees the row


class Sequence:
    """One generation as the scheduler runs it: prompt progress, sampling state, output queue.

    Only the scheduler thread calls `advance`/`fail`; the consumer reads `out` and may set
    `cancelled`.
    """

    def __init__(self, engine: LocalEngine, req: GenerationRequest) -> None:
        import torch

        self.req, self.engine = req, engine
        self.prompt = list(req.prompt_ids)
        self.pos = 0
        self.last_token: int | None = None
        self.state: Any = None
        self.wait: Any = None
        self.cancelled = self.finished = self.done = False
        self.n = 0
        self.sampled: list[int] = []  # what `req.logits_processor` reads after the prompt
        self.stops = set(req.stop_token_ids) | (set() if req.ignore_eos else set(engine.eos_token_ids))
        self.generator = torch.Generator()
        if req.seed is not None:
            self.generator.manual_seed(req.seed)
        else:
            self.generator.seed()
        self.detok = _Detokenizer(engine.tokenizer, req)
        self.out: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def reserve(self) -> int:
        """Positions to allocate up front (more are added as needed)."""
        return len(self.prompt) + min(self.req.max_tokens, 256)

    def advance(self, logits: Any) -> None:
        """Sample the next token from this sequence's logits (1-D float32) and publish the step."""
        req, engine = self.req, self.engine
        if req.logits_processor is not None:
            logits = req.logits_processor(self.prompt + self.sampled, logits)
        token, logprobs = choose_token(logits, req.sampling, self.generator, engine.logprobs_mode)
        self.sampled.append(token)
        top = top_logprobs(logprobs, token, req.num_top_logprobs)
        self.n += 1
        finish, stop_reason = None, None
        if token in self.stops:
            finish, stop_reason = "stop", (token if token not in engine.eos_token_ids else None)
            delta = self.detok.finish(token)
        else:
            delta, hit = self.detok.add(token)
            if hit is not None:
                finish, stop_reason = "stop", hit
            elif self.n == req.max_tokens:
                finish = "length"
                delta += self.detok.flush()
        self.last_token = token
        self.finished = finish is not None
        self.out.put((TokenStep(token, float(logprobs[token]), top, delta), self.detok.text, finish, stop_reason))

    def fail(self, error: BaseException) -> None:
        self.finished = True
        self.out.put(error)


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
        delta = upto[len(self.text) :]
        self.text = upto
        return delta
