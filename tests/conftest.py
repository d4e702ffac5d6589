"""Shared test configuration. Fakes live in the test files that need them."""

from __future__ import annotations

from pathlib import Path

import pytest

from dagent.core.suite import TaskSuite
from tests.factories import write_suite

pytest_plugins = ["pytester"]


def pytest_collection_modifyitems(config, items):
    """`failure_mode("Fnn")` takes only a code registered in dagent/failures.py."""
    from dagent.failures import FAILURE_MODES

    bad = sorted({f"{item.nodeid}: {mark.args!r}" for item in items for mark in item.iter_markers("failure_mode")
                  if len(mark.args) != 1 or mark.args[0] not in FAILURE_MODES})
    if bad:
        raise pytest.UsageError("failure_mode markers name codes not in dagent/failures.py:\n  " + "\n  ".join(bad))


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> tuple[Path, dict]:
    """The bundled suite, built once per session from the real tables (slow: about a minute quiet,
    several under load): `(directory, build report)`."""
    from datasets_build.build import build_suite

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
