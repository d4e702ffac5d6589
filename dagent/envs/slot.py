"""The one runtime a server process serves, for both loops' servers.

OpenEnv builds an environment class with no arguments, per session, so the class cannot be handed
its runtime: it finds it here. `configure` sets it where the app is built (`create_app`);
`current` gives it, or fails naming how to build the app with one."""

from __future__ import annotations

from typing import Generic, TypeVar

from dagent.errors import ConfigError

T = TypeVar("T")


class RuntimeSlot(Generic[T]):
    def __init__(self, missing: str) -> None:
        self._runtime: T | None = None
        self._missing = missing  # the error's message: how to build the app with a runtime

    def configure(self, runtime: T) -> T:
        self._runtime = runtime
        return runtime

    def current(self) -> T:
        if self._runtime is None:
            raise ConfigError(self._missing)
        return self._runtime
