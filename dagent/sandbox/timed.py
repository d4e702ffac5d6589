"""A backend whose sandboxes report their seconds to a `PhaseClock`: set-up (create, stage, close)
as `sandbox_setup`, the calls tools make (exec, read, write) as `sandbox_tools`."""

from __future__ import annotations

from typing import Any

from dagent.clock import PhaseClock
from dagent.sandbox.base import Sandbox, SandboxBackend


class TimedSandbox(Sandbox):
    """A sandbox whose calls are timed; everything else is the wrapped sandbox's."""

    def __init__(self, inner: Sandbox, clock: PhaseClock) -> None:
        self._inner, self._clock = inner, clock
        self.workdir, self.home = inner.workdir, inner.home  # class attributes: not reached by __getattr__

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def exec(self, *args: Any, **kwargs: Any) -> Any:
        with self._clock.phase("sandbox_tools"):
            return self._inner.exec(*args, **kwargs)

    def write_file(self, path: str, data: bytes | str) -> None:
        with self._clock.phase("sandbox_tools"):
            self._inner.write_file(path, data)

    def read_file(self, path: str) -> bytes | None:
        with self._clock.phase("sandbox_tools"):
            return self._inner.read_file(path)

    def stage(self, files: Any) -> None:
        with self._clock.phase("sandbox_setup"):
            self._inner.stage(files)

    def close(self) -> None:
        with self._clock.phase("sandbox_setup"):
            self._inner.close()


class TimedBackend(SandboxBackend):
    def __init__(self, inner: SandboxBackend, clock: PhaseClock) -> None:
        self._inner, self._clock = inner, clock
        self.name, self.remote, self.home = inner.name, inner.remote, inner.home

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def create(self, resources: Any = None) -> Sandbox:
        with self._clock.phase("sandbox_setup"):
            return TimedSandbox(self._inner.create(resources), self._clock)

    def describe(self) -> str:
        return self._inner.describe()
