"""Held-out pass@1 per checkpoint read back from `dagent eval watch` directories (dagent.eval.watch_curves):
the warm start at step 0, checkpoints by number (not by name order), an arm with no graded task kept
out of the line, a directory with nothing evaluated refused, and the records a sitting published of
a watch (seed-S/watch/POINT.jsonl) read to the same points as the watch's own directory."""

from __future__ import annotations

import pytest

from dagent.errors import ConfigError
from dagent.eval import watch_curves
from dagent.eval.experiment import scores_json
from dagent.eval.scoring import task_scores
from dagent.eval.watch_curves import figure, main, points
from tests.eval.test_scoring import rec


def _arm(root, name, outcomes):
    (root / name).mkdir(parents=True)
    records = [rec(f"t{i}", o) for i, o in enumerate(outcomes)]
    (root / name / "scores.json").write_text(scores_json({name: task_scores(records, arm=name)}))


def test_points_are_read_by_step_with_their_intervals(tmp_path):
    watch = tmp_path / "watch-0"
    _arm(watch, "checkpoint-10", ["correct"] * 3 + ["wrong"])
    _arm(watch, "baseline", ["correct"] + ["wrong"] * 3)
    _arm(watch, "checkpoint-5", ["correct", "correct", "wrong", "wrong"])
    _arm(watch, "checkpoint-8", ["ungraded"] * 4)  # nothing graded: no pass@1
    (watch / "notes").mkdir()  # not an arm
    pts = points(watch)
    assert [p.step for p in pts] == [0, 5, 8, 10]
    assert [p.pass1 for p in pts] == [0.25, 0.5, None, 0.75]
    assert pts[2].graded_tasks == 0 and pts[2].ci is None
    assert pts[0].ci[0] <= 0.25 <= pts[0].ci[1] and pts[3].ci[0] <= 0.75 <= pts[3].ci[1]


def test_the_plot_holds_one_line_per_seed(tmp_path, capsys, monkeypatch):
    for seed, outcomes in ((0, ["correct", "wrong"]), (1, ["wrong", "wrong"])):
        _arm(tmp_path / f"watch-{seed}", "baseline", ["wrong", "wrong"])
        _arm(tmp_path / f"watch-{seed}", "checkpoint-3", outcomes)
    out = tmp_path / "curves.png"
    drawn = []
    monkeypatch.setattr(watch_curves, "figure", lambda series, **kw: drawn.append(series) or figure(series, **kw))
    # each directory followed by its label, as scripts/learning_run.sh passes them
    main(
        [
            str(tmp_path / "watch-0"),
            "--label",
            "seed 0",
            str(tmp_path / "watch-1"),
            "--label",
            "seed 1",
            "--out",
            str(out),
        ]
    )
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and str(out) in capsys.readouterr().out
    (series,) = drawn
    ax = figure(series).axes[0]
    lines = {c.get_label(): list(c.lines[0].get_ydata()) for c in ax.containers}  # one errorbar per seed
    assert lines == {"seed 0": [0.0, 0.5], "seed 1": [0.0, 0.0]}  # each seed's own pass@1 by step
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["seed 0", "seed 1"]


def test_nothing_evaluated_and_mismatched_labels_are_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="eval watch"):
        points(tmp_path / "empty")
    _arm(tmp_path / "w", "baseline", ["correct"])
    with pytest.raises(ConfigError, match="one per directory"):
        main([str(tmp_path / "w"), "--label", "a", "--label", "b", "--out", str(tmp_path / "x.png")])


def test_published_watch_records_read_to_the_points_the_watch_scored(tmp_path):
    """A published seed-S/watch folder holds each point's records only (scripts/learning_run.sh publish):
    scored here, they give the pass@1 and interval the watch's own scores.json held."""
    watch, published = tmp_path / "watch-0", tmp_path / "seed-0" / "watch"
    published.mkdir(parents=True)
    for name, outcomes in (
        ("baseline", ["correct", "wrong", "wrong", "wrong"]),
        ("checkpoint-16", ["correct", "correct", "correct", "wrong"]),
        ("checkpoint-8", ["correct", "correct", "wrong", "ungraded"]),
    ):
        _arm(watch, name, outcomes)
        records = [rec(f"t{i}", o) for i, o in enumerate(outcomes)]
        (published / f"{name}.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in records))
    (published / "notes.jsonl").write_text("")  # not a point
    assert points(published) == points(watch)
    assert [(p.step, p.pass1) for p in points(published)] == [(0, 0.25), (8, 2 / 3), (16, 0.75)]
