"""The permuted-reward control (F52): the same trainer and code path, each batch's rewards shuffled
across its rollouts, so the reward no longer tracks the answer, where lr=0 would leave the weights
bit-identical and make "no difference" certain."""

from __future__ import annotations

import json
import math

import pytest

torch = pytest.importorskip("torch")

from dagent.errors import ConfigError  # noqa: E402
from dagent.train.control import controlled  # noqa: E402


class Base:
    def __init__(self, rewards):
        self.rewards = rewards

    def _calculate_rewards(self, *args, **kwargs):
        return self.rewards.clone()


def test_rewards_are_permuted_within_the_batch_alike_on_every_process():
    rewards = torch.tensor([[1.0], [0.0], [0.0], [float("nan")], [1.0], [0.0], [0.0], [0.0]])
    a, b = controlled(Base, "permuted", seed=3)(rewards), controlled(Base, "permuted", seed=3)(rewards)
    out_a, out_b = a._calculate_rewards(), b._calculate_rewards()
    assert torch.equal(out_a.nan_to_num(-1), out_b.nan_to_num(-1))  # two ranks, one seed: the same permutation
    (order,) = a.control_permutations
    assert sorted(order) == list(range(8)) and order != list(range(8))
    assert torch.equal(out_a.nan_to_num(-1), rewards[order].nan_to_num(-1))  # the same multiset, moved
    assert math.isnan(out_a[order.index(3), 0])  # an ungraded rollout stays ungraded where it lands
    assert controlled(Base, "none") is Base  # training itself is untouched
    with pytest.raises(ConfigError, match="unknown control"):
        controlled(Base, "lr0")


@pytest.mark.slow
def test_a_two_step_permuted_control_trains_through_the_same_path(suite, backend, tmp_path):
    from transformers import AutoTokenizer

    from dagent.engine.models import tiny_qwen3
    from dagent.recipes import WhiteboxRecipe
    from dagent.tools.episode import close_all
    from dagent.train.grpo import build_trainer
    from tests.train.test_grpo_smoke import steer

    model_dir = tiny_qwen3()
    recipe = WhiteboxRecipe.cpu(split="train", max_steps=2, save_steps=2, num_generations=4, per_device_train_batch_size=4,
                        max_completion_length=192, output_chars=100, max_tool_calling_iterations=2,
                        learning_rate=1e-3, warmup_steps=0)
    run = build_trainer(model_dir, suite, recipe, tmp_path, backend=backend, control="permuted",
                        generation_kwargs={"sequence_bias": steer(AutoTokenizer.from_pretrained(model_dir))})
    before = {k: v.detach().clone() for k, v in run.trainer.model.named_parameters()}
    try:
        run.trainer.train()
    finally:
        close_all()
    assert type(run.trainer).__name__ == "PermutedRewardsGRPOTrainer" and len(run.trainer.control_permutations) == 2
    assert all(sorted(p) == list(range(4)) for p in run.trainer.control_permutations)
    assert any(not torch.equal(v.detach(), before[k]) for k, v in run.trainer.model.named_parameters())  # it trains
    stamp = json.loads((tmp_path / "checkpoint-2" / "provenance.json").read_text())
    assert stamp["control"] == "permuted" and stamp["recipe"]["learning_rate"] == 1e-3  # same optimiser as the run


@pytest.mark.slow
@pytest.mark.failure_mode("F52")
def test_a_control_whose_weights_never_move_is_refused_naming_f52(suite, backend, tmp_path):
    """The planted fault: the control at learning rate 0 (the guaranteed null). Its two steps run, its
    weights end bit-identical, and the run fails naming F52 instead of entering a comparison."""
    from transformers import AutoTokenizer

    from dagent.engine.models import tiny_qwen3
    from dagent.recipes import WhiteboxRecipe
    from dagent.tools.episode import close_all
    from dagent.train.control import ControlError
    from dagent.train.grpo import build_trainer
    from tests.train.test_grpo_smoke import steer

    model_dir = tiny_qwen3()
    recipe = WhiteboxRecipe.cpu(split="train", max_steps=2, save_steps=2, num_generations=4, per_device_train_batch_size=4,
                        max_completion_length=192, output_chars=100, max_tool_calling_iterations=2,
                        learning_rate=0.0, warmup_steps=0)
    run = build_trainer(model_dir, suite, recipe, tmp_path, backend=backend, control="permuted",
                        generation_kwargs={"sequence_bias": steer(AutoTokenizer.from_pretrained(model_dir))})
    try:
        with pytest.raises(ControlError, match=r"F52: the control's weights are bit-identical after steps 1\.\.2"):
            run.trainer.train()
    finally:
        close_all()
