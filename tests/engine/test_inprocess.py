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
            body = {"model": "policy", "prompt": "count: 1 2 3", "max_tokens": 6, "seed": seed,
                    "ignore_eos": True, "return_token_ids": True}
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


def test_autocast_runs_every_engine_step_in_bfloat16_on_either_thread_and_leaves_the_weights_float32() -> None:
    """`autocast="bfloat16"`: the engine's steps compute in a CPU bfloat16 autocast (what a linear
    layer returns says so, taken from torch, not from the engine), whether the waiting thread or the
    scheduler's own thread serves them; the module's weights stay float32 (the optimizer's copy)."""
    loaded = load_model("tiny-qwen3")
    model = loaded.model.float()
    seen: list[tuple[str, torch.dtype]] = []
    first_linear = next(m for m in model.modules() if isinstance(m, torch.nn.Linear))
    served = InProcessEngine(model, loaded.tokenizer, served_model_name="policy", autocast="bfloat16")
    # from here on (the engine's self-check at construction ran the module in float32, outside serving)
    hook = first_linear.register_forward_hook(
        lambda _m, _i, out: seen.append((threading.current_thread().name, out.dtype)))
    try:
        with served:
            def rollout(seed: int) -> list[int]:
                body = {"model": "policy", "prompt": "count: 1 2 3", "max_tokens": 4, "seed": seed,
                        "ignore_eos": True, "return_token_ids": True}
                reply = httpx.post(f"{served.url}/v1/completions", json=body, timeout=120).json()
                return reply["choices"][0]["token_ids"]

            with served.generating(), ThreadPoolExecutor(max_workers=2) as pool:
                futures = [pool.submit(rollout, s) for s in (1, 2)]
                served.serve_until(futures)
                assert all(len(f.result()) == 4 for f in futures)
            assert len(rollout(3)) == 4  # nobody waiting: the scheduler's own thread serves it
    finally:
        hook.remove()
    threads = {name for name, _ in seen}
    assert {threading.current_thread().name, "dagent-engine"} <= threads
    assert seen and {dtype for _, dtype in seen} == {torch.bfloat16}
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_autocast_accepts_bfloat16_only() -> None:
    from dagent.errors import EngineError

    loaded = load_model("tiny-qwen3")
    with pytest.raises(EngineError, match="bfloat16 only"):
        InProcessEngine(loaded.model, loaded.tokenizer, served_model_name="policy", autocast="float16")
