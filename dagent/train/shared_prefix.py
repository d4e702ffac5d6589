"""A GRPO group's shared prompt computed once in the trainer's forward and backward (a CPU's tree attention).

The G rollouts of a group start from ONE prompt: black-box, pi's ~1,000-token system prompt and
the task, against completions of ~160 tokens (a two-turn answer). TRL 1.16 scores each row whole
(`GRPOTrainer._get_per_token_logps_and_entropies`: prompt + completion, left-padded, one row
each), so the prompt's forward and backward run G times a group: measured here, the optimizer
phase was 45% of a black-box step (`benchmarks/blackbox_train.py`). TRL's answer on GPUs is tree
attention in its async trainer (FlashAttention-3 only); this is the same idea for the CPU path:

    one sequence a group:  prompt[:-1] | prompt[-1] c_1 | prompt[-1] c_2 | ... | prompt[-1] c_G

with a 4D mask (each segment sees the prompt and itself, causally; never another segment) and
each segment's positions continuing the prompt's (p-1, p, ...), so every completion token is
scored against exactly the context it had as a row of its own: the same attention over the same
keys at the same positions (rotary embeddings depend on position differences only, so TRL's
left padding shifts nothing either). The labels are pre-shifted (`shift_labels`, TRL's fused
head scores them as given): segment i's position k predicts `c_i[k]`. The prompt's activations are
shared by the G segments, so the backward sums their gradients into one prompt, which is what G
separate rows sum too.

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

import functools
from typing import Any

from dagent.engine.batching import ATTENTION

METHOD = "_get_per_token_logps_and_entropies"
# attention implementations that take a custom 4D mask as given; dagent's engine registers its own
# on a module it serves (dagent.engine.batching: sdpa, masks included, for every call not its own)
SDPA_LIKE = ("sdpa", ATTENTION)
MASKED_4D = (*SDPA_LIKE, "eager")
_MULTIMODAL = ("pixel_values", "image_grid_thw", "num_images", "pixel_attention_mask", "spatial_shapes",
               "num_tiles", "image_sizes", "token_type_ids", "mm_token_type_ids", "image_position_ids")


def groups_of(prompts: list[tuple[int, ...]]) -> dict[tuple[int, ...], list[int]]:
    """Row indices by prompt, in first-seen order (a row alone is a group of one)."""
    out: dict[tuple[int, ...], list[int]] = {}
    for i, p in enumerate(prompts):
        out.setdefault(p, []).append(i)
    return out


def packed_inputs(prompt: list[int], completions: list[list[int]]) -> dict[str, Any]:
    """One group as one sequence (module docstring): input ids, positions, a boolean 4D mask (True:
    attend), pre-shifted labels (-100: not scored) and where each completion's scores start."""
    import torch

    p = len(prompt)
    ids, pos, labels, starts = list(prompt[:-1]), list(range(p - 1)), [-100] * (p - 1), []
    bounds = []
    for c in completions:
        start = len(ids)
        starts.append(start)
        seg = [prompt[-1], *c]
        ids += seg
        pos += range(p - 1, p - 1 + len(seg))
        labels += [*c, -100]  # position k predicts c[k]; the last predicts nothing
        bounds.append((start, len(ids)))
    n = len(ids)
    mask = torch.zeros(n, n, dtype=torch.bool)
    mask[: p - 1, : p - 1] = torch.ones(p - 1, p - 1, dtype=torch.bool).tril()
    for start, end in bounds:
        mask[start:end, : p - 1] = True
        mask[start:end, start:end] = torch.ones(end - start, end - start, dtype=torch.bool).tril()
    return {"input_ids": torch.tensor([ids]), "position_ids": torch.tensor([pos]), "mask": mask[None, None],
            "shift_labels": torch.tensor([labels]), "starts": starts}


def share_prompts(trainer: Any) -> bool:
    """Wrap `trainer._get_per_token_logps_and_entropies` so rows sharing a prompt are scored as one
    packed sequence a group (module docstring). Returns whether it was wrapped."""
    method = getattr(trainer, METHOD, None)
    if not callable(method):
        return False
    if getattr(method, "_dagent_shared_prefix", False):
        return True

    @functools.wraps(method)
    def scored(model: Any, input_ids: Any, attention_mask: Any, logits_to_keep: int, batch_size: Any = None,
               compute_entropy: bool = False, compute_aux_loss: bool = False, **extra: Any) -> Any:
        packed = packable(model, input_ids, attention_mask, logits_to_keep, compute_aux_loss, extra)
        if packed is None:
            return method(model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size,
                          compute_entropy=compute_entropy, compute_aux_loss=compute_aux_loss, **extra)
        return packed_scores(trainer, model, packed, input_ids, logits_to_keep, compute_entropy)

    scored._dagent_shared_prefix = True  # type: ignore[attr-defined]
    setattr(trainer, METHOD, scored)
    return True


def packable(model: Any, input_ids: Any, attention_mask: Any, logits_to_keep: int, compute_aux_loss: bool,
             extra: dict[str, Any]) -> list[tuple[list[int], list[int]]] | None:
    """Each row's (prompt, completion) where the batch packs exactly, else None (TRL's path)."""
    if compute_aux_loss or any(extra.get(k) is not None for k in _MULTIMODAL):
        return None
    if attention(model) not in MASKED_4D:
        return None
    prompt_len = input_ids.size(1) - logits_to_keep
    rows = []
    for ids, mask in zip(input_ids.tolist(), attention_mask.tolist(), strict=True):
        pm, cm = mask[:prompt_len], mask[prompt_len:]
        pad, n = prompt_len - sum(pm), sum(cm)
        if pad == prompt_len or pm != [0] * pad + [1] * (prompt_len - pad) or cm != [1] * n + [0] * (len(cm) - n):
            return None  # no prompt, or holes: not a left-padded prompt and a right-padded completion
        rows.append((ids[pad:prompt_len], ids[prompt_len: prompt_len + n]))
    return rows


def attention(model: Any) -> str | None:
    """The attention implementation of `model` (unwrapped from DDP's `.module`)."""
    config = getattr(getattr(model, "module", model), "config", None)
    return getattr(config, "_attn_implementation", None)


def packed_scores(trainer: Any, model: Any, rows: list[tuple[list[int], list[int]]], input_ids: Any,
                  logits_to_keep: int, compute_entropy: bool) -> tuple[Any, Any, None]:
    import torch

    device = input_ids.device
    logps = torch.zeros(input_ids.size(0), logits_to_keep, device=device)
    entropies = torch.zeros_like(logps) if compute_entropy else None
    sdpa = attention(model) in SDPA_LIKE
    pieces: list[tuple[int, int, int, Any, Any]] = []
    for prompt, members in groups_of([tuple(p) for p, _ in rows]).items():
        completions = [rows[i][1] for i in members]
        packed = packed_inputs(list(prompt), completions)
        mask = packed["mask"].to(device)
        if not sdpa:  # eager attention adds the mask: 0 where attended, the dtype's minimum elsewhere
            mask = torch.zeros(mask.shape, device=device).masked_fill(~mask, torch.finfo(torch.float32).min)
        with trainer.accelerator.autocast():
            out = model(input_ids=packed["input_ids"].to(device), attention_mask=mask,
                        position_ids=packed["position_ids"].to(device), shift_labels=packed["shift_labels"].to(device),
                        fused_lm_head=True)
        for i, start, c in zip(members, packed["starts"], completions, strict=True):
            pieces.append((i, start, len(c), out.log_probs, getattr(out, "entropy", None)))
    # scatter into the (rows, completion positions) layout TRL returns: out-of-place, so gradients flow
    rows_lp, rows_ent = [], []
    for i in range(input_ids.size(0)):
        _, start, n, lp, ent = next(p for p in pieces if p[0] == i)
        pad = logits_to_keep - n
        rows_lp.append(torch.nn.functional.pad(lp[0, start: start + n], (0, pad)))
        if compute_entropy:
            rows_ent.append(torch.nn.functional.pad(ent[0, start: start + n], (0, pad)))
    logps = torch.stack(rows_lp)
    if compute_entropy:
        entropies = torch.stack(rows_ent)
    return logps, entropies, None
