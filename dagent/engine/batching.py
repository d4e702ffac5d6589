"""Continuous batching for the local engine: concurrent sequences share each forward pass.

Invariant: every sequence's logits are those of the model run on that sequence alone (equal to
float rounding, about 1e-6 in float32), whatever else shares its steps. Each step packs the new
tokens of all running sequences into one `[1, T]` input with each sequence's own position ids;
projections, MLPs and the LM head run once over the T tokens, and attention runs per sequence
against that sequence's own keys and values (`ragged_attention`): no padding, so no mask can leak
between sequences and rotary positions are each sequence's own. `RaggedBackend.self_check` proves
this on the loaded model before batching is used; a model that fails it (or is not a plain
full-attention transformers model, e.g. the hybrid Qwen3.5 stack or a test's scripted callable)
is served one sequence at a time by `SerialBackend`, the engine's previous behaviour.

Finished sequences' keys and values stay in a byte-bounded LRU (`PrefixCache`); a new prompt
copies the longest cached (or still running) prefix instead of recomputing it, as vLLM's automatic
prefix caching does, so a GRPO group of identical prompts or an agent's next turn prefills only
its new tokens. Reused keys and values were computed from the same tokens at the same positions,
so they equal recomputed ones to float rounding.

Which rows run in each step is `dagent.engine.scheduler`'s choice; what a sequence is (its
sampling, detokenizing and stop rules) is `dagent.engine.generation`'s.
"""

from __future__ import annotations

import functools
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Protocol

from dagent.errors import EngineError


class Row(Protocol):
    """What the scheduler needs of a sequence (`dagent.engine.generation.Sequence`)."""

    prompt: list[int]
    pos: int  # prompt tokens fed so far
    last_token: int | None
    state: Any  # the backend's per-sequence state
    wait: Any  # the backend's note of a prefix it waits for
    cancelled: bool  # set by the consumer: stop generating
    finished: bool  # set by advance/fail: nothing more to generate
    done: bool  # set by the scheduler: no longer running (no more keys/values will be computed)

    def reserve(self) -> int: ...
    def advance(self, logits: Any) -> None: ...
    def fail(self, error: BaseException) -> None: ...


ATTENTION = "dagent_ragged"


# -- keys and values ------------------------------------------------------------------------
class SequenceKV:
    """One sequence's keys and values per layer, `[1, kv_heads, capacity, head_dim]` buffers
    grown by doubling; positions `[0, length)` hold the keys/values of `tokens`."""

    def __init__(self, reserve: int) -> None:
        self.keys: list[Any] = []
        self.values: list[Any] = []
        self.length = 0
        self.tokens: list[int] = []
        self.reserve = max(16, reserve)

    @property
    def nbytes(self) -> int:
        return sum(t.element_size() * t.nelement() for t in (*self.keys, *self.values))

    def slot(self, layer: int, like: Any, end: int) -> tuple[Any, Any]:
        """The buffers of a layer, holding at least `end` positions (allocated like `like`)."""
        import torch

        if layer == len(self.keys):
            shape = (1, like.shape[1], _rounded(max(end, self.reserve)), like.shape[3])
            self.keys.append(torch.empty(shape, dtype=like.dtype))
            self.values.append(torch.empty(shape, dtype=like.dtype))
        elif layer > len(self.keys):
            raise EngineError(f"the model updated cache layer {layer} before layer {len(self.keys)}")
        keys, values = self.keys[layer], self.values[layer]
        if end > keys.shape[2]:
            shape = (1, keys.shape[1], _rounded(max(end, 2 * keys.shape[2])), keys.shape[3])
            grown_k, grown_v = torch.empty(shape, dtype=keys.dtype), torch.empty(shape, dtype=keys.dtype)
            grown_k[:, :, : self.length] = keys[:, :, : self.length]
            grown_v[:, :, : self.length] = values[:, :, : self.length]
            self.keys[layer], self.values[layer] = keys, values = grown_k, grown_v
        return keys, values

    def copy_prefix(self, source: SequenceKV, n: int) -> None:
        """Start as the first n positions of another sequence (whose first n tokens are ours)."""
        for layer, (k, v) in enumerate(zip(source.keys, source.values, strict=True)):
            keys, values = self.slot(layer, k, n)
            keys[:, :, :n] = k[:, :, :n]
            values[:, :, :n] = v[:, :, :n]
        self.length, self.tokens = n, source.tokens[:n]


def _rounded(n: int) -> int:
    return -(-n // 64) * 64


class _Ragged:
    """What `PackedStep.update` hands to the attention: each row's keys/values so far."""

    def __init__(self, rows: list[tuple[Any, Any, int, int, int]]) -> None:
        self.rows = rows  # (keys, values, past, start, n)


class PackedStep:
    """The `cache` of one packed forward: rows are (SequenceKV, start in the packed input, n)."""

    def __init__(self, rows: list[tuple[SequenceKV, int, int]]) -> None:
        self.rows = rows

    def update(self, key_states: Any, value_states: Any, layer_idx: int, kwargs: Any = None) -> tuple[Any, Any]:
        out = []
        for kv, start, n in self.rows:
            past = kv.length
            keys, values = kv.slot(layer_idx, key_states, past + n)
            keys[:, :, past: past + n] = key_states[:, :, start: start + n]
            values[:, :, past: past + n] = value_states[:, :, start: start + n]
            out.append((keys[:, :, : past + n], values[:, :, : past + n], past, start, n))
        ragged = _Ragged(out)
        return ragged, ragged

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0  # positions are always passed explicitly

    def commit(self, new_tokens: Sequence[list[int]]) -> None:
        for (kv, _, n), tokens in zip(self.rows, new_tokens, strict=True):
            kv.length += n
            kv.tokens.extend(tokens)


def ragged_attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any,
                     dropout: float = 0.0, scaling: float | None = None, **kwargs: Any) -> tuple[Any, None]:
    """Attention per packed row against its own keys/values; anything else goes to sdpa."""
    import torch
    import torch.nn.functional as F

    if not isinstance(key, _Ragged):
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, **kwargs)
    gqa = query.shape[1] != key.rows[0][0].shape[1]
    outs = []
    kernel = decode_kernel(query.dtype, key.rows[0][0].shape[1], query.shape[1], query.shape[3])
    for keys, values, past, start, n in key.rows:
        if n == 1:
            outs.append(kernel(query[:, :, start: start + 1], keys, values, scaling))
            continue
        mask = None
        if n > 1 and past > 0:  # a prefill chunk after earlier positions: causal, offset by past
            mask = torch.ones(n, past + n, dtype=torch.bool).tril(diagonal=past)
        outs.append(F.scaled_dot_product_attention(
            query[:, :, start: start + n], keys, values, attn_mask=mask, is_causal=n > 1 and past == 0,
            scale=scaling, enable_gqa=gqa))
    out = outs[0] if len(outs) == 1 else torch.cat(outs, dim=2)
    return out.transpose(1, 2).contiguous(), None


def decode_attention(query: Any, keys: Any, values: Any, scaling: float | None) -> Any:
    """One new token against a sequence's keys/values, query heads grouped onto their key/value
    head (transformers' `repeat_kv` order: query head h reads kv head h // group), computed in
    float32 whatever the model's dtype. On some CPUs `scaled_dot_product_attention` is slow for
    one query in bfloat16, on others it is the faster (figures: benchmarks/README.md), so
    `decode_kernel` times both on the machine it runs on."""
    import torch

    _, heads, _, dim = query.shape
    kv_heads = keys.shape[1]
    grouped = query.float().reshape(1, kv_heads, heads // kv_heads, dim)
    scores = torch.matmul(grouped, keys.float().transpose(-1, -2)) * (dim ** -0.5 if scaling is None else scaling)
    out = torch.matmul(torch.softmax(scores, dim=-1), values.float())
    return out.to(query.dtype).reshape(1, heads, 1, dim)


def sdpa_decode(query: Any, keys: Any, values: Any, scaling: float | None) -> Any:
    """One new token against a sequence's keys/values with `scaled_dot_product_attention`."""
    import torch.nn.functional as F

    return F.scaled_dot_product_attention(query, keys, values, scale=scaling,
                                          enable_gqa=query.shape[1] != keys.shape[1])


DECODE_KERNELS = {"float32": decode_attention, "sdpa": sdpa_decode}


@functools.cache
def decode_kernel(dtype: Any, kv_heads: int, heads: int, head_dim: int) -> Any:
    """The faster decode-attention kernel for this shape on this CPU, timed once per process on a
    1,024-token context (the best of 3 runs of 8 calls each; either kernel gives the same
    attention to the dtype's rounding, so a noisy timing costs speed, never correctness)."""
    import torch

    gen = torch.Generator().manual_seed(0)
    query = torch.randn(1, heads, 1, head_dim, generator=gen).to(dtype)
    keys, values = (torch.randn(1, kv_heads, 1024, head_dim, generator=gen).to(dtype) for _ in range(2))
    timings = {}
    with torch.inference_mode():
        for name, kernel in DECODE_KERNELS.items():
            runs = []
            for _ in range(3):
                start = time.perf_counter()
                for _ in range(8):
                    kernel(query, keys, values, None)
                runs.append(time.perf_counter() - start)
            timings[name] = min(runs)
    return DECODE_KERNELS[min(timings, key=timings.__getitem__)]


def _register_attention() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTENTION, ragged_attention)
    AttentionMaskInterface.register(ATTENTION, sdpa_mask)  # unpacked calls get sdpa's masks


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    import numpy as np

    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0]) if diff.size else n


class PrefixCache:
    """Finished sequences' keys/values, least recently used out first, within a byte budget."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget = budget_bytes
        self.entries: OrderedDict[int, SequenceKV] = OrderedDict()
        self.nbytes = 0

    def add(self, kv: SequenceKV) -> None:
        if kv.length == 0 or kv.nbytes > self.budget:
            return
        for key, old in list(self.entries.items()):  # an entry this one extends is redundant
            if old.length <= kv.length and _common_prefix(old.tokens, kv.tokens) == old.length:
                self._drop(key)
        self.entries[id(kv)] = kv
        self.nbytes += kv.nbytes
        while self.nbytes > self.budget:
            self._drop(next(iter(self.entries)))

    def _drop(self, key: int) -> None:
        self.nbytes -= self.entries.pop(key).nbytes

    def clear(self) -> None:
        """Forget every entry (the weights that computed them changed)."""
        self.entries.clear()
        self.nbytes = 0

    def longest(self, tokens: Sequence[int]) -> tuple[SequenceKV | None, int]:
        best, best_n = None, 0
        for kv in self.entries.values():
            n = _common_prefix(tokens, kv.tokens)
            if n > best_n:
                best, best_n = kv, n
        if best is not None:
            self.entries.move_to_end(id(best))
        return best, best_n


def within_rounding(got: Any, want: Any, dtype: Any) -> bool:
    """Whether log-probabilities `got` equal `want` to the rounding of `dtype`. float32: every id
    within 1e-3. Half precision rounds each logit to ~3 significant digits, so a cached forward
    differs from a full one on tail ids by tenths of a nat whatever computes it (transformers' own
    cached decode included; figures: benchmarks/README.md): there the expected error
    under `want` must stay under 0.1 nats and no id may move by a nat. A leak between rows or a
    wrong position moves the expected error by nats (tests/engine/test_batching.py)."""
    import torch

    diff = (got - want).abs()
    if dtype == torch.float32:
        return float(diff.max()) <= 1e-3
    expected = (want.exp() * diff).sum(dim=-1)
    return float(expected.max()) <= 0.1 and float(diff.max()) <= 1.0


# -- backends -------------------------------------------------------------------------------
class SerialBackend:
    """Any callable with the transformers causal-LM interface (`input_ids`, `cache`, `use_cache`,
    `logits_to_keep` -> `.logits`, `.cache`), one sequence at a time, whole prompt at once."""

    batched = False

    def __init__(self, model: Any) -> None:
        self.model = model

    def admit(self, seq: Row, running: Sequence[Row]) -> None:
        seq.state = None

    def ready(self, seq: Row) -> bool:
        return True

    def forward(self, rows: list[tuple[Row, list[int]]]) -> list[Any]:
        import torch

        [(seq, ids)] = rows
        out = self.model(input_ids=torch.tensor([ids]), cache=seq.state, use_cache=True, logits_to_keep=1)
        seq.state = out.cache
        return [out.logits[0, -1].float()]

    def release(self, seq: Row, reusable: bool) -> None:
        seq.state = None


class RaggedBackend:
    """A transformers full-attention causal LM run on packed rows (see the module docstring)."""

    batched = True

    def __init__(self, model: Any, prefix_cache_bytes: int) -> None:
        import torch

        self.model = model
        self.prefix = PrefixCache(prefix_cache_bytes) if prefix_cache_bytes > 0 else None
        self._mask = torch.ones(1, 1, 1, 1, dtype=torch.bool)  # a 4D mask: transformers builds none
        self.reused_tokens = 0

    @classmethod
    def for_model(cls, model: Any, prefix_cache_bytes: int) -> RaggedBackend | None:
        """The batched backend if this model qualifies and passes the self-check, else None."""
        try:
            from transformers import PreTrainedModel
        except ImportError:
            return None
        config = getattr(model, "config", None)
        if not isinstance(model, PreTrainedModel) or config is None:
            return None
        if any(t != "full_attention" for t in getattr(config, "layer_types", None) or ()):
            return None  # sliding-window or linear-attention layers keep other state
        if getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True) is not False:
            return None
        previous = config._attn_implementation
        if previous not in ("sdpa", ATTENTION):
            return None  # eager/flash numerics would change under sdpa
        _register_attention()
        try:
            model.set_attn_implementation(ATTENTION)
        except (KeyError, ValueError):
            return None
        backend = cls(model, prefix_cache_bytes)
        if config._attn_implementation == ATTENTION and backend.self_check():
            return backend
        model.set_attn_implementation(previous)
        return None

    # -- the forward pass ----------------------------------------------------------------------
    def run(self, rows: list[tuple[SequenceKV, list[int]]]) -> Any:
        """Feed each row's new tokens after its cached ones; logits at each row's last token."""
        import torch

        ids: list[int] = []
        positions: list[int] = []
        packed, last = [], []
        for kv, new in rows:
            packed.append((kv, len(ids), len(new)))
            positions.extend(range(kv.length, kv.length + len(new)))
            ids.extend(new)
            last.append(len(ids) - 1)
        step = PackedStep(packed)
        out = self.model(input_ids=torch.tensor([ids]), position_ids=torch.tensor([positions]),
                         attention_mask=self._mask, cache=step, use_cache=True,
                         logits_to_keep=torch.tensor(last))
        step.commit([new for _, new in rows])
        return out.logits[0].float()

    def self_check(self) -> bool:
        """Packed, chunked, cached logits equal one plain forward pass per sequence."""
        import torch

        vocab = min(int(self.model.config.vocab_size), 5000)
        gen = torch.Generator().manual_seed(0)
        a, b = (torch.randint(0, vocab, (n,), generator=gen).tolist() for n in (11, 6))
        try:
            with torch.inference_mode():
                ref_a = torch.log_softmax(self.model(input_ids=torch.tensor([a])).logits[0].float(), -1)
                ref_b = torch.log_softmax(self.model(input_ids=torch.tensor([b])).logits[0].float(), -1)
                ka, kb = SequenceKV(8), SequenceKV(8)
                got, want = [], []
                for rows, refs in (([(ka, a[:4])], [ref_a[3]]),
                                   ([(ka, a[4:9]), (kb, b[:5])], [ref_a[8], ref_b[4]]),
                                   ([(kb, b[5:6]), (ka, a[9:10])], [ref_b[5], ref_a[9]]),
                                   ([(ka, a[10:11])], [ref_a[10]])):
                    got.append(torch.log_softmax(self.run(rows), -1))
                    want.append(torch.stack(refs))
        except Exception:
            return False
        return all(within_rounding(g, w, self.model.dtype) for g, w in zip(got, want, strict=True))

    # -- the scheduler's interface ---------------------------------------------------------------
    def admit(self, seq: Row, running: Sequence[Row]) -> None:
        seq.state, seq.wait = SequenceKV(seq.reserve()), None
        if self.prefix is None:
            return
        limit = len(seq.prompt) - 1  # the last prompt token is always computed: it gives the logits
        cached, n = self.prefix.longest(seq.prompt)
        source = None
        for other in running:  # a running sequence may be computing the same prefix right now
            kv = other.state
            if other is seq or other.done or kv is None:
                continue
            tokens = kv.tokens if kv.length >= len(other.prompt) else other.prompt
            m = _common_prefix(seq.prompt, tokens)
            if m > n:
                cached, n, source = kv, m, other
        n = min(n, limit)
        if n <= 0:
            return
        if source is None:
            self._copy(seq, cached, n)
        else:
            seq.wait = (source, cached, n)

    def ready(self, seq: Row) -> bool:
        """False while the prefix this sequence waits for is still being computed elsewhere."""
        if seq.wait is None:
            return True
        source, kv, n = seq.wait
        if kv.length < n and not source.done:
            return False
        seq.wait = None
        self._copy(seq, kv, min(n, kv.length))
        return True

    def _copy(self, seq: Row, source: SequenceKV, n: int) -> None:
        if n > 0:
            seq.state.copy_prefix(source, n)
            seq.pos = n
            self.reused_tokens += n

    def forward(self, rows: list[tuple[Row, list[int]]]) -> Any:
        return self.run([(seq.state, ids) for seq, ids in rows])

    def release(self, seq: Row, reusable: bool) -> None:
        if reusable and self.prefix is not None and seq.state is not None:
            self.prefix.add(seq.state)
        seq.state = None


def backend_for(model: Any, prefix_cache_bytes: int) -> RaggedBackend | SerialBackend:
    return RaggedBackend.for_model(model, prefix_cache_bytes) or SerialBackend(model)
