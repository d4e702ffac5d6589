"""Task sources. The local path is covered end to end; Hub paths are covered up to the
`snapshot_download` call (offline here): its arguments and the error mapping. Not covered: a
real download."""

from pathlib import Path

import pytest

from dagent.core.suite import BASE_SPLITS
from dagent.errors import TaskError
from dagent.suites import sources as hub
from tests.factories import make_task


def write_suite(root: Path, n_per_split: int = 3) -> None:
    import datasets

    rows = {
        split: [make_task(i + 10 * k, level=1 + i % 3).to_row() for i in range(n_per_split)]
        for k, split in enumerate(BASE_SPLITS)
    }
    (root / "data").mkdir(parents=True)
    for split, r in rows.items():
        datasets.Dataset.from_list(r).to_parquet(str(root / "data" / f"{split}-00000-of-00001.parquet"))


def test_local_build_round_trips(tmp_path):
    write_suite(tmp_path)
    suite = hub.load_tasks(tmp_path)
    assert suite.bases == BASE_SPLITS
    assert len(suite.tasks("train")) == 3
    assert suite.task_at("test", 0) == make_task(10, level=1)
    assert suite.tables_root == tmp_path / "tables"


def test_missing_local_build_names_the_build_command(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGENT_CACHE", str(tmp_path))
    with pytest.raises(TaskError, match="dagent suite build"):
        hub.load_tasks(None)


@pytest.mark.parametrize(
    "source,expected",
    [
        ("hf://datasets/HuggingEnvs/data-agent", ("hub", "HuggingEnvs/data-agent", None, None)),
        ("hf://datasets/HuggingEnvs/data-agent@v1", ("hub", "HuggingEnvs/data-agent", "v1", None)),
        ("hf://datasets/org/name@main/suite", ("hub", "org/name", "main", "suite")),
        ("org/name", ("hub", "org/name", None, None)),
    ],
)
def test_hub_sources_parse(source, expected):
    assert hub.parse_source(source) == expected


@pytest.mark.parametrize("source", ["hf://models/x/y", "hf://buckets/x/y", "not a thing", "a/b/c"])
def test_unusable_sources_fail_with_the_accepted_forms(source):
    with pytest.raises(TaskError, match="hf://datasets"):
        hub.parse_source(source)


def test_hub_repo_goes_through_snapshot_download(tmp_path, monkeypatch):
    import huggingface_hub

    write_suite(tmp_path)
    calls = []

    def fake_snapshot_download(**kw):
        calls.append(kw)
        return str(tmp_path)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    suite = hub.load_tasks("hf://datasets/org/name@rev1")
    assert calls == [
        {
            "repo_id": "org/name",
            "repo_type": "dataset",
            "revision": "rev1",
            "allow_patterns": ["data/*", "tables/**", "README.md"],
        }
    ]
    assert suite.source == "hf://datasets/org/name"


def test_hub_unreachable_is_a_named_error(monkeypatch):
    import huggingface_hub

    def offline(**kw):
        raise OSError("Name or service not known")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(TaskError, match="could not reach the Hub"):
        hub.load_tasks("org/name")
