"""The trainer's own module served from its process: rollouts' model calls are computed on the
thread that waits for them (the trainer's main thread), and a phase leaves the module as it was."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

torch = pytest.importorskip("torch")
httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")

from dagent.engine.inprocess import InProcessEngine  # noqa: E402
from dagent.engine.models import load_model  # noqa: E402
from tests.factories import record_forward_threads  # noqa: E402


def test_rollouts_calls_are_computed_on_the_waiting_thread_and_the_mode_is_restored() -> None:
    loaded = load_model("tiny-qwen3")
    model = loaded.model.train()
    with InProcessEngine(model, loaded.tokenizer, served_model_name="policy") as served:
        threads = record_forward_threads(served.engine)

        def rollout(seed: int) -> list[int]:
            body = {
                "model": "policy",
                "prompt": "count: 1 2 3",
                "max_tokens": 6,
                "seed": seed,
                "ignore_eos": True,
                "return_token_ids": True,
            }
            reply = httpx.post(f"{served.url}/v1/completions", json=body, timeout=120).json()
            return reply["choices"][0]["token_ids"]

        with served.generating():
            assert not model.training
            with ThreadPoolExecutor(max_workers=3) as pool:
                futures = [pool.submit(rollout, s) for s in (1, 2, 1)]
                served.serve_until(futures)
                assert all(f.done() for f in futures)
                tokens = [f.result() for f in futures]
        assert model.training  # the trainer's mode back
        assert len(tokens[0]) == 6 and tokens[0] == tokens[2]  # one seed, one answer
        assert threads and set(threads) == {threading.current_thread().name}
        assert served.engine.scheduler._thread is None
        # with nobody waiting here, a call is served by a scheduler thread of its own again
        threads.clear()
        assert rollout(3) and set(threads) == {"dagent-engine"}


def test_a_bfloat16_copy_serves_the_weights_the_last_optimizer_step_wrote() -> None:
    """`dtype="bfloat16"`: rollouts are computed by a bfloat16 module (what its linear layer returns
    says so, from torch), the trainer's weights stay float32, and each rollout phase serves the
    module's CURRENT weights: after an "optimizer step" (the weights changed in place) the next
    phase's answers are those of a bfloat16 copy made fresh from the changed weights (the truth:
    a second engine built from them), not the stale copy's."""
    loaded = load_model("tiny-qwen3")
    model = loaded.model.float()
    served = InProcessEngine(model, loaded.tokenizer, served_model_name="policy", dtype="bfloat16")
    seen: list[torch.dtype] = []
    first_linear = next(m for m in served.copy.modules() if isinstance(m, torch.nn.Linear))
    hook = first_linear.register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))

    def phase(engine: InProcessEngine) -> list[float]:
        def rollout() -> list[float]:
            body = {
                "model": "policy",
                "prompt": "count: 1 2 3",
                "max_tokens": 4,
                "seed": 7,
                "ignore_eos": True,
                "logprobs": 1,
                "return_token_ids": True,
            }
            reply = httpx.post(f"{engine.url}/v1/completions", json=body, timeout=120).json()
            return reply["choices"][0]["logprobs"]["token_logprobs"]

        with engine.generating(), ThreadPoolExecutor(max_workers=1) as pool:
            future = pool.submit(rollout)
            engine.serve_until([future])
            return future.result()

    try:
        with served:
            before = phase(served)
            with torch.no_grad():  # an optimizer step: the trainer's weights change in place
                for p in model.parameters():
                    p.add_(torch.randn_like(p) * 0.05)
            after = phase(served)
    finally:
        hook.remove()
    with InProcessEngine(model, loaded.tokenizer, served_model_name="policy", dtype="bfloat16") as fresh:
        truth = phase(fresh)
    assert served.batched  # continuous batching, not the one-sequence fallback a failed self-check leaves
    assert seen and set(seen) == {torch.bfloat16}
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert after == truth and after != before


def test_the_copy_is_bfloat16_or_nothing() -> None:
    from dagent.errors import EngineError

    loaded = load_model("tiny-qwen3")
    with pytest.raises(EngineError, match="bfloat16 copy"):
        InProcessEngine(loaded.model, loaded.tokenizer, served_model_name="policy", dtype="float16")
