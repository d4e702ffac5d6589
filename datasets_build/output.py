"""What a build leaves on disk: the task Parquet per split, the dataset card and the build report.

Layout (read by `dagent.suites.sources.read_suite`):
    README.md                          dataset card (YAML front matter names the three splits)
    data/<split>-00000-of-00001.parquet one row per task, columns = Task.to_row()
    tables/<package>/<file>             the tables
    build_report.json                  counts, dropped tasks, dedup report, table list

Every file is byte-stable across builds: rows keep build order, JSON keys are sorted, and the
report holds no timings.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

from dagent.core.suite import DedupReport
from dagent.core.task import TIERS, Task
from datasets_build.instructions import has_example
from datasets_build.templates import Candidate

CARD_HEAD = """---
configs:
- config_name: default
  data_files:
  - split: train
    path: data/train-*
  - split: test
    path: data/test-*
  - split: eval
    path: data/eval-*
license: other
pretty_name: dagent data-agent tasks
tags:
- data-agents
- tabular
- reinforcement-learning
---

# dagent data-agent tasks

Questions about real tables, each with a gold answer printed by a reference pandas program run in a
sandbox on the same files the agent gets (`/workdir/input/`). Every row is a `dagent.core.task.Task`:
`instruction`, `data_files` (paths under `tables/`), `gold`, `answer_type`, `atol`/`rtol`,
`solution`, `difficulty_level` (1-3) and `difficulty_tier`, `cpus`/`memory_mb`, `sources` and
`template_id`. Splits are disjoint by (table, template) pair. Built by `python -m datasets_build`.

Each table keeps the licence its publisher states; see the table list below.
"""


def report(
    tables: Sequence[dict],
    cands: Sequence[Candidate],
    dropped: Sequence,
    dedup: DedupReport,
    splits: Mapping[str, Sequence[Task]],
) -> dict:
    counts = {s: {tier: sum(t.difficulty_tier == tier for t in ts) for tier in TIERS} for s, ts in splits.items()}
    every = [t for ts in splits.values() for t in ts]
    pairs = {s: len({(t.sources[0].table_id, t.template_id) for t in ts}) for s, ts in splits.items()}
    return {
        "counts": counts,
        "totals": {s: len(ts) for s, ts in splits.items()} | {"all": len(every)},
        "pairs_per_split": pairs,
        "candidates": len(cands),
        "dropped": {
            "count": len(dropped),
            "by_reason": dict(sorted(Counter(d.reason for d in dropped).items())),
            "tasks": [{"task_id": d.task_id, "reason": d.reason, "detail": d.detail} for d in dropped],
        },
        "dedup": dedup.summary(),
        "dedup_report": {
            "tasks_in": dedup.tasks_in,
            "tasks_out": dedup.tasks_out,
            "duplicate_instructions": dedup.duplicate_instructions,
            "dropped_tasks": dedup.dropped_tasks,
            "conflicting_golds": dedup.conflicting_golds,
            "conflicts": [{"instruction": i, "golds": list(g)} for i, g in dedup.conflicts],
        },
        "answer_types": dict(sorted(Counter(t.answer_type for t in every).items())),
        "sizing": {
            f"{c} cpu / {m} MB": n for (c, m), n in sorted(Counter((t.cpus, t.memory_mb) for t in every).items())
        },
        "with_shell_example": sum(has_example(t.task_id) for t in every),
        "tables": list(tables),
        "packages": sorted({t["package"] for t in tables}),
    }


def card(tables: Sequence[dict], rep: dict) -> str:
    lines = [CARD_HEAD, "## Counts", "", "| split | easy | medium | hard | total |", "|---|---|---|---|---|"]
    for s, tiers in rep["counts"].items():
        lines.append(f"| {s} | {tiers['easy']} | {tiers['medium']} | {tiers['hard']} | {rep['totals'][s]} |")
    lines += ["", "## Tables", "", "| table | file | rows | package | origin | licence |", "|---|---|---|---|---|---|"]
    for t in tables:
        lines.append(
            f"| {t['table_id']} | tables/{t['file']} | {t['rows']} | {t['package']} | {t['origin']} | {t['licence']} |"
        )
    return "\n".join(lines) + "\n"


def write(out_dir: Path, splits: Mapping[str, Sequence[Task]], rep: dict, tables: Sequence[dict]) -> None:
    import datasets

    data = out_dir / "data"
    data.mkdir(parents=True, exist_ok=True)
    quiet = datasets.utils.logging.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        dd = datasets.DatasetDict({s: datasets.Dataset.from_list([t.to_row() for t in ts]) for s, ts in splits.items()})
        for s, ds in dd.items():
            ds.to_parquet(str(data / f"{s}-00000-of-00001.parquet"))
    finally:
        if quiet:
            datasets.enable_progress_bars()
    (out_dir / "README.md").write_text(card(tables, rep), encoding="utf-8")
    (out_dir / "build_report.json").write_text(json.dumps(rep, indent=2, sort_keys=True) + "\n", encoding="utf-8")
