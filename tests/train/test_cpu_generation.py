"""White-box generation on a CPU in bfloat16 (dagent.train.whitebox.cpu_generation): every turn TRL generates
runs inside one CPU bfloat16 autocast, the model's weights stay float32, and a recipe that asks for
float32 generation or trains without bf16 is left as TRL made it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from dagent.train.whitebox.cpu_generation import generate_in_bf16  # noqa: E402


class Generating:
    """A trainer's generation method that reports the precision it ran in and what a linear layer
    computed there."""

    def __init__(self) -> None:
        self.layer = torch.nn.Linear(8, 8)
        self.seen: list[tuple[bool, torch.dtype]] = []

    def _generate_single_turn(self, prompt_ids: list[list[int]], *rest: object) -> tuple[list, None]:
        out = self.layer(torch.ones(1, 8))
        self.seen.append((torch.is_autocast_enabled("cpu"), out.dtype))
        return [[1, 2]] * len(prompt_ids), None


def test_every_generated_turn_runs_in_bfloat16_and_the_weights_stay_float32():
    trainer = Generating()
    trainer._generate_single_turn([[5]], None, None, 1)
    assert generate_in_bf16(trainer) and generate_in_bf16(trainer)  # idempotent: wrapped once
    ids, logprobs = trainer._generate_single_turn([[5], [6]], None, None, 2)
    assert ids == [[1, 2], [1, 2]] and logprobs is None  # what TRL's method returned, untouched
    assert trainer.seen == [(False, torch.float32), (True, torch.bfloat16)]
    assert trainer.layer.weight.dtype == torch.float32 and not torch.is_autocast_enabled("cpu")


def test_a_trl_without_the_method_is_left_alone():
    assert generate_in_bf16(SimpleNamespace()) is False


def test_generation_in_bfloat16_follows_the_recipe(monkeypatch, rowcount_suite, tmp_path):
    """build_trainer wraps the trainer's generation where the CPU recipe trains in bf16 and asks for
    "auto", never where it asks for float32."""
    from dagent.engine.models import tiny_qwen3
    from dagent.recipes import WhiteboxRecipe
    from dagent.train.whitebox.grpo import build_trainer

    wrapped = {}
    for dtype in ("auto", "float32"):
        recipe = WhiteboxRecipe.cpu(
            split="train", max_steps=1, bf16=True, generation_dtype=dtype, generator="transformers"
        )
        run = build_trainer(tiny_qwen3(), rowcount_suite, recipe, tmp_path / dtype, force=True)
        wrapped[dtype] = getattr(run.trainer._generate_single_turn, "__wrapped__", None) is not None and getattr(
            run.trainer._generate_single_turn.__wrapped__, "_dagent_bf16", False
        )
    assert wrapped == {"auto": True, "float32": False}
