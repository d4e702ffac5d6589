"""Record answers graded field by field: table cases, per-field tolerances, the note naming the field."""

from __future__ import annotations

import pytest

from dagent.core.task import Task
from dagent.grading.dispatch import grade, grade_answer

GOLD = '{"mean_fare": 34.65, "median_age": 28, "survived_more": true, "top_class": "First"}'
ALL = "mean_fare, median_age, survived_more, top_class"


# (answer, correct, a phrase of the note), all against GOLD
RECORD_CASES = [
    ('{"mean_fare": 34.65, "median_age": 28, "survived_more": true, "top_class": "First"}', True, "all 4"),
    (
        '```json\n{"Mean Fare": "34.65", "MEDIAN-AGE": 28.0, "survived_more": "yes", "top_class": "first"}\n```',
        True,
        "all 4",
    ),
    ("mean_fare: 34.65\nmedian_age: 28\nsurvived_more: True\ntop_class: First", True, "all 4"),
    ("mean_fare = $34.65; median_age = 28 years; survived_more = yes; top_class = First", True, "all 4"),
    (
        'Answer: {"mean_fare": 34.65, "median_age": 28, "survived_more": true, "top_class": "First", "extra": 1}',
        True,
        "all 4",
    ),
    (
        '{"mean_fare": 34.66, "median_age": 28, "survived_more": true, "top_class": "First"}',
        False,
        "1 of 4 fields wrong: mean_fare: 34.66 is outside tolerance",
    ),
    (
        '{"mean_fare": 34.65, "median_age": 28, "top_class": "Second"}',
        False,
        "2 of 4 fields wrong: survived_more: missing; top_class: text differs",
    ),
    (
        '{"mean_fare": "<value>", "median_age": 28, "survived_more": false, "top_class": "First"}',
        False,
        "mean_fare: placeholder",
    ),
    (
        '{"mean_fare": "34.65 or 34.7", "median_age": 28, "survived_more": true, "top_class": "First"}',
        False,
        "mean_fare: hedge",
    ),
    ("mean_fare: 34.65, median_age: 28, survived_more: yes, top_class: First", True, "all 4"),
    ("34.65, 28, true, First", False, f"not a record: expected a JSON object with the keys {ALL}"),
    ("[34.65, 28]", False, "not a record"),
]


@pytest.mark.parametrize("answer,correct,note", RECORD_CASES)
def test_record_cases(answer, correct, note):
    g = grade_answer(answer, GOLD, "record", 0.0, 0.0)
    assert g.correct is correct and g.method == "record" and note in g.note, g


def test_thousands_separators_survive_the_comma_form():
    assert grade_answer("total: 1,234, mean: 2.5", '{"total": 1234, "mean": 2.5}', "record").correct


def test_a_broken_record_gold_ungrades_even_an_empty_answer():
    assert grade_answer("", "{}", "record").method == "ungraded"


def test_each_field_takes_its_own_tolerance_or_the_tasks():
    gold = '{"share": 0.25, "count": 120}'
    loose = {"share": (0.01, 0.0)}
    assert grade_answer('{"share": 0.255, "count": 120}', gold, "record", 0, 0, loose).correct
    g = grade_answer('{"share": 0.255, "count": 121}', gold, "record", 0, 0, loose)
    assert not g.correct and g.note.startswith("1 of 2 fields wrong: count: 121 is outside tolerance")
    assert grade_answer('{"share": 0.255, "count": 121}', gold, "record", 1.0, 0, loose).correct  # task atol 1


@pytest.mark.parametrize("gold", ["34.65", "[1, 2]", "{}", "not json"])
def test_a_gold_that_is_not_a_json_object_is_a_task_bug_not_a_wrong_answer(gold):
    g = grade_answer('{"a": 1}', gold, "record")
    assert (g.correct, g.reward, g.method) == (None, None, "ungraded")


@pytest.mark.parametrize("answer,why", [(None, "empty answer"), ("", "empty answer"), (b"\xff\xfe", "UTF-8")])
def test_empty_and_undecodable_answers_are_rejected(answer, why):
    g = grade_answer(answer, GOLD, "record")
    assert (g.correct, g.method) == (False, "reject") and why in g.note


def test_a_record_task_round_trips_its_tolerances_through_a_row_and_grades():
    task = Task(
        task_id="t.r",
        instruction="Report mean_fare and median_age as a JSON object.",
        data_files=("x/t.csv",),
        answer_type="record",
        difficulty_level=2,
        difficulty_tier="medium",
        cpus=1,
        memory_mb=512,
        sources=(),
        gold='{"mean_fare": 34.65, "median_age": 28}',
        atol=0.005,
        rtol=0.0,
        solution="print(1)",
        template_id="r",
        field_tolerances={"median_age": (0.5, 0.0)},
    )
    row = task.to_row()
    assert isinstance(row["field_tolerances"], str)  # one string column in Parquet, whatever the keys
    back = Task(**row)
    assert back == task and back.field_tolerances == {"median_age": (0.5, 0.0)}
    assert grade(back, '{"mean_fare": 34.654, "median_age": 28.4}').correct
    assert not grade(back, '{"mean_fare": 34.66, "median_age": 28.4}').correct
    assert "field_tolerances" not in task.public().model_dump()  # tolerances stay server side
