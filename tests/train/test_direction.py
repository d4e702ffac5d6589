"""The training signal's direction, in both loops (dagent.train.verify.direction, dagent.train.verify.truth;
`pytest -k direction`).

On a fixed batch of REAL rollouts of each loop, built by the trainer's own code
(`_generate_and_score_completions`): white-box through TRL's environment_factory path and the
generator the CPU preset uses (dagent's engine over the trainer's module, steered with
`sequence_bias` towards submitting the right or a wrong digit); black-box through capture and the
sync trainer's row conversion, pi and opencode (the steered policy of test_blackbox_sync, every
other answer wrong). The truth comes from OUTSIDE the trainer (F57): the expected advantages from the
grader's verdict on the answer each rollout's sampled text submitted (white-box), the audit
reference from the sampler's own output (the engine's ids as it returned them; black-box: the
capture's), the arm's wiring from what the run asked for. One optimizer step with the recipe's loss
at a learning rate large enough to see, then, in eval mode, the change of each rollout's summed
log-prob over its trained tokens:

- real rewards: every rollout with a positive advantage goes up, every negative one down, and a
  clear majority of their tokens (counts asserted);
- the same rollouts through the permuted-reward control's code path (F52): the step follows the
  PERMUTED advantages, and fails when judged by the real ones;
- eight planted faults, each failing the check of the loop it sits in: the advantage negated in the
  batch, the loss's sign flipped inside TRL's loss, tool output trained, the GRPO arm wired through
  the permuted control, the reward inverted where it is computed, the completion ids shifted by one
  inside the generator, the generator dropping the first sampled token, half of each completion
  masked out of the loss.

The random tiny model suffices: the direction of a policy-gradient step is a property of the loss,
the mask and the rows, not of language. The weights are restored between variants.
"""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")

from dagent.train.verify.batch import Record  # noqa: E402
from dagent.train.verify.direction import (  # noqa: E402
    DirectionError,
    Snapshot,
    check_arm,
    group_advantages,
    replaying,
    rewards_of,
    untrained_gradient,
    verify,
)
from dagent.train.verify.truth import SamplerLog, sampled_texts, sampler_audit, verdicts, verify_signal  # noqa: E402

LR = 0.1  # plain SGD (dagent.train.verify.direction): the tiny model's log-probs move visibly in one step


def mask_over_tools(batch: dict) -> dict:
    out = dict(batch)
    out["tool_mask"] = torch.ones_like(batch["tool_mask"])
    return out


def flipped(batch: dict) -> dict:
    out = dict(batch)
    out["advantages"] = -batch["advantages"]
    return out


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
            if moved != expected and sum(any(moved[g : g + self.group]) for g in groups) >= sum(
                any(expected[g : g + self.group]) for g in groups
            ):
                return seed
        raise AssertionError(f"no permutation of {self.rewards} keeps a group mixed")

    def permuted(self) -> tuple[dict, list]:
        """The same rollouts rebuilt by the permuted-reward control's code path, and the rewards it used.
        Wired so, the trainer is named by `check_arm` as the GRPO arm it was asked to be (F57 planted)."""
        from dagent.train.control import controlled

        real_class = type(self.trainer)
        self.trainer.__class__ = controlled(real_class, "permuted", seed=self.control_seed())
        try:
            with pytest.raises(DirectionError, match="F57: the arm was asked for control 'none'"):
                check_arm(self.trainer, "none")
            batch = self.trainer._generate_and_score_completions(self.inputs)
            order = self.trainer.control_permutations[-1]
        finally:
            self.trainer.__class__ = real_class
        return batch, [self.rewards[i] for i in order]

    def rebuilt(self) -> dict:
        """A NEW batch through the trainer's code (its recorded batch not replayed), the record kept."""
        saved = self.trainer._recorded_generation, self.trainer.recorded_rewards
        self.trainer._recorded_generation = self.trainer.recorded_rewards = None
        try:
            return self.trainer._generate_and_score_completions(self.inputs)
        finally:
            self.trainer._recorded_generation, self.trainer.recorded_rewards = saved


def plant_shared_faults(fixed: Fixed, fails, monkeypatch) -> tuple[dict, list]:
    """The faults both loops share, each through `fails(name, batch, match=...)`: the advantage negated
    in the batch, tool output trained, half of each completion masked out, the loss's sign flipped
    inside TRL's loss, the GRPO arm wired through the permuted control. Returns that permuted batch
    and its rewards."""
    fails("advantage negated in the batch", flipped(fixed.batch), match="grader's verdicts")
    fails("tool output trained", mask_over_tools(fixed.batch), match="sampler did not produce")
    fails("half of each completion masked out", half_masked(fixed.batch), match="sampler did not produce")
    with monkeypatch.context() as m:
        original = fixed.trainer._compute_loss
        m.setattr(fixed.trainer, "_compute_loss", lambda model, inputs: -original(model, inputs))
        fails("loss sign flipped inside TRL's loss", fixed.batch, match="advantages' way")
    permuted_batch, permuted = fixed.permuted()
    fails("GRPO arm running the permuted control", permuted_batch, match="grader's verdicts")
    return permuted_batch, permuted


def half_masked(batch: dict) -> dict:
    """Half of each completion masked out of the loss (its second half)."""
    out = dict(batch)
    mask = batch["tool_mask"].clone()
    for i, n in enumerate(batch["completion_mask"].sum(1).tolist()):
        mask[i, int(n) // 2 :] = 0
    out["tool_mask"] = mask
    return out


class Whitebox:
    """The white-box loop's fixed batch with its truth: the engine's own generations (SamplerLog)
    and the grader's verdicts on the answers they submitted."""

    def __init__(self, fixed: Fixed, suite, log: SamplerLog, max_completion_length: int) -> None:
        self.fixed, self.suite, self.limit = fixed, suite, max_completion_length
        self.task_ids = [row["task_id"] for row in fixed.inputs]
        self.batch, self.log = fixed.batch, log
        self.truth = self.verdicts(fixed.batch, log)

    def verdicts(self, batch, log) -> list:
        return verdicts(self.suite, self.task_ids, sampled_texts(batch, log, self.fixed.trainer.processing_class))

    def judge(self, batch, truth=None, log=None, **kw):
        return verify_signal(
            self.fixed.trainer,
            batch,
            self.fixed.record,
            self.truth if truth is None else truth,
            self.fixed.group,
            audit=sampler_audit(batch, log or self.log, max_completion_length=self.limit),
            snapshot=self.fixed.snapshot,
            **kw,
        )

    def fresh(self, monkeypatch, target: str, planted) -> tuple[dict, list, SamplerLog]:
        """A NEW batch through the trainer's code (not replayed) with `target` replaced by `planted`
        for its generation and scoring: a fault where the trainer builds its batch."""
        with monkeypatch.context() as m, SamplerLog() as log:
            m.setattr(target, planted)
            batch = self.fixed.rebuilt()
        return batch, self.verdicts(batch, log), log


@pytest.mark.slow
@pytest.mark.failure_mode("F52")
@pytest.mark.failure_mode("F57")
def test_direction_whitebox_environment_factory_through_the_engine(rowcount_suite, backend, tmp_path, monkeypatch):
    from transformers import AutoTokenizer

    from dagent.engine.models import tiny_qwen3
    from dagent.recipes import WhiteboxRecipe
    from dagent.tools.episode import close_all
    from dagent.train.whitebox import engine_generation
    from dagent.train.whitebox.grpo import build_trainer
    from tests.train.test_engine_generation import through_engine
    from tests.train.test_grpo_smoke import steer

    model_dir = tiny_qwen3()
    recipe = WhiteboxRecipe.cpu(
        split="train",
        max_steps=1,
        num_generations=4,
        per_device_train_batch_size=8,
        max_completion_length=192,
        output_chars=100,
        max_tool_calling_iterations=2,
        learning_rate=LR,
        warmup_steps=0,
        bf16=False,
        seed=3,
        generator="engine",
    )
    run = build_trainer(
        model_dir,
        rowcount_suite,
        recipe,
        tmp_path,
        backend=backend,
        generation_kwargs={"sequence_bias": steer(AutoTokenizer.from_pretrained(model_dir))},
    )
    assert through_engine(run.trainer), "the preset's generator is dagent's engine"
    try:
        with SamplerLog() as log:
            fixed = Fixed(run.trainer, recipe.num_generations)
        wb = Whitebox(fixed, rowcount_suite, log, recipe.max_completion_length)
        assert len(log.generations) >= fixed.record.rollouts, "the engine sampled no turn: not the preset's path"
        assert sorted(set(wb.truth)) == [0.0, 1.0], f"the grader's verdicts split no group: {wb.truth}"
        # the environment's reward agrees with the grader on the sampled answers (its order, not its size)
        assert [r > 0 for r in fixed.rewards] == [t > 0 for t in wb.truth], (fixed.rewards, wb.truth)
        assert fixed.record.untrained_tokens() > 0, "no tool output in the completions: the mask check would be empty"

        real = wb.judge(fixed.batch)
        assert real.agree == len(real.signed) >= 2 and real.tokens_with > 2 * real.tokens_against, real.summary()

        caught = {}

        def fails(name, batch, truth=None, log=None, match="") -> None:
            with pytest.raises(DirectionError, match=match) as err:
                wb.judge(batch, truth, log)
            caught[name] = str(err.value)

        # 1-4, 8: faults in the batch the loss reads, and the arm's wiring
        permuted_batch, permuted = plant_shared_faults(fixed, fails, monkeypatch)
        # 5-7: faults where the batch is built: each a new batch through the trainer's code
        batch, truth, plog = wb.fresh(
            monkeypatch,
            "dagent.tools.episode.reward",
            lambda correct, tool_calls, config=None: None if correct is None else 1.3 * (1 - float(correct)),
        )
        fails("reward inverted where it is computed", batch, truth, plog, match="grader's verdicts")
        first_eos = engine_generation._through_first_eos
        batch, truth, plog = wb.fresh(
            monkeypatch,
            "dagent.train.whitebox.engine_generation._through_first_eos",
            lambda ids, eos, limit: first_eos(ids, eos, limit)[1:],
        )
        fails("generator drops the first sampled token", batch, truth, plog, match="sampler did not produce")
        generate = engine_generation._Engine.generate
        batch, truth, plog = wb.fresh(
            monkeypatch,
            "dagent.train.whitebox.engine_generation._Engine.generate",
            lambda self, prompts, *a, **k: [
                [p[-1], *ids[:-1]] for p, ids in zip(prompts, generate(self, prompts, *a, **k))
            ],
        )
        fails("completion ids shifted by one in the generator", batch, truth, plog, match="sampler did not produce")
        assert len(caught) == 8, sorted(caught)
    finally:
        close_all()
        fixed.snapshot.restore()
    # the permuted control's own step follows its permuted advantages, and fails judged by the real ones
    moved = verify(fixed.trainer, permuted_batch, fixed.record, permuted, fixed.group, snapshot=fixed.snapshot)
    assert moved.agree == len(moved.signed), moved.summary()
    with pytest.raises(DirectionError, match="advantages' way"):
        verify(
            fixed.trainer, permuted_batch, fixed.record, wb.truth, fixed.group, snapshot=fixed.snapshot, measured=moved
        )
    leak, _ = untrained_gradient(
        fixed.trainer, mask_over_tools(fixed.batch), fixed.record, group_advantages(wb.truth, fixed.group)
    )
    assert leak > 0 and real.leak == 0.0 and real.starved == 0
    print({"real": real.summary(), **caught})


def by_harness(model, tokenizer):
    """The live module steered towards the rollout script (test_blackbox_sync), where each harness's
    answer steps alternate right and wrong, counted per harness (its system prompt heads every call):
    a group of 2 rollouts of one harness then holds one of each, in whatever order they run. The
    first look prints a name of its own (`mktemp -u`), so a rollout's later calls carry it: a call
    the harness repeats (a retry under load) gets the answer its rollout got, never the next one."""
    import re

    from benchmarks.rollouts import LOOK, SteeredPolicy, script_for, tool_call
    from tests.train.test_blackbox_sync import WRONG

    look = {**LOOK, "command": LOOK["command"] + "; mktemp -u"}
    writes: dict[str, int] = {}
    right: dict[str, bool] = {}  # a rollout (its harness, its look's output) -> its answer is right

    def script(prompt: str) -> str:
        text = script_for(prompt)
        if text == tool_call(LOOK):
            return tool_call(look)
        if "answer.txt" not in text or "<tool_response>" not in prompt:
            return text
        head = prompt[:400]
        seen = re.search(r"<tool_response>(.*?)</tool_response>", prompt, re.S)
        rollout = head + (seen.group(1) if seen else "")
        if rollout not in right:
            writes[head] = writes.get(head, 0) + 1
            right[rollout] = writes[head] % 2 == 1
        return text if right[rollout] else tool_call(WRONG)

    return SteeredPolicy(model, tokenizer, tokenizer.convert_tokens_to_ids("<|im_end|>"), script=script)


class Captured:
    """The black-box loop's truth beside the trainer's rows: every Rollout the runtime settled (its
    answer, and the engine's completions as capture recorded them) and the row made of it; `replay`
    hands the same rollouts out again, so a fault downstream of the runtime gets a new batch without
    new agent runs."""

    def __init__(self, monkeypatch) -> None:
        import dagent.train.blackbox.rollouts as rollouts

        self.made: dict[int, object] = {}  # id(row) -> the Rollout it was made of
        self.cache: dict[tuple, list] = {}
        self.replay, self.planted_reward = False, None
        captured = self

        def one(self, index, harness, sample):
            if captured.replay:
                rollout = captured.cache[(index, harness)].pop(0)
                captured.cache[(index, harness)].append(rollout)
                if captured.planted_reward is not None:
                    rollout = dataclasses.replace(
                        rollout,
                        record=rollout.record.model_copy(
                            update={"reward": captured.planted_reward(rollout.record.reward)}
                        ),
                    )
            else:
                rollout = self.runtimes[harness].run_rollout(self.split, index, timeout_s=self.timeout_s, sample=sample)
                captured.cache.setdefault((index, harness), []).append(rollout)
            row = rollouts.row_of(rollout, harness, self.fork_threshold, self.placeholder)
            captured.made[id(row)] = rollout
            return row

        monkeypatch.setattr(rollouts.BlackBoxRollouts, "_one", one)

    def truth(self, rows, suite) -> tuple[list, list]:
        """(the grader's verdict on each row's rollout's answer, the engine's completions capture recorded)."""
        from dagent.grading.dispatch import grade

        made = [self.made[id(r)] for r in rows]
        verdict = []
        for r in made:
            g = grade(suite.find(r.task_id)[2], r.record.answer)
            verdict.append(None if g.correct is None else float(g.correct))
        calls = [[e["completion_token_ids"] for e in r.trace_entries() if any(e["loss_mask"])] for r in made]
        return verdict, calls


@pytest.mark.harness
@pytest.mark.slow
@pytest.mark.failure_mode("F52")
@pytest.mark.failure_mode("F57")
def test_direction_blackbox_capture_rows_pi_and_opencode(rowcount_suite, tmp_path, monkeypatch):
    import dagent.train.blackbox.rollouts as rollouts
    from dagent.engine.models import tiny_qwen3
    from dagent.recipes import BlackboxRecipe
    from dagent.train.blackbox.trainer import build_sync_trainer
    from dagent.train.verify.truth import capture_audit
    from tests.envs.test_blackbox import need_opencode
    from tests.harness.test_pi import need_pi

    need_opencode()
    need_pi()
    captured = Captured(monkeypatch)
    recipe = BlackboxRecipe.cpu(
        split="train",
        max_steps=1,
        num_generations=2,
        groups_per_step=2,
        learning_rate=LR,
        warmup_steps=0,
        agent_steps=6,
        max_output_tokens=256,
        bf16=False,
    )
    run = build_sync_trainer(
        tiny_qwen3(),
        rowcount_suite,
        recipe,
        tmp_path,
        harnesses=("pi", "opencode"),
        policy=by_harness,
        served_name="tiny-qwen3-steered",
        sandbox_dir=tmp_path / "sandboxes",
    )
    try:
        fixed = Fixed(run.trainer, recipe.num_generations)
        rows = list(run.rollouts.rows)
        assert sorted(r.harness for r in rows) == ["opencode", "opencode", "pi", "pi"]
        assert all(r.audit == "exact" for r in rows), [r.receipt() for r in rows]  # rows vs the engine's tokens
        for harness in ("pi", "opencode"):  # each harness's group holds a right and a wrong rollout
            assert sorted(r.outcome for r in rows if r.harness == harness) == ["correct", "wrong"], [
                r.receipt() for r in rows
            ]
        truth, calls = captured.truth(rows, rowcount_suite)
        assert sorted(truth) == [0.0, 0.0, 1.0, 1.0], truth
        assert fixed.record.untrained_tokens() > 0, "no tool output in the completions: the mask check would be empty"

        def judge(batch, truth_=truth, calls_=calls, **kw):
            return verify_signal(
                fixed.trainer,
                batch,
                fixed.record,
                truth_,
                fixed.group,
                audit=capture_audit(batch, calls_),
                snapshot=fixed.snapshot,
                **kw,
            )

        real = judge(fixed.batch)
        assert real.agree == len(real.signed) >= 2 and real.tokens_with > 2 * real.tokens_against, real.summary()
        caught = {}

        def fails(name, batch, match, **kw) -> None:
            with pytest.raises(DirectionError, match=match) as err:
                judge(batch, **kw)
            caught[name] = str(err.value)

        permuted_batch, permuted = plant_shared_faults(fixed, fails, monkeypatch)

        def rebuilt():  # a new batch from the same settled rollouts, through the trainer's code
            captured.replay = True
            try:
                batch = fixed.rebuilt()
            finally:
                captured.replay, captured.planted_reward = False, None
            return batch, *captured.truth(run.rollouts.rows[-len(rows) :], rowcount_suite)

        captured.planted_reward = lambda r: None if r is None else 1.3 - r
        batch, t, c = rebuilt()
        fails("reward inverted where the runtime computed it", batch, "grader's verdicts", truth_=t, calls_=c)
        row_of = rollouts.row_of
        with monkeypatch.context() as m:
            m.setattr(
                rollouts,
                "row_of",
                lambda *a: dataclasses.replace(
                    r := row_of(*a), completion_ids=(r.prompt_ids[-1], *r.completion_ids[:-1])
                ),
            )
            batch, t, c = rebuilt()
        fails(
            "completion ids shifted by one in the row conversion", batch, "sampler did not produce", truth_=t, calls_=c
        )
        assert len(caught) == 7, sorted(caught)
    finally:
        run.stop()
        fixed.snapshot.restore()
    moved = verify(fixed.trainer, permuted_batch, fixed.record, permuted, fixed.group, snapshot=fixed.snapshot)
    assert moved.agree == len(moved.signed), moved.summary()
    with pytest.raises(DirectionError, match="advantages' way"):
        verify(fixed.trainer, permuted_batch, fixed.record, truth, fixed.group, snapshot=fixed.snapshot, measured=moved)
    print({"real": real.summary(), **caught})
