"""The learning protocol's report (dagent.eval.learning_report) from records published by sittings on
different machines: a seed pools only with both arms, a pooled result carries the effect its design
could detect or no verdict (F56), what made the records differently is said above the figures, and
arms measured under other episode conditions are refused (F47), published or not."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest

from dagent.errors import DagentError
from dagent.eval.learning_report import comparisons, published, sitting, write_report
from dagent.eval.report import recorded_conditions
from tests.eval.test_scoring import planted

CONDITIONS = {"loop": "white-box", "temperature": 0.8, "step_cap": 4}


def write(path: Path, records, **made) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(r.model_dump_json() + "\n" for r in records))
    about = {
        "warm_start_sha256": "abc",
        "bf16_native": False,
        "conditions": CONDITIONS,
        "sizes": {"EVAL_LIMIT": "60"},
        **made,
    }
    path.with_suffix(".json").write_text(json.dumps(about))


def publish(root: Path, seeds: dict[int, tuple[str, ...]], made_of=None) -> Path:
    """warm.jsonl, and per seed the arms named: GRPO 20 points above the warm start, the control at it."""
    warm, _ = planted(n_tasks=60, flip=0.2, seed=1)
    write(root / "warm.jsonl", warm)
    for s, arms in seeds.items():
        a, grpo = planted(n_tasks=60, flip=0.2, seed=10 + s)
        records = {"grpo": grpo, "control": a}
        for arm in arms:
            write(
                root / f"seed-{s}" / f"{arm}.jsonl", records[arm], **{"steps": 40, **(made_of or {}).get((s, arm), {})}
            )
    return root


def test_a_seed_with_one_arm_is_pending_and_left_out_of_the_comparisons_that_need_both(tmp_path):
    run = published(publish(tmp_path / "runs", {0: ("grpo", "control"), 1: ("grpo", "control"), 2: ("grpo",)}))
    assert run.seeds == [0, 1, 2] and run.complete(("grpo", "control")) == [0, 1]
    found = comparisons(run)
    assert found["pool-grpo-vs-control"].seeds == 2 and found["pool-grpo-vs-warm"].seeds == 3
    assert found["pool-control-vs-warm"].seeds == 2
    vs_control = found["pool-grpo-vs-control"]
    assert vs_control.diff == pytest.approx(0.2) and vs_control.detectable is not None  # F56: two seeds give one
    text = write_report(run, tmp_path / "report", title="Learning, measured").read_text()
    assert "Pending, so outside every comparison that needs them: seed 2 (permuted-reward control)" in text
    assert "| permuted-reward control | " in text and text.count("pending |") == 1
    assert "the design could detect about" in text  # the verdict beside the pooled figure
    assert (tmp_path / "report" / "pool-grpo-vs-control" / "pooled.png").is_file()
    assert "differs" not in text  # every record says the same made it


def test_one_seed_states_no_verdict_without_the_effect_it_could_detect(tmp_path):
    run = published(publish(tmp_path / "runs", {0: ("grpo", "control")}))
    text = write_report(run, tmp_path / "report", title="t").read_text()
    assert "+20.0%" in text and "verdict: none stated" in text and "F56" in text
    assert "could detect about" not in text


def test_records_made_differently_are_said_above_the_figures(tmp_path):
    root = publish(
        tmp_path / "runs",
        {0: ("grpo", "control"), 1: ("grpo", "control")},
        {(1, "control"): {"warm_start_sha256": "other", "steps": 32}},
    )
    text = write_report(published(root), tmp_path / "report", title="t").read_text()
    head = text.split("## pass@1")[0]
    assert "warm_start_sha256 differs" in head and "control seed 1" in head
    assert "steps differ" in head and "control seed 1 32" in head


def test_published_arms_under_other_episode_conditions_are_refused(tmp_path):
    root = publish(
        tmp_path / "runs", {0: ("grpo", "control")}, {(0, "grpo"): {"conditions": {**CONDITIONS, "temperature": 1.0}}}
    )
    assert recorded_conditions(root / "seed-0" / "grpo.jsonl")["temperature"] == 1.0
    with pytest.raises(DagentError, match="F47"):
        comparisons(published(root))


def test_a_sittings_own_output_reports_the_arms_it_finished(tmp_path):
    out = tmp_path / "lr"
    warm, _ = planted(n_tasks=40, flip=0.2, seed=1)
    control, grpo = planted(n_tasks=40, flip=0.25, seed=2)
    for name, records in (("eval-warm", warm), ("eval-grpo-0", grpo), ("eval-control-0", control)):
        (out / name / "final").mkdir(parents=True)
        (out / name / "final" / "records.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in records))
    (out / ".done").mkdir()
    for name in ("eval-warm", "eval-grpo-0"):
        (out / ".done" / name).touch()  # the control's evaluation was cut short: not finished
    run = sitting(out, [0])
    assert [(e.arm, e.seed) for e in run.arms] == [("grpo", 0)]
    text = write_report(run, out, title="t", about=["Sizes: planted."]).read_text()
    assert "Sizes: planted." in text and "seed 0 (permuted-reward control)" in text
    assert "GRPO - warm start" in text and "GRPO - permuted-reward control" not in text


def test_a_control_the_design_never_planned_is_not_pending_and_one_seed_says_what_it_alone_detects(tmp_path):
    """The powered black-box run trains the permuted control at seed 0 only (CONTROL_SEEDS=0, written
    before any evaluation): seeds 1 and 2 are not "pending", and GRPO - control, read at one seed,
    states no verdict but what that seed's tasks alone could detect (the training seeds' spread unknown)."""
    root = publish(tmp_path / "runs", {0: ("grpo", "control"), 1: ("grpo",), 2: ("grpo",)})
    about = json.loads((root / "warm.json").read_text())
    about["sizes"]["CONTROL_SEEDS"] = "0"  # as learning_run.sh publishes it
    (root / "warm.json").write_text(json.dumps(about))
    run = published(root)
    assert run.control_seeds == (0,) and not run.planned(1, "control") and run.planned(1, "grpo")
    text = write_report(run, tmp_path / "report", title="t").read_text()
    assert "Pending" not in text
    assert "By design no permuted-reward control at seeds 1, 2 (CONTROL_SEEDS=0)" in text
    assert text.count("not in the design") == 2 and "pending |" not in text
    # the truth from the planted data, not from pooled(): 12 of 60 tasks gained (planted flip 0.2), the
    # rest tied, so the per-task differences are 12 ones and 48 zeros
    d = [1.0] * 12 + [0.0] * 48
    z = statistics.NormalDist().inv_cdf(0.975) + statistics.NormalDist().inv_cdf(0.8)
    alone = z * statistics.stdev(d) / math.sqrt(len(d))
    vs_control = comparisons(run)["pool-grpo-vs-control"]
    assert vs_control.seeds == 1 and vs_control.detectable is None  # no verdict from one seed (F56)
    assert vs_control.within_seed_detectable == pytest.approx(alone)
    section = text.split("## GRPO - permuted-reward control")[1].split("## ")[0]
    assert "verdict: none stated: one seed" in section and f"detects about {alone * 100:.1f} points" in section
    # without CONTROL_SEEDS among the published sizes every seed's control is expected: pending
    about["sizes"].pop("CONTROL_SEEDS")
    (root / "warm.json").write_text(json.dumps(about))
    assert (
        "Pending, so outside every comparison that needs them: seed 1 (permuted-reward control)"
        in write_report(published(root), tmp_path / "report2", title="t").read_text()
    )


def test_a_run_with_only_its_warm_start_published_reports_that_figure_and_no_empty_table(tmp_path):
    """A restarted run publishes its warm start's evaluation before any arm: the report gives that pass@1
    (counted here from the planted records themselves) instead of a table whose seed columns are empty."""
    root = publish(tmp_path / "runs", {})
    rows = [json.loads(line) for line in (root / "warm.jsonl").read_text().splitlines()]
    rate = sum(bool(r["correct"]) for r in rows) / len(rows)
    text = write_report(published(root), tmp_path / "report", title="t").read_text()
    assert f"every seed's baseline): {rate:.1%}" in text and "No trained arm evaluated yet." in text
    assert "| arm |  |" not in text
