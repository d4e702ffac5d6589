"""The grader's entry points: `grade_answer` dispatches on the answer type (single values to
`dagent.grading.value`, multi-field answers to `dagent.grading.fields`), `grade` grades an answer
against a full task, server side.

Invariant: `grade_answer` never raises, whatever the agent wrote; `grade` raises GraderError only
when handed something without gold, such as a `PublicTask` (F14).
"""

from __future__ import annotations

from collections.abc import Mapping

from dagent.core.task import PublicTask, Task
from dagent.errors import GraderError
from dagent.grading.fields import grade_record, parse_gold
from dagent.grading.value import VALUE_TYPES, Grade, decode, grade_value, normalise, ungraded, wrong

ANSWER_TYPES = (*VALUE_TYPES, "record")


def grade_answer(
    answer: str | bytes | None,
    gold: str,
    answer_type: str,
    atol: float = 0.0,
    rtol: float = 0.0,
    field_tolerances: Mapping[str, tuple[float, float]] | None = None,
) -> Grade:
    """Grade one answer against one gold (the pure core; never raises for any answer).
    `field_tolerances` only matters for records (dagent.grading.fields: field by field)."""
    if answer_type not in ANSWER_TYPES:
        return ungraded(f"unknown answer_type {answer_type!r} (expected one of {ANSWER_TYPES})")
    if answer_type != "record":
        return grade_value(answer, gold, answer_type, atol, rtol)
    if parse_gold(str(gold)) is None:  # a task bug ungrades whatever the answer (as for other types)
        return ungraded("record gold is not a non-empty JSON object")
    raw, why = decode(answer)
    if raw is None:
        return wrong("reject", why)
    text = normalise(raw)
    return grade_record(text, str(gold), atol, rtol, field_tolerances) if text else wrong("reject", "empty answer")


def grade(task: Task, answer: str | bytes | None) -> Grade:
    """Grade an answer against the full task (server side). A PublicTask cannot be graded (F14)."""
    gold = getattr(task, "gold", None)
    if gold is None or (isinstance(task, PublicTask) and not isinstance(task, Task)):
        raise GraderError(
            f"grading needs the full Task server-side, got {type(task).__name__} without gold "
            "(F14: the public view withholds gold, so grading through it could never succeed); "
            "grade on the server with the Task record, not task.public()"
        )
    return grade_answer(answer, gold, task.answer_type, task.atol, task.rtol, task.field_tolerances)
