"""Preflight refusals (each a planted fault) and the training-health watch."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from transformers import TrainerControl

from dagent.harness.contract import StepCapError, check_step_cap
from dagent.harness.toolloop import tool_schemas
from dagent.recipes import WhiteboxRecipe
from dagent.tools import select
from dagent.train.health import HealthWatch, TrainingHealthError, groups_per_step
from dagent.train.preflight import (
    PreflightError,
    alike_probability,
    check_completion_length,
    check_group_size,
    check_logits_memory,
    check_split,
    check_template,
    check_venv_on_path,
    round_trip_tokens,
)
from dagent.train.whitebox.grpo import preflight


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from dagent.engine.models import tiny_qwen3

    return AutoTokenizer.from_pretrained(tiny_qwen3())


@pytest.mark.failure_mode("F35")
def test_an_agent_cap_above_the_environments_budget_is_refused_and_b_is_not_a_cap():
    assert check_step_cap(17, 30).ok  # the reference run's hard cap; the reward's B = 15 caps nothing
    with pytest.raises(StepCapError, match=r"step_cap_above_budget.*\(31\).*\(30 tool calls"):
        check_step_cap(31, 30)
    with pytest.raises(StepCapError):
        preflight(WhiteboxRecipe.cpu(max_tool_calling_iterations=40), None, 10)


@pytest.mark.failure_mode("F38")
def test_a_completion_budget_that_cannot_hold_one_round_trip_is_refused():
    need = round_trip_tokens(1200)
    assert check_completion_length(3072, 1200).ok
    with pytest.raises(PreflightError, match=f"completion_too_short.*at least {need}"):
        check_completion_length(need - 1, 1200)


@pytest.mark.failure_mode("F39")
def test_a_group_size_where_most_groups_score_alike_is_refused_unless_forced():
    assert alike_probability(0.5, 4) == pytest.approx(0.125)
    assert alike_probability(0.02, 8) == pytest.approx(0.98**8 + 0.02**8)
    assert check_group_size(8, 0.3).ok  # 0.3^8 + 0.7^8 = 0.058
    with pytest.raises(PreflightError, match=r"zero_variance_groups: G=8 at base pass@1 0\.020.*= 0\.851"):
        check_group_size(8, 0.02)
    assert "(forced)" in check_group_size(8, 0.02, force=True).detail
    assert "unchecked" in check_group_size(8, None).detail


def test_the_template_must_render_tools_and_round_trip(tokenizer):
    tools = tool_schemas(select())
    assert check_template(tokenizer, tools).ok  # Qwen3: TRL swaps in its prefix-preserving variant
    plain = tokenizer.__class__.from_pretrained(tokenizer.name_or_path)
    plain.chat_template = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    with pytest.raises(PreflightError, match="template_ignores_tools"):
        check_template(plain, tools)
    dropping = tokenizer.__class__.from_pretrained(tokenizer.name_or_path)
    dropping.chat_template = (  # renders tools, but only the LAST message: prefixes are not prefixes
        "{% if tools %}<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}</tools>{% endif %}"
        "{{ messages[-1].role }}: {{ messages[-1].content }}{% if add_generation_prompt %}\nassistant:{% endif %}"
    )
    with pytest.raises(PreflightError, match="template_not_prefix_preserving"):
        check_template(dropping, tools)


def test_an_empty_split_is_refused():
    with pytest.raises(PreflightError, match="empty_split"):
        check_split(0, "train:hard")


def test_gpu_checks_name_the_fix():
    with pytest.raises(PreflightError, match="venv_not_on_path.*export PATH="):
        check_venv_on_path({"PATH": "/usr/bin"}, "/opt/venv/bin/python")
    assert check_venv_on_path({"PATH": "/opt/venv/bin:/usr/bin"}, "/opt/venv/bin/python").ok
    # 2 x 4096 x 151,936 fp32 logits = 4.6 GiB beside a 0.6B model's 9 GiB of weights + Adam state
    with pytest.raises(PreflightError, match="logits_do_not_fit"):
        check_logits_memory(2, 4096, 151_936, 600_000_000, 12 * 2**30)
    assert check_logits_memory(2, 4096, 151_936, 600_000_000, 80 * 2**30).ok


def feed(watch: HealthWatch, *logs: dict) -> TrainerControl:
    control = TrainerControl()
    for entry in logs:
        watch.on_log(None, None, control, logs=entry)
    return control


@pytest.mark.failure_mode("F39")
def test_the_absorbing_state_stops_the_run_with_a_named_reason():
    watch = HealthWatch(patience=3, absorbing_groups=12)
    flat = {"reward_std": 0.0, "grad_norm": 0.0, "entropy": 1.0}
    four_groups = SimpleNamespace(
        num_generations=4, per_device_train_batch_size=16, gradient_accumulation_steps=1, world_size=1
    )
    control = TrainerControl()
    for entry in (flat, {"reward_std": 0.2, "grad_norm": 0.5, "entropy": 1.0}, flat, flat):
        watch.on_log(four_groups, None, control, logs=entry)
    assert not control.should_training_stop  # a moving step resets the count
    watch.on_log(four_groups, None, control, logs=flat)
    assert control.should_training_stop and watch.stopped.startswith("absorbing_state")
    assert "12 groups" in watch.stopped
    with pytest.raises(TrainingHealthError, match="absorbing_state"):
        watch.raise_if_stopped()


@pytest.mark.failure_mode("F39")
def test_three_alike_groups_by_chance_do_not_stop_a_one_group_a_step_run_and_twelve_do():
    # the learning protocol's black-box seed 2 (pi from a warm start at 50% on train:easy, one group of
    # 4 a step): 3 alike groups first, then moving steps; the watch at 3 steps stopped it at step 3
    flat = {"reward_std": 0.0, "grad_norm": 0.0, "entropy": 0.01}
    moving = {"reward_std": 0.64, "grad_norm": 0.8, "entropy": 0.01}
    one_group = SimpleNamespace(
        num_generations=4, per_device_train_batch_size=4, gradient_accumulation_steps=1, world_size=1
    )
    watch, control = HealthWatch(), TrainerControl()
    for entry in (flat, flat, flat, moving, flat, flat, flat, moving):
        watch.on_log(one_group, None, control, logs=entry)
    assert not control.should_training_stop and watch.stopped is None
    for _ in range(11):
        watch.on_log(one_group, None, control, logs=flat)
    assert not control.should_training_stop
    watch.on_log(one_group, None, control, logs=flat)
    assert control.should_training_stop and "12 steps (12 groups)" in watch.stopped


def test_groups_per_step_reads_the_trainers_arguments():
    assert groups_per_step(None) == 1
    assert (
        groups_per_step(
            SimpleNamespace(
                num_generations=8, per_device_train_batch_size=2, gradient_accumulation_steps=4, world_size=2
            )
        )
        == 2
    )


def entropies(values):
    return [{"reward_std": 0.3, "grad_norm": 1.0, "entropy": e} for e in values]


def stopped_at(watch: HealthWatch) -> int:
    import re

    return int(re.search(r"at step (\d+)", watch.stopped).group(1))


@pytest.mark.failure_mode("F05")
def test_entropy_climbing_as_in_the_seeds_collapsing_run_stops_it_early_and_the_reference_never():
    # the seed's collapsing run: 0.23 -> 0.59 nats over 24 steps; the reference held 0.17-0.21
    collapsing = [0.23 + (0.59 - 0.23) * i / 23 for i in range(24)]
    watch = HealthWatch()
    assert feed(watch, *entropies(collapsing)).should_training_stop
    assert watch.stopped.startswith("entropy_climbing") and stopped_at(watch) <= 12  # half-way at the latest
    reference = [0.19, 0.17, 0.21, 0.18, 0.20, 0.21, 0.17, 0.19] * 5
    quiet = HealthWatch()
    assert not feed(quiet, *entropies(reference)).should_training_stop and quiet.stopped is None


def test_entropy_collapsing_towards_determinism_stops_the_run():
    falling = [0.20 - 0.15 * i / 23 for i in range(24)]  # the beta=0 failure: the policy goes deterministic
    watch = HealthWatch()
    assert feed(watch, *entropies(falling)).should_training_stop
    assert watch.stopped.startswith("entropy_collapsing") and "raise beta" in watch.stopped


@pytest.mark.failure_mode("F05")
def test_a_step0_importance_ratio_far_from_one_stops_the_run():
    watch = HealthWatch()
    control = feed(watch, {"reward_std": 0.3, "grad_norm": 1.0, "sampling/importance_sampling_ratio/mean": 1.4})
    assert control.should_training_stop and watch.stopped.startswith("importance_ratio_off")


def _records(rates: dict[str, tuple[int, int]]) -> list:
    """EvalRecords of a starting model: task -> (correct, samples), one ungraded sample extra each."""
    from dagent.core.outcome import EvalRecord

    out = []
    for task, (correct, samples) in rates.items():
        for s in range(samples + 1):
            graded = s < samples
            out.append(
                EvalRecord(
                    task_id=task,
                    split="train:easy",
                    index=0,
                    difficulty_tier="easy",
                    agent="tools",
                    sample=s,
                    outcome=("correct" if s < correct else "wrong") if graded else "ungraded",
                    reward=(1.0 if s < correct else 0.0) if graded else None,
                    correct=(s < correct) if graded else None,
                    method="exact" if graded else "ungraded",
                    cause=None if graded else "sandbox_error",
                )
            )
    return out


@pytest.mark.failure_mode("F55")
def test_the_group_size_check_uses_each_tasks_rate_not_the_mean(tmp_path):
    from dagent.train.preflight import TaskRates, alike_posterior, mixed_rows

    # half the tier always solved, half never: the mean is 0.5, yet no group of 4 is ever mixed
    spread = {f"t{i}": ((4, 4) if i % 2 else (0, 4)) for i in range(8)}
    rates = TaskRates.of(_records(spread))
    assert rates.mean == 0.5 and len(rates.counts) == 8  # the ungraded samples left out
    assert check_group_size(4, rates.mean).ok  # the mean-based check (F39) lets it through: 0.125
    with pytest.raises(
        PreflightError, match=r"zero_variance_groups.*fraction of groups all alike 0\.563.*predicts 0\.125.*F55"
    ):
        check_group_size(4, None, rates=rates)
    # a tier of tasks each solved half the time passes, and the estimate does not read 0 of 2 as "never"
    even = TaskRates.of(_records({f"t{i}": (1, 2) for i in range(8)}))
    assert check_group_size(4, None, rates=even).ok
    assert alike_posterior(0, 2, 4) < 1.0 and alike_posterior(0, 2, 4) > alike_posterior(1, 2, 4)
    assert alike_posterior(0, 1000, 4) == pytest.approx(1.0, abs=0.01)  # many samples: the plug-in value
    # the tasks kept for training: the mixed ones, read back from an evaluation directory
    (tmp_path / "final").mkdir()  # as `dagent eval --out DIR` writes it: DIR/<arm>/records.jsonl
    (tmp_path / "final" / "records.jsonl").write_text(
        "\n".join(r.model_dump_json() for r in _records({**spread, "m": (1, 2)}))
    )
    read = TaskRates.read(tmp_path)
    assert read.mixed() == ["m"]
    rows = [{"task_id": t, "split": "train:easy", "index": i} for i, t in enumerate([*spread, "m"])]
    assert [r["task_id"] for r in mixed_rows(rows, read)] == ["m"]
    with pytest.raises(PreflightError, match="no_mixed_tasks"):
        mixed_rows(rows[:-1], read)
    with pytest.raises(PreflightError, match="no_base_evaluation"):
        TaskRates.read(tmp_path / "absent")


def test_with_mixed_only_the_group_size_check_reads_the_tasks_trained_not_the_whole_tier():
    """Measured on the powered run's warm start: 64 tasks, 41.8% of groups alike over the tier, and the
    check reported that figure although --mixed-only trained only the 34 mixed tasks."""
    from dagent.train.preflight import TaskRates, mixed_rows

    spread = {
        **{f"never{i}": (0, 4) for i in range(12)},
        **{f"always{i}": (4, 4) for i in range(2)},
        **{f"mixed{i}": (2, 4) for i in range(4)},
    }
    rates = TaskRates.of(_records(spread))
    rows = mixed_rows([{"task_id": t} for t in spread], rates)
    trained = rates.only(r["task_id"] for r in rows)
    assert sorted(t for t, _, _ in trained.counts) == [f"mixed{i}" for i in range(4)]
    assert trained.mean == 0.5 and trained.alike(4) < 0.25 < rates.alike(4)
    check = check_group_size(4, None, rates=trained)
    assert check.ok and "over 4 tasks' own rates" in check.detail and "0.238" in check.detail
    assert "over 18 tasks' own rates" in check_group_size(4, None, rates=rates).detail
