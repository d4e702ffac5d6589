"""The suite as a Hub Benchmark: the `eval.yaml` a dataset repo declares its tasks in, and the
reference from a loaded suite back to the repo and revision it came from.

A Hub dataset repo is a Benchmark when its root holds an `eval.yaml` (Inspect AI's format: a list
of `tasks`, each with an `id`, the dataset `config` and `split` it reads, a `field_spec`, solvers
and scorers). A model repo's `.eval_results/*.yaml` entry links to one of those tasks by the
dataset's repo id, its revision and the task's `id`; the model page and the benchmark's
leaderboard read that link.

The declared tasks are the held-out splits and each of their tiers, with the id dagent uses for
the split (`test`, `test:easy`, ..., `eval:hard`), so `dagent eval --split test:easy` scores task
`test:easy`. A tier is its own dataset config (`<split>_<tier>`, files under `tiers/`), so a task
reads exactly its tasks. The metric is dagent's: pass@1 over graded tasks, ungraded tasks excluded
and counted beside it. Inspect's own solvers cannot stage the tables an agent reads, so its
fallback (`generate`, `match`) sees the questions without their tables; the scores on the
leaderboard come from dagent's harness (`dagent eval --push-to`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from dagent.core.suite import TaskSuite
from dagent.core.task import TIERS
from dagent.errors import ConfigError

BENCHMARK_FILE = "eval.yaml"
HELD_OUT = ("test", "eval")  # train is what a model learns from: not a benchmark task
METRIC = "pass@1 over graded tasks (fraction); ungraded tasks excluded and counted in each result's notes"
_SNAPSHOT = re.compile(r"datasets--(?P<owner>[^/]+?)--(?P<name>[^/]+)/snapshots/(?P<sha>[0-9a-f]{40})(?:/|$)")


def task_ids(suite: TaskSuite) -> list[str]:
    """The benchmark's task ids: each held-out split the suite has, then each of its tiers."""
    ids = []
    for split in HELD_OUT:
        tasks = suite.tasks(split) if split in suite.bases else []
        if tasks:
            ids.append(split)
            present = {t.difficulty_tier for t in tasks}
            ids += [f"{split}:{tier}" for tier in TIERS if tier in present]
    return ids


def tier_config(task_id: str) -> str:
    """The dataset config a task reads: `default` for a whole split, `<split>_<tier>` for a tier."""
    split, _, tier = task_id.partition(":")
    return f"{split}_{tier}" if tier else "default"


def eval_yaml(repo_id: str, suite: TaskSuite) -> str:
    """The repo's `eval.yaml` (module docstring)."""
    tasks = [
        {
            "id": tid,
            "config": tier_config(tid),
            "split": tid.partition(":")[0],
            "field_spec": {"input": "instruction", "target": "gold", "id": "task_id"},
            "solvers": [{"name": "generate"}],
            "scorers": [{"name": "match"}],
        }
        for tid in task_ids(suite)
    ]
    if not tasks:
        raise ConfigError(f"the suite has no held-out tasks ({', '.join(HELD_OUT)}): nothing to declare as a benchmark")
    doc = {
        "name": repo_id,
        "description": (
            "Data-agent tasks over real tables: the agent reads the files under /workdir/input, writes "
            "its answer to /workdir/answer.txt, and is graded server side. Scored with dagent "
            "(pip package from its repository): `dagent eval --suite " + repo_id + " --split TASK_ID "
            "--push-to OWNER/MODEL`. Inspect's solvers below see the question without its tables."
        ),
        "metric": METRIC,
        "evaluation_framework": "dagent",
        "tasks": tasks,
    }
    return yaml.safe_dump(doc, sort_keys=False, width=100)


def declared_task_ids(text: str) -> list[str]:
    """The task ids an `eval.yaml` declares (its `tasks[].id`)."""
    doc = yaml.safe_load(text) or {}
    return [str(t["id"]) for t in doc.get("tasks") or [] if isinstance(t, dict) and t.get("id")]


def hub_reference(suite: TaskSuite) -> tuple[str, str | None] | None:
    """(dataset repo id, the revision it was read at) of a suite loaded from the Hub, or None for a
    local suite (its results cannot link to a benchmark)."""
    source = str(suite.source)
    if not source.startswith("hf://datasets/"):
        return None
    repo_id = "/".join(source.removeprefix("hf://datasets/").split("/")[:2])
    snap = _SNAPSHOT.search(str(Path(suite.tables_root).resolve()))
    return repo_id, snap["sha"] if snap else None


def fetch_declared(repo_id: str, revision: str | None, *, api: Any = None) -> list[str]:
    """The task ids the dataset repo's `eval.yaml` declares at `revision`; ConfigError when the repo
    is not a Benchmark (no eval.yaml there)."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError

    download = api.hf_hub_download if api is not None else hf_hub_download
    try:
        path = download(repo_id=repo_id, filename=BENCHMARK_FILE, repo_type="dataset", revision=revision)
    except EntryNotFoundError as e:
        raise ConfigError(
            f"datasets/{repo_id} has no {BENCHMARK_FILE}: it is not a Benchmark, so results cannot link "
            "to it; push the suite with `dagent suite push`, which writes one"
        ) from e
    except HfHubHTTPError as e:
        raise ConfigError(f"cannot read {BENCHMARK_FILE} of datasets/{repo_id}@{revision or 'main'}: {e}") from e
    return declared_task_ids(Path(path).read_text(encoding="utf-8"))
