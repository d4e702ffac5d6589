"""Small builders for synthetic tasks used across tests (not fakes of adapters)."""

from __future__ import annotations

from dagent.task import TIER_OF_LEVEL, TableSource, Task

SOURCE = TableSource(table_id="demo/t", path="demo/t.csv", package="demo==0", origin="test", licence="CC0")


def make_task(i: int = 0, *, level: int = 1, gold: str = "42", answer_type: str = "number",
              instruction: str | None = None, **kw) -> Task:
    fields = dict(
        task_id=f"demo.t{i}",
        instruction=instruction or f"Question {i}? Write only the value to /workdir/answer.txt.",
        data_files=("demo/t.csv",),
        answer_type=answer_type,
        difficulty_level=level,
        difficulty_tier=TIER_OF_LEVEL[level],
        cpus=1,
        memory_mb=1024,
        sources=(SOURCE,),
        gold=gold,
        atol=0.0,
        rtol=0.0,
        solution="print(42)",
        template_id="demo",
    )
    fields.update(kw)
    return Task(**fields)
