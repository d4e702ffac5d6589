"""`dagent suite push OWNER/NAME [--bucket OWNER/BUCKET]`: a suite to the Hub, readable back.

The dataset repo gets `data/<split>-*.parquet` (the rows, one task each) and a card whose
`configs` name every split, so both `datasets.load_dataset(OWNER/NAME)` and `dagent`'s
`load_tasks(OWNER/NAME)` read it; and `eval.yaml`, which makes it a Hub Benchmark whose tasks are
the held-out splits and their tiers (`dagent.suites.benchmark`; each tier a config of its own
under `tiers/`). The tables go either into the same repo (`tables/`, as the
local build lays them out) or, with `--bucket`, to a Hub storage bucket (`batch_bucket_files`)
under a prefix; the pushed rows then name each table by its bucket URL
(`hf://buckets/OWNER/BUCKET/PREFIX/<path>`) and `TaskSuite.files_for` stages it from there
(`dagent.sandbox.staging.fetch_bucket`: retries, the two distinct empty errors, a host cache).

Buckets go through Xet storage, which no local endpoint serves: that half is tested with an
injected `HfApi` (tests/suites/test_push.py says so); the dataset half against a local endpoint.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dagent.errors import ConfigError
from dagent.sandbox.staging import BUCKET_SCHEME
from dagent.suites.benchmark import BENCHMARK_FILE, METRIC, eval_yaml, task_ids, tier_config
from dagent.suites.sources import read_suite


def card(repo_id: str, splits: dict[str, int], *, bucket_url: str | None, tiers: tuple[str, ...] = ()) -> str:
    """README.md: the `default` config (every split under data/), one config per benchmark tier
    (`<split>_<tier>`, under tiers/, what `eval.yaml`'s tier tasks read), and how to load it."""
    configs = "\n".join(f"  - split: {s}\n    path: data/{s}-*.parquet" for s in splits)
    for task_id in tiers:
        split = task_id.partition(":")[0]
        configs += (
            f"\n- config_name: {tier_config(task_id)}\n  data_files:\n  - split: {split}\n"
            f"    path: tiers/{tier_config(task_id)}.parquet"
        )
    where = (
        f"The tables live in the storage bucket `{bucket_url}`; each row's `data_files` names its tables there."
        if bucket_url
        else "The tables live under `tables/` in this repo; `data_files` are paths there."
    )
    return (
        f"---\nconfigs:\n- config_name: default\n  data_files:\n{configs}\ntags:\n- dagent\n- data-agent\n---\n\n"
        f"# {repo_id}\n\nA dagent task suite: one row per task (question, gold answer, tolerance, reference "
        f"program, the tables it reads). Tasks per split: {json.dumps(splits)}.\n\n{where}\n\n"
        f"A Benchmark: `{BENCHMARK_FILE}` declares its tasks ({', '.join(tiers) or 'none'} and the whole held-out "
        f"splits); the metric is {METRIC}.\n\n"
        f'```python\nfrom dagent.suites.sources import load_tasks\nsuite = load_tasks("{repo_id}")\n```\n'
    )


def push_suite(
    root: str | Path,
    repo_id: str,
    *,
    bucket: str | None = None,
    prefix: str | None = None,
    api: Any = None,
    private: bool = False,
    echo: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Push the suite at `root` (module docstring); what went where."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from huggingface_hub import HfApi

    root = Path(root)
    suite = read_suite(root)  # refuse what is not a suite before anything is created
    api = api or HfApi()
    splits = {s: len(suite.tasks(s)) for s in suite.bases}
    bucket_url = None
    with tempfile.TemporaryDirectory(prefix="dagent-suite-push-") as tmp:
        staged = Path(tmp)
        (staged / "data").mkdir()
        if bucket:
            if bucket.count("/") != 1:
                raise ConfigError(f"--bucket {bucket!r} is not OWNER/BUCKET")
            prefix = (prefix or repo_id.split("/")[1]).strip("/")
            bucket_url = f"{BUCKET_SCHEME}{bucket}/{prefix}"
            tables = sorted(p for p in (root / "tables").rglob("*") if p.is_file())
            api.create_bucket(bucket, exist_ok=True, private=private)
            api.batch_bucket_files(
                bucket, add=[(str(p), f"{prefix}/{p.relative_to(root / 'tables').as_posix()}") for p in tables]
            )
            echo(f"{len(tables)} tables to {bucket_url}")
            for f in sorted((root / "data").glob("*.parquet")):
                rows = pq.read_table(f).to_pylist()
                for row in rows:
                    row["data_files"] = [f"{bucket_url}/{d}" for d in row["data_files"]]
                pq.write_table(pa.Table.from_pylist(rows), staged / "data" / f.name)
        else:
            for f in sorted((root / "data").glob("*.parquet")):
                shutil.copy2(f, staged / "data" / f.name)
            shutil.copytree(root / "tables", staged / "tables")
        ids = task_ids(suite)
        tiers = tuple(i for i in ids if ":" in i)
        (staged / "tiers").mkdir()
        for task_id in tiers:  # a tier's rows as their own config, exactly the tasks its benchmark task reads
            split, _, tier = task_id.partition(":")
            rows = [
                r
                for f in sorted((staged / "data").glob(f"{split}-*.parquet"))
                for r in pq.read_table(f).to_pylist()
                if r["difficulty_tier"] == tier
            ]
            pq.write_table(pa.Table.from_pylist(rows), staged / "tiers" / f"{tier_config(task_id)}.parquet")
        (staged / BENCHMARK_FILE).write_text(eval_yaml(repo_id, suite))
        (staged / "README.md").write_text(card(repo_id, splits, bucket_url=bucket_url, tiers=tiers))
        api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
        commit = api.upload_folder(
            repo_id=repo_id,
            repo_type="dataset",
            folder_path=str(staged),
            commit_message=f"dagent suite: {json.dumps(splits)}",
        )
    echo(
        f"{sum(splits.values())} tasks to datasets/{repo_id}"
        + (f", tables in {bucket_url}" if bucket_url else "")
        + f"; a Benchmark of {len(ids)} tasks ({BENCHMARK_FILE})"
    )
    return {
        "repo": repo_id,
        "splits": splits,
        "bucket": bucket_url,
        "commit": getattr(commit, "oid", None),
        "tasks": ids,
    }
