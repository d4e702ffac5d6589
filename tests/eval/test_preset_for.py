"""`dagent eval --model CKPT` runs under the preset the checkpoint trained under (its provenance.json,
as the trainers stamp it), unless --preset says otherwise, and says which and why; before, train
defaulted to cpu and eval to gpu, so a default train-then-eval measured a checkpoint under other
conditions than it trained in (F47 caught it only at `eval compare`)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dagent.errors import ConfigError
from dagent.eval.args import DEFAULT_PRESET, preset_for
from dagent.provenance import STAMP_FILE
from dagent.recipes import PRESETS, preset_of


def stamped(folder: Path, kind: str, preset: str, **overrides) -> Path:
    """A run directory as the trainers leave it: provenance.json with the recipe record, and final/."""
    recipe = PRESETS[kind][preset](**overrides)
    record = {**asdict(recipe), "mode": "black-box sync"} if kind == "blackbox" else asdict(recipe)
    folder.mkdir(parents=True)
    (folder / STAMP_FILE).write_text(json.dumps({"recipe": record}, default=str))
    (folder / "final").mkdir()
    (folder / "final" / "config.json").write_text("{}")
    return folder


@pytest.mark.parametrize("kind, preset", [(k, p) for k in PRESETS for p in PRESETS[k]])
def test_each_presets_checkpoint_is_evaluated_under_that_preset(tmp_path, kind, preset):
    run = stamped(tmp_path / "run", kind, preset)
    for model in (run, run / "final"):  # the run's directory, or its final/ beside the stamped checkpoints
        got, why = preset_for(None, str(model))
        assert got == preset and "provenance.json" in why


def test_given_wins_an_unstamped_model_gets_the_default_and_disagreeing_arms_are_refused(tmp_path):
    cpu = stamped(tmp_path / "cpu", "whitebox", "cpu")
    gpu = stamped(tmp_path / "gpu", "whitebox", "gpu")
    assert preset_for("gpu", str(cpu))[0] == "gpu"
    assert preset_for(None, "smollm2-135m", None) == (DEFAULT_PRESET, preset_for(None)[1])
    with pytest.raises(ConfigError, match="different presets"):
        preset_for(None, str(cpu), str(gpu))


def test_a_run_that_overrode_its_conditions_names_no_preset(tmp_path):
    run = stamped(tmp_path / "run", "blackbox", "cpu", agent_steps=5)
    assert preset_of(json.loads((run / STAMP_FILE).read_text())["recipe"]) is None
    assert preset_for(None, str(run))[0] == DEFAULT_PRESET


def test_dagent_eval_says_which_preset_and_runs_the_arms_under_it(tmp_path, monkeypatch):
    import dagent.cli.app as app

    run = stamped(tmp_path / "run", "blackbox", "cpu")
    seen = {}
    monkeypatch.setattr(
        "dagent.cli.eval._run_arms", lambda arms, suite, target, args, **_: seen.setdefault("args", args) and 0
    )
    result = CliRunner().invoke(
        app.app, ["eval", "--agent", "pi", "--model", str(run / "final"), "--out", str(tmp_path / "out")]
    )
    assert result.exit_code == 0, result.output
    assert seen["args"].recipes.preset == "cpu"
    assert "preset cpu: from" in result.output and "provenance.json" in result.output
