"""`dagent suite validate`: a clean suite passes; each planted problem is caught with its own message,
and bad input (missing columns, unreadable or non-UTF-8 files, unknown answer types) never crashes."""

from __future__ import annotations

from pathlib import Path

import pytest

from dagent.suites.check import expected_atol, validate_suite
from tests.factories import TABLE, make_task


def row(i, split_offset=0, **kw):
    fields = dict(
        instruction=f"Q{split_offset + i}: how many rows does /workdir/input/t.csv have? "
        "Write only the value to /workdir/answer.txt.",
        gold="3",
        solution="import pandas as pd\nprint(len(pd.read_csv('/workdir/input/t.csv')))\n",
        template_id=f"tpl{split_offset + i}",
    )
    fields.update(kw)
    return make_task(split_offset + i, **fields).to_row()


def write(root: Path, splits: dict[str, list[dict]], *, table: bytes = TABLE.encode()) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    (root / "data").mkdir(parents=True)
    (root / "tables" / "demo").mkdir(parents=True)
    (root / "tables" / "demo" / "t.csv").write_bytes(table)
    for split, rows in splits.items():
        pq.write_table(pa.Table.from_pylist(rows), root / "data" / f"{split}-00000-of-00001.parquet")
    return root


def clean() -> dict[str, list[dict]]:
    return {"train": [row(0), row(1)], "test": [row(0, 10)], "eval": [row(0, 20)]}


def checks(report) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for p in report.problems:
        out.setdefault(p.check, []).append(p.message)
    return out


def test_a_clean_suite_has_no_problems_and_its_oracle_passes(tmp_path, backend):
    report = validate_suite(write(tmp_path / "s", clean()), oracle=True, backend=backend)
    assert report.ok, report.lines()
    assert report.oracle_run == 4 and report.lines()[-1] == "no problems"


@pytest.mark.parametrize(
    "plant,check,words",
    [
        (
            lambda s: s["test"].append({**row(5), "instruction": s["train"][0]["instruction"], "gold": "4"}),
            "conflict",
            "golds ['3', '4'] (F11)",
        ),
        (
            lambda s: s["eval"].append(
                {**row(7), "instruction": s["train"][1]["instruction"], "gold": "3", "template_id": "other"}
            ),
            "duplicate",
            "one instruction 2 times",
        ),
        (
            lambda s: s["test"].append({**row(8), "template_id": s["train"][0]["template_id"]}),
            "disjoint",
            "in test, train",
        ),
        (
            lambda s: s["train"].append(row(9, data_files=["demo/missing.csv"])),
            "file",
            "tables/demo/missing.csv: missing",
        ),
        (lambda s: s["train"].append(row(11, gold="three")), "gold", "does not grade correct against itself"),
        (
            lambda s: s["train"].append(
                row(
                    12,
                    instruction="Mean of a? Round to two decimal places. Write only the value to /workdir/answer.txt.",
                    gold="3.00",
                    atol=0.0,
                )
            ),
            "tolerance",
            "atol 0 does not fit the rounding asked for (between 0.005 and 0.01)",
        ),
        (lambda s: s["train"].append({**row(13), "answer_type": "table"}), "schema", "answer_type"),
        (lambda s: s["train"].append(row(15, data_files=["../t.csv"])), "file", "path must stay under tables/"),
        (lambda s: s["test"].append({**row(16), "task_id": "demo.t0"}), "duplicate", "task_id used 2 times"),
        (lambda s: s["train"].append({k: v for k, v in row(14).items() if k != "gold"}), "schema", "gold"),
    ],
)
def test_each_planted_problem_is_caught_by_its_check(tmp_path, plant, check, words):
    splits = clean()
    plant(splits)
    found = checks(validate_suite(write(tmp_path / "s", splits)))
    assert any(words in m for m in found.get(check, [])), found


def test_a_table_that_is_not_utf8_is_a_file_problem_not_a_crash(tmp_path):
    report = validate_suite(write(tmp_path / "s", clean(), table=b"a,b\n\xff\xfe,1\n"))
    assert checks(report)["file"][0].endswith("not UTF-8 text (byte 4)")


def test_an_unreadable_shard_and_an_empty_directory_are_layout_problems(tmp_path):
    root = write(tmp_path / "s", clean())
    (root / "data" / "test-00000-of-00001.parquet").write_bytes(b"not parquet")
    found = checks(validate_suite(root))
    assert any(m.startswith("cannot read") for m in found["layout"])
    assert "no data/ directory" in checks(validate_suite(tmp_path))["layout"][0]


def test_the_oracle_check_reports_wrong_programs_and_skips_missing_ones(tmp_path, backend):
    splits = clean()
    splits["train"][0]["solution"] = "print(4)"
    splits["train"][1]["solution"] = ""
    report = validate_suite(write(tmp_path / "s", splits), oracle=True, backend=backend)
    assert [p.where for p in report.problems if p.check == "oracle"] == ["train[0] demo.t0"]
    assert (report.oracle_run, report.oracle_skipped) == (3, 1)
    assert "1 tasks without a program skipped (not checked)" in "\n".join(report.lines())


@pytest.mark.parametrize(
    "text,span",
    [
        ("Round to two decimal places.", (0.005, 0.01)),
        ("rounded to 3 decimal places", (0.0005, 0.001)),
        ("Give the nearest whole number.", (0.0, 1.0 - 1e-9)),
        ("How many?", None),
    ],
)
def test_the_rounding_asked_for_sets_the_atol_span(text, span):
    assert expected_atol(text) == (pytest.approx(span) if span else None)


def test_the_cli_exits_nonzero_with_the_list(tmp_path):
    from typer.testing import CliRunner

    from dagent.cli.app import app

    splits = clean()
    splits["train"].append(row(11, gold="three"))
    result = CliRunner().invoke(app, ["suite", "validate", str(write(tmp_path / "s", splits))])
    assert result.exit_code == 1 and "[gold] train[2] demo.t11" in result.output
