"""`dagent suite push` and back: the rows to a Hub dataset repo against a real local HTTP endpoint
(tests/fake_hub.py), read back by `load_tasks`, every task's tables staged from what came down; with
`--bucket`, the tables to a storage bucket and the rows naming them there. Buckets go through Xet,
which no local endpoint serves: that half uses an injected HfApi whose bucket calls keep files in
memory (list_bucket_tree / download_bucket_files as huggingface_hub 2.4 names them). Not covered:
Xet itself, the real Hub's auth, `datasets.load_dataset` reading the card's configs online."""

from __future__ import annotations

from types import SimpleNamespace

import yaml
from huggingface_hub import HfApi

from dagent.suites.push import push_suite
from dagent.suites.sources import load_tasks
from tests.factories import write_suite
from tests.fake_hub import FakeHub


class BucketApi:
    """The Hub endpoint for repos, an in-memory store for bucket calls (Xet, not served offline)."""

    def __init__(self, api: HfApi) -> None:
        self.api, self.buckets, self.calls = api, {}, []

    def __getattr__(self, name):
        return getattr(self.api, name)

    def create_bucket(self, bucket_id, exist_ok=False, private=False, **kw):
        self.calls.append(("create_bucket", bucket_id))
        self.buckets.setdefault(bucket_id, {})

    def batch_bucket_files(self, bucket_id, add=None, **kw):
        self.calls.append(("batch_bucket_files", bucket_id, len(add or [])))
        for src, dest in add or []:
            self.buckets[bucket_id][dest] = open(src, "rb").read()

    def list_bucket_tree(self, bucket_id, prefix=None, recursive=None, token=None):
        return [
            SimpleNamespace(type="file", path=p) for p in sorted(self.buckets[bucket_id]) if p.startswith(prefix or "")
        ]

    def download_bucket_files(self, bucket_id, files, raise_on_missing_files=True, token=None):
        for f, dest in files:
            open(dest, "wb").write(self.buckets[bucket_id][f.path])


def round_trip(tmp_path, bucket: str | None):
    root = write_suite(tmp_path / "suite")
    with FakeHub() as hub:
        api = BucketApi(HfApi(endpoint=hub.url, token=hub.token))
        pushed = push_suite(root, "fake-user/suite", bucket=bucket, api=api, echo=lambda _l: None)
        files = hub.files("fake-user/suite", "dataset")
        back = load_tasks("fake-user/suite", api=api)
        staged = {t.task_id: back.files_for(t) for base in back.bases for t in back.tasks(base)}
    return root, pushed, files, back, staged, api


def test_a_pushed_suite_reads_back_task_for_task_and_file_for_file(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGENT_CACHE", str(tmp_path / "cache"))
    root, pushed, files, back, staged, _ = round_trip(tmp_path, None)
    local = load_tasks(str(root))
    assert pushed["splits"] == {"train": 4, "test": 2, "eval": 2} and pushed["bucket"] is None
    assert {"data/train-00000-of-00001.parquet", "tables/demo/t.csv", "README.md"} <= set(files)
    front = yaml.safe_load(files["README.md"].decode().split("---")[1])
    assert [c["split"] for c in front["configs"][0]["data_files"]] == ["train", "test", "eval"]
    for base in local.bases:
        assert [t.model_dump() for t in back.tasks(base)] == [t.model_dump() for t in local.tasks(base)]
    assert back.source == "hf://datasets/fake-user/suite"
    assert all(
        paths["t.csv"].read_bytes() == (root / "tables" / "demo" / "t.csv").read_bytes() for paths in staged.values()
    )


def test_with_a_bucket_the_rows_name_their_tables_there_and_staging_fetches_them(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGENT_CACHE", str(tmp_path / "cache"))
    root, pushed, files, back, staged, api = round_trip(tmp_path, "fake-user/tables")
    assert pushed["bucket"] == "hf://buckets/fake-user/tables/suite"
    assert ("batch_bucket_files", "fake-user/tables", 1) in api.calls and api.buckets["fake-user/tables"] == {
        "suite/demo/t.csv": (root / "tables" / "demo" / "t.csv").read_bytes()
    }
    assert not any(p.startswith("tables/") for p in files)  # the tables are in the bucket only
    task = back.tasks("train")[0]
    assert task.data_files == ("hf://buckets/fake-user/tables/suite/demo/t.csv",)
    assert staged[task.task_id]["t.csv"].read_bytes() == (root / "tables" / "demo" / "t.csv").read_bytes()
    assert str(staged[task.task_id]["t.csv"]).startswith(str(tmp_path / "cache" / "buckets"))
