"""`dagent reproduce`: stages that stop with their cause and a rerun line, the smokes on a suite with
real reference programs, and the receipts computed from what stages write (a real tiny checkpoint
trained here: optimizer state present, weights changed, restored to identical tensors)."""

from __future__ import annotations

import json
import shutil

import pytest

from dagent.errors import ConfigError
from dagent.reproduce.checkpoints import checkpoint_receipt
from dagent.reproduce.pipeline import Reproduction
from dagent.reproduce.profiles import Profile
from dagent.reproduce.receipts import checks_for, validation_markdown
from dagent.reproduce.stages import StageError
from tests.factories import write_solvable_suite


@pytest.fixture(scope="module")
def solvable(tmp_path_factory):
    return str(write_solvable_suite(tmp_path_factory.mktemp("solvable")))


def test_a_failed_stage_stops_the_run_with_its_cause_and_the_command_that_reruns_from_it(
    tmp_path, solvable, monkeypatch
):
    lines: list[str] = []
    run = Reproduction(tmp_path, Profile.named("cpu", "tiny-qwen3"), suite=solvable, echo=lines.append)

    def broken(self, stage):
        raise RuntimeError("the engine fell over")

    monkeypatch.setattr(Reproduction, "stage_smoke_whitebox", broken)
    with pytest.raises(StageError) as e:
        run.run()
    assert "stage smoke-whitebox failed: RuntimeError: the engine fell over" in str(e.value)
    assert f"--out {tmp_path} --suite {solvable} --from smoke-whitebox" in str(e.value)
    assert lines[0] == "[1/11] suite ..." and lines[1].startswith("[1/11] suite ok in ")
    saved = json.loads((tmp_path / "stages.json").read_text())
    assert saved["suite"]["status"] == "ok" and saved["smoke-whitebox"]["status"] == "failed"
    with pytest.raises(ConfigError, match="stage smoke-whitebox has not completed"):
        Reproduction(tmp_path, Profile.named("cpu", "tiny-qwen3"), suite=solvable, echo=lines.append).run("eval-base")


def test_stage_commands_run_from_the_project_with_a_relative_out(tmp_path, monkeypatch):
    # `--out runs/reproduce` (the README's) once reached the stages' commands as a relative path while
    # they ran from the package directory: the Harbor export landed in dagent/runs/ and the jobs/
    # scripts were not found
    import sys

    from dagent.reproduce.pipeline import ROOT
    from dagent.reproduce.stages import Stage

    monkeypatch.chdir(tmp_path)
    run = Reproduction("runs/r", Profile.named("cpu", "tiny-qwen3"), echo=lambda _l: None)
    assert run.out == tmp_path / "runs" / "r"
    run._cmd(Stage("x"), [sys.executable, "-c", "import os; print(os.getcwd())"], "cwd.log")
    assert (run.out / "logs" / "cwd.log").read_text().strip() == str(ROOT)
    assert (ROOT / "jobs" / "sft_warmstart.py").is_file() and (ROOT / "dagent" / "reproduce" / "pipeline.py").is_file()


@pytest.mark.slow
def test_the_white_box_smoke_plays_the_reference_program_through_the_servers_tools(tmp_path, solvable):
    run = Reproduction(tmp_path, Profile.named("cpu", "tiny-qwen3"), suite=solvable, echo=lambda _l: None)
    stages = run.run(stop="smoke-whitebox")
    receipt = stages["smoke-whitebox"].receipt
    assert receipt["outcome"] == "correct" and receipt["reward"] > 1.0 and receipt["tool_calls"] == 1
    assert stages["suite"].receipt["tasks"] == {"train": 4, "test": 2, "eval": 2}
    assert checks_for("smoke-whitebox", receipt, "ok")[0][1] is True


def train_tiny(out, steps: int, lr: float):
    """A real transformers Trainer run of the tiny Qwen3 on a few random rows, checkpointed."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

    from dagent.engine.models import tiny_qwen3

    model = AutoModelForCausalLM.from_pretrained(str(tiny_qwen3()), dtype=torch.float32)
    rows = [{"input_ids": list(range(10 + i, 26 + i)), "labels": list(range(10 + i, 26 + i))} for i in range(8)]
    args = TrainingArguments(
        output_dir=str(out),
        max_steps=steps,
        per_device_train_batch_size=2,
        learning_rate=lr,
        save_strategy="steps",
        save_steps=steps,
        use_cpu=True,
        report_to="none",
        logging_steps=1,
        weight_decay=0.01,
    )
    Trainer(model=model, args=args, train_dataset=Dataset.from_list(rows)).train()
    return tiny_qwen3()


@pytest.mark.slow
def test_checkpoint_receipts_read_what_training_wrote(tmp_path):
    import copy

    import torch

    from dagent.reproduce.checkpoints import restores_identically

    start = train_tiny(tmp_path / "moved", 2, 1e-3)
    stale = tmp_path / "moved" / "checkpoint-12"  # an earlier, longer run's, its optimizer state deleted
    shutil.copytree(tmp_path / "moved" / "checkpoint-2", stale)
    (stale / "optimizer.pt").unlink()
    receipt = checkpoint_receipt(tmp_path / "moved", start, 2)
    assert receipt["checkpoint"].endswith("checkpoint-2") and receipt["state_present"] == {
        "optimizer.pt": True,
        "scheduler.pt": True,
        "trainer_state.json": True,
    }
    assert receipt["tensors_changed"] > 0 and receipt["tensors"] > 0
    assert receipt["restore"]["identical"] and receipt["restore"]["optimizer_tensors"] > 0
    assert receipt["restore"]["param_groups"] == 2  # the Trainer's decay / no-decay groups, rebuilt
    assert receipt["restore"]["optimizer_steps"] == [2] == [receipt["restore"]["global_step"]]
    # planted: an optimizer state from another step (stale), and moments landing on the wrong parameters
    ckpt = tmp_path / "moved" / "checkpoint-2"
    good = torch.load(ckpt / "optimizer.pt", map_location="cpu", weights_only=False)
    stale = copy.deepcopy(good)
    for state in stale["state"].values():
        state["step"] = torch.tensor(1.0)
    torch.save(stale, ckpt / "optimizer.pt")
    assert restores_identically(ckpt)["optimizer_steps"] == [1] and not restores_identically(ckpt)["identical"]
    swapped = copy.deepcopy(good)
    ids = [i for i, st in swapped["state"].items() if "exp_avg" in st]
    shapes = {i: swapped["state"][i]["exp_avg"].shape for i in ids}
    a, b = next((x, y) for x in ids for y in ids if shapes[x] != shapes[y])
    swapped["state"][a], swapped["state"][b] = swapped["state"][b], swapped["state"][a]
    torch.save(swapped, ckpt / "optimizer.pt")
    restored = restores_identically(ckpt)
    assert restored["misplaced"] and not restored["identical"]
    torch.save(good, ckpt / "optimizer.pt")
    checks = dict(checks_for("train-whitebox", receipt, "ok"))
    assert all(checks.values())
    # planted: a run that never moved, and a checkpoint without its optimizer state
    frozen = checkpoint_receipt(tmp_path / "frozen", train_tiny(tmp_path / "frozen", 1, 0.0), 1)
    assert frozen["tensors_changed"] == 0
    assert [ok for check, ok in checks_for("train-whitebox", frozen, "ok") if check.startswith("weights changed")] == [
        False
    ]
    with pytest.raises(StageError, match=r"no checkpoint-3 .*checkpoint-12.*checkpoint-2"):
        checkpoint_receipt(tmp_path / "moved", start, 3)  # a run that stopped short
    (tmp_path / "moved" / "checkpoint-2" / "optimizer.pt").unlink()
    with pytest.raises(StageError, match="optimizer.pt"):
        checkpoint_receipt(tmp_path / "moved", start, 2)


def test_validation_says_pass_fail_or_skipped_for_each_stage(tmp_path):
    from dagent.reproduce.stages import Stage

    stages = {
        "smoke-blackbox": Stage(
            "smoke-blackbox",
            "ok",
            12.0,
            "POST ...",
            {"outcome": "wrong", "cause": None, "exact_token_audit": "trained token 3 differs", "trained_tokens": 9},
        ),
        "smoke-harbor": Stage("smoke-harbor", "skipped", 0.1, "", {"skipped": "Harbor is not installed here"}),
        "sft": Stage("sft", "failed", 3.0, "python jobs/sft_warmstart.py", {}, cause="OOM"),
    }
    text = validation_markdown(Profile.named("cpu"), stages)
    assert "- FAIL: every trained token id is the engine's (exact-token audit: trained token 3 differs" in text
    assert "- SKIPPED: Harbor is not installed here" in text
    assert "## sft: failed (3 s)" in text and "cause: OOM" in text and "- FAIL: the stage completed" in text


def test_the_command_exits_non_zero_when_any_receipt_fails(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from dagent.cli import app as cli
    from dagent.reproduce.stages import Stage

    def ran(fail: int):
        def fake(*a, **kw):
            report = Stage("report")
            report.receipt = {"pass": 19, "fail": fail, "skipped": 0}
            return {"report": report}

        return fake

    monkeypatch.setattr(cli, "reproduce", ran(1))
    r = CliRunner().invoke(cli.app, ["reproduce", "--out", str(tmp_path)])
    assert r.exit_code == 1 and "1 receipt(s) FAIL" in r.output
    monkeypatch.setattr(cli, "reproduce", ran(0))
    assert CliRunner().invoke(cli.app, ["reproduce", "--out", str(tmp_path)]).exit_code == 0


@pytest.mark.parametrize("stage,folder", [("sft", "sft"), ("train_whitebox", "grpo"), ("sft_blackbox", "sft-blackbox")])
def test_a_rerun_training_stage_starts_from_an_empty_output(tmp_path, monkeypatch, stage, folder):
    """A stage's rerun replaces its output: a stale checkpoint-N of an earlier, longer run is gone before
    the command runs, so no receipt can read it."""
    from dagent.reproduce import pipeline
    from dagent.reproduce.stages import Stage

    rep = Reproduction(tmp_path / "out", Profile.named("cpu"))
    stale = rep.out / folder / "checkpoint-99"
    stale.mkdir(parents=True)
    seen = []

    def command(st, argv, log):  # what the stage's command would find, then what it writes
        seen.append(stale.exists())
        (rep.out / folder).mkdir(parents=True, exist_ok=True)
        for summary in ("sft_summary.json", "summary.json"):
            (rep.out / folder / summary).write_text("{}")

    monkeypatch.setattr(rep, "_cmd", command)
    monkeypatch.setattr(pipeline, "checkpoint_receipt", lambda *a, **kw: {})
    getattr(rep, f"stage_{stage}")(Stage(stage))
    assert seen == [False] and not stale.exists()
