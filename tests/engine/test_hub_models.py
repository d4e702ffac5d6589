"""Models from the Hub: `--model OWNER/NAME[@REVISION]` resolves through huggingface_hub into its
cache, once, against a real local HTTP endpoint (tests/fake_hub.py) holding real weights files;
the revision it resolved to is recorded. Not covered: the real Hub (auth, Xet storage, LFS)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from dagent.engine.models import hub_model, model_dir, model_source, tiny_qwen3
from dagent.errors import ConfigError
from tests.fake_hub import FakeHub, FakeRepo
from tests.train.test_sft import tiny_suite  # noqa: F401  (a fixture: a suite whose programs print their gold)

pytest.importorskip("transformers")


@contextlib.contextmanager
def hub_env(hub: FakeHub, cache: Path) -> Iterator[dict[str, str]]:
    """This process and its children pointed at `hub`, with their own huggingface_hub cache."""
    import huggingface_hub.constants as constants

    env = {"HF_ENDPOINT": hub.url, "HF_TOKEN": hub.token, "HF_HOME": str(cache), "HF_HUB_CACHE": str(cache / "hub")}
    saved_env = {k: os.environ.get(k) for k in env}
    saved_cache = constants.HF_HUB_CACHE
    os.environ.update(env)
    constants.HF_HUB_CACHE = env["HF_HUB_CACHE"]
    try:
        yield env
    finally:
        constants.HF_HUB_CACHE = saved_cache
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def seed_model_repo(hub: FakeHub, repo_id: str, folder: Path, *, checkpoint: str | None = None) -> str:
    """A model repo holding `folder`'s files at its root (and, named, a checkpoint folder beside
    them), committed once; its commit id."""
    files = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    if checkpoint:
        files |= {f"{checkpoint}/{name}": data for name, data in files.items()}
        files[f"{checkpoint}/optimizer.pt"] = b"optimizer state"
    repo = hub.repos[("model", repo_id)] = FakeRepo("model", repo_id, {}, files)
    repo.commits.append({"oid": "c" * 40, "summary": "seed", "description": "", "paths": sorted(files)})
    return repo.sha


@pytest.fixture(scope="module")
def hub():
    with FakeHub() as hub:
        seed_model_repo(hub, "fake-user/tiny", tiny_qwen3(), checkpoint="checkpoint-3")
        yield hub


def test_a_hub_id_downloads_the_root_model_once_and_records_its_revision(hub, tmp_path):
    with hub_env(hub, tmp_path):
        path = model_dir("fake-user/tiny")
        assert (path / "model.safetensors").read_bytes() == (tiny_qwen3() / "model.safetensors").read_bytes()
        assert not (path / "checkpoint-3").exists()  # a run's checkpoints (optimizer state) are not fetched
        fetched = [r for r in hub.requests if "/resolve/" in r[1]]
        assert model_dir("fake-user/tiny@" + "c" * 40) == path  # by commit: the same snapshot
        assert model_dir("fake-user/tiny") == path
        again = [r for r in hub.requests if "/resolve/" in r[1]]
        assert again == fetched  # downloaded once: the second and third resolve from the cache
        assert model_source("fake-user/tiny") == {
            "name": "fake-user/tiny",
            "repo": "fake-user/tiny",
            "revision": "c" * 40,
            "folder": None,
        }
        assert model_source(path)["revision"] == "c" * 40  # from the resolved directory too


def test_a_checkpoint_of_a_run_is_named_after_the_at(hub, tmp_path):
    with hub_env(hub, tmp_path):
        path = model_dir("fake-user/tiny@checkpoint-3")
        assert path.name == "checkpoint-3" and (path / "config.json").is_file()
        assert not (path / "optimizer.pt").exists()  # model files only
        assert model_source(path)["folder"] == "checkpoint-3"


def test_a_local_directory_wins_and_an_unknown_repo_names_the_fix(hub, tmp_path, monkeypatch):
    local = tmp_path / "fake-user" / "tiny"
    local.mkdir(parents=True)
    (local / "config.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    assert model_dir("fake-user/tiny") == Path("fake-user/tiny")  # a checkpoint directory of that spelling
    with hub_env(hub, tmp_path / "hf"), pytest.raises(ConfigError, match="no model repo 'fake-user/nothing'"):
        hub_model("fake-user/nothing")
    with pytest.raises(ConfigError, match="OWNER/NAME"):
        model_dir("not a model")


def test_a_repo_without_a_model_at_its_root_is_refused(hub, tmp_path):
    seed_model_repo(hub, "fake-user/only-checkpoints", tiny_qwen3())
    hub.repos[("model", "fake-user/only-checkpoints")].files = {
        f"checkpoint-1/{k}": v for k, v in hub.repos[("model", "fake-user/only-checkpoints")].files.items()
    }
    with hub_env(hub, tmp_path), pytest.raises(ConfigError, match="no config.json at its root"):
        model_dir("fake-user/only-checkpoints")


@pytest.mark.slow
def test_an_evaluation_serves_a_hub_model_and_records_its_revision(hub, tmp_path, suite):
    """`dagent eval --model OWNER/NAME`: the local engine process serves the downloaded model."""
    import json

    from dagent.eval.args import EvalArgs
    from dagent.eval.experiment import Arm, run_experiment

    with hub_env(hub, tmp_path / "hf"):
        run_experiment(
            suite,
            [Arm("hub", agent="tools", model="fake-user/tiny")],
            tmp_path / "out",
            EvalArgs.of(preset="cpu", split="test", limit=1, workers=1, timeout_s=120),
        )
    summary = json.loads((tmp_path / "out" / "hub" / "summary.json").read_text())
    assert summary["model"] == {
        "name": "fake-user/tiny",
        "repo": "fake-user/tiny",
        "revision": "c" * 40,
        "folder": None,
    }
    assert summary["tasks"] == 1 and summary["ungraded"] == 0  # the engine answered: graded, right or wrong


@pytest.mark.slow
def test_sft_and_white_box_training_start_from_a_hub_model(hub, tmp_path, tiny_suite):  # noqa: F811
    """`jobs/sft_warmstart.py --model OWNER/NAME` and `dagent train whitebox --model OWNER/NAME`: the
    Hub model is what trains, and the run's provenance names its repo and revision."""
    import json
    import sys

    from dagent.jobargs import parse
    from dagent.tools.episode import close_all
    from dagent.train.whitebox.grpo import WhiteboxArgs, train_whitebox

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "jobs"))
    try:
        import sft_warmstart
    finally:
        sys.path.pop(0)
    suite_dir = tiny_suite.source  # programs that print their gold: demonstrations can be built
    with hub_env(hub, tmp_path / "hf"):
        sft = sft_warmstart.SFTArgs(
            model="fake-user/tiny",
            suite=str(suite_dir),
            split="train",
            tools="bash",
            n=2,
            max_steps=1,
            out=str(tmp_path / "sft"),
        )
        assert sft_warmstart.main(sft) == 0
        args = parse(
            WhiteboxArgs,
            [
                "--model",
                "fake-user/tiny",
                "--suite",
                str(suite_dir),
                "--split",
                "train",
                "--max-steps",
                "1",
                "--num-generations",
                "2",
                "--save-steps",
                "1",
                "--warmup-steps",
                "0",
                "--max-completion-length",
                "336",
                "--report-to",
                "none",
                "--force",
                "--out",
                str(tmp_path / "grpo"),
            ],
        )
        try:
            train_whitebox(args, echo=lambda _l: None)
        finally:
            close_all()
    stamped = json.loads((tmp_path / "grpo" / "checkpoint-1" / "provenance.json").read_text())
    assert stamped["model"]["repo"] == "fake-user/tiny" and stamped["model"]["revision"] == "c" * 40
    assert (tmp_path / "sft" / "final" / "config.json").is_file()
