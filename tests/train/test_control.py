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


class Stepped(Base):
    """A trainer at an optimizer step (transformers' `state.global_step`)."""

    def __init__(self, rewards, step):
        super().__init__(rewards)
        self.state = type("State", (), {"global_step": step})()


def test_a_resumed_control_draws_the_permutations_an_unbroken_one_draws():
    """The permutation is a function of (seed, step, batch within the step), not of a generator's
    history: a control resumed at step 3 (a fresh process) permutes step 3 as the unbroken run did,
    and a second batch scored within one step gets its own permutation."""
    rewards = torch.arange(8.0).unsqueeze(1)
    unbroken = controlled(Stepped, "permuted", seed=1)(rewards, 0)
    for step in range(5):
        unbroken.state.global_step = step
        unbroken._calculate_rewards()
    unbroken._calculate_rewards()  # a second batch at step 4
    resumed = controlled(Stepped, "permuted", seed=1)(rewards, 3)
    resumed._calculate_rewards()
    resumed.state.global_step = 4
    resumed._calculate_rewards()
    resumed._calculate_rewards()
    assert resumed.control_permutations == unbroken.control_permutations[3:]
    assert len({tuple(o) for o in unbroken.control_permutations}) == 6  # each batch its own order
    other_seed = controlled(Stepped, "permuted", seed=2)(rewards, 3)
    other_seed._calculate_rewards()
    assert other_seed.control_permutations[0] != unbroken.control_permutations[3]


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
    from dagent.train.whitebox.grpo import build_trainer
    from tests.train.test_grpo_smoke import steer

    model_dir = tiny_qwen3()
    recipe = WhiteboxRecipe.cpu(
        split="train",
        max_steps=2,
        save_steps=2,
        num_generations=4,
        per_device_train_batch_size=4,
        max_completion_length=192,
        output_chars=100,
        max_tool_calling_iterations=2,
        learning_rate=1e-3,
        warmup_steps=0,
    )
    run = build_trainer(
        model_dir,
        suite,
        recipe,
        tmp_path,
        backend=backend,
        control="permuted",
        generation_kwargs={"sequence_bias": steer(AutoTokenizer.from_pretrained(model_dir))},
    )
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
    from dagent.train.whitebox.grpo import build_trainer
    from tests.train.test_grpo_smoke import steer

    model_dir = tiny_qwen3()
    recipe = WhiteboxRecipe.cpu(
        split="train",
        max_steps=2,
        save_steps=2,
        num_generations=4,
        per_device_train_batch_size=4,
        max_completion_length=192,
        output_chars=100,
        max_tool_calling_iterations=2,
        learning_rate=0.0,
        warmup_steps=0,
    )
    run = build_trainer(
        model_dir,
        suite,
        recipe,
        tmp_path,
        backend=backend,
        control="permuted",
        generation_kwargs={"sequence_bias": steer(AutoTokenizer.from_pretrained(model_dir))},
    )
    try:
        with pytest.raises(ControlError, match=r"F52: the control's weights are bit-identical after steps 1\.\.2"):
            run.trainer.train()
    finally:
        close_all()


@pytest.mark.failure_mode("F57")
def test_a_grpo_arm_wired_through_the_control_is_named_from_its_arguments():
    """F57 planted: the GRPO arm built through the permuted control's code path. The rewards the
    trainer records are then the permuted ones, so a check judging the step by them passes; the arm's
    wiring, judged by what the run was asked for, does not."""
    pytest.importorskip("torch")
    from dagent.train.verify.direction import DirectionError, check_arm

    class Trainer:
        def _calculate_rewards(self, *args, **kwargs):
            return None

    check_arm(Trainer(), "none")
    check_arm(controlled(Trainer, "none")(), "none")
    planted = controlled(Trainer, "permuted")()
    check_arm(planted, "permuted")
    with pytest.raises(DirectionError, match="F57: the arm was asked for control 'none' .* scores as 'permuted'"):
        check_arm(planted, "none")
    with pytest.raises(DirectionError, match="F57"):
        check_arm(Trainer(), "permuted")  # a control that is really a training run
