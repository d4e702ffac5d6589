"""Shared test configuration. Fakes live in the test files that need them."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from dagent.core.suite import TaskSuite
from tests.factories import write_suite

pytest_plugins = ["pytester"]
STARTED = pytest.StashKey[float]()


def pytest_collection_modifyitems(config, items):
    """`failure_mode("Fnn")` takes only a code registered in dagent/failures.py."""
    from dagent.failures import FAILURE_MODES

    bad = sorted(
        {
            f"{item.nodeid}: {mark.args!r}"
            for item in items
            for mark in item.iter_markers("failure_mode")
            if len(mark.args) != 1 or mark.args[0] not in FAILURE_MODES
        }
    )
    if bad:
        raise pytest.UsageError("failure_mode markers name codes not in dagent/failures.py:\n  " + "\n  ".join(bad))


def pytest_sessionstart(session):
    session.config.stash[STARTED] = time.time()


def pytest_collection_finish(session):
    """The fresh machines (tests/test_fresh_machine.py) start as soon as the run knows it has them:
    their ~13 minutes of downloads and builds overlap the rest of the run instead of following it."""
    if not session.config.option.collectonly and any(
        item.path.name == "test_fresh_machine.py" for item in session.items
    ):
        from tests.test_fresh_machine import MACHINES, start_machines

        session.config.stash[MACHINES] = start_machines()


def pytest_sessionfinish(session):
    from tests.test_fresh_machine import MACHINES, stop_machines

    stop_machines(session.config.stash.get(MACHINES, {}))


@pytest.fixture(scope="session")
def built(tmp_path_factory, pytestconfig) -> tuple[Path, dict]:
    """The bundled suite built from the real tables by this checkout's code, once per session (about
    five minutes): `(directory, build report)`. Where no bundled suite exists yet (a fresh machine, as
    in CI) it is built there, so the commands that build it on first use find it; one that a command
    built during this session is taken as is; one from before the session may come from older code
    and is left alone (this build goes to a temporary directory)."""
    from dagent.suites.sources import default_suite_dir
    from datasets_build.build import build_suite

    out = default_suite_dir()
    if (out / "data").is_dir():
        report = out / "build_report.json"
        if report.is_file() and report.stat().st_mtime >= pytestconfig.stash[STARTED]:
            return out, json.loads(report.read_text())
        out = tmp_path_factory.mktemp("suite") / "build"
    return out, build_suite(out)


@pytest.fixture(scope="session")
def suite_dir(tmp_path_factory) -> Path:
    return write_suite(tmp_path_factory.mktemp("suite"))


@pytest.fixture(scope="session")
def solvable_suite(tmp_path_factory) -> TaskSuite:
    """The demo suite with real (pandas) reference programs for its row-count and sum tasks, so the
    first task's oracle is correct: what a remote backend's image check runs (F51)."""
    from dagent.suites.sources import load_tasks
    from tests.factories import write_solvable_suite

    return load_tasks(write_solvable_suite(tmp_path_factory.mktemp("solvable")))


@pytest.fixture(scope="session")
def suite(suite_dir) -> TaskSuite:
    from dagent.suites.sources import load_tasks

    return load_tasks(suite_dir)


@pytest.fixture(scope="session")
def backend(tmp_path_factory):
    from dagent.sandbox.local import LocalBackend

    return LocalBackend(base_dir=tmp_path_factory.mktemp("sandboxes"))
