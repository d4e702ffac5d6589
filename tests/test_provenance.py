"""Provenance beside every number (project revision, library versions, grader digest, hardware,
suite digest) and void runs dropping out of tables."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from dagent.cli.app import app
from dagent.errors import ConfigError
from dagent.eval.report import load_records
from dagent.harness.oracle import OracleAgent
from dagent.harness.play import run_eval
from dagent.provenance import LIBRARIES, grader_digest, provenance, void_reason, void_run


def test_provenance_names_revision_libraries_grader_hardware_and_suite(suite):
    p = provenance(suite)
    assert set(p) == {"project", "libraries", "grader", "hardware", "suite", "recorded_at"}
    assert set(p["libraries"]) == set(LIBRARIES) and p["libraries"]["pandas"]
    assert p["project"]["revision"] is None or len(p["project"]["revision"]) == 40
    assert p["grader"] == grader_digest() and len(p["grader"]) == 16
    assert p["hardware"]["cpus"] >= 1 and p["hardware"]["python"]
    assert p["suite"]["digest"] and p["suite"]["tasks"] == {b: len(suite.tasks(b)) for b in suite.bases}


def test_the_suite_digest_changes_with_a_gold(suite_dir, tmp_path):
    import shutil

    from dagent.suites.sources import load_tasks

    copy = tmp_path / "s"
    shutil.copytree(suite_dir, copy)
    before = provenance(load_tasks(copy))["suite"]["digest"]
    import pyarrow.parquet as pq

    f = next((copy / "data").glob("test-*.parquet"))
    rows = pq.read_table(f).to_pylist()
    rows[0]["gold"] = rows[0]["gold"] + "0"  # one gold changed
    import pyarrow as pa

    pq.write_table(pa.Table.from_pylist(rows), f)
    assert provenance(load_tasks(copy))["suite"]["digest"] != before


def test_an_evaluation_records_it_and_a_void_run_drops_out(suite, backend, tmp_path):
    out = tmp_path / "run"
    run_eval(suite, "train", OracleAgent(), backend, workers=1, out_dir=out)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["provenance"]["grader"] == grader_digest()
    assert len(load_records(out)) == len(suite.tasks("train"))
    with pytest.raises(ConfigError, match="reason"):
        void_run(out, " ")
    void_run(out, "the grader had a tolerance bug")
    assert void_reason(out / "records.jsonl") == "the grader had a tolerance bug"
    with pytest.raises(ConfigError, match="is void \\(the grader had a tolerance bug\\)"):
        load_records(out)
    assert load_records(out, include_void=True)
    other = tmp_path / "other"
    run_eval(suite, "train", OracleAgent(), backend, workers=1, out_dir=other)
    r = CliRunner().invoke(app, ["eval", "compare", str(out), str(other)])
    assert isinstance(r.exception, ConfigError) and "is void" in str(r.exception)
    r = CliRunner().invoke(
        app, ["eval", "compare", str(out), str(other), "--include-void", "--out", str(tmp_path / "cmp")]
    )
    assert r.exit_code == 0, r.output


def test_results_md_carries_provenance(suite, backend, tmp_path):
    from dagent.eval.experiment import write_arms

    records, _ = run_eval(suite, "train", OracleAgent(), backend, workers=1)
    write_arms(tmp_path, "train", {"oracle": records}, baseline=None, provenance=provenance(suite))
    md = (tmp_path / "results.md").read_text()
    assert "## Provenance" in md and f"- grader: {grader_digest()}" in md and "pandas" in md
    assert json.loads((tmp_path / "oracle" / "summary.json").read_text())["provenance"]["suite"]["digest"]
