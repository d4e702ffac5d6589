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
so they equal recomputed ones to float rounding. A prefix taken from a RUNNING sequence (a group's
rows waiting for the first to compute their shared prompt) is held by reference, not copied
(`SequenceKV.base`), and stays shared through later turns; decode rows that share one attend to it
together, one product for all their queries, so the prompt's keys are read once a step instead of
once a row (`ragged_attention`, `attention_lse`, `merge`; figures: benchmarks/README.md).

Which rows run in each step is `dagent.engine.scheduler`'s choice; what a sequence is (its
sampling, detokenizing and stop rules) is `dagent.engine.generation`'s.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Protocol

from dagent.engine.attention import SharedFloat, attention_lse, decode_kernel, merge
from dagent.errors import EngineError

_log = logging.getLogger(__name__)


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
    """One sequence's keys and values per layer. Positions `[0, base_len)` are a prefix SHARED with
    the sequence it was copied from (`base`: views of that sequence's buffers, never written again:
    a GRPO group's rows read their one prompt's keys from one place, and decode attends to it for
    all of them at once, `ragged_attention`); positions `[base_len, length)` are this sequence's
    own, in `[1, kv_heads, capacity, head_dim]` buffers grown by doubling. `tokens` are all of them."""

    def __init__(self, reserve: int) -> None:
        self.keys: list[Any] = []  # own buffers: position p at index p - base_len
        self.values: list[Any] = []
        self.base: list[tuple[Any, Any]] = []  # per layer, the shared prefix's keys and values
        self.base_len = 0
        self.length = 0
        self.tokens: list[int] = []
        self.reserve = max(16, reserve)

    @property
    def nbytes(self) -> int:
        """The bytes this sequence holds alone (a shared prefix is counted where it is owned)."""
        return sum(t.element_size() * t.nelement() for t in (*self.keys, *self.values))

    def slot(self, layer: int, like: Any, end: int) -> tuple[Any, Any]:
        """The own buffers of a layer, holding at least up to position `end` (allocated like `like`)."""
        import torch

        need = end - self.base_len
        if layer == len(self.keys):
            shape = (1, like.shape[1], _rounded(max(need, self.reserve)), like.shape[3])
            self.keys.append(torch.empty(shape, dtype=like.dtype))
            self.values.append(torch.empty(shape, dtype=like.dtype))
        elif layer > len(self.keys):
            raise EngineError(f"the model updated cache layer {layer} before layer {len(self.keys)}")
        keys, values = self.keys[layer], self.values[layer]
        if need > keys.shape[2]:
            shape = (1, keys.shape[1], _rounded(max(need, 2 * keys.shape[2])), keys.shape[3])
            grown_k, grown_v = torch.empty(shape, dtype=keys.dtype), torch.empty(shape, dtype=keys.dtype)
            own = self.length - self.base_len
            grown_k[:, :, :own] = keys[:, :, :own]
            grown_v[:, :, :own] = values[:, :, :own]
            self.keys[layer], self.values[layer] = keys, values = grown_k, grown_v
        return keys, values

    def copy_prefix(self, source: SequenceKV, n: int, *, share: bool = False) -> None:
        """Start as the first n positions of another sequence (whose first n tokens are ours). A
        prefix the source itself shares stays shared (a group keeps reading its one prompt, turn
        after turn); the source's own positions are shared by reference when `share` (a running
        sequence whose siblings decode beside it), else copied (a finished one in the prefix cache:
        one reader gains nothing from a second piece)."""
        b = min(source.base_len, n)
        if not b and share:
            self.keys, self.values = [], []
            self.base = [(k[:, :, :n], v[:, :, :n]) for k, v in zip(source.keys, source.values, strict=True)]
            self.base_len, self.length, self.tokens = n, n, source.tokens[:n]
            return
        self.keys, self.values = [], []
        self.base = [(k[:, :, :b], v[:, :, :b]) for k, v in source.base] if b else []
        self.base_len = self.length = b
        for layer in range(len(source.keys) if n > b else 0):
            k, v = source.keys[layer], source.values[layer]
            keys, values = self.slot(layer, k, n)
            keys[:, :, : n - b] = k[:, :, : n - b]
            values[:, :, : n - b] = v[:, :, : n - b]
        self.length, self.tokens = n, source.tokens[:n]


def _rounded(n: int) -> int:
    return -(-n // 64) * 64


class _Ragged:
    """What `PackedStep.update` hands to the attention: each row's keys/values so far."""

    def __init__(self, rows: list[tuple[Any, Any, Any, int, int, int, Any]]) -> None:
        self.rows = rows  # (shared prefix (keys, values) or None, own keys, own values, past, start, n,
        # the shared prefix as decode attention reads it: float32 where `SharedFloat` holds a copy)


class PackedStep:
    """The `cache` of one packed forward: rows are (SequenceKV, start in the packed input, n)."""

    def __init__(self, rows: list[tuple[SequenceKV, int, int]], shared: SharedFloat | None = None) -> None:
        self.rows = rows
        self.shared = shared

    def update(self, key_states: Any, value_states: Any, layer_idx: int, kwargs: Any = None) -> tuple[Any, Any]:
        out = []
        for kv, start, n in self.rows:
            past, b = kv.length, kv.base_len
            keys, values = kv.slot(layer_idx, key_states, past + n)
            keys[:, :, past - b : past - b + n] = key_states[:, :, start : start + n]
            values[:, :, past - b : past - b + n] = value_states[:, :, start : start + n]
            base = kv.base[layer_idx] if b else None
            # a decode row reads its group's prefix in float32 (one copy for the group and its life)
            read = self.shared.of(layer_idx, base) if base is not None and n == 1 and self.shared else base
            out.append((base, keys[:, :, : past + n - b], values[:, :, : past + n - b], past, start, n, read))
        ragged = _Ragged(out)
        return ragged, ragged

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0  # positions are always passed explicitly

    def commit(self, new_tokens: Sequence[list[int]]) -> None:
        for (kv, _, n), tokens in zip(self.rows, new_tokens, strict=True):
            kv.length += n
            kv.tokens.extend(tokens)


def ragged_attention(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[Any, None]:
    """Attention per packed row against its own keys/values; anything else goes to sdpa. Decode rows
    that share a prefix attend to it together (one product for the group's queries, the prefix read
    once), then each to its own positions, the two parts merged by their log-sum-exp."""
    import torch
    import torch.nn.functional as F

    if not isinstance(key, _Ragged):
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    first_k = key.rows[0][1]
    gqa = query.shape[1] != first_k.shape[1]
    scale = query.shape[3] ** -0.5 if scaling is None else scaling
    outs: list[Any] = [None] * len(key.rows)
    kernel = decode_kernel(query.dtype, first_k.shape[1], query.shape[1], query.shape[3])
    groups: dict[tuple[int, int], list[int]] = {}  # by the prefix's storage and length: views of one buffer
    for i, (base, keys, values, past, start, n, _) in enumerate(key.rows):
        if n == 1 and base is not None:
            groups.setdefault((base[0].data_ptr(), base[0].shape[2]), []).append(i)
            continue
        if base is not None:  # a prefill chunk after a shared prefix: attend to both, contiguous
            keys, values = torch.cat([base[0], keys], dim=2), torch.cat([base[1], values], dim=2)
        if n == 1:
            outs[i] = kernel(query[:, :, start : start + 1], keys, values, scaling)
            continue
        mask = None
        if n > 1 and past > 0:  # a prefill chunk after earlier positions: causal, offset by past
            mask = torch.ones(n, past + n, dtype=torch.bool).tril(diagonal=past)
        outs[i] = F.scaled_dot_product_attention(
            query[:, :, start : start + n],
            keys,
            values,
            attn_mask=mask,
            is_causal=n > 1 and past == 0,
            scale=scaling,
            enable_gqa=gqa,
        )
    for members in groups.values():
        base_k, base_v = key.rows[members[0]][6]
        queries = torch.cat([query[:, :, key.rows[i][4] : key.rows[i][4] + 1] for i in members], dim=2)
        shared_out, shared_lse = attention_lse(queries, base_k, base_v, scale)
        shared = (shared_out.transpose(0, 2), shared_lse.transpose(0, 2))  # [R, heads, 1, .]: one row each
        if len({key.rows[i][1].shape[2] for i in members}) == 1:  # rows decoded alike: their own positions at once
            own = attention_lse(
                queries.transpose(0, 2),
                torch.cat([key.rows[i][1] for i in members]),
                torch.cat([key.rows[i][2] for i in members]),
                scale,
            )
            merged = merge(shared, own).to(query.dtype)
            for j, i in enumerate(members):
                outs[i] = merged[j : j + 1]
            continue
        for j, i in enumerate(members):
            _, keys, values, _, start, _, _ = key.rows[i]
            own = attention_lse(query[:, :, start : start + 1], keys, values, scale)
            outs[i] = merge((shared[0][j : j + 1], shared[1][j : j + 1]), own).to(query.dtype)
    out = outs[0] if len(outs) == 1 else torch.cat(outs, dim=2)
    return out.transpose(1, 2).contiguous(), None


def register_attention() -> None:
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
        self.shared = SharedFloat()

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
        register_attention()
        try:
            model.set_attn_implementation(ATTENTION)
        except (KeyError, ValueError):
            return None
        backend = cls(model, prefix_cache_bytes)
        if config._attn_implementation == ATTENTION and backend.self_check():
            return backend
        model.set_attn_implementation(previous)
        msg = "the batched engine backend failed its self-check in %s: serving one sequence at a time (slower)"
        _log.warning(msg, model.dtype)  # a bf16 black-box step went 72 s -> 282-372 s
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
        step = PackedStep(packed, self.shared)
        out = self.model(
            input_ids=torch.tensor([ids]),
            position_ids=torch.tensor([positions]),
            attention_mask=self._mask,
            cache=step,
            use_cache=True,
            logits_to_keep=torch.tensor(last),
        )
        step.commit([new for _, new in rows])
        self.shared.end_step()
        return out.logits[0].float()

    def self_check(self) -> bool:
        """Packed, chunked, cached logits equal one plain forward pass per sequence."""
        import torch

        vocab = min(int(self.model.config.vocab_size), 5000)
        gen = torch.Generator().manual_seed(0)
        a, b = (torch.randint(0, vocab, (n,), generator=gen).tolist() for n in (11, 6))
        c, d = a[:9] + [5, 6, 7], a[:9] + [8, 9]  # two sequences sharing a's first 9 positions
        try:
            with torch.inference_mode():
                ref_a = torch.log_softmax(self.model(input_ids=torch.tensor([a])).logits[0].float(), -1)
                ref_b = torch.log_softmax(self.model(input_ids=torch.tensor([b])).logits[0].float(), -1)
                ka, kb = SequenceKV(8), SequenceKV(8)
                got, want = [], []
                for rows, refs in (
                    ([(ka, a[:4])], [ref_a[3]]),
                    ([(ka, a[4:9]), (kb, b[:5])], [ref_a[8], ref_b[4]]),
                    ([(kb, b[5:6]), (ka, a[9:10])], [ref_b[5], ref_a[9]]),
                    ([(ka, a[10:11])], [ref_a[10]]),
                ):
                    got.append(torch.log_softmax(self.run(rows), -1))
                    want.append(torch.stack(refs))
                # a shared prefix (c and d read a's first 9 positions from a's buffers, decoding together)
                # gives what the same rows give with the prefix computed for each (checked just above)
                shared = [SequenceKV(8), SequenceKV(8)]
                own = [SequenceKV(8), SequenceKV(8)]
                for kv in shared:
                    kv.copy_prefix(ka, 9, share=True)
                self.run([(own[0], c[:9]), (own[1], d[:9])])
                for kc, kd in (shared, own):
                    steps = [self.run([(kc, c[9:11]), (kd, d[9:10])]), self.run([(kd, d[10:11]), (kc, c[11:12])])]
                    (got if kc is shared[0] else want).extend(torch.log_softmax(x, -1) for x in steps)
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
            self._copy(seq, cached, n, share=False)
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
        self._copy(seq, kv, min(n, kv.length), share=not source.done)
        return True

    def _copy(self, seq: Row, source: SequenceKV, n: int, *, share: bool) -> None:
        if n > 0:
            seq.state.copy_prefix(source, n, share=share)
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
