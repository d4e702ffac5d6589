"""The sampler on its own: its draws follow the processed distribution, and never a dead id."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from dagent.core.sampling import Sampling  # noqa: E402
from dagent.engine.generation import _draw, choose_token  # noqa: E402


@pytest.mark.parametrize("vocab", [7, 1024, 3000])  # below one block, exactly one, blocks plus a tail
def test_draws_follow_the_distribution_and_skip_zero_probability_ids(vocab: int) -> None:
    gen = torch.Generator().manual_seed(0)
    probs = torch.rand(vocab, generator=gen) ** 4
    probs[torch.rand(vocab, generator=gen) < 0.5] = 0.0  # half the ids dead, scattered
    probs[-1] = 0.0
    probs /= probs.sum()
    n = 8_000
    draws = torch.tensor([_draw(probs, gen) for _ in range(n)])
    assert probs[draws].min() > 0
    # 20 buckets of about equal mass (ids in order): each must get its mass, within 5 sd
    bucket = (probs.double().cumsum(0) * 20).floor().clamp(max=19).long()
    mass = torch.zeros(20, dtype=torch.float64).index_add_(0, bucket, probs.double())
    freq = torch.bincount(bucket[draws], minlength=20).double() / n
    sd = (mass * (1 - mass)).clamp(min=0).div(n).sqrt()
    assert ((freq - mass).abs() <= 5 * sd + 1e-3).all(), (freq, mass)


def test_a_single_live_id_anywhere_is_always_drawn() -> None:
    gen = torch.Generator().manual_seed(1)
    for live in (0, 1023, 1024, 2999):
        probs = torch.zeros(3000)
        probs[live] = 1.0
        assert {_draw(probs, gen) for _ in range(20)} == {live}


def test_top_k_then_top_p_keep_only_the_nucleus_of_the_top_k() -> None:
    logits = torch.linspace(0, 10, 5000)  # id 4999 most likely
    gen = torch.Generator().manual_seed(2)
    sampling = Sampling(temperature=1.0, top_k=50, top_p=0.5)
    drawn = {choose_token(logits, sampling, gen, "raw_logprobs")[0] for _ in range(300)}
    x = logits.clone()
    kth = torch.topk(x, 50).values[-1]
    x = x.masked_fill(x < kth, float("-inf"))
    sorted_x, order = torch.sort(x)
    keep = order[~(torch.softmax(sorted_x, -1).cumsum(-1) <= 0.5)]  # the reference rule over the whole vocabulary
    assert drawn <= set(keep.tolist()) and len(drawn) > 1
    token, processed = choose_token(logits, sampling, gen, "processed_logprobs")
    assert torch.isfinite(processed).sum() == len(keep) and torch.isfinite(processed[token])
