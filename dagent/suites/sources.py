"""Where a task suite comes from: the local build, a Hub dataset repo, or an `hf://` path.

The suite's layout is the Hub's: `data/<split>-*.parquet` (one row per task, columns = `Task`
fields) and `tables/` (the files an analyst gets, as they would sit under a bucket prefix). A
local build and a downloaded Hub snapshot are read by the same code.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from dagent.core.suite import BASE_SPLITS, TaskSuite
from dagent.core.task import Task
from dagent.errors import MissingDependencyError, TaskError
from dagent.sandbox.staging import fetch_bucket
from dagent.settings import cache_dir

_HF_DATASET = re.compile(r"^hf://datasets/(?P<repo>[\w.-]+/[\w.-]+)(?:@(?P<rev>[^/]+))?(?:/(?P<sub>.*))?$")
_REPO_ID = re.compile(r"^[\w.-]+/[\w.-]+$")


def default_suite_dir() -> Path:
    """Where `dagent suite build` writes the bundled suite by default."""
    return cache_dir() / "suite"


def parse_source(source: str | Path | None) -> tuple[str, str, str | None, str | None]:
    """Classify a source: ("local", path, None, None) or ("hub", repo_id, revision, subdir)."""
    if source is None:
        return "local", str(default_suite_dir()), None, None
    text = str(source)
    if text.startswith("hf://"):
        m = _HF_DATASET.match(text.rstrip("/"))
        if not m:
            raise TaskError(f"cannot read tasks from {text!r}: use hf://datasets/OWNER/NAME[@REVISION][/SUBDIR]")
        return "hub", m["repo"], m["rev"], m["sub"] or None
    if Path(text).exists():
        return "local", text, None, None
    if _REPO_ID.match(text) and not text.startswith((".", "/")):
        return "hub", text, None, None
    raise TaskError(
        f"no task suite at {text!r}: give a local build directory (`dagent suite build` makes one), "
        "a Hub dataset repo id (OWNER/NAME) or an hf://datasets/... path"
    )


def load_tasks(source: str | Path | None = None, *, api: object = None) -> TaskSuite:
    """Load a suite from the local build (default), a Hub dataset repo id, or an hf:// path.
    `api`: a `huggingface_hub.HfApi` for the downloads (default: a new one)."""
    root, label = suite_root(source, api=api)
    if not (root / "data").is_dir():
        raise TaskError(f"no task suite at {root}: run `dagent suite build --out {root}` first")
    suite = read_suite(root, source=label)
    if api is not None:
        suite.remote_files = functools.partial(fetch_remote, api=api)
    return suite


def suite_root(source: str | Path | None = None, *, api: object = None) -> tuple[Path, str]:
    """(the suite's directory on this machine, its source label): a local path as is, a Hub
    dataset downloaded (snapshot) first."""
    kind, where, revision, subdir = parse_source(source)
    if kind == "local":
        return Path(where), str(Path(where))
    root = _download(where, revision, api)
    return (root / subdir if subdir else root), f"hf://datasets/{where}"


def _download(repo_id: str, revision: str | None, api: object = None) -> Path:
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import HfHubHTTPError
    except ImportError as e:  # pragma: no cover - huggingface_hub is a core dependency
        raise MissingDependencyError("huggingface_hub", purpose="loading tasks from the Hub") from e
    try:
        path = (api.snapshot_download if api is not None else snapshot_download)(  # type: ignore[attr-defined]
            repo_id=repo_id,
            repo_type="dataset",
            revision=revision,
            allow_patterns=["data/*", "tables/**", "README.md"],
        )
    except HfHubHTTPError as e:
        raise TaskError(f"could not download dataset {repo_id!r} from the Hub: {e}") from e
    except OSError as e:  # offline, DNS, connection refused, local-files-only misses
        raise TaskError(
            f"could not reach the Hub for dataset {repo_id!r} ({e.__class__.__name__}); check the "
            "network or HF_HUB_OFFLINE, or build locally with `dagent suite build`"
        ) from e
    return Path(path)


def read_suite(root: Path, *, source: str = "local") -> TaskSuite:
    """Read `data/<split>-*.parquet` under `root` into a suite whose tables live in `root/tables`."""
    import pyarrow.parquet as pq

    splits: dict[str, list[Task]] = {}
    for split in BASE_SPLITS:
        files = sorted((root / "data").glob(f"{split}-*.parquet"))
        if not files:
            continue
        rows = [row for f in files for row in pq.read_table(f).to_pylist()]
        try:
            splits[split] = [Task.model_validate(row) for row in rows]
        except ValueError as e:
            raise TaskError(f"{files[0]} holds rows that are not dagent tasks: {e}") from e
    if not splits:
        raise TaskError(f"no data/<split>-*.parquet files under {root}; is this a dagent suite?")
    return TaskSuite(splits=splits, tables_root=root / "tables", source=source, remote_files=fetch_remote)


def fetch_remote(url: str, *, api: object = None) -> dict[str, Path]:
    """A table named by a bucket URL, downloaded to this host's cache (`dagent.sandbox.staging`:
    retries, nothing-at-prefix vs directory-empty, complete downloads only)."""
    return fetch_bucket(url, cache_dir() / "buckets", api=api)
