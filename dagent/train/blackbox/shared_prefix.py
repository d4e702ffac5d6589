"""Prompts computed once in the trainer's forward and backward: a GRPO batch as one prefix tree (a CPU's tree
attention).

The G rollouts of a group start from ONE prompt: black-box, pi's ~1,000-token system prompt and
the task, against completions of ~160 tokens (a two-turn answer). TRL 1.16 scores each row whole
(`GRPOTrainer._get_per_token_logps_and_entropies`: prompt + completion, left-padded, one row
each), so the prompt's forward and backward run G times a group: measured here (4 groups of 4 pi
rollouts a step, SmolLM2-135M, 2 cores), the loss's forward took 23.9 s and its backward 46.6 s of a
116 s step, against 6.1 s and 19.1 s packed as below (`benchmarks/blackbox_train.py` has the whole
step side by side). TRL's answer on GPUs is tree
attention in its async trainer (FlashAttention-3 only); this is the same idea for the CPU path:

    one sequence a batch, a tree of spans:
        the prompts' common prefix (pi's system prompt, the same for every task)
          +- task A's rest of the prompt (but its last token)
          |    +- A's last token, completion 1   +- A's last token, completion 2  ...
          +- task B's rest ...

with a 4D mask (a span sees its ancestors whole and itself causally, never a sibling) and each
span's positions continuing its parent's, so every completion token is scored against exactly the
context it had as a row of its own: the same attention over the same keys at the same positions
(rotary embeddings depend on position differences only, so TRL's left padding shifts nothing
either). The labels are pre-shifted (`shift_labels`, TRL's fused head scores them as given): a
row span's position k predicts `completion[k]`. The shared spans' activations serve every row
under them, so the backward sums the rows' gradients into them, which is what separate rows sum.

INVARIANTS (tests/train/test_shared_prefix.py, against TRL's own per-row computation):
- log-probabilities and entropies at every completion position equal TRL's per-row ones to the
  compute dtype's rounding, and the gradient of a loss over them equals TRL's;
- a batch this cannot pack exactly (multimodal inputs, an MoE aux loss, a completion mask with
  holes, an attention implementation without 4D masks) goes to TRL's method unchanged;
- positions past a row's completion are 0 (TRL's own masked value).

`share_prompts(trainer)` wraps the instance's method (TRL's class untouched); returns False where
this TRL has no such method.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dagent.engine.batching import ATTENTION, ragged_attention, register_attention
from dagent.train.trl_seams import SCORE, wrap_method

METHOD = SCORE
# the attention implementations a packed batch keeps the numerics of (tree_attention is sdpa span by
# span); dagent's engine registers its own on a module it serves (dagent.engine.batching: sdpa for
# every call not its own)
TREE = "dagent_tree"  # span-by-span attention over a packed tree (tree_attention), sdpa for the rest
SDPA_LIKE = ("sdpa", ATTENTION, TREE)
_MULTIMODAL = (
    "pixel_values",
    "image_grid_thw",
    "num_images",
    "pixel_attention_mask",
    "spatial_shapes",
    "num_tiles",
    "image_sizes",
    "token_type_ids",
    "mm_token_type_ids",
    "image_position_ids",
)


def common_prefix(prompts: list[tuple[int, ...]]) -> int:
    """How many leading tokens every prompt shares, leaving each prompt its last token."""
    n = min(len(p) for p in prompts) - 1
    first = prompts[0]
    for k in range(n):
        if any(p[k] != first[k] for p in prompts):
            return k
    return max(n, 0)


def packed_inputs(rows: list[tuple[list[int], list[int]]]) -> dict[str, Any]:
    """A batch as ONE sequence, a prefix tree of spans (module docstring): the prompts' common
    prefix; under it each distinct prompt's rest but its last token; under that, per row, the
    prompt's last token and the row's completion. A span attends to its ancestors whole and to
    itself causally; its positions continue its parent's. Returns input ids, positions, the spans
    (`Spans`, what `tree_attention` reads), pre-shifted labels (-100: not scored) and where each
    row's scores start."""
    import torch

    prompts = [tuple(p) for p, _ in rows]
    shared = common_prefix(prompts)
    spans: list[tuple[list[int], int | None, list[int]]] = []  # (tokens, parent span, labels)
    if shared:
        spans.append((list(prompts[0][:shared]), None, [-100] * shared))
    root = 0 if shared else None
    rest: dict[tuple[int, ...], int | None] = {}
    row_span = []
    for prompt, completion in rows:
        key = tuple(prompt)
        if key not in rest:
            middle = list(prompt[shared:-1])
            if middle:
                spans.append((middle, root, [-100] * len(middle)))
                rest[key] = len(spans) - 1
            else:
                rest[key] = root
        spans.append(([prompt[-1], *completion], rest[key], [*completion, -100]))  # k predicts completion[k]
        row_span.append(len(spans) - 1)
    ids: list[int] = []
    pos: list[int] = []
    labels: list[int] = []
    next_pos: list[int] = []  # per span: the position after its last token
    tree: list[tuple[int, int, tuple[tuple[int, int], ...]]] = []  # per span: (start, end, ancestors)
    for tokens, parent, span_labels in spans:
        first = next_pos[parent] if parent is not None else 0
        ancestors = (*tree[parent][2], tree[parent][:2]) if parent is not None else ()
        tree.append((len(ids), len(ids) + len(tokens), ancestors))
        ids += tokens
        pos += range(first, first + len(tokens))
        labels += span_labels
        next_pos.append(first + len(tokens))
    where = [start for start, _, _ in tree]
    return {
        "input_ids": torch.tensor([ids]),
        "position_ids": torch.tensor([pos]),
        "spans": Spans(tuple(tree)),
        "shift_labels": torch.tensor([labels]),
        "starts": [where[k] for k in row_span],
    }


@dataclass(frozen=True)
class Spans:
    """A packed sequence's spans, in order: (start, end, the ancestors' (start, end) from the root)."""

    spans: tuple[tuple[int, int, tuple[tuple[int, int], ...]], ...]

    def mask(self) -> Any:
        """The dense boolean mask it stands for, (1, 1, T, T), True: attend (what tests compare with)."""
        import torch

        n = self.spans[-1][1] if self.spans else 0
        mask = torch.zeros(n, n, dtype=torch.bool)
        for a, b, ancestors in self.spans:
            mask[a:b, a:b] = torch.ones(b - a, b - a, dtype=torch.bool).tril()
            for pa, pb in ancestors:
                mask[a:b, pa:pb] = True
        return mask[None, None]


def tree_attention(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    dropout: float = 0.0,
    scaling: float | None = None,
    dagent_spans: Spans | None = None,
    **kwargs: Any,
) -> tuple[Any, None]:
    """Attention over a packed tree, span by span: each span's queries against its ancestors' keys
    (whole) and its own (causally), never the T x T product a dense mask costs (sdpa computes every
    masked block: measured here, one 3,900-token sequence's forward and backward took 4.6 times a
    causal one's). Anything without spans goes to the engine's attention (sdpa, or its ragged rows)."""
    import torch

    if dagent_spans is None:
        return ragged_attention(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    outs = []
    for a, b, ancestors in dagent_spans.spans:
        keys = [(pa, pb) for pa, pb in ancestors] + [(a, b)]
        k = torch.cat([key[:, :, pa:pb] for pa, pb in keys], dim=2)
        v = torch.cat([value[:, :, pa:pb] for pa, pb in keys], dim=2)
        seen = sum(pb - pa for pa, pb in ancestors)
        own = torch.ones(b - a, b - a, dtype=torch.bool, device=query.device).tril()
        mask = torch.cat([torch.ones(b - a, seen, dtype=torch.bool, device=query.device), own], dim=1)
        out, _ = sdpa_attention_forward(
            module, query[:, :, a:b], k, v, mask[None, None], dropout=dropout, scaling=scaling, is_causal=False
        )
        outs.append(out)
    return torch.cat(outs, dim=1), None


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    register_attention()  # the engine's (the fallback of every call without spans)
    AttentionInterface.register(TREE, tree_attention)
    AttentionMaskInterface.register(TREE, sdpa_mask)


def share_prompts(trainer: Any) -> bool:
    """Wrap `trainer._get_per_token_logps_and_entropies` so rows sharing a prompt are scored as one
    packed sequence a group (module docstring). Returns whether it was wrapped."""

    def wrap(method: Any) -> Any:
        def scored(
            model: Any,
            input_ids: Any,
            attention_mask: Any,
            logits_to_keep: int,
            batch_size: Any = None,
            compute_entropy: bool = False,
            compute_aux_loss: bool = False,
            **extra: Any,
        ) -> Any:
            packed = packable(model, input_ids, attention_mask, logits_to_keep, compute_aux_loss, extra)
            if packed is None:
                return method(
                    model,
                    input_ids,
                    attention_mask,
                    logits_to_keep,
                    batch_size=batch_size,
                    compute_entropy=compute_entropy,
                    compute_aux_loss=compute_aux_loss,
                    **extra,
                )
            return packed_scores(trainer, model, packed, input_ids, logits_to_keep, compute_entropy)

        return scored

    return wrap_method(trainer, METHOD, "_dagent_shared_prefix", wrap)


def packable(
    model: Any, input_ids: Any, attention_mask: Any, logits_to_keep: int, compute_aux_loss: bool, extra: dict[str, Any]
) -> list[tuple[list[int], list[int]]] | None:
    """Each row's (prompt, completion) where the batch packs exactly, else None (TRL's path)."""
    if compute_aux_loss or any(extra.get(k) is not None for k in _MULTIMODAL):
        return None
    if attention(model) not in SDPA_LIKE:
        return None  # eager or flash attention: numerics would change under sdpa
    prompt_len = input_ids.size(1) - logits_to_keep
    rows = []
    for ids, mask in zip(input_ids.tolist(), attention_mask.tolist(), strict=True):
        pm, cm = mask[:prompt_len], mask[prompt_len:]
        pad, n = prompt_len - sum(pm), sum(cm)
        if pad == prompt_len or pm != [0] * pad + [1] * (prompt_len - pad) or cm != [1] * n + [0] * (len(cm) - n):
            return None  # no prompt, or holes: not a left-padded prompt and a right-padded completion
        rows.append((ids[pad:prompt_len], ids[prompt_len : prompt_len + n]))
    return rows


def attention(model: Any) -> str | None:
    """The attention implementation of `model` (unwrapped from DDP's `.module`)."""
    config = getattr(getattr(model, "module", model), "config", None)
    return getattr(config, "_attn_implementation", None)


def packed_scores(
    trainer: Any,
    model: Any,
    rows: list[tuple[list[int], list[int]]],
    input_ids: Any,
    logits_to_keep: int,
    compute_entropy: bool,
) -> tuple[Any, Any, None]:
    """The batch's log-probs (and entropies) from one forward over its packed tree, laid out as
    TRL returns them: (rows, completion positions), 0 past each row's completion."""
    import torch
    import torch.nn.functional as F

    device = input_ids.device
    packed = packed_inputs(rows)
    inner = getattr(model, "module", model)
    if attention(inner) != TREE:
        _register()
        inner.set_attn_implementation(TREE)
    with trainer.accelerator.autocast():
        out = model(
            input_ids=packed["input_ids"].to(device),
            position_ids=packed["position_ids"].to(device),
            shift_labels=packed["shift_labels"].to(device),
            fused_lm_head=True,
            dagent_spans=packed["spans"],
        )

    def laid_out(values: Any) -> Any:  # out-of-place, so gradients flow back into the packed sequence
        return torch.stack(
            [
                F.pad(values[0, start : start + len(c)], (0, logits_to_keep - len(c)))
                for start, (_, c) in zip(packed["starts"], rows, strict=True)
            ]
        )

    return laid_out(out.log_probs), laid_out(out.entropy) if compute_entropy else None, None
