"""Settling an episode: the grade decided from what the episode left behind (its answer file, the
infrastructure's cause, the number of model calls), so that a run the infrastructure broke is
ungraded with its cause, never a 0.0 (F07, F18, F32)."""

from __future__ import annotations

from dagent.core.outcome import VOIDING_CAUSES, cause_head
from dagent.core.task import Task
from dagent.grading.dispatch import grade
from dagent.grading.value import Grade


def settle(
    task: Task,
    answer: bytes | None,
    *,
    infra_cause: str | None = None,
    model_calls: int | None = None,
) -> Grade:
    """Decide an episode's grade from what it left behind.

    - a voiding cause (the engine never answered, or the loop ended on an engine failure) ->
      ungraded whatever the answer file holds (F07: a shell may have written it);
    - zero model calls (an LLM agent that never reached its engine) -> ungraded (F07);
    - no answer file and an infrastructure cause (OOM, timeout, crash) -> ungraded (F18);
    - no answer file otherwise -> graded wrong (the agent did not submit);
    - an answer -> the grader, with the FULL task (F14).
    """
    if infra_cause is not None and cause_head(infra_cause) in VOIDING_CAUSES:
        return Grade(reward=None, correct=None, method="ungraded", note=infra_cause)
    if model_calls == 0 and infra_cause is None:
        return Grade(reward=None, correct=None, method="ungraded", note="zero_model_calls")
    if answer is None:
        if infra_cause is not None:
            return Grade(reward=None, correct=None, method="ungraded", note=infra_cause)
        return Grade(reward=0.0, correct=False, method="reject", note="no answer file was written")
    return grade(task, answer)
