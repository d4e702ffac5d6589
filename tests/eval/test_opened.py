"""Which held-out tasks each result opened (dagent.eval.opened, F60): a reused task is disclosed in
the report with the figures on the fresh tasks beside it, and refused where fresh tasks were promised."""

from __future__ import annotations

import json

import pytest

from dagent.errors import ConfigError
from dagent.eval.learning_report import published, write_report
from dagent.eval.opened import Ledger, Opening, ReuseError, main
from tests.eval.test_learning_report import publish

EARLY = Opening(result="small run", split="eval:easy", task_ids=("t1", "t2", "t3"), how="limit 3, task seed 0")


def test_a_ledger_names_what_each_earlier_result_opened(tmp_path):
    ledger = Ledger().add(EARLY).add(Opening(result="big run", split="eval:easy", task_ids=("t0", "t1", "t2", "t9")))
    assert ledger.reused(["t0", "t1", "t2", "t9"], result="big run") == {"small run": ["t1", "t2"]}
    assert ledger.fresh(["t0", "t1", "t2", "t9"], result="big run") == ["t0", "t9"]
    text = ledger.disclosure("big run", "eval:easy", ["t0", "t1", "t2", "t9"])
    assert (
        "4 eval:easy tasks; 2 of them had been opened before (2 by small run)" in text and "2 were opened here" in text
    )
    assert "no earlier result" in ledger.disclosure("small run", "eval:easy", ["t1", "t2", "t3"])
    assert Ledger.read(ledger.write(tmp_path / "opened.json")) == ledger
    with pytest.raises(ConfigError, match="already has a result named"):
        ledger.add(EARLY)
    with pytest.raises(ConfigError, match="reuse cannot be ruled out"):
        Ledger.read(tmp_path / "missing.json")


@pytest.mark.failure_mode("F60")
def test_a_run_promised_on_fresh_tasks_refuses_one_an_earlier_result_opened(tmp_path, capsys):
    ledger = Ledger().add(EARLY)
    ledger.require_fresh("eval:medium", ["m1", "m2"])  # nothing opened: passes
    with pytest.raises(ReuseError, match=r"F60: 1 of these 3 eval:easy tasks .*small run: 1 \(e.g. t2\)"):
        ledger.require_fresh("eval:easy", ["t7", "t2", "t8"])
    path = ledger.write(tmp_path / "opened.json")
    records = tmp_path / "records.jsonl"
    records.write_text("".join(json.dumps({"task_id": t}) + "\n" for t in ("t3", "t4")))
    with pytest.raises(ReuseError, match="F60"):
        main(["check", str(records), "--ledger", str(path), "--split", "eval:easy"])
    records.write_text("t4\nt5\n")
    main(["check", str(records), "--ledger", str(path), "--split", "eval:easy"])
    assert "2 eval:easy tasks, none opened" in capsys.readouterr().out


@pytest.mark.failure_mode("F60")
def test_the_report_discloses_reuse_and_reads_the_fresh_tasks_apart(tmp_path):
    root = publish(tmp_path / "runs" / "lr-x", {0: ("grpo", "control"), 1: ("grpo", "control")})
    run = published(root)
    ids = [f"t{i}" for i in range(60)]
    ledger = (
        Ledger()
        .add(Opening(result="earlier", split="test", task_ids=tuple(ids[:20])))
        .add(Opening(result="lr-x", split="test", task_ids=tuple(ids)))
    )
    text = write_report(run, tmp_path / "report", title="t", ledger=ledger, result_name="lr-x").read_text()
    assert "lr-x opened 60 test tasks; 20 of them had been opened before (20 by earlier)" in text
    assert "On the 40 tasks opened here first" in text and "| GRPO - warm start |" in text
    silent = write_report(run, tmp_path / "report2", title="t").read_text()
    assert "not ruled out" in silent and "opened here first" not in silent


@pytest.mark.failure_mode("F60")
def test_a_result_that_opened_its_tasks_twice_says_so_in_its_report(tmp_path):
    """A run lost with its machine and restarted opens its tasks again under the same result name: no
    earlier result opened them, so the disclosure alone reads "fresh"; the report quotes the ledger's own
    entry for the result, which says what was read the first time."""
    root = publish(tmp_path / "runs" / "lr-x", {0: ("grpo", "control")})
    run = published(root)
    how = "opened first by a lost attempt whose warm start pass@1 (10.2%) was read; restarted, opened again"
    ledger = Ledger().add(Opening(result="lr-x", split="test", task_ids=tuple(f"t{i}" for i in range(60)), how=how))
    text = write_report(run, tmp_path / "report", title="t", ledger=ledger, result_name="lr-x").read_text()
    assert "no earlier result had opened" in text
    assert f"The ledger on lr-x: {how}" in text
