"""A group's shared prompt packed into one sequence scores exactly as TRL's per-row computation:
the truth is TRL's own `GRPOTrainer._get_per_token_logps_and_entropies` on the same rows (left-
padded prompts, right-padded completions), its log-probs, entropies and the gradient of a loss
over them; and three planted packing faults (a segment seeing another, positions restarted,
labels shifted) each break the agreement."""

from __future__ import annotations

import contextlib
import types

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

import dagent.train.blackbox.shared_prefix as shared_prefix  # noqa: E402
from dagent.engine.models import load_model  # noqa: E402
from dagent.train.blackbox.shared_prefix import share_prompts  # noqa: E402

# prompt A (7 tokens) x 3 completions and prompt B (4 tokens) x 2, sharing their first 3 tokens (B has
# no rest of its own under them); one completion empty. ALONE: prompts sharing nothing.
PROMPT_A, PROMPT_B, PROMPT_C = [11, 12, 13, 14, 15, 16, 17], [11, 12, 13, 24], [91, 92, 93, 94, 95]
ROWS = [
    (PROMPT_A, [31, 32, 33, 34, 35]),
    (PROMPT_B, [41, 42, 43, 44, 45, 46]),
    (PROMPT_A, [51, 52, 53]),
    (PROMPT_A, []),
    (PROMPT_B, [61, 62]),
]
ALONE = [(PROMPT_C, [31, 32]), (PROMPT_A, [41, 42, 43]), (PROMPT_C, [51])]
PACKED_LEN = {
    "shared": 3 + 3 + (1 + 5) + (1 + 3) + (1 + 0) + (1 + 6) + (1 + 2),
    "alone": 4 + 6 + (1 + 2) + (1 + 3) + (1 + 1),
}


def batch(rows=ROWS):
    p = max(len(a) for a, _ in rows)
    c = max(len(b) for _, b in rows)
    ids = [[0] * (p - len(a)) + a + b + [0] * (c - len(b)) for a, b in rows]
    mask = [[0] * (p - len(a)) + [1] * len(a) + [1] * len(b) + [0] * (c - len(b)) for a, b in rows]
    valid = torch.tensor([[1] * len(b) + [0] * (c - len(b)) for _, b in rows], dtype=torch.bool)
    return torch.tensor(ids), torch.tensor(mask), c, valid


@pytest.fixture(scope="module")
def model():
    from trl.trainer.utils import add_fused_lm_head

    m = load_model("tiny-qwen3").model.float()
    assert m.config._attn_implementation in shared_prefix.SDPA_LIKE
    add_fused_lm_head(m, outputs=("log_probs", "entropy"))
    return m


def trainer_like():
    """What TRL's method reads from its trainer: the accelerator's autocast (none on this CPU test)."""
    from trl import GRPOTrainer

    fake = types.SimpleNamespace(
        accelerator=types.SimpleNamespace(autocast=contextlib.nullcontext, is_main_process=True)
    )
    fake._get_per_token_logps_and_entropies = types.MethodType(GRPOTrainer._get_per_token_logps_and_entropies, fake)
    return fake


def scores_and_grads(model, trainer, ids, mask, c, valid):
    model.zero_grad()
    logps, ent, _ = trainer._get_per_token_logps_and_entropies(model, ids, mask, c, compute_entropy=True)
    weights = torch.linspace(0.5, 1.5, logps.numel()).view_as(logps)
    (logps * weights * valid).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logps.detach() * valid, ent.detach() * valid, grads


def agree(ref, got) -> bool:
    (lp_r, ent_r, g_r), (lp_g, ent_g, g_g) = ref, got
    return (
        torch.allclose(lp_r, lp_g, atol=1e-4)
        and torch.allclose(ent_r, ent_g, atol=1e-4)
        and g_r.keys() == g_g.keys()
        and all(torch.allclose(g_r[k], g_g[k], atol=1e-5, rtol=1e-3) for k in g_r)
    )


@pytest.mark.parametrize("rows", ["shared", "alone"])
def test_packed_prompts_score_and_train_as_trls_own_rows(model, rows):
    ids, mask, c, valid = batch(ROWS if rows == "shared" else ALONE)
    ref = scores_and_grads(model, trainer_like(), ids, mask, c, valid)
    packed = trainer_like()
    assert share_prompts(packed) and share_prompts(packed)  # idempotent
    calls = []
    forward = model.forward

    def counting(*a, **k):
        calls.append(k["input_ids"].shape)
        return forward(*a, **k)

    model.forward = counting
    try:
        got = scores_and_grads(model, packed, ids, mask, c, valid)
    finally:
        model.forward = forward  # the fused head's forward, an instance attribute
    assert len(calls) == 1  # one forward for the batch, not one a row
    assert calls[0][1] == PACKED_LEN[rows]  # each prompt token once, each completion behind its prompt's last token
    assert agree(ref, got)
    assert (got[0][valid] != 0).all()  # real scores, not zeros that agree with zeros


@pytest.mark.parametrize("fault", ["siblings see each other", "positions run on", "labels shifted"])
def test_a_planted_packing_fault_breaks_the_agreement(model, monkeypatch, fault):
    honest = shared_prefix.packed_inputs

    def faulty(rows):
        out = honest(rows)
        if fault == "siblings see each other":  # every span sees everything before it: one causal sequence
            spans = out["spans"].spans
            out["spans"] = shared_prefix.Spans(
                tuple((a, b, tuple((pa, pb) for pa, pb, _ in spans[:i])) for i, (a, b, _) in enumerate(spans))
            )
        elif fault == "positions run on":  # one long sequence's positions, not each span's own
            out["position_ids"] = torch.arange(out["position_ids"].size(1))[None]
        else:
            out["shift_labels"] = torch.roll(out["shift_labels"], 1, dims=1)
        return out

    ids, mask, c, valid = batch()
    ref = scores_and_grads(model, trainer_like(), ids, mask, c, valid)
    monkeypatch.setattr(shared_prefix, "packed_inputs", faulty)
    packed = trainer_like()
    share_prompts(packed)
    assert not agree(ref, scores_and_grads(model, packed, ids, mask, c, valid))


def test_a_batch_it_cannot_pack_exactly_goes_to_trls_method(model):
    ids, mask, c, valid = batch()
    mask = mask.clone()
    mask[0, -c + 1] = 0  # a hole inside a completion's mask
    packed = trainer_like()
    share_prompts(packed)
    assert shared_prefix.packable(model, ids, mask, c, False, {}) is None
    ref = trainer_like()._get_per_token_logps_and_entropies(model, ids, mask, c, compute_entropy=True)
    got = packed._get_per_token_logps_and_entropies(model, ids, mask, c, compute_entropy=True)
    assert torch.equal(ref[0], got[0])
    assert shared_prefix.packable(model, ids, torch.ones_like(mask), c, False, {"pixel_values": torch.ones(1)}) is None


def test_span_attention_equals_dense_sdpa_under_the_mask_the_spans_stand_for():
    """The truth: torch's sdpa over the whole sequence with the dense mask (the T x T product the
    span-by-span attention avoids), GQA included (9 query heads over 3 key/value heads)."""
    import torch.nn.functional as F

    packed = shared_prefix.packed_inputs(ROWS)
    spans, n = packed["spans"], packed["input_ids"].size(1)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, h, n, 16, generator=g) for h in (9, 3, 3))
    module = types.SimpleNamespace(num_key_value_groups=3, is_causal=True, training=False)
    got, _ = shared_prefix.tree_attention(module, q, k, v, None, dagent_spans=spans)
    want = F.scaled_dot_product_attention(
        q, k.repeat_interleave(3, 1), v.repeat_interleave(3, 1), attn_mask=spans.mask()
    ).transpose(1, 2)
    assert got.shape == want.shape and torch.allclose(got, want, atol=1e-5)
    assert spans.mask().sum() < n * (n + 1) // 2  # the tree hides siblings: fewer pairs than one causal sequence
