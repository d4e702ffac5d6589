"""Fixtures shared by the sandbox tests."""

from __future__ import annotations

import shutil

import pytest

from tests.factories import write_suite


@pytest.fixture()
def open_suite(tmp_path_factory):
    """A suite every local user can read (0755 all the way down from a 0755 directory)."""
    root = tmp_path_factory.getbasetemp().parent.parent / f"dagent-open-suite-{id(object())}"
    write_suite(root)
    for p in [root, *root.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    yield root
    shutil.rmtree(root, ignore_errors=True)
