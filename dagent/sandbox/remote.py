"""What the cloud sandboxes (E2B, Hugging Face) share: open/closed state, the default command
timeout, absolute-path checks, staging by upload (retried once) and kill-on-close.

A backend module supplies `_run` (one command -> ExecResult), `_upload` (one file) and the SDK
calls; everything around them lives here once.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dagent.errors import SandboxError
from dagent.sandbox.base import WORKDIR, ExecResult, Resources, Sandbox
from dagent.sandbox.staging import stage_remote

STAGE_TIMEOUT_S = 600.0  # uploads and the staging check: the SDKs' 60 s defaults cut large tables short
_LOG = logging.getLogger(__name__)


class RemoteSandbox(Sandbox):
    label = "remote"  # "E2B" / "HF" in messages
    ends_when = "when its provider ends it"  # what happens if kill() fails

    sdk_sandbox: Any
    resources: Resources
    id: str
    _closed: bool = False

    @abc.abstractmethod
    def _run(self, command: str, *, timeout_s: float, env: Mapping[str, str] | None, cwd: str) -> ExecResult:
        """Run one command; SDK failures raise SandboxError, command failures are data."""

    @abc.abstractmethod
    def _upload(self, src: Path, dest: str) -> None:
        """Upload one host file to an absolute sandbox path."""

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxError(f"{self.label} sandbox {self.id} is closed: create a new one with backend.create()")

    def _check_path(self, path: str) -> None:
        self._check_open()
        if not path.startswith("/"):
            raise SandboxError(f"{path!r} is not an absolute sandbox path: use e.g. {WORKDIR}/{path}")

    def exec(
        self,
        command: str,
        *,
        timeout_s: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> ExecResult:
        self._check_open()
        timeout = self.resources.timeout_s if timeout_s is None else timeout_s
        return self._run(command, timeout_s=timeout, env=env, cwd=cwd or WORKDIR)

    def stage(self, files: Mapping[str, Path]) -> None:
        self._check_open()
        stage_remote(self, files, self._upload, attempts=2, timeout_s=STAGE_TIMEOUT_S)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.sdk_sandbox.kill()  # ends the sandbox/job; an SDK close() would only drop its client
        except Exception as e:
            _LOG.warning("could not kill %s sandbox %s (it ends %s): %s", self.label, self.id, self.ends_when, e)
