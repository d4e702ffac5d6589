"""`dagent export harbor`: one Harbor task directory per task, generated and deterministic (F43),
sized from the task's measured peak (F18), its healthcheck failing on an empty input (F21), its
grader dagent's own modules byte for byte, its solution the reference program; and the push to a
Hub dataset repo in the layout `harbor run --repo` reads. No Harbor needed here (see test_harbor)."""

from __future__ import annotations

import filecmp
import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from huggingface_hub import HfApi

import dagent
from dagent.core.suite import TaskSuite
from dagent.harbor.export import (
    GRADER_MODULES,
    HEALTHCHECK_PATH,
    export_harbor,
    push_catalog,
    task_digest,
    verify_catalog,
)
from dagent.sandbox.base import Resources
from tests.factories import SOURCE, make_task
from tests.fake_hub import FakeHub

ROOT = Path(__file__).resolve().parents[2]
COUNT = "import pandas as pd\nprint(len(pd.read_csv('/workdir/input/t.csv')))\n"


@pytest.fixture
def suite(suite_dir) -> TaskSuite:
    """Two real tasks on the demo table: one sized 2 CPUs / 4 GB, one record task."""
    tasks = [
        make_task(0, gold="3", solution=COUNT, cpus=2, memory_mb=4096),
        make_task(
            1,
            level=3,
            answer_type="record",
            gold='{"rows": 3, "first_a": 1}',
            field_tolerances={"rows": (0.5, 0.0)},
            solution="import json\nimport pandas as pd\nd = pd.read_csv('/workdir/input/t.csv')\n"
            "print(json.dumps({'rows': len(d), 'first_a': int(d.a[0])}))\n",
        ),
    ]
    return TaskSuite(splits={"train": [], "test": tasks, "eval": []}, tables_root=suite_dir / "tables")


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.failure_mode("F43")
def test_two_exports_are_byte_identical_and_stale_tasks_are_removed(suite, tmp_path):
    export_harbor(suite, "test", tmp_path / "a")
    (tmp_path / "b" / "old.task").mkdir(parents=True)
    (tmp_path / "b" / "old.task" / "task.toml").write_text("left by an earlier export")
    export_harbor(suite, "test", tmp_path / "b")
    assert tree(tmp_path / "a") == tree(tmp_path / "b")
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["dataset.toml", "demo.t0", "demo.t1"]


@pytest.mark.failure_mode("F43")
def test_the_catalog_is_git_ignored_where_the_cli_writes_it_by_default():
    r = subprocess.run(["git", "check-ignore", "-q", "harbor_catalog/demo.t0/task.toml"], cwd=ROOT)
    assert r.returncode == 0, "harbor_catalog/ (the CLI's default --out) must be in .gitignore"


def test_the_grader_is_dagents_own_modules_byte_for_byte(suite, tmp_path):
    export_harbor(suite, "test", tmp_path)
    lib, package = tmp_path / "demo.t0" / "tests" / "lib" / "dagent", Path(dagent.__file__).parent
    for name in GRADER_MODULES:
        assert filecmp.cmp(lib / name, package / name, shallow=False), name
    assert filecmp.cmp(tmp_path / "demo.t0" / "tests" / "grader.py", package / "harbor" / "grader.py", shallow=False)


@pytest.mark.failure_mode("F18")
def test_task_toml_carries_the_measured_sizing_and_the_network_and_user_rules(suite, tmp_path):
    export_harbor(suite, "test", tmp_path, allowed_hosts=("capture.example.hf.space",))
    cfg = tomllib.loads((tmp_path / "demo.t0" / "task.toml").read_text())
    assert cfg["schema_version"] == "1.4" and cfg["task"]["name"] == "dagent/demo.t0"
    env = cfg["environment"]
    assert (env["cpus"], env["memory_mb"]) == (2, 4096)  # the task's own sizing, not 1 CPU / 1 GB
    assert env["storage_mb"] >= 1024
    assert env["network_mode"] == "allowlist" and env["allowed_hosts"] == ["capture.example.hf.space"]
    assert cfg["verifier"] == {"timeout_sec": 120.0, "environment_mode": "separate", "network_mode": "no-network"}
    assert cfg["agent"]["user"] == "agent" and cfg["artifacts"] == ["/workdir/answer.txt"]
    meta = cfg["metadata"]
    assert (meta["difficulty_tier"], meta["answer_type"], meta["tables"], meta["licences"]) == (
        "easy",
        "number",
        [SOURCE.table_id],
        [SOURCE.licence],
    )
    record = tomllib.loads((tmp_path / "demo.t1" / "task.toml").read_text())["metadata"]
    assert json.loads(record["field_tolerances"]) == {"rows": [0.5, 0.0]}
    assert (tmp_path / "demo.t0" / "instruction.md").read_text() == suite.tasks("test")[0].instruction + "\n"
    dockerfile = (tmp_path / "demo.t0" / "environment" / "Dockerfile").read_text()
    assert "COPY input/ /workdir/input/" in dockerfile and "pandas==" in dockerfile
    assert "tests/" not in dockerfile and "solution" not in dockerfile  # nothing hidden leaks in
    gold = json.loads((tmp_path / "demo.t1" / "tests" / "gold.json").read_text())
    assert gold["gold"] == '{"rows": 3, "first_a": 1}' and gold["field_tolerances"] == {"rows": [0.5, 0.0]}


def test_the_manifest_lists_every_task_with_its_content_digest(suite, tmp_path):
    export_harbor(suite, "test", tmp_path)
    manifest = tomllib.loads((tmp_path / "dataset.toml").read_text())
    assert manifest["dataset"]["name"] == "dagent/data-agent-harbor-test"
    digests = {t["name"]: t["digest"] for t in manifest["tasks"]}
    assert digests == {f"dagent/{n}": task_digest(tmp_path / n) for n in ("demo.t0", "demo.t1")}
    assert verify_catalog(tmp_path) == []


@pytest.mark.failure_mode("F43")
def test_a_hand_edited_or_stale_catalog_is_named(suite, tmp_path):
    export_harbor(suite, "test", tmp_path)
    (tmp_path / "demo.t0" / "tests" / "gold.json").write_text('{"gold": "4"}')  # a hand edit
    shutil.copytree(tmp_path / "demo.t1", tmp_path / "demo.t9")  # a task the manifest does not list
    assert verify_catalog(tmp_path) == [
        "demo.t9: not in dataset.toml",
        "demo.t0: files differ from the exported digest (hand-edited or stale): re-export",
    ]


def _sandbox_with(backend, task_dir: Path, *, stage: bool = True):
    sb = backend.create(Resources(cpus=1, memory_mb=1024))
    if stage:
        sb.stage({p.name: p for p in (task_dir / "environment" / "input").iterdir()})
    sb.write_file("/workdir/healthcheck.py", (task_dir / "environment" / "healthcheck.py").read_bytes())
    return sb


@pytest.mark.failure_mode("F21")
def test_the_healthcheck_fails_on_an_empty_or_missing_input_and_passes_on_the_tables(suite, backend, tmp_path):
    export_harbor(suite, "test", tmp_path)
    program = (tmp_path / "demo.t0" / "environment" / "healthcheck.py").read_text()
    assert "/workdir/input" in program and "'t.csv'" in program
    with _sandbox_with(backend, tmp_path / "demo.t0") as sb:
        assert sb.exec("python /workdir/healthcheck.py").exit_code == 0
    with _sandbox_with(backend, tmp_path / "demo.t0", stage=False) as sb:
        r = sb.exec("python /workdir/healthcheck.py")
        assert r.exit_code == 1 and "directory empty" in r.stderr
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with backend.create(Resources()) as sb:
        sb.stage({"t.csv": empty, "other.csv": tmp_path / "demo.t0" / "environment" / "input" / "t.csv"})
        sb.write_file("/workdir/healthcheck.py", program)
        r = sb.exec("python /workdir/healthcheck.py")
        assert r.exit_code == 1 and "empty file t.csv" in r.stderr
    assert HEALTHCHECK_PATH in (tmp_path / "demo.t0" / "task.toml").read_text()


def test_solve_sh_then_test_sh_grades_the_reference_program_correct(suite, backend, tmp_path):
    """The exported files alone, in a sandbox: solve.sh writes the answer, grader.py grades it."""
    export_harbor(suite, "test", tmp_path)
    for name in ("demo.t0", "demo.t1"):
        task_dir = tmp_path / name
        with _sandbox_with(backend, task_dir) as sb:
            sb.write_file("/workdir/solve.sh", (task_dir / "solution" / "solve.sh").read_bytes())
            assert sb.exec("bash /workdir/solve.sh").exit_code == 0
            answer = sb.read_file("/workdir/answer.txt")
        work = tmp_path / f"grade-{name}"
        work.mkdir()
        (work / "answer.txt").write_bytes(answer)
        r = subprocess.run(
            [
                sys.executable,
                "-I",
                str(task_dir / "tests" / "grader.py"),
                "--answer",
                str(work / "answer.txt"),
                "--gold",
                str(task_dir / "tests" / "gold.json"),
                "--out",
                str(work),
            ],
            capture_output=True,
            text=True,
        )
        assert r.returncode == 0, r.stderr
        assert json.loads((work / "reward.json").read_text())["reward"] == 1.0, (name, answer)


def test_push_publishes_the_tasks_dir_layout_harbor_repo_reads(suite, tmp_path):
    export_harbor(suite, "test", tmp_path / "cat")
    with FakeHub(token="hf_fake") as hub:
        url = push_catalog(tmp_path / "cat", "me/data-agent-harbor-test", api=HfApi(endpoint=hub.url, token="hf_fake"))
        files = hub.files("me/data-agent-harbor-test", repo_type="dataset")
    assert url and "dataset.toml" in files and "README.md" in files
    # Harbor's implicit catalog: directories directly under tasks/ that hold a task.toml
    found = sorted(
        p.split("/")[1] for p in files if p.startswith("tasks/") and p.count("/") == 2 and p.endswith("/task.toml")
    )
    assert found == ["demo.t0", "demo.t1"]
    assert (
        files["tasks/demo.t0/environment/input/t.csv"]
        == (tmp_path / "cat" / "demo.t0" / "environment" / "input" / "t.csv").read_bytes()
    )


def test_push_without_an_export_names_the_command(tmp_path):
    from dagent.errors import ConfigError

    with pytest.raises(ConfigError, match="dagent export harbor"):
        push_catalog(tmp_path, "me/x", api=HfApi(endpoint="http://127.0.0.1:9", token="hf_fake"))


def test_the_cli_exports_a_split_with_its_options(suite_dir, tmp_path):
    from typer.testing import CliRunner

    from dagent.cli.app import app

    out = tmp_path / "cat"
    r = CliRunner().invoke(
        app,
        [
            "export",
            "harbor",
            "--suite",
            str(suite_dir),
            "--split",
            "test",
            "--out",
            str(out),
            "--allow-host",
            "capture.example.org",
            "--base-image",
            "python:3.11-slim@sha256:" + "0" * 64,
        ],
    )
    assert r.exit_code == 0, r.output
    assert "2 Harbor tasks of split 'test'" in r.output
    assert "capture.example.org" in (out / "demo.t100" / "task.toml").read_text()
    assert (out / "demo.t100" / "environment" / "Dockerfile").read_text().startswith("FROM python:3.11-slim@sha256:")
    assert verify_catalog(out) == []
