"""Two vLLM engines on one card (an evaluation's checkpoint and baseline): each gets a computed
share, and a pair that cannot fit is refused before either starts (F49)."""

from __future__ import annotations

import sys

import pytest

from dagent.engine.models import tiny_qwen3
from dagent.engine.process import VllmProcess
from dagent.engine.sizing import OVERHEAD_BYTES, USABLE, EngineSizingError, ModelShape, size_engines
from dagent.eval.args import EvalArgs
from dagent.eval.experiment import Arm, evaluate_arms, gpu_shares

GIB = 1024**3
# Qwen3-8B-like: 16 GiB of bf16 weights, 36 layers x 8 KV heads x 128 = 144 KiB of cache a token
EIGHT_B = ModelShape("8b", 16 * GIB, 2 * 36 * 8 * 128 * 2)
# SmolLM2-135M-like: 270 MB, 30 layers x 3 KV heads x 64
SMALL = ModelShape("135m", 270 * 1024**2, 2 * 30 * 3 * 64 * 2)


def test_two_engines_share_a_card_within_what_vllm_may_take():
    card = 141 * GIB  # an H200
    a, b = size_engines(card, [EIGHT_B, SMALL], max_model_len=32_768)
    assert a.gpu_memory_utilization + b.gpu_memory_utilization <= USABLE + 1e-3  # never 2 x 0.9
    for share, model in ((a, EIGHT_B), (b, SMALL)):
        assert (
            share.gpu_memory_utilization * card
            >= model.weight_bytes + OVERHEAD_BYTES + model.kv_bytes_per_token * 32_768
        )
        assert share.cache_tokens >= 32_768 and 1 <= share.max_num_seqs <= 256
    assert abs(a.cache_tokens - b.cache_tokens) / a.cache_tokens < 0.01  # the spare split so both hold alike


@pytest.mark.failure_mode("F49")
def test_engines_that_cannot_fit_are_refused_naming_the_figures():
    with pytest.raises(EngineSizingError, match=r"engines_do_not_fit.*24\.0 GiB.*8b.*F49"):
        size_engines(24 * GIB, [EIGHT_B, EIGHT_B], max_model_len=32_768)


def test_a_model_directory_gives_its_shape():
    shape = ModelShape.of(tiny_qwen3())
    assert shape.kv_bytes_per_token == 2 * 2 * 2 * 32 * 4  # 2 layers x 2 KV heads x head 32, float32
    assert shape.weight_bytes == (tiny_qwen3() / "model.safetensors").stat().st_size


@pytest.mark.failure_mode("F49")
def test_an_evaluation_sizes_its_gpu_engines_and_refuses_before_starting_any(suite):
    arms = [
        Arm("ckpt", model="tiny-qwen3", engine="vllm"),
        Arm("base", model="tiny-qwen3", engine="vllm"),
        Arm("oracle", agent="oracle"),
    ]
    shares = gpu_shares(arms, card=80 * GIB)
    assert set(shares) == {"ckpt", "base"} and sum(s.gpu_memory_utilization for s in shares.values()) <= USABLE + 1e-3
    argv, _ = VllmProcess(
        "tiny-qwen3",
        gpu=True,
        python=sys.executable,
        gpu_memory_utilization=shares["ckpt"].gpu_memory_utilization,
        max_num_seqs=shares["ckpt"].max_num_seqs,
    ).command()
    assert argv[argv.index("--gpu-memory-utilization") + 1] == str(shares["ckpt"].gpu_memory_utilization)
    assert argv[argv.index("--max-num-seqs") + 1] == str(shares["ckpt"].max_num_seqs)
    with pytest.raises(EngineSizingError, match="F49"):  # 2 GiB runtime each alone overflows a 3 GiB card
        evaluate_arms(suite, arms, EvalArgs(split="test", limit=1), card=3 * GIB)
