import math
import random

import pytest

from dagent.core.outcome import EvalRecord
from dagent.errors import ConfigError
from dagent.eval.scoring import paired, pass_at_k, sign_flip_p, tally, task_scores, wrong_category


def rec(
    task="t0",
    outcome="correct",
    *,
    sample=0,
    tier="easy",
    cause=None,
    note="",
    answer="42",
    method=None,
    tool_calls=3,
    agent="tools",
    model="m",
):
    reward = {"correct": 1.0, "wrong": 0.0, "ungraded": None}[outcome]
    correct = {"correct": True, "wrong": False, "ungraded": None}[outcome]
    if outcome == "ungraded":
        cause = cause or "sandbox_oom"
    return EvalRecord(
        task_id=task,
        split="test",
        index=0,
        difficulty_tier=tier,
        agent=agent,
        model=model,
        sample=sample,
        outcome=outcome,
        reward=reward,
        correct=correct,
        method=method or ("ungraded" if outcome == "ungraded" else "numeric"),
        note=note,
        cause=cause,
        answer=answer,
        tool_calls=tool_calls,
    )


def arm(correct_by_task, tiers=None):
    """One sample per task: True -> correct, False -> wrong."""
    return [
        rec(f"t{i}", "correct" if ok else "wrong", tier=(tiers or {}).get(i, "easy"))
        for i, ok in enumerate(correct_by_task)
    ]


@pytest.mark.parametrize(
    "n, c, k, want",
    [
        (5, 2, 1, 0.4),
        (5, 2, 2, 1 - math.comb(3, 2) / math.comb(5, 2)),
        (4, 0, 1, 0.0),
        (4, 0, 4, 0.0),
        (4, 4, 1, 1.0),
        (3, 3, 3, 1.0),
        (5, 4, 2, 1.0),
        (10, 3, 5, 1 - math.comb(7, 5) / math.comb(10, 5)),
    ],
)
def test_pass_at_k_matches_the_hand_computed_values(n, c, k, want):
    assert pass_at_k(n, c, k) == pytest.approx(want)


def test_pass_at_k_is_stable_for_many_samples():
    assert pass_at_k(1000, 1, 1) == pytest.approx(0.001)
    assert pass_at_k(1000, 500, 100) == pytest.approx(1 - math.comb(500, 100) / math.comb(1000, 100))


@pytest.mark.parametrize("n, c, k", [(3, 1, 4), (0, 0, 1), (3, 4, 1), (3, -1, 1), (3, 1, 0), (3.0, 1, 1), (3, True, 1)])
def test_pass_at_k_refuses_bad_inputs(n, c, k):
    with pytest.raises(ConfigError):
        pass_at_k(n, c, k)


def test_pass_at_k_refusal_of_k_above_n_names_the_fix():
    with pytest.raises(ConfigError, match="samples >= 4"):
        pass_at_k(3, 1, 4)


def test_task_scores_count_only_graded_samples_and_exclude_tasks_without_any():
    records = [
        rec("a", "correct", sample=0),
        rec("a", "ungraded", sample=1, cause="sandbox_timeout"),
        rec("b", "wrong", sample=0),
        rec("b", "correct", sample=1),
        rec("c", "ungraded", sample=0, cause="sandbox_oom"),
        rec("c", "ungraded", sample=1, cause="sandbox_oom"),
    ]
    s = task_scores(records, k_values=(1, 2))
    assert (s.tasks, s.graded_tasks, s.excluded_tasks) == (3, 2, 1)
    assert s.excluded_by_cause == {"sandbox_oom": 1}
    assert s.ungraded_by_cause == {"sandbox_oom": 2, "sandbox_timeout": 1}
    assert (s.samples, s.graded_samples) == (6, 3)
    assert s.pass_at[1] == pytest.approx((1.0 + 0.5) / 2)  # a: 1/1 (its ungraded sample is not a 0)
    assert s.short_of_k == {1: 0, 2: 1} and s.pass_at[2] == pytest.approx(1.0)  # only b has n >= 2
    assert s.mean_reward == pytest.approx(2 / 3)  # None rewards never became 0


@pytest.mark.failure_mode("F32")
def test_an_all_ungraded_arm_scores_none_not_zero():
    s = task_scores([rec("a", "ungraded"), rec("b", "ungraded", cause="harness_crash")])
    assert s.pass_at[1] is None and s.mean_reward is None and s.pass1_ci is None
    assert s.excluded_by_cause == {"harness_crash": 1, "sandbox_oom": 1}


def test_scores_lines_state_exclusions_before_any_score():
    s = task_scores([rec("a"), rec("b", "ungraded", cause="sandbox_timeout")], step_cap=3)
    text = s.lines()
    first_score = next(i for i, line in enumerate(text) if "pass@1" in line)
    assert any("sandbox_timeout" in line for line in text[:first_score])
    assert s.at_step_cap == 1.0 and "at the step cap" in text[-1]


def test_scores_break_down_by_tier_present_only_and_ci_is_seeded():
    records = arm([True, False, True, False, True, True], tiers={0: "hard", 1: "hard", 2: "easy"})
    s = task_scores(records)
    assert list(s.by_tier) == ["easy", "hard"]
    assert s.by_tier["hard"].pass_at[1] == 0.5 and s.by_tier["easy"].tasks == 4
    assert s.pass1_ci == task_scores(records).pass1_ci
    lo, hi = s.pass1_ci
    assert 0 <= lo <= s.pass_at[1] <= hi <= 1


def test_two_arms_mixed_into_one_are_refused():
    with pytest.raises(ConfigError, match="one arm"):
        tally([rec("a"), rec("a", agent="oracle", model=None)])


def test_step_cap_fraction_counts_graded_samples_with_a_known_tool_count():
    records = [
        rec("a", tool_calls=30),
        rec("b", tool_calls=10),
        rec("c", tool_calls=None),
        rec("d", "ungraded", tool_calls=30),
    ]
    assert task_scores(records, step_cap=30).at_step_cap == pytest.approx(0.5)
    assert task_scores(records).at_step_cap is None


def planted(n_tasks=200, p_a=0.3, flip=0.2, seed=1):
    """Arm A correct with prob p_a; B = A with `flip * n_tasks` wrong tasks turned correct."""
    rng = random.Random(seed)
    a = [rng.random() < p_a for _ in range(n_tasks)]
    wrong = [i for i, ok in enumerate(a) if not ok]
    flipped = set(rng.sample(wrong, int(flip * n_tasks)))
    b = [ok or i in flipped for i, ok in enumerate(a)]
    return arm(a), arm(b)


def test_paired_finds_a_planted_improvement():
    a, b = planted()
    p = paired(a, b)
    assert p.paired_tasks == 200 and p.diff == pytest.approx(0.2)
    assert p.ci[0] < 0.2 < p.ci[1] and p.ci[0] > 0
    assert p.p_value < 0.01
    assert (p.wins, p.losses, p.ties) == (40, 0, 160)
    assert paired(a, b) == p  # seeded


def test_paired_null_difference_has_a_ci_around_zero_and_a_large_p():
    rng = random.Random(7)
    a = [rng.random() < 0.5 for _ in range(200)]
    b = list(a)
    ones, zeros = [i for i, x in enumerate(a) if x], [i for i, x in enumerate(a) if not x]
    for i in rng.sample(ones, 15) + rng.sample(zeros, 15):  # as many lost as gained
        b[i] = not b[i]
    p = paired(arm(a), arm(b))
    assert p.diff == pytest.approx(0.0)
    assert p.ci[0] < 0 < p.ci[1]
    assert p.p_value > 0.05
    assert (p.wins, p.losses) == (15, 15)


def test_paired_drops_tasks_ungraded_in_either_arm_and_reports_them_by_cause_first():
    a, b = planted()
    a[3] = rec("t3", "ungraded", cause="sandbox_oom")
    b[5] = rec("t5", "ungraded", cause="engine_unreachable")
    b[6] = rec("t6", "ungraded", cause="engine_unreachable")
    b.append(rec("extra", "correct"))
    p = paired(a, b)
    assert p.tasks_in_both == 200 and p.paired_tasks == 197
    assert p.excluded_a_by_cause == {"sandbox_oom": 1}
    assert p.excluded_b_by_cause == {"engine_unreachable": 2}
    assert (p.only_a, p.only_b) == (0, 1)
    text = p.lines()
    diff_line = next(i for i, line in enumerate(text) if "difference" in line)
    assert diff_line == len(text) - 1
    assert any("sandbox_oom" in line for line in text[:diff_line])
    assert any("engine_unreachable" in line for line in text[:diff_line])


def test_paired_with_several_samples_uses_per_task_pass_at_1_over_graded():
    a = [rec("x", "correct", sample=0), rec("x", "wrong", sample=1), rec("x", "ungraded", sample=2)]
    b = [rec("x", "correct", sample=0), rec("x", "correct", sample=1), rec("x", "wrong", sample=2)]
    p = paired(a, b)
    assert p.mean_a == pytest.approx(0.5) and p.mean_b == pytest.approx(2 / 3)
    assert paired(a, b, k=3).short_of_k == 1  # A has only 2 graded samples


def test_paired_with_nothing_in_common_says_so_without_a_score():
    p = paired([rec("a")], [rec("b")])
    assert p.diff is None and p.ci is None and p.p_value is None
    assert "nothing to compare" in p.lines()[-1]


def test_sign_flip_exact_for_few_differences():
    assert sign_flip_p([1.0, 1.0, 1.0]) == pytest.approx(2 / 8)
    assert sign_flip_p([0.0, 0.0]) == 1.0
    assert sign_flip_p([1.0, -1.0]) == 1.0


@pytest.mark.parametrize(
    "note, answer, method, want",
    [
        ("no answer file was written", None, "reject", "no_answer"),
        ("empty answer (none given)", None, "reject", "no_answer"),
        ("empty answer", "  \n", "reject", "empty"),
        ("placeholder: '<value>'", "<value>", "reject", "placeholder"),
        ("answer is not a number", "<number of rows>", "numeric", "placeholder"),
        ("shell command instead of a value: 'echo '", "echo 5 > /workdir/answer.txt", "reject", "shell_command"),
        ("answer is not a number", "awk '{s+=$1} END {print s}' data.csv", "numeric", "shell_command"),
        ("text differs from gold (compared ignoring case and spacing)", "$(cat out.txt)", "exact", "shell_command"),
        ("hedge with two candidate answers: 'or'", "3 or 4", "reject", "hedge"),
        ("41 is outside tolerance (atol=0, rtol=0)", "41", "numeric", "outside_tolerance"),
        ("LaTeX value 0.5 is outside tolerance", "\\frac{1}{2}", "math_verify", "outside_tolerance"),
        ("2 items, expected 3 (an extra or missing item)", "a, b", "list", "wrong_items"),
        ("no answer item matches gold item #1", "a, b, c", "list", "wrong_items"),
        ("answer is not a number", "forty", "numeric", "not_a_number"),
        ("text differs from gold (compared ignoring case and spacing)", "Paris", "exact", "text_differs"),
        ("opposite truth value", "yes", "bool", "other"),
    ],
)
def test_wrong_answer_categories_follow_the_grader_notes(note, answer, method, want):
    assert wrong_category(rec(outcome="wrong", note=note, answer=answer, method=method)) == want


def test_scores_count_wrong_answers_by_category():
    records = [
        rec("a", "wrong", note="no answer file was written", answer=None),
        rec("b", "wrong", note="no answer file was written", answer=None),
        rec("c", "wrong", note="7 is outside tolerance (atol=0, rtol=0)", answer="7"),
        rec("d"),
    ]
    assert task_scores(records).wrong_by_category == {"no_answer": 2, "outside_tolerance": 1}


def test_cut_off_samples_are_counted_by_where_over_every_llm_sample():
    base = dict(split="test", index=0, difficulty_tier="easy", agent="tools", model="m", method="numeric")
    records = [
        EvalRecord(task_id=t, outcome=o, reward=r, correct=c, cutoff=cut, model_calls=3, **base)
        for t, o, r, c, cut in [
            ("a", "wrong", 0.0, False, "step_cap"),
            ("b", "correct", 1.0, True, None),
            ("c", "wrong", 0.0, False, "call_budget"),
            ("d", "wrong", 0.0, False, "step_cap"),
        ]
    ]
    s = task_scores(records)
    assert s.cut_off == pytest.approx(0.75) and s.cut_off_by == {"step_cap": 2, "call_budget": 1}
    assert "cut off mid-task: 75.0% of samples (step_cap 2, call_budget 1)" in s.lines()[-1]
    assert task_scores([rec("a", agent="oracle", model=None)]).cut_off is None  # no model calls: not asked


def test_an_agent_run_says_where_it_was_cut_off():
    from dagent.harness.base import AgentRun, Captured
    from dagent.sandbox.base import ExecResult
    from dagent.trajectory import analyse

    assert AgentRun(metadata={"step_capped": True, "stop": "submitted"}).cutoff == "step_cap"
    assert AgentRun(captured=Captured("s", analyse([]), (), budget_stops=2)).cutoff == "call_budget"
    assert AgentRun(metadata={"stop": "context_overflow"}).cutoff == "context_overflow"
    assert AgentRun(exec_result=ExecResult(None, "", "", timed_out=True)).cutoff == "timeout"
    assert AgentRun(metadata={"stop": "submitted"}).cutoff is None
