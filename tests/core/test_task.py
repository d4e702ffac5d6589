import pytest
from pydantic import ValidationError

from dagent.core.task import PublicTask, Task
from tests.factories import make_task


def test_public_view_withholds_gold_and_solution():
    task = make_task(gold="17")
    public = task.public()
    assert type(public) is PublicTask
    dumped = public.model_dump()
    assert "gold" not in dumped and "solution" not in dumped and "atol" not in dumped
    assert public.instruction == task.instruction


@pytest.mark.failure_mode("F13")
def test_difficulty_level_is_an_int_and_must_match_the_tier():
    with pytest.raises(ValidationError):
        make_task(level=2, difficulty_tier="easy")
    with pytest.raises(ValidationError):
        make_task(difficulty_level="easy")
    assert make_task(level=3).difficulty_tier == "hard"


def test_records_are_frozen_and_reject_unknown_fields():
    task = make_task()
    with pytest.raises(ValidationError):
        task.gold = "1"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        Task(**{**task.model_dump(), "surprise": 1})


def test_row_round_trip():
    task = make_task()
    assert Task.model_validate(task.to_row()) == task
