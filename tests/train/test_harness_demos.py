"""The black-box warm start's demonstrations (dagent.train.blackbox.harness_demos): the REAL harness (pi,
opencode) plays train tasks in the real sandbox against an engine replaying the reference program
as that harness's tool calls; the rows are the sync trainer's own conversion of what capture
recorded (exact-token audit), graded correct by the environment. Then the SFT job trains on them
(`jobs/sft_warmstart.py --harness pi`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dagent.errors import ConfigError
from dagent.train.blackbox.harness_demos import CLOSING, TITLE, build_harness_demonstrations, replay_command

ROOT = Path(__file__).resolve().parents[2]


def test_the_replayed_command_writes_the_answer_file_from_the_reference_program():
    command = replay_command("print(1)\nPY\nprint(2)\n")  # a program with the tag in it gets another tag
    assert command.splitlines()[0] == "python3 - > /workdir/answer.txt <<'PY_'"
    assert command.splitlines()[-2:] == ["PY_", "cat /workdir/answer.txt"]


def test_held_out_splits_and_unknown_harnesses_are_refused(solvable_suite):
    with pytest.raises(ConfigError, match="train split only"):
        build_harness_demonstrations(solvable_suite, "test", n=1, model_dir="unused")
    with pytest.raises(ConfigError, match="opencode or pi"):
        build_harness_demonstrations(solvable_suite, "train", n=1, model_dir="unused", harness="aider")


@pytest.mark.harness
@pytest.mark.slow
@pytest.mark.parametrize("harness", ["pi", "opencode"])
def test_demonstrations_are_the_harness_own_format_captured_token_exact(harness, solvable_suite, tmp_path):
    from transformers import AutoTokenizer

    from dagent.engine.models import tiny_qwen3

    if harness == "pi":
        from tests.harness.test_pi import need_pi

        need_pi()
    else:
        from tests.envs.test_blackbox import need_opencode

        need_opencode()
    path = tiny_qwen3()
    rows = build_harness_demonstrations(
        solvable_suite,
        "train",
        n=2,
        model_dir=path,
        harness=harness,
        served="tiny-qwen3",
        sandbox_dir=tmp_path / "sandboxes",
    )
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    assert len(rows) == 2 and len({r["task_id"] for r in rows}) == 2
    solutions = {t.task_id: t.solution for t in solvable_suite.tasks("train")}
    for row in rows:
        assert row["harness"] == harness and len(row["input_ids"]) == len(row["completion_mask"])
        trained = tokenizer.decode([t for t, m in zip(row["input_ids"], row["completion_mask"]) if m])
        context = tokenizer.decode([t for t, m in zip(row["input_ids"], row["completion_mask"]) if not m])
        # the agent's own turns are trained: the tool call running the reference program into the
        # answer file, and the closing sentence; the title call (opencode's auxiliary root) is not here
        assert replay_command(solutions[row["task_id"]]).splitlines()[0] in trained and CLOSING in trained
        assert TITLE not in trained and TITLE not in context
        # the harness's own prompt (system prompt, tool schemas) and the real tool result are context
        assert "<tool_response>" in context and '"name": "bash"' in context
        first = row["completion_mask"].index(1)
        assert sum(row["completion_mask"][first:]) < len(row["completion_mask"]) - first  # tool result masked


@pytest.mark.harness
@pytest.mark.slow
def test_the_sft_job_trains_on_pi_demonstrations(tmp_path, monkeypatch):
    import importlib.util
    import sys

    from tests.factories import write_solvable_suite
    from tests.harness.test_pi import need_pi

    need_pi()
    root = write_solvable_suite(tmp_path / "suite")
    spec = importlib.util.spec_from_file_location("sft_warmstart", ROOT / "jobs" / "sft_warmstart.py")
    sft_warmstart = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "sft_warmstart", sft_warmstart)  # its dataclass looks itself up there
    spec.loader.exec_module(sft_warmstart)

    args = sft_warmstart.SFTArgs(
        model="tiny-qwen3",
        suite=str(root),
        split="train",
        harness="pi",
        n=2,
        max_steps=1,
        batch_size=2,
        save_steps=1,
        out=str(tmp_path / "sft"),
        processes=1,
    )
    assert sft_warmstart.main(args) == 0
    summary = json.loads((tmp_path / "sft" / "sft_summary.json").read_text())
    assert summary["rows"] == 2 and summary["steps"] == 1 and summary["loss_tokens"] > 0
    assert (tmp_path / "sft" / "final" / "config.json").is_file()
