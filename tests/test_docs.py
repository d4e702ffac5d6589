"""docs/suite.md documents every column a suite row has (the Task model is the source)."""

from pathlib import Path

from dagent.core.task import TableSource, Task
from dagent.grading.dispatch import ANSWER_TYPES

DOC = (Path(__file__).resolve().parents[1] / "docs" / "suite.md").read_text()


def test_every_task_column_and_answer_type_is_documented():
    missing = [name for name in Task.model_fields if f"`{name}`" not in DOC]
    assert not missing, f"docs/suite.md lacks the columns {missing}"
    assert not [t for t in ANSWER_TYPES if f"`{t}`" not in DOC]
    assert not [n for n in TableSource.model_fields if f"`{n}`" not in DOC]
