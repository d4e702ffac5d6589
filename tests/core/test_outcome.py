import pytest

from dagent.core.outcome import EvalRecord, outcome_of, summarize
from dagent.grading.settle import settle
from tests.factories import make_task


def rec(outcome, tier="easy", cause=None):
    reward = {"correct": 1.0, "wrong": 0.0, "ungraded": None}[outcome]
    correct = {"correct": True, "wrong": False, "ungraded": None}[outcome]
    return EvalRecord(
        task_id="t",
        split="test",
        index=0,
        difficulty_tier=tier,
        agent="x",
        outcome=outcome,
        reward=reward,
        correct=correct,
        method="m",
        cause=cause,
    )


@pytest.mark.failure_mode("F07")
def test_zero_model_calls_is_ungraded_even_with_a_matching_answer():
    g = settle(make_task(gold="42"), b"42", model_calls=0)
    assert g.reward is None and g.correct is None and g.note == "zero_model_calls"


@pytest.mark.failure_mode("F18")
@pytest.mark.parametrize("cause", ["sandbox_oom", "sandbox_timeout"])
def test_oom_or_timeout_without_answer_is_ungraded_with_the_cause(cause):
    g = settle(make_task(), None, infra_cause=cause)
    assert g.reward is None and g.note == cause


def test_no_answer_without_infrastructure_cause_is_graded_wrong():
    g = settle(make_task(), None)
    assert g.reward == 0.0 and g.correct is False


def test_answer_is_graded_with_the_full_task():
    assert settle(make_task(gold="42"), b"42\n").correct is True
    assert settle(make_task(gold="42"), b"41").correct is False


@pytest.mark.failure_mode("F32")
def test_summary_keeps_ungraded_out_of_the_score_and_reports_it_first():
    records = [
        rec("correct"),
        rec("wrong", "hard"),
        rec("ungraded", cause="sandbox_oom"),
        rec("ungraded", cause="sandbox_oom"),
    ]
    s = summarize(records)
    assert (s.tasks, s.graded, s.correct, s.wrong, s.ungraded) == (4, 2, 1, 1, 2)
    assert s.accuracy == 0.5 and s.mean_reward == 0.5
    assert s.ungraded_causes == {"sandbox_oom": 2}
    assert s.excluded_fraction == 0.5
    lines = s.lines()
    assert "excluded" in lines[0] and "accuracy" not in lines[0]
    assert s.by_tier["hard"].accuracy == 0.0


def test_nothing_graded_has_no_accuracy():
    s = summarize([rec("ungraded", cause="harness_crash")])
    assert s.accuracy is None and s.mean_reward is None
    assert outcome_of(settle(make_task(), None, infra_cause="harness_crash")) == "ungraded"
