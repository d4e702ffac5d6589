"""`dagent suite import`: a questions file written here over REAL tables (palmerpenguins' two CSVs,
from the pinned PyPI package) becomes a suite that validates, loads with `load_tasks`, passes its
oracle, serves through the white-box server and grades correct and wrong submissions. Bad input is
listed line by line and nothing is written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dagent.suites.importer import SuiteImportError, assign_splits, import_suite

pd = pytest.importorskip("pandas")


@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> Path:
    import palmerpenguins

    src = Path(palmerpenguins.__file__).parent / "data"
    out = tmp_path_factory.mktemp("tables")
    for name in ("penguins.csv", "penguins-raw.csv"):
        shutil.copy(src / name, out / name)
    return out


def questions(tables: Path) -> list[dict]:
    df = pd.read_csv(tables / "penguins.csv")
    raw = pd.read_csv(tables / "penguins-raw.csv")
    gentoo = df[df.species == "Gentoo"]
    read = "import pandas as pd\ndf = pd.read_csv('/workdir/input/penguins.csv')\n"
    return [
        {
            "question": "How many penguins of the species Adelie are in the table?",
            "files": ["penguins.csv"],
            "gold": int((df.species == "Adelie").sum()),
            "id": "p.adelie_count",
            "solution": read + "print(int((df.species == 'Adelie').sum()))\n",
        },
        {
            "question": "What is the mean body mass in grams (column `body_mass_g`) of the Gentoo penguins? "
            "Round to one decimal place.",
            "files": ["penguins.csv"],
            "gold": round(float(gentoo.body_mass_g.mean()), 1),
            "id": "p.gentoo_mass",
            "solution": read + "print(round(float(df[df.species == 'Gentoo'].body_mass_g.mean()), 1))\n",
        },
        {
            "question": "For the Gentoo penguins, give their count and their median flipper length in mm.",
            "files": ["penguins.csv"],
            "id": "p.gentoo_record",
            "gold": {"count": int(len(gentoo)), "median_flipper_mm": float(gentoo.flipper_length_mm.median())},
        },
        {
            "question": "Is any penguin in the table from the island Torgersen heavier than 4500 g?",
            "files": ["penguins.csv"],
            "id": "p.torgersen_heavy",
            "answer_type": "bool",
            "gold": bool((df[df.island == "Torgersen"].body_mass_g > 4500).any()),
        },
        {
            "question": "How many rows does the raw penguin data have?",
            "files": ["penguins-raw.csv"],
            "gold": int(len(raw)),
            "id": "raw.rows",
            "tier": "easy",
            "solution": "import pandas as pd\nprint(len(pd.read_csv('/workdir/input/penguins-raw.csv')))\n",
        },
    ]


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


@pytest.fixture(scope="module")
def imported(tables, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("imp")
    out = root / "suite"
    result = import_suite(
        write_jsonl(root / "q.jsonl", questions(tables)), tables, out, test_fraction=0.2, eval_fraction=0.0
    )
    assert result.without_solution == 2
    return out


def test_the_imported_suite_validates_and_its_oracle_passes_where_programs_exist(imported, backend):
    from dagent.suites.check import validate_suite

    report = validate_suite(imported, oracle=True, backend=backend)
    assert report.ok, report.lines()
    assert (report.oracle_run, report.oracle_skipped) == (3, 2)


def test_it_loads_with_types_tiers_tolerances_and_disjoint_splits(imported):
    from dagent.suites.sources import load_tasks

    suite = load_tasks(str(imported))
    by_id = {t.task_id: (split, t) for split in suite.bases for t in suite.tasks(split)}
    assert set(by_id) == {"p.adelie_count", "p.gentoo_mass", "p.gentoo_record", "p.torgersen_heavy", "raw.rows"}
    split_of = {tid: s for tid, (s, _) in by_id.items()}
    assert len({split_of[t] for t in by_id if t.startswith("p.")}) == 1  # one table, one split
    assert split_of["raw.rows"] != split_of["p.adelie_count"]
    mass, record, heavy = by_id["p.gentoo_mass"][1], by_id["p.gentoo_record"][1], by_id["p.torgersen_heavy"][1]
    assert (mass.answer_type, mass.atol, mass.difficulty_tier) == ("number", 0.1, "easy")
    assert (record.answer_type, record.difficulty_tier) == ("record", "hard")
    assert "`count`, `median_flipper_mm`" in record.instruction and record.instruction.endswith("/workdir/answer.txt.")
    assert heavy.gold in ("yes", "no") and heavy.instruction.startswith(
        "The directory /workdir/input/ holds penguins.csv."
    )
    assert all(t.memory_mb >= 1024 and t.sources[0].package == "user" for _, t in by_id.values())


def test_it_serves_through_the_white_box_server_and_grades_both_ways(imported, backend):
    from dagent.envs.whitebox_client import WhiteBoxHTTP
    from dagent.envs.whitebox_server import create_app
    from dagent.suites.sources import load_tasks
    from tests.factories import LiveServer

    suite = load_tasks(str(imported))
    split, index, task = next(
        (s, i, t) for s in suite.bases for i, t in enumerate(suite.tasks(s)) if t.task_id == "p.gentoo_record"
    )
    gold = json.loads(task.gold)
    live = LiveServer(create_app(suite, backend=backend))
    try:
        http = WhiteBoxHTTP(live.url)
        for answer, correct in ((json.dumps(gold), True), (json.dumps({**gold, "count": gold["count"] + 1}), False)):
            episode = http.reset(split, index)["episode_id"]
            listing = http.call_tool(episode, "bash", {"command": "ls input"})
            assert listing.output.strip() == "penguins.csv"
            http.call_tool(episode, "submit_solution", {"answer": answer})
            summary = http.finish(episode)
            assert summary["correct"] is correct, summary
        assert "count: " in summary["note"] and "1 of 2 fields wrong" in summary["note"]
    finally:
        live.stop()


def test_bad_input_is_listed_by_line_and_nothing_is_written(tables, tmp_path):
    good = questions(tables)[0]
    rows = [
        good,
        "{not json",
        {"question": "q"},
        {**good, "id": "x", "files": ["nope.csv"]},
        {**good, "id": "y", "tier": "extreme"},
        {**good, "color": "red"},
        {**good, "id": "z", "answer_type": "table"},
        {**good, "gold": 999, "id": "w"},
        {**good, "id": "v", "level": "hard"},
        {**good, "id": "u", "answer_type": "record"},
        {**good, "id": "t", "files": ["../penguins.csv"]},
        {**good, "id": "s", "files": ["/etc/passwd"]},
    ]
    path = write_jsonl(tmp_path / "q.jsonl", rows)
    with path.open("ab") as fh:
        fh.write(b'{"question": "\xff"}\n')
    with pytest.raises(SuiteImportError) as e:
        import_suite(path, tables, tmp_path / "out")
    text = str(e.value)
    for words in (
        "line 2: not JSON",
        "line 3: missing files, gold",
        "line 4: file nope.csv not found",
        "line 5: tier 'extreme'",
        "line 6: unknown fields ['color']",
        "line 7: answer_type",
        "line 13: not UTF-8",
        "(F11)",
        "line 9: invalid literal",
        "line 10: a record's gold",
        "line 11: '../penguins.csv' must be a relative path",
        "line 12: '/etc/passwd' must be",
    ):
        assert words in text, (words, text)
    assert not (tmp_path / "out").exists()


def test_groups_sharing_a_file_stay_in_one_split():
    from tests.factories import make_task

    tasks = [
        make_task(i, data_files=(f"t{i % 5}.csv",) + ((f"t{(i + 1) % 5}.csv",) if i == 0 else ()), instruction=f"q{i}")
        for i in range(20)
    ]
    splits = assign_splits(tasks, test_fraction=0.2, eval_fraction=0.2)
    where = {f: s for s, items in splits.items() for t in items for f in t.data_files}
    for s, items in splits.items():
        for t in items:
            assert all(where[f] == s for f in t.data_files)
    assert sum(map(len, splits.values())) == 20 and splits["train"]
