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

import dagent.train.shared_prefix as shared_prefix  # noqa: E402
from dagent.engine.models import load_model  # noqa: E402
from dagent.train.shared_prefix import share_prompts  # noqa: E402

# two groups: prompt A (7 tokens) x 3 completions, prompt B (4 tokens) x 2; one completion empty
PROMPT_A, PROMPT_B = [11, 12, 13, 14, 15, 16, 17], [21, 22, 23, 24]
ROWS = [(PROMPT_A, [31, 32, 33, 34, 35]), (PROMPT_B, [41, 42, 43, 44, 45, 46]), (PROMPT_A, [51, 52, 53]),
        (PROMPT_A, []), (PROMPT_B, [61, 62])]


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
    assert m.config._attn_implementation in shared_prefix.MASKED_4D
    add_fused_lm_head(m, outputs=("log_probs", "entropy"))
    return m


def trainer_like():
    """What TRL's method reads from its trainer: the accelerator's autocast (none on this CPU test)."""
    from trl import GRPOTrainer

    fake = types.SimpleNamespace(accelerator=types.SimpleNamespace(autocast=contextlib.nullcontext, is_main_process=True))
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
    return (torch.allclose(lp_r, lp_g, atol=1e-4) and torch.allclose(ent_r, ent_g, atol=1e-4)
            and g_r.keys() == g_g.keys()
            and all(torch.allclose(g_r[k], g_g[k], atol=1e-5, rtol=1e-3) for k in g_r))


def test_packed_groups_score_and_train_as_trls_own_rows(model):
    ids, mask, c, valid = batch()
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
    assert len(calls) == 2  # one forward a prompt, not one a row
    assert calls[0][1] == len(PROMPT_A) - 1 + 3 + 5 + 3 + 0  # the prompt once, each completion behind its last token
    assert agree(ref, got)
    assert (got[0][valid] != 0).all()  # real scores, not zeros that agree with zeros


@pytest.mark.parametrize("fault", ["segments see each other", "positions restart", "labels shifted"])
def test_a_planted_packing_fault_breaks_the_agreement(model, monkeypatch, fault):
    honest = shared_prefix.packed_inputs

    def faulty(prompt, completions):
        out = honest(prompt, completions)
        if fault == "segments see each other":
            out["mask"] = out["mask"] | torch.ones_like(out["mask"]).tril()
        elif fault == "positions restart":
            p = len(prompt)
            out["position_ids"] = torch.where(torch.arange(out["position_ids"].size(1)) >= p - 1,
                                              out["position_ids"] - (p - 1), out["position_ids"])
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
