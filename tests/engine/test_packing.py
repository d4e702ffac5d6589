"""The engine process's speed-ups keep its numbers: pre-packed half-precision linear layers, the
decode-attention kernel timed per machine, and the model served from the main thread."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from dagent.core.sampling import Sampling  # noqa: E402
from dagent.engine import batching  # noqa: E402
from dagent.engine.generation import GenerationRequest, LocalEngine  # noqa: E402
from dagent.engine.models import load_model, native_half_precision  # noqa: E402
from dagent.engine.packing import pack_linears, packable  # noqa: E402
from tests.factories import record_forward_threads  # noqa: E402

HALF = pytest.mark.skipif(
    not native_half_precision(torch.bfloat16) or not torch.backends.mkldnn.is_available(),
    reason="this CPU has no native bfloat16 (AVX512-BF16/AMX): nothing is packed there",
)


def logits(model: Any, ids: list[int]) -> Any:
    with torch.inference_mode():
        return model(input_ids=torch.tensor([ids])).logits[0].float()


def close_in_bfloat16(got: Any, want: Any) -> bool:
    """Within a few bfloat16 roundings (8 bits of mantissa: ~0.4% each) of the logits' scale."""
    return float((got - want).abs().max()) <= 0.02 * float(want.abs().max())


def test_float32_models_are_left_alone() -> None:
    model = load_model("tiny-qwen3").model
    assert not packable(model)
    forward = model.lm_head.forward
    assert pack_linears(model) == 0 and model.lm_head.forward == forward


@HALF
def test_packed_layers_give_the_plain_layers_logits_to_bfloat16_rounding_and_still_batch() -> None:
    plain = load_model("tiny-qwen3", dtype="bfloat16").model
    packed = load_model("tiny-qwen3", dtype="bfloat16").model
    linears = sum(isinstance(m, torch.nn.Linear) for m in packed.modules())
    assert pack_linears(packed) == linears > 0 and "forward" in vars(packed.lm_head)
    ids = torch.randint(0, 5000, (24,), generator=torch.Generator().manual_seed(3)).tolist()
    want, got = logits(plain, ids), logits(packed, ids)
    assert close_in_bfloat16(got, want)
    assert batching.within_rounding(torch.log_softmax(got, -1), torch.log_softmax(want, -1), torch.bfloat16)
    # a planted fault: packing a weight that is not the layer's own is caught by the same comparison
    wrong = load_model("tiny-qwen3", dtype="bfloat16").model
    with torch.no_grad():
        wrong.model.layers[1].mlp.down_proj.weight.mul_(-1.0)
    pack_linears(wrong)
    assert not close_in_bfloat16(logits(wrong, ids), want)
    assert batching.RaggedBackend.for_model(packed, 0) is not None  # the batched self-check passes


def test_both_decode_kernels_compute_the_same_grouped_attention() -> None:
    gen = torch.Generator().manual_seed(0)
    query = torch.randn(1, 8, 1, 32, generator=gen)
    keys, values = (torch.randn(1, 2, 300, 32, generator=gen) for _ in range(2))
    # the reference: every query head h reads kv head h // 4, as transformers' repeat_kv orders them
    k, v = keys.repeat_interleave(4, dim=1), values.repeat_interleave(4, dim=1)
    want = torch.softmax(query @ k.transpose(-1, -2) / 32**0.5, -1) @ v
    from dagent.engine import attention

    for name, kernel in attention.DECODE_KERNELS.items():
        got = kernel(query, keys, values, None)
        assert torch.allclose(got, want, atol=1e-5), name
    chosen = attention.decode_kernel(torch.float32, 2, 8, 32)
    assert chosen in attention.DECODE_KERNELS.values()
    assert attention.decode_kernel(torch.float32, 2, 8, 32) is chosen  # timed once per shape
    # the two-part attention: a prefix and the rest, each with its log-sum-exp, merged, is the whole
    head, tail = (
        attention.attention_lse(query, keys[:, :, :120], values[:, :, :120], 32**-0.5),
        attention.attention_lse(query, keys[:, :, 120:], values[:, :, 120:], 32**-0.5),
    )
    assert torch.allclose(attention.merge(head, tail), want, atol=1e-5)


def test_a_resident_scheduler_serves_on_its_own_thread_and_hands_back_when_stopped() -> None:
    loaded = load_model("tiny-qwen3")
    engine = LocalEngine(
        loaded.model,
        loaded.tokenizer,
        eos_token_ids=loaded.eos_token_ids,
        max_model_len=loaded.max_model_len,
        name="tiny-qwen3",
    )
    threads = record_forward_threads(engine)
    request = GenerationRequest(prompt_ids=(1, 2, 3, 4), max_tokens=5, sampling=Sampling(), seed=7, ignore_eos=True)
    alone = engine.generate(request).run().token_ids
    assert set(threads) == {"dagent-engine"}  # no home: a scheduler thread of its own
    stop = threading.Event()
    home = threading.Thread(target=engine.scheduler.serve_here, args=(stop,), name="home")
    home.start()
    try:
        # until serve_here has taken residence and the first request's thread has ended its burst: a
        # request submitted before either would still be run by a scheduler thread
        deadline = time.monotonic() + 10
        while (not engine.scheduler._resident or engine.scheduler._thread is not None) and time.monotonic() < deadline:
            time.sleep(0.01)
        threads.clear()
        served = [engine.generate(request) for _ in range(3)]
        results = [g.run().token_ids for g in served]
        assert set(threads) == {"home"} and engine.scheduler._thread is None
        assert results == [alone] * 3  # same seed, same tokens wherever they are computed
    finally:
        stop.set()
        home.join(timeout=10)
    assert not home.is_alive()
    threads.clear()
    assert engine.generate(request).run().token_ids == alone and set(threads) == {"dagent-engine"}
