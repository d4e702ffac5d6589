"""On CPU the trainer's log-probs are scored at the completion's positions only
(dagent.train.scoring), with exactly the values, and gradients, TRL's every-position path gives."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


def test_compact_scoring_on_cpu_gives_the_same_logprobs_and_gradients():
    import trl.trainer.utils as utils
    from transformers import AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    from dagent.engine.models import tiny_qwen3
    from dagent.train import scoring

    model = AutoModelForCausalLM.from_pretrained(tiny_qwen3(), dtype=torch.float32)
    add_fused_lm_head(model, temperature=0.7, outputs=("log_probs", "entropy"))
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 1000, (2, 96), generator=g)
    attention = torch.ones_like(ids)
    attention[0, :40] = 0  # a left-padded shorter prompt
    labels = ids.masked_fill(attention == 0, -100)
    labels[:, :-24] = -100  # only the last 24 positions (the completion) are scored

    def score():
        model.zero_grad(set_to_none=True)
        out = model(input_ids=ids, attention_mask=attention, labels=labels, fused_lm_head=True)
        out.log_probs[:, -24:].sum().backward()
        return out.log_probs[:, -24:].detach(), model.lm_head.weight.grad.clone()

    scoring.restore()
    every_logps, every_grad = score()
    assert scoring.score_completions_only() and scoring.score_completions_only()  # idempotent
    assert utils._use_triton(torch.device("cpu"))
    try:
        compact_logps, compact_grad = score()
    finally:
        scoring.restore()
    assert not utils._use_triton(torch.device("cpu"))
    assert torch.allclose(every_logps, compact_logps, atol=1e-5)
    assert torch.allclose(every_grad, compact_grad, atol=1e-6)
    assert compact_logps.abs().sum() > 0
