"""`dagent eval regrade`: recorded answers re-graded with the current grader, every flip listed.

tests/fixtures/regrade/records.jsonl holds answers to the demo suite's tasks (tests/factories.py)
with the verdicts the grader gave when the fixture was written: placeholders, a shell command, an
empty answer, none at all, a hedge, prose, out-of-tolerance numbers, yes/no. A grader change that
flips any of them fails here, naming the answer, until the fixture is renewed on purpose.
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from dagent.cli.app import app
from dagent.eval.regrade import regrade
from dagent.eval.report import load_records

FIXTURE = Path(__file__).parents[1] / "fixtures" / "regrade" / "records.jsonl"


def test_the_current_grader_keeps_every_recorded_verdict(suite):
    records = load_records(FIXTURE)
    report = regrade(records, suite)
    assert report.flips == (), "\n".join(report.lines())
    assert report.regraded == len(records) - 1 and report.renoted == 0
    assert report.skipped == {"ungraded (an infrastructure cause decided, not the grader)": 1}
    assert {r.outcome for r in records} == {"correct", "wrong", "ungraded"}


def test_a_verdict_the_grader_no_longer_gives_is_listed_with_its_answer(suite):
    records = load_records(FIXTURE)
    placeholder = next(i for i, r in enumerate(records) if r.answer == "<value>")
    records[placeholder] = records[placeholder].model_copy(
        update={"outcome": "correct", "correct": True, "method": "exact", "note": ""}
    )
    long = records[0].model_copy(update={"answer": "9" * 500, "sample": 50})  # clipped: not re-graded
    report = regrade([*records, long], suite)
    (flip,) = report.flips
    assert flip.answer == "<value>" and flip.before[0] == "correct" and flip.after[:2] == ("wrong", "reject")
    assert "placeholder" in flip.after[2] and "correct -> wrong" in report.lines()[-1]
    assert report.skipped["answer clipped in the record (>= 500 characters)"] == 1


def test_the_command_prints_the_flips_and_fails_on_them_when_asked(suite_dir, tmp_path):
    runner = CliRunner()
    ok = runner.invoke(app, ["eval", "regrade", str(FIXTURE), "--suite", str(suite_dir), "--fail-on-flip"])
    assert ok.exit_code == 0, ok.output
    assert "0 verdict(s) flip" in ok.output and "grader: recorded unknown, current" in ok.output
    lines = FIXTURE.read_text().splitlines()
    row = json.loads(lines[1])
    row.update(outcome="correct", correct=True)
    (tmp_path / "records.jsonl").write_text("\n".join([lines[0], json.dumps(row), *lines[2:]]) + "\n")
    bad = runner.invoke(app, ["eval", "regrade", str(tmp_path), "--suite", str(suite_dir), "--fail-on-flip"])
    assert bad.exit_code == 1 and "1 verdict(s) flip" in bad.output and "'<value>'" in bad.output
