"""The capture tests' engines and proxy (tests/capture/engines.py has the backends): `engine` runs
each test taking it against dagent's local engine and a real vLLM, started once for the package."""

from __future__ import annotations

from typing import Any

import pytest

from dagent.capture import CaptureServer
from tests.capture.engines import PINNED, LocalBackend, VllmBackend


@pytest.fixture(scope="package", params=["local", pytest.param("vllm", marks=[pytest.mark.engine, pytest.mark.slow])])
def engine(request: Any, tmp_path_factory: Any) -> Any:
    """The engine behind the proxy: dagent's local engine, or a real vLLM (tests/capture/engines.py)."""
    backend = LocalBackend() if request.param == "local" else VllmBackend(tmp_path_factory.mktemp("vllm"))
    yield backend
    backend.close()


@pytest.fixture()
def steer(engine: Any) -> Any:
    yield engine.steer
    engine.steer(None)


@pytest.fixture()
def capture(engine: Any) -> Any:
    with CaptureServer(engine.url, sampling=PINNED, admin_token="admin-secret") as server:
        yield server
