"""Pushing an evaluation's results to a Hub model repo, through the real `HfApi` over real HTTP to
`tests.fake_hub.FakeHub`: one commit with out_dir's files and the `.eval_results/*.yaml`, ungraded
arms unreported, HTTP errors wrapped once with the fix named and the token never shown.

Not covered: the real Hub's authentication and token scopes (the fake checks one bearer token),
Xet/LFS storage of large files (the fake answers "regular" for every file, so everything travels
inline in the commit), the Hub's server-side validation of `.eval_results/*.yaml` and how the
model page and leaderboards render it, rate limits and retries.
"""

from __future__ import annotations

import json
import logging
import struct
import zlib

import pytest
import yaml
from huggingface_hub import HfApi, parse_eval_result_entries
from huggingface_hub.errors import HfHubHTTPError

from dagent.errors import ConfigError
from dagent.eval.hub import HubPushError, eval_result_entries, push_results
from tests.fake_hub import FakeHub

DATASET = "HuggingEnvs/data-agent"
NOTES = "dagent opencode agent, pass@1"
DATE = "2025-01-15T10:30:00Z"


def png_1x1() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)  # 1x1, 8-bit RGB
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(b"\0\xff\x00\x00"))
        + chunk(b"IEND", b"")
    )


@pytest.fixture(scope="module")
def hub():
    with FakeHub(token="hf_fake") as h:
        yield h


@pytest.fixture
def out_dir(tmp_path):
    out = tmp_path / "run"
    (out / "base").mkdir(parents=True)
    (out / "trained").mkdir()
    (out / "results.md").write_text("# Results\n\n| arm | pass@1 |\n|---|---|\n| base | 0.25 |\n")
    (out / "pass_at_1.png").write_bytes(png_1x1())
    for arm in ("base", "trained"):
        (out / arm / "records.jsonl").write_text(json.dumps({"task_id": "demo.t0", "arm": arm}) + "\n")
        (out / arm / "summary.json").write_text(json.dumps({"arm": arm, "n": 1}))
    return out


def entries(scores):
    return eval_result_entries(scores, dataset_id=DATASET, task_id="test", notes=NOTES, date=DATE)


def test_one_commit_carries_the_files_and_the_eval_results(hub, out_dir, caplog):
    api = HfApi(endpoint=hub.url, token="hf_fake")
    caplog.set_level(logging.DEBUG, logger="dagent")
    url = push_results(
        "me/qwen-agent",
        out_dir,
        {
            "dagent_test": entries({"base": 0.25, "trained": 0.5, "broken": None}),
            "dagent_test_broken": entries({"broken": None}),  # every arm ungraded: no file at all
        },
        api=api,
    )

    commits = hub.commits("me/qwen-agent")
    assert len(commits) == 1
    assert url == f"{hub.url}/me/qwen-agent/commit/{commits[0]['oid']}"
    files = hub.files("me/qwen-agent")
    assert sorted(files) == [
        ".eval_results/dagent_test.yaml",
        "eval/base/records.jsonl",
        "eval/base/summary.json",
        "eval/pass_at_1.png",
        "eval/results.md",
        "eval/trained/records.jsonl",
        "eval/trained/summary.json",
    ]
    for rel in ("results.md", "pass_at_1.png", "base/records.jsonl", "trained/summary.json"):
        assert files[f"eval/{rel}"] == (out_dir / rel).read_bytes()
    assert files["eval/pass_at_1.png"].startswith(b"\x89PNG")

    text = files[".eval_results/dagent_test.yaml"].decode()
    parsed = parse_eval_result_entries(yaml.safe_load(text))
    assert [(e.dataset_id, e.task_id, e.value, e.date) for e in parsed] == [
        (DATASET, "test", 0.25, DATE),
        (DATASET, "test", 0.5, DATE),
    ]
    assert [e.notes for e in parsed] == [f"{NOTES} (arm base)", f"{NOTES} (arm trained)"]
    assert "broken" not in text  # ungraded stays unreported, never a 0

    dagent_log = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("dagent"))
    assert "token: present" in dagent_log and "hf_fake" not in dagent_log


def test_ungraded_arms_get_no_entry_and_a_bad_score_is_refused():
    assert entries({"a": None, "b": None}) == []
    assert [e.value for e in entries({"a": 1, "b": None, "c": 0.0})] == [1.0, 0.0]  # a real 0 is reported
    assert entries({"a": 0.5})[0].notes == f"{NOTES} (arm a)"
    assert eval_result_entries({"a": 0.5}, dataset_id=DATASET, task_id="t", notes=None)[0].notes == "arm a"
    with pytest.raises(ConfigError, match="None"):
        entries({"a": float("nan")})


def test_a_rejected_token_names_hf_token_and_never_shows_the_token(hub, out_dir, caplog):
    secret = "hf_wrongSecretToken123"
    caplog.set_level(logging.DEBUG)
    with pytest.raises(HubPushError, match="set HF_TOKEN with write access to me/denied") as info:
        push_results(
            "me/denied", out_dir, {"dagent_test": entries({"base": 0.25})}, api=HfApi(endpoint=hub.url, token=secret)
        )
    assert "401" in str(info.value)
    assert isinstance(info.value.__cause__, HfHubHTTPError)  # wrapped once, the Hub's error kept as cause
    assert secret not in str(info.value) and secret not in caplog.text
    assert ("model", "me/denied") not in hub.repos


def test_a_missing_repo_without_create_names_the_fix(hub, out_dir):
    with pytest.raises(HubPushError, match=r"404.*create=True"):
        push_results("me/absent", out_dir, {}, api=HfApi(endpoint=hub.url, token="hf_fake"), create=False)


def test_pushing_the_same_results_again_makes_no_new_commit(hub, out_dir):
    api = HfApi(endpoint=hub.url, token="hf_fake")
    files = {"dagent_test": entries({"base": 0.25})}
    first = push_results("me/again", out_dir, files, api=api, path_in_repo="runs/1/")
    again = push_results(
        "me/again", out_dir, {"dagent_test": entries({"base": 0.25})}, api=api, path_in_repo="runs/1"
    )  # existing repo: create is exist_ok; unchanged files skipped
    assert again == first and len(hub.commits("me/again")) == 1
    assert "runs/1/results.md" in hub.files("me/again")


@pytest.mark.parametrize("repo_id", ["no-namespace", "a/b/c", "me/bad name", "me/x--y", ""])
def test_a_bad_repo_id_is_a_config_error_before_any_request(repo_id, out_dir):
    with pytest.raises(ConfigError, match="OWNER/NAME"):
        push_results(repo_id, out_dir, {}, api=HfApi(endpoint="http://127.0.0.1:9", token="hf_fake"))


def test_a_missing_out_dir_or_bad_file_name_is_a_config_error(tmp_path, out_dir):
    api = HfApi(endpoint="http://127.0.0.1:9", token="hf_fake")
    with pytest.raises(ConfigError, match="no results directory"):
        push_results("me/m", tmp_path / "missing", {}, api=api)
    with pytest.raises(ConfigError, match="eval results file name"):
        push_results("me/m", out_dir, {"../x": entries({"a": 1.0})}, api=api)


def test_the_fake_hub_serves_dataset_and_space_repos_too(hub, tmp_path):
    """FakeHub is shared with later Hub tests: upload_folder to a dataset (with a root README.md,
    which create_commit validates first) and a docker Space land under their own repo type."""
    api = HfApi(endpoint=hub.url, token="hf_fake")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train-00000-of-00001.parquet").write_bytes(b"PAR1")
    (tmp_path / "README.md").write_text("---\nlicense: mit\n---\n")
    assert api.create_repo("me/qwen-agent", repo_type="dataset").endswith("/datasets/me/qwen-agent")
    api.upload_folder(folder_path=tmp_path, repo_id="me/qwen-agent", repo_type="dataset")
    api.create_repo("me/env", repo_type="space", space_sdk="docker")
    api.upload_file(
        path_or_fileobj=b"FROM python:3.12\n", path_in_repo="Dockerfile", repo_id="me/env", repo_type="space"
    )
    assert sorted(hub.files("me/qwen-agent", "dataset")) == ["README.md", "data/train-00000-of-00001.parquet"]
    assert hub.files("me/env", "space") == {"Dockerfile": b"FROM python:3.12\n"}
    assert hub.repos[("space", "me/env")].settings["sdk"] == "docker"


def test_a_run_lands_in_a_results_dataset_beside_earlier_runs(hub, out_dir):
    from dagent.eval.hub import push_results_dataset

    api = HfApi(endpoint=hub.url, token=hub.token)
    push_results_dataset("fake-user/dagent-results", out_dir, "eval-a", api=api)
    push_results_dataset("fake-user/dagent-results", out_dir, "eval-b", api=api)
    files = hub.files("fake-user/dagent-results", "dataset")
    mine = sorted(p.relative_to(out_dir).as_posix() for p in out_dir.rglob("*") if p.is_file())
    assert sorted(files) == sorted(f"runs/{run}/{p}" for run in ("eval-a", "eval-b") for p in mine)
    with pytest.raises(ConfigError, match="run name"):
        push_results_dataset("fake-user/dagent-results", out_dir, "../x", api=api)
