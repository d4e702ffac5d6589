"""Harbor itself (0.26, in .venv-harbor) on exported tasks of the real suite: `harbor lint` is clean,
`harbor sync` agrees with our digests, and `harbor run` with dagent's sandbox provider (no Docker)
scores the oracle 100% on 30 test tasks, grades a wrong answer 0.0, leaves an ungradable task
without a reward (F32) and stops an empty input before the agent (F21).

Not covered here: Docker builds of the exported Dockerfiles (no Docker daemon on these machines;
the provider reads the Dockerfile instead, see dagent.harbor.provider), and `harbor run --repo`
against the real Hub (no network).
"""

from __future__ import annotations

import random
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from dagent.core.suite import TaskSuite
from dagent.harbor.export import export_harbor
from dagent.harbor.job import harbor_binary, read_job, run_harbor

pytestmark = pytest.mark.harbor
try:
    HARBOR = harbor_binary()
except Exception as e:  # noqa: BLE001 - the reason is the skip message
    pytest.skip(str(e), allow_module_level=True)

LINT_SAMPLE = 120  # tasks linted per split, spread across tables (linting all 7,206: `harbor lint` on an export)


@pytest.fixture(scope="module")
def real(built):
    from dagent.suites.sources import load_tasks

    return load_tasks(built[0])


def spread(tasks, n: int, seed: int = 0) -> list[str]:
    """n task ids drawn across tables (round robin over tables in a seeded order)."""
    by_table: dict[str, list[str]] = {}
    for t in tasks:
        by_table.setdefault(t.table_ids[0], []).append(t.task_id)
    rng = random.Random(seed)
    tables = sorted(by_table)
    rng.shuffle(tables)
    picked: list[str] = []
    while len(picked) < n and any(by_table.values()):
        for table in tables:
            if by_table[table] and len(picked) < n:
                picked.append(by_table[table].pop(rng.randrange(len(by_table[table]))))
    return picked


# every rule but unpinned-image (a digest cannot be looked up offline: `--base-image` takes one)
STRICT = ["--select", "ALL", "--ignore", "unpinned-image"]


def lint(dirs: list[Path], *rules: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(HARBOR), "lint", *rules, *map(str, dirs)], capture_output=True, text=True)


@pytest.mark.slow
def test_harbor_lint_is_clean_on_the_exported_splits(real, tmp_path):
    dirs = []
    for split in ("test", "eval"):  # whole splits exported, a seeded spread across tables linted
        report = export_harbor(real, split, tmp_path / split)
        assert report.tasks == len(real.tasks(split))
        assert len(list((tmp_path / split).glob("*/task.toml"))) == report.tasks
        dirs += [tmp_path / split / t for t in sorted(spread(real.tasks(split), LINT_SAMPLE))]
    keep = set(spread(real.tasks("train"), LINT_SAMPLE))
    sample = TaskSuite(
        splits={"train": [t for t in real.tasks("train") if t.task_id in keep]}, tables_root=real.tables_root
    )
    export_harbor(sample, "train", tmp_path / "train")
    dirs += sorted(tmp_path / "train" / t for t in keep)
    r = lint(dirs)  # Harbor's default rules
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    r = lint(dirs[:LINT_SAMPLE], *STRICT)  # all rules but one, on the test split's sample
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    # and lint can fail: a root agent is a finding
    planted = dirs[0]
    config = (planted / "task.toml").read_text().replace('user = "agent"\n', "")
    (planted / "task.toml").write_text(config)
    r = lint([planted], *STRICT)
    assert r.returncode == 1 and "root-agent" in r.stdout


def test_harbor_sync_agrees_with_our_digests(real, tmp_path):
    export_harbor(real, "test", tmp_path, limit=5)
    before = (tmp_path / "dataset.toml").read_text()
    r = subprocess.run([str(HARBOR), "sync", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    after = tomllib.loads((tmp_path / "dataset.toml").read_text())
    assert {t["name"]: t["digest"] for t in after["tasks"]} == {
        t["name"]: t["digest"] for t in tomllib.loads(before)["tasks"]
    }


@pytest.mark.slow
def test_the_oracle_through_harbor_run_scores_100_percent_on_30_test_tasks(real, tmp_path):
    ids = spread(real.tasks("test"), 30)
    export_harbor(real, "test", tmp_path / "cat")
    for p in (tmp_path / "cat").iterdir():
        if p.is_dir() and p.name not in ids:
            shutil.rmtree(p)
    trials = run_harbor(tmp_path / "cat", tmp_path / "jobs", agent="oracle", concurrency=2)
    assert sorted(t.task for t in trials) == sorted(ids)
    bad = [t for t in trials if t.reward != 1.0]
    assert not bad, bad[:3]


@pytest.mark.failure_mode("F32")
def test_wrong_ungradable_and_empty_input_tasks_through_harbor_run(real, tmp_path):
    wrong, ungradable, empty = [t for t in real.tasks("test") if t.answer_type == "number"][:3]
    cat = tmp_path / "cat"
    export_harbor(TaskSuite(splits={"test": [wrong, ungradable, empty]}, tables_root=real.tables_root), "test", cat)
    # a wrong answer: the reference program's output replaced
    solve = cat / wrong.task_id / "solution" / "solve.sh"
    solve.write_text(solve.read_text().replace("python /tmp/solution.py >", "echo -123456789 >"))
    # a task bug: a gold the grader cannot parse
    gold = cat / ungradable.task_id / "tests" / "gold.json"
    gold.write_text(gold.read_text().replace(f'"gold": "{ungradable.gold}"', '"gold": "not a number"'))
    # an empty input directory
    for f in (cat / empty.task_id / "environment" / "input").iterdir():
        f.unlink()
    results = {t.task: t for t in run_harbor(cat, tmp_path / "jobs", agent="oracle", concurrency=2)}
    assert (results[wrong.task_id].reward, results[wrong.task_id].correct) == (0.0, 0.0)
    bug = results[ungradable.task_id]
    assert bug.reward is None and bug.error and "Reward" in bug.error  # never 0.0 (F32)
    stopped = results[empty.task_id]
    assert stopped.reward is None and "directory empty" in stopped.error  # F21: before the agent
    assert len(read_job(next((tmp_path / "jobs").iterdir()))) == 3
