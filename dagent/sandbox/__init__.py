"""Sandbox backends: `local` (the default), `e2b` and `hf` (Hugging Face sandboxes).

Each backend class is imported only when asked for, so a missing cloud SDK costs nothing until
that backend is used. The agent's home differs by backend (E2B runs as `user` in `/home/user`,
HF sandboxes and local ones as root in `/root`); the class attribute `home` is the one place
that says so and `sandbox_home()` reads it (F20). Anything that writes configuration for the
agent asks `sandbox_home()` (or a live sandbox's `.home`), never a literal path.

Secrets reach a sandbox only through its process environment; logs say whether one is present,
never what it is (`describe_secrets`, F22).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable, Mapping
from typing import Any

from dagent.errors import ConfigError
from dagent.sandbox.base import SandboxBackend

__all__ = ["BACKENDS", "OutputBuffer", "describe_secrets", "get_backend", "sandbox_home", "secret_env"]

BACKENDS: dict[str, tuple[str, str]] = {
    "local": ("dagent.sandbox.local", "LocalBackend"),
    "e2b": ("dagent.sandbox.e2b", "E2BBackend"),
    "hf": ("dagent.sandbox.hf", "HFBackend"),
}


def _backend_class(name: str) -> type[SandboxBackend]:
    try:
        module, cls = BACKENDS[name]
    except KeyError:
        raise ConfigError(f"unknown sandbox backend {name!r}: use one of {', '.join(BACKENDS)}") from None
    return getattr(importlib.import_module(module), cls)


def get_backend(name: str = "local", **kwargs: Any) -> SandboxBackend:
    """Construct the named backend (`local`, `e2b`, `hf`) with its own keyword arguments."""
    return _backend_class(name)(**kwargs)


def sandbox_home(backend_name: str) -> str:
    """The agent's home directory in sandboxes of `backend_name` (F20)."""
    return _backend_class(backend_name).home


def secret_env(names: Iterable[str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The named variables that are set (non-empty) in `environ` (default: this process's)."""
    environ = os.environ if environ is None else environ
    return {n: environ[n] for n in names if environ.get(n)}


def describe_secrets(names: Iterable[str], environ: Mapping[str, str] | None = None) -> str:
    """`HF_TOKEN: present, E2B_API_KEY: absent`: presence only, never a value (F22)."""
    environ = os.environ if environ is None else environ
    return ", ".join(f"{n}: {'present' if environ.get(n) else 'absent'}" for n in names) or "none"


class OutputBuffer:
    """Collects a command's streamed output up to `cap` characters, then notes what was cut."""

    def __init__(self, cap: int = 1 << 20) -> None:
        self.cap, self.parts, self.size, self.dropped = cap, [], 0, 0

    def __call__(self, chunk: str) -> None:
        room = self.cap - self.size
        if room > 0:
            self.parts.append(chunk[:room])
            self.size += min(len(chunk), room)
        self.dropped += max(len(chunk) - max(room, 0), 0)

    def text(self) -> str:
        note = f"\n[dagent: output truncated: {self.dropped} more characters]" if self.dropped else ""
        return "".join(self.parts) + note
