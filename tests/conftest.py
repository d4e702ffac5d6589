"""Shared test configuration. Fakes live in the test files that need them."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> tuple[Path, dict]:
    """The bundled suite, built once per session from the real tables (slow: about a minute quiet,
    several under load): `(directory, build report)`."""
    from datasets_build.build import build_suite

    out = tmp_path_factory.mktemp("suite") / "build"
    return out, build_suite(out)
