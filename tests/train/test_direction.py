"""The training signal's direction, in both loops (dagent.train.direction; `pytest -k direction`).

On a fixed batch of REAL rollouts of each loop, built by the trainer's own code
(`_generate_and_score_completions`): white-box through TRL's environment_factory path (the tiny
Qwen3 in real sandboxes, steered as in test_grpo_smoke towards submitting the right or a wrong
digit); black-box through capture and the sync trainer's row conversion, pi and opencode (the
steered policy of test_blackbox_sync, every other answer wrong). One optimizer step with the
recipe's loss at a learning rate large enough to see, then, in eval mode, the change of each
rollout's summed log-prob over its trained tokens:

- real rewards: every rollout with a positive advantage goes up, every negative one down, and a
  clear majority of their tokens (counts asserted);
- the same rollouts through the permuted-reward control's code path (F52): the step follows the
  PERMUTED advantages, and fails when judged by the real ones;
- planted faults, each failing the check: the advantage's sign flipped, the loss mask covering
  tool-result tokens (which also gives those tokens a gradient), the completion ids shifted by one.

The random tiny model suffices: the direction of a policy-gradient step is a property of the loss,
the mask and the rows, not of language. The weights are restored between variants.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from dagent.train.direction import (  # noqa: E402
    DirectionError,
    Record,
    Snapshot,
    check_arm,
    group_advantages,
    replaying,
    rewards_of,
    untrained_gradient,
    verify,
)

LR = 0.1  # plain SGD (dagent.train.direction): the tiny model's log-probs move visibly in one step


def shifted(batch: dict) -> dict:
    """A row conversion off by one: the completion ids one token late against the masks."""
    out = dict(batch)
    ids = batch["completion_ids"]
    out["completion_ids"] = torch.cat([batch["prompt_ids"][:, -1:], ids[:, :-1]], dim=1)
    return out


def mask_over_tools(batch: dict) -> dict:
    out = dict(batch)
    out["tool_mask"] = torch.ones_like(batch["tool_mask"])
    return out


def flipped(batch: dict) -> dict:
    out = dict(batch)
    out["advantages"] = -batch["advantages"]
    return out


FAULTS = {"sign": flipped, "mask": mask_over_tools, "shift": shifted}


class Fixed:
    """One generation batch of real rollouts, its record, the environment's rewards, and the trainer
    (replaying that batch on every later build)."""

    def __init__(self, trainer, group: int, control: str = "none") -> None:
        check_arm(trainer, control)  # F57: the arm is wired as its arguments asked, judged apart from its batch
        self.trainer, self.group = replaying(trainer), group
        self.inputs = next(iter(trainer.get_train_dataloader()))
        trainer.model.train()
        self.batch = trainer._generate_and_score_completions(self.inputs)
        self.record = Record.of(self.batch)
        self.rewards = rewards_of(trainer.recorded_rewards)
        self.snapshot = Snapshot(trainer)

    def control_seed(self) -> int:
        """The first control seed whose permutation (dagent.train.control.permutation at this step) leaves
        every group that had a gradient with one, and changes the advantages: a permutation that
        gathers a group's alike rewards has nothing to measure."""
        expected = group_advantages(self.rewards, self.group)
        from dagent.train.control import permutation

        step = int(getattr(self.trainer.state, "global_step", 0) or 0)  # the step the control permutes at
        for seed in range(100):
            order = permutation(len(self.rewards), seed, step)
            moved = group_advantages([self.rewards[i] for i in order], self.group)
            groups = range(0, len(moved), self.group)
            if moved != expected and sum(any(moved[g:g + self.group]) for g in groups) >= sum(
                    any(expected[g:g + self.group]) for g in groups):
                return seed
        raise AssertionError(f"no permutation of {self.rewards} keeps a group mixed")

    def permuted(self) -> tuple[dict, list]:
        """The same rollouts rebuilt by the permuted-reward control's code path, and the rewards it used."""
        from dagent.train.control import controlled

        real_class = type(self.trainer)
        self.trainer.__class__ = controlled(real_class, "permuted", seed=self.control_seed())
        try:
            batch = self.trainer._generate_and_score_completions(self.inputs)
            order = self.trainer.control_permutations[-1]
        finally:
            self.trainer.__class__ = real_class
        return batch, [self.rewards[i] for i in order]


def check_loop(fixed: Fixed) -> dict:
    """Every assertion of the module docstring on one loop's fixed batch; returns what it measured."""
    rewards, group, record = fixed.rewards, fixed.group, fixed.record
    expected = group_advantages(rewards, group)
    assert any(expected), f"every group scored alike ({rewards}): the steering gave no mixed group"
    trainer_adv = fixed.batch["advantages"].tolist()  # TRL's own advantages agree with the rewards' in sign
    assert all((a > 0) == (e > 0) and (a < 0) == (e < 0) for a, e in zip(trainer_adv, expected)), (trainer_adv, expected)
    assert record.untrained_tokens() > 0, "no tool output in the completions: the mask check would be empty"

    real = verify(fixed.trainer, fixed.batch, record, rewards, group, snapshot=fixed.snapshot)
    assert real.agree == len(real.signed) >= 2 and real.tokens_with > 2 * real.tokens_against, real.summary()

    permuted_batch, permuted = fixed.permuted()
    moved = verify(fixed.trainer, permuted_batch, record, permuted, group, snapshot=fixed.snapshot)
    assert moved.agree == len(moved.signed), moved.summary()
    assert group_advantages(permuted, group) != expected, "the permutation left every advantage in place"
    with pytest.raises(DirectionError, match="advantages' way"):  # judged by the real rewards, the same steps fail
        verify(fixed.trainer, permuted_batch, record, rewards, group, snapshot=fixed.snapshot, measured=moved)

    caught = {}
    for name, plant in FAULTS.items():
        with pytest.raises(DirectionError) as err:
            verify(fixed.trainer, plant(fixed.batch), record, rewards, group, snapshot=fixed.snapshot)
        caught[name] = str(err.value)
    leak, _ = untrained_gradient(fixed.trainer, mask_over_tools(fixed.batch), record, expected)
    assert leak > 0, "the mask fault put no gradient on tool-result tokens"
    assert real.leak == 0.0 and real.starved == 0  # the real batch's own gradient check
    assert "advantages' way" in caught["sign"]
    assert "did not produce" in caught["mask"] and "did not produce" in caught["shift"]
    fixed.snapshot.restore()
    return {"real": real.summary(), "permuted": moved.summary(), **caught}


@pytest.mark.slow
@pytest.mark.failure_mode("F52")
def test_direction_whitebox_environment_factory(rowcount_suite, backend, tmp_path):
    from transformers import AutoTokenizer

    from dagent.engine.models import tiny_qwen3
    from dagent.recipes import WhiteboxRecipe
    from dagent.tools.episode import close_all
    from dagent.train.grpo import build_trainer
    from tests.train.test_grpo_smoke import steer

    model_dir = tiny_qwen3()
    recipe = WhiteboxRecipe.cpu(split="train", max_steps=1, num_generations=4, per_device_train_batch_size=8,
                        max_completion_length=192, output_chars=100, max_tool_calling_iterations=2,
                        learning_rate=LR, warmup_steps=0, bf16=False, seed=3)
    run = build_trainer(model_dir, rowcount_suite, recipe, tmp_path, backend=backend,
                        generation_kwargs={"sequence_bias": steer(AutoTokenizer.from_pretrained(model_dir))})
    try:
        fixed = Fixed(run.trainer, recipe.num_generations)
    finally:
        close_all()
    measured = check_loop(fixed)
    print(measured)


def by_harness(model, tokenizer):
    """The live module steered towards the rollout script (test_blackbox_sync), where each harness's
    answer steps alternate right and wrong, counted per harness (its system prompt heads every call):
    a group of 2 rollouts of one harness then holds one of each, in whatever order they run."""
    from benchmarks.rollouts import SteeredPolicy, script_for, tool_call
    from tests.train.test_blackbox_sync import WRONG

    writes: dict[str, int] = {}

    def script(prompt: str) -> str:
        text = script_for(prompt)
        if "answer.txt" not in text or "<tool_response>" not in prompt:
            return text
        key = prompt[:400]
        writes[key] = writes.get(key, 0) + 1
        return tool_call(WRONG) if writes[key] % 2 == 0 else text

    return SteeredPolicy(model, tokenizer, tokenizer.convert_tokens_to_ids("<|im_end|>"), script=script)


@pytest.mark.harness
@pytest.mark.slow
@pytest.mark.failure_mode("F52")
def test_direction_blackbox_capture_rows_pi_and_opencode(rowcount_suite, tmp_path):
    from dagent.engine.models import tiny_qwen3
    from dagent.recipes import BlackboxRecipe
    from dagent.train.blackbox import build_sync_trainer
    from tests.envs.test_blackbox import need_opencode
    from tests.harness.test_pi import need_pi

    need_opencode()
    need_pi()
    recipe = BlackboxRecipe.cpu(split="train", max_steps=1, num_generations=2, groups_per_step=2, learning_rate=LR,
                                warmup_steps=0, agent_steps=6, max_output_tokens=256, bf16=False)
    run = build_sync_trainer(tiny_qwen3(), rowcount_suite, recipe, tmp_path, harnesses=("pi", "opencode"),
                             policy=by_harness, served_name="tiny-qwen3-steered", sandbox_dir=tmp_path / "sandboxes")
    try:
        fixed = Fixed(run.trainer, recipe.num_generations)
    finally:
        run.stop()
    rows = run.rollouts.rows
    assert sorted(r.harness for r in rows) == ["opencode", "opencode", "pi", "pi"]
    assert all(r.audit.startswith("exact") for r in rows), [r.receipt() for r in rows]  # rows vs the engine's tokens
    for harness in ("pi", "opencode"):  # each harness's group holds a right and a wrong rollout
        assert sorted(r.outcome for r in rows if r.harness == harness) == ["correct", "wrong"], [r.receipt() for r in rows]
    # the record is the rows as converted: the batch's trained tokens are the engine's, in order
    for i, r in enumerate(rows):
        trained = fixed.record.completion_ids[i][fixed.record.loss_mask[i].bool()].tolist()
        assert trained == [t for t, m in zip(r.completion_ids, r.env_mask) if m]
    measured = check_loop(fixed)
    print(measured)
