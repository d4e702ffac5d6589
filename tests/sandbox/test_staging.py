"""Staging: bucket prefixes through huggingface_hub into a host cache, and the remote upload loop.

The fake Hub API binds every call to the real `HfApi.list_bucket_tree` /
`HfApi.download_bucket_files` signatures, answers with real `BucketFile` objects and fails with
the real `HfHubHTTPError` over `httpx2` responses, so the retry classification sees exactly what
huggingface_hub raises.

NOT covered offline (needs network and a token that can read the bucket): a real bucket listing
and xet download, huggingface_hub's own error for a private bucket without a token, and how often
the live Hub answers 5xx.
"""

from __future__ import annotations

import inspect
import logging
from pathlib import Path

import httpx2
import pytest
from huggingface_hub import BucketFile, BucketFolder, HfApi
from huggingface_hub.errors import HfHubHTTPError

from dagent.errors import StagingError
from dagent.sandbox.base import ExecResult
from dagent.sandbox.staging import BucketPrefix, check_inputs, fetch_bucket, is_transient, stage_bucket, stage_remote

LIST_SIG = inspect.signature(HfApi.list_bucket_tree)
DOWNLOAD_SIG = inspect.signature(HfApi.download_bucket_files)
URL = "hf://buckets/owner/tables/task-7"
HF_SECRET = "hf_SECRET_abcdef123456"


def http_error(status: int) -> HfHubHTTPError:
    request = httpx2.Request("GET", "https://huggingface.co/api/buckets/owner/tables/tree/task-7")
    return HfHubHTTPError(f"{status} Server Error", response=httpx2.Response(status, request=request))


def bucket_file(path: str, size: int = 4) -> BucketFile:
    return BucketFile(type="file", path=path, size=size, xetHash="0" * 64)


class FakeHub:
    """`list_bucket_tree` / `download_bucket_files` with scripted failures."""

    def __init__(self, files=("task-7/data/flights.csv", "task-7/airports.csv"), deliver=True):
        self.tree = [bucket_file(p) for p in files] + [BucketFolder(type="directory", path="task-7/data")]
        self.deliver = deliver
        self.list_errors: list[Exception] = []
        self.download_errors: list[Exception] = []
        self.calls: list[tuple[str, dict]] = []

    def list_bucket_tree(self, *args, **kw):
        LIST_SIG.bind(None, *args, **kw)
        self.calls.append(("list", {"args": args, **kw}))
        if self.list_errors:
            raise self.list_errors.pop(0)
        return iter(self.tree)

    def download_bucket_files(self, *args, **kw):
        bound = DOWNLOAD_SIG.bind(None, *args, **kw)
        self.calls.append(("download", kw))
        if self.download_errors:
            raise self.download_errors.pop(0)
        for remote, local in bound.arguments["files"]:
            assert isinstance(remote, BucketFile)  # listed objects: no second metadata round trip
            if self.deliver:
                Path(local).write_text(f"from {remote.path}")


def fetch(api, tmp_path, sleeps=None, **kw):
    return fetch_bucket(URL, tmp_path / "cache", api=api, sleep=(sleeps if sleeps is not None else []).append, **kw)


def test_prefix_is_listed_downloaded_and_flattened(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", HF_SECRET)
    api = FakeHub()
    files = fetch(api, tmp_path)
    assert sorted(files) == ["airports.csv", "flights.csv"]  # flattened at download time
    assert files["flights.csv"].read_text() == "from task-7/data/flights.csv"
    _, listed = api.calls[0]
    assert listed["args"] == ("owner/tables",) and listed["prefix"] == "task-7" and listed["recursive"] is True
    assert listed["token"] == HF_SECRET  # through the API call, never a log or a command
    assert fetch(api, tmp_path) == files and len(api.calls) == 2  # a complete download is reused
    files["flights.csv"].unlink()  # a damaged cache entry is fetched again, not staged short
    assert fetch(api, tmp_path) == files and len(api.calls) == 4 and files["flights.csv"].is_file()


@pytest.mark.failure_mode("F21")
def test_transient_503_is_retried_then_succeeds(tmp_path, caplog):
    api, sleeps = FakeHub(), []
    api.list_errors = [http_error(503)]
    api.download_errors = [ConnectionResetError("connection reset by peer")]
    with caplog.at_level(logging.WARNING):
        files = fetch(api, tmp_path, sleeps)
    assert sorted(files) == ["airports.csv", "flights.csv"]
    assert sleeps == [2.0, 2.0]  # one retry each for the listing and the download
    assert "attempt 1/4 failed" in caplog.text


@pytest.mark.failure_mode("F21")
def test_four_attempts_with_linear_backoff_then_a_loud_error(tmp_path):
    api, sleeps = FakeHub(), []
    api.list_errors = [http_error(504)] * 4
    with pytest.raises(StagingError, match="after 4 attempts"):
        fetch(api, tmp_path, sleeps)
    assert sleeps == [2.0, 4.0, 6.0]
    api.list_errors = [httpx2.ConnectTimeout("timed out")] * 2
    assert fetch(api, tmp_path, sleeps=[], attempts=3, backoff_s=0.5)  # configurable


def test_client_errors_are_not_retried_and_name_the_token(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", HF_SECRET)
    api, sleeps = FakeHub(), []
    api.list_errors = [http_error(404)]
    with pytest.raises(StagingError, match="HF_TOKEN: present") as e:
        fetch(api, tmp_path, sleeps)
    assert sleeps == [] and HF_SECRET not in str(e.value)


def test_classification():
    assert is_transient(http_error(500)) and is_transient(http_error(429)) and is_transient(TimeoutError())
    assert is_transient(httpx2.RemoteProtocolError("peer closed connection"))
    assert not is_transient(http_error(401)) and not is_transient(ValueError("bad bucket id"))


@pytest.mark.failure_mode("F21")
def test_nothing_at_prefix_and_directory_empty_are_distinct(tmp_path):
    with pytest.raises(StagingError) as nothing:
        fetch(FakeHub(files=()), tmp_path)
    with pytest.raises(StagingError) as empty:
        fetch(FakeHub(deliver=False), tmp_path)
    assert str(nothing.value).startswith(f"nothing at prefix {URL}:")
    assert str(empty.value).startswith("directory empty:") and "2 file(s) listed" in str(empty.value)
    assert "directory empty" not in str(nothing.value) and "nothing at prefix" not in str(empty.value)
    assert not list((tmp_path / "cache").glob(".tmp-*"))  # no half-made cache entry left behind


def test_flattening_collisions_are_refused(tmp_path):
    with pytest.raises(StagingError, match="cannot flatten"):
        fetch(FakeHub(files=("task-7/a/t.csv", "task-7/b/t.csv")), tmp_path)


def test_bucket_urls():
    assert BucketPrefix.parse("hf://buckets/o/n/a/b/") == BucketPrefix("o/n", "a/b")
    assert BucketPrefix.parse("hf://buckets/o/n") == BucketPrefix("o/n", "")
    assert str(BucketPrefix("o/n", "p")) == "hf://buckets/o/n/p"
    for bad in ("hf://datasets/o/n", "hf://buckets/o", "s3://x/y"):
        with pytest.raises(StagingError, match="not a bucket prefix"):
            BucketPrefix.parse(bad)


class ListingSandbox:
    """Just enough of a Sandbox for `stage_remote`: uploads land in a dict, `find` lists them."""

    def __init__(self, lose_uploads: bool = False):
        self.uploaded: dict[str, bytes] = {}
        self.lose_uploads = lose_uploads
        self.staged: dict[str, Path] = {}

    def upload(self, src: Path, dest: str) -> None:
        if not self.lose_uploads:
            self.uploaded[dest] = src.read_bytes()

    def exec(self, command, *, timeout_s=None, env=None, cwd=None):
        names = "".join(f"./{p.removeprefix('/workdir/input/')}\n" for p in self.uploaded)
        return ExecResult(exit_code=0, stdout=names, stderr="")

    def stage(self, files):
        self.staged = dict(files)


@pytest.mark.failure_mode("F21")
def test_upload_that_leaves_the_sandbox_empty_is_directory_empty(tmp_path):
    (tmp_path / "t.csv").write_text("x")
    sb = ListingSandbox(lose_uploads=True)
    with pytest.raises(StagingError, match="^directory empty: /workdir/input holds none"):
        stage_remote(sb, {"t.csv": tmp_path / "t.csv"}, sb.upload)
    ok = ListingSandbox()
    stage_remote(ok, {"sub/t.csv": tmp_path / "t.csv"}, ok.upload)
    assert ok.uploaded == {"/workdir/input/sub/t.csv": b"x"}


def test_input_names_are_checked(tmp_path):
    (tmp_path / "t.csv").write_text("x")
    for bad in ("../t.csv", "/etc/passwd", ""):
        with pytest.raises(StagingError, match="relative path"):
            check_inputs({bad: tmp_path / "t.csv"})
    with pytest.raises(StagingError, match="not found on the host"):
        check_inputs({"t.csv": tmp_path / "missing.csv"})


def test_stage_bucket_hands_the_cache_to_the_sandbox(tmp_path):
    sb = ListingSandbox()
    files = stage_bucket(sb, URL, tmp_path / "cache", api=FakeHub(), sleep=lambda s: None)
    assert sb.staged == files and sorted(files) == ["airports.csv", "flights.csv"]
