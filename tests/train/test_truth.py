"""The direction check's truth from outside the trainer (dagent.train.verify.truth, F57), on hand-made
batches: the sampler audit holds trained runs to the engine's own generations, the grader's verdicts
come from the submitted answer in the sampled text, and advantages that disagree with them are named.
(The full checks on real rollouts of both loops: tests/train/test_direction.py.)"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from dagent.train.verify.direction import DirectionError  # noqa: E402
from dagent.train.verify.truth import (  # noqa: E402
    SamplerLog,
    advantage_signs,
    capture_audit,
    sampler_audit,
    submitted_answer,
    verify_signal,
)

PROMPT = [1, 2, 3]
TURN1, TOOL, TURN2 = [10, 11, 12], [50, 51], [13, 14]


def batch(completion, mask, advantages=(1.0,)):
    """One rollout: left-padded prompt, right-padded completion, tool mask over it."""
    width = len(completion) + 2
    ids = torch.zeros(1, width, dtype=torch.long)
    ids[0, : len(completion)] = torch.tensor(completion)
    cm = torch.zeros(1, width, dtype=torch.long)
    cm[0, : len(completion)] = 1
    tm = torch.zeros(1, width, dtype=torch.long)
    tm[0, : len(mask)] = torch.tensor(mask)
    return {
        "prompt_ids": torch.tensor([[0, *PROMPT]]),
        "prompt_mask": torch.tensor([[0, 1, 1, 1]]),
        "completion_ids": ids,
        "completion_mask": cm,
        "tool_mask": tm,
        "advantages": torch.tensor(advantages),
    }


def log_of(*generations):
    log = SamplerLog()
    log.generations = [(tuple(p), tuple(g)) for p, g in generations]
    return log


LOG = log_of((PROMPT, TURN1), (PROMPT + TURN1 + TOOL, TURN2))
GOOD = batch(TURN1 + TOOL + TURN2, [1, 1, 1, 0, 0, 1, 1])


@pytest.mark.failure_mode("F57")
@pytest.mark.parametrize(
    "name, planted, says",
    [
        ("tool output trained", batch(TURN1 + TOOL + TURN2, [1] * 7), "1 trained runs for 2 turns"),
        (
            "half masked",
            batch(TURN1 + TOOL + TURN2, [1, 1, 0, 0, 0, 1, 1]),
            "trains 2 tokens where the engine sampled 3",
        ),
        (
            "first token dropped",
            batch(TURN1[1:] + TOOL + TURN2, [1, 1, 0, 0, 1, 1]),
            "trained runs for 1 turns|first differing",
        ),
        (
            "shifted by one",
            batch([3, *TURN1[:-1]] + TOOL + TURN2, [1, 1, 1, 0, 0, 1, 1]),
            "trained runs for 1 turns|first differing at token 0",
        ),
    ],
)
def test_the_sampler_audit_names_a_batch_that_is_not_the_engines_output(name, planted, says):
    assert sampler_audit(GOOD, LOG, max_completion_length=100) == []
    problems = sampler_audit(planted, LOG, max_completion_length=100)
    assert problems and any(__import__("re").search(says, p) for p in problems), (name, problems)


def test_a_completion_cut_at_its_budget_may_end_short_and_only_there():
    cut = batch(TURN1 + TOOL + TURN2[:1], [1, 1, 1, 0, 0, 1])
    assert sampler_audit(cut, LOG, max_completion_length=6) == []
    assert sampler_audit(cut, LOG, max_completion_length=100) != []


def test_capture_audit_holds_rows_to_the_captured_completions():
    assert capture_audit(GOOD, [[TURN1, TURN2]]) == []
    assert capture_audit(GOOD, [[TURN1, [13, 15]]]) == [
        "rollout 0, turn 1: the loss trains 2 tokens where the engine sampled 2, first differing at token 1"
    ]


def test_the_submitted_answer_is_read_from_the_sampled_call():
    call = '<tool_call>\n{"name": "submit_solution", "arguments": {"answer": 3}}\n</tool_call>'
    assert submitted_answer("thinking " + call) == "3"
    assert submitted_answer('<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>' + call) == "3"
    assert submitted_answer("I think it is 3") is None and submitted_answer("<tool_call>{broken</tool_call>") is None


@pytest.mark.failure_mode("F57")
def test_advantages_that_disagree_with_the_verdicts_are_named_before_any_step():
    truth = [1.0, 0.0, 0.0, 1.0]
    assert advantage_signs([0.9, -0.9, -0.9, 0.9], truth, 4) == []
    assert len(advantage_signs([-0.9, 0.9, 0.9, -0.9], truth, 4)) == 4  # a reward inverted where it is computed
    assert advantage_signs([0.5, -0.5], [1.0, 1.0], 2) == []  # verdicts alike: the reward may rank by tool calls
    with pytest.raises(DirectionError, match="grader's verdicts"):
        verify_signal(None, dict(GOOD, advantages=torch.tensor([-1.0, 1.0])), None, [1.0, 0.0], 2, audit=[])
    with pytest.raises(DirectionError, match="sampler did not produce"):
        verify_signal(None, GOOD, None, [1.0], 1, audit=["rollout 0: planted"])
