"""E2B sandboxes (remote microVMs) through the `e2b` SDK: `pip install 'dagent[cloud]'`.

What E2B is, as the installed SDK (e2b 2.x) defines it:

- A sandbox is made from a TEMPLATE (a name or id), not an image. CPU and memory are fixed when the
  template is built, so `Resources.cpus` / `memory_mb` cannot resize a sandbox here: build the
  template at the size the tasks need (2 cpu / 4 GB fits a 0.3 GB table; 1 cpu / 1 GB was
  OOM-killed, F18). `Resources.timeout_s` is the default per-command timeout.
- Two different timeouts, named apart in this module:
  `lifetime_s` -> `Sandbox.create(timeout=...)`: seconds the whole sandbox lives;
  `timeout_s`  -> `commands.run(timeout=...)`: seconds one command's stream may stay open.
  The SDK defaults the command timeout to 60 s for EVERY command, background ones included, and
  an expired stream ends the command. So it is always passed: `timeout_s` for `exec`, `0` ("no
  limit", per the SDK's `timeout_to_ms`) for `exec_background`.
- Commands run as `user`, whose home is `/home/user` (F20). `/workdir` does not exist (and `/` is
  not writable by `user`) on the base template, so creation makes it as root and hands it over.
- `commands.run` raises `CommandExitException` for a non-zero exit and `TimeoutException` when the
  command timeout passes. Both become `ExecResult` data: 0 stays 0 (F17), a non-zero exit keeps
  its code, a timeout has no code and `timed_out`, and exit 137 (SIGKILL, also when envd reports it
  as a negative code with "signal: killed") is `oom_killed` (F18). Any other SDK error means the
  sandbox could not be used: `SandboxError`.
- Secrets reach the sandbox as `envs=` (create or exec), never inside a command string; logs say
  only whether each is present (F22). E2B_API_KEY goes to the SDK, never into the sandbox.
- Staging uploads each file with `files.write`, then checks the input dir; the whole step is
  retried once (`dagent.sandbox.staging.stage_remote`).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dagent.errors import ConfigError, MissingDependencyError, SandboxError
from dagent.sandbox import OutputBuffer, describe_secrets
from dagent.sandbox.base import INPUT_DIR, WORKDIR, ExecResult, Resources, SandboxBackend
from dagent.sandbox.e2b_template import DEFAULT_TEMPLATE
from dagent.sandbox.remote import STAGE_TIMEOUT_S, RemoteSandbox

__all__ = ["E2BBackend", "E2BSandbox"]

_LOG = logging.getLogger(__name__)
_HOME = "/home/user"  # E2B runs commands as `user` (F20); read it through sandbox_home("e2b")
_USER = "user"
SETUP_TIMEOUT_S = 60.0
ALL_TRAFFIC = "0.0.0.0/0"


def _import_e2b() -> Any:
    try:
        import e2b
    except ImportError as e:
        raise MissingDependencyError("e2b", extra="cloud", purpose="the E2B sandbox backend") from e
    return e2b


class E2BBackend(SandboxBackend):
    """Creates E2B sandboxes from one template.

    `env` is the process environment of every command in every sandbox: put secrets there
    (e.g. `secret_env(["HF_TOKEN"])`). `api_key` defaults to `$E2B_API_KEY`.
    """

    name = "e2b"
    remote = True
    home = _HOME
    label = "E2B"
    ends_when = "with its lifetime"

    def __init__(
        self,
        template: str = DEFAULT_TEMPLATE,
        *,
        lifetime_s: int = 900,
        env: Mapping[str, str] | None = None,
        api_key: str | None = None,
        allow_out: Sequence[str] = (),
        allow_base_template: bool = False,
    ) -> None:
        """`template`: dagent's (`dagent sandbox template e2b`); E2B's bare `base` is refused (no
        huggingface_hub, /workdir not writable by `user`: every task would start with an empty input
        and score as wrong) unless `allow_base_template`. `allow_out`: the only hosts a sandbox may
        reach (the capture URL's host, the bucket host); empty: no internet access at all."""
        self.sdk = _import_e2b()
        if template == "base" and not allow_base_template:
            raise ConfigError(
                "E2B's `base` template cannot run the tasks (no huggingface_hub for staging, "
                f"{WORKDIR} not writable by `{_USER}`): build dagent's with `dagent sandbox template "
                f"e2b --alias {DEFAULT_TEMPLATE}` and use it (the default)"
            )
        self.api_key = api_key or os.environ.get("E2B_API_KEY")
        if not self.api_key:
            raise ConfigError(
                "E2B_API_KEY is not set: export E2B_API_KEY=<your key from the E2B dashboard> "
                "or pass E2BBackend(api_key=...)"
            )
        self.template = template
        self.lifetime_s = int(lifetime_s)
        self.env = dict(env or {})
        self.allow_out = tuple(allow_out)

    def network_options(self) -> dict[str, Any]:
        """`Sandbox.create` keywords for the egress policy: nothing, or only `allow_out`."""
        if not self.allow_out:
            return {"allow_internet_access": False}
        return {"network": {"allow_out": list(self.allow_out), "deny_out": [ALL_TRAFFIC]}}

    def describe(self) -> str:
        egress = f"egress only to {', '.join(self.allow_out)}" if self.allow_out else "no internet access"
        return (
            f"e2b: remote microVM from template {self.template!r} (cpu and memory fixed by the "
            f"template), lifetime {self.lifetime_s} s, commands as `{_USER}` in {_HOME}, {egress}"
        )

    def create(self, resources: Resources | None = None) -> E2BSandbox:
        try:
            sdk_sandbox = self.sdk.Sandbox.create(
                template=self.template,
                timeout=self.lifetime_s,  # the sandbox's lifetime, not a command's
                envs=self.env or None,
                metadata={"app": "dagent"},
                api_key=self.api_key,
                **self.network_options(),
            )
        except Exception as e:
            raise SandboxError(f"could not create an E2B sandbox from template {self.template!r}: {e}") from e
        _LOG.info(
            "e2b sandbox %s from template %r, lifetime %d s; env: %s",
            getattr(sdk_sandbox, "sandbox_id", "?"),
            self.template,
            self.lifetime_s,
            describe_secrets(sorted(self.env), self.env),
        )
        return E2BSandbox(sdk_sandbox, self, resources or Resources())


class E2BSandbox(RemoteSandbox):
    """One live E2B sandbox; commands run with bash as `user`, cwd `/workdir`."""

    home = _HOME

    def __init__(self, sdk_sandbox: Any, backend: E2BBackend, resources: Resources) -> None:
        self.sdk_sandbox, self.sdk, self.resources = sdk_sandbox, backend.sdk, resources
        self.id = str(getattr(sdk_sandbox, "sandbox_id", "?"))
        self._closed = False
        setup = self._run(
            f"mkdir -p {INPUT_DIR} && chown -R {_USER}:{_USER} {WORKDIR}",
            timeout_s=SETUP_TIMEOUT_S,
            env=None,
            cwd="/",
            user="root",
        )
        if not setup.ok:
            self.close()
            raise SandboxError(
                f"could not prepare {WORKDIR} in E2B sandbox {self.id} "
                f"({setup.failure_cause}): {setup.stderr.strip()[-300:]}"
            )

    def _run(
        self, command: str, *, timeout_s: float, env: Mapping[str, str] | None, cwd: str, user: str | None = None
    ) -> ExecResult:
        out, err = OutputBuffer(), OutputBuffer()
        kwargs: dict[str, Any] = dict(
            envs=dict(env) if env else None,
            cwd=cwd,
            timeout=timeout_s,
            on_stdout=out,
            on_stderr=err,
            retain_output=False,
        )
        if user is not None:
            kwargs["user"] = user
        start = time.monotonic()
        try:
            code: int | None = self.sdk_sandbox.commands.run(command, **kwargs).exit_code
            error = None
        except self.sdk.CommandExitException as e:
            code, error = e.exit_code, e.error
        except self.sdk.TimeoutException:
            return ExecResult(
                exit_code=None,
                stdout=out.text(),
                stderr=err.text(),
                timed_out=True,
                duration_s=time.monotonic() - start,
            )
        except Exception as e:
            raise SandboxError(f"E2B sandbox {self.id}: could not run a command: {e}") from e
        if code is not None and code < 0 and "killed" in (error or ""):
            code = 137  # envd's "signal: killed": SIGKILL, as a shell would report it
        return ExecResult(
            exit_code=code,
            stdout=out.text(),
            stderr=err.text(),
            oom_killed=code == 137,
            duration_s=time.monotonic() - start,
        )

    def exec_background(self, command: str, *, env: Mapping[str, str] | None = None, cwd: str | None = None) -> int:
        """Start `command` without waiting and return its pid; it lives as long as the sandbox."""
        self._check_open()
        try:
            handle = self.sdk_sandbox.commands.run(
                command,
                background=True,
                envs=dict(env) if env else None,
                cwd=cwd or WORKDIR,
                timeout=0,
                retain_output=False,
            )
        except Exception as e:
            raise SandboxError(f"E2B sandbox {self.id}: could not start a background command: {e}") from e
        return int(handle.pid)

    def write_file(self, path: str, data: bytes | str) -> None:
        self._check_path(path)
        try:
            self.sdk_sandbox.files.write(path, data, request_timeout=STAGE_TIMEOUT_S)
        except Exception as e:
            raise SandboxError(f"E2B sandbox {self.id}: could not write {path}: {e}") from e

    def read_file(self, path: str) -> bytes | None:
        self._check_path(path)
        try:
            return bytes(self.sdk_sandbox.files.read(path, format="bytes", request_timeout=STAGE_TIMEOUT_S))
        except self.sdk.FileNotFoundException:
            return None
        except Exception as e:
            raise SandboxError(f"E2B sandbox {self.id}: could not read {path}: {e}") from e

    def _upload(self, src: Path, dest: str) -> None:
        try:
            with open(src, "rb") as f:
                self.sdk_sandbox.files.write(dest, f, request_timeout=STAGE_TIMEOUT_S)
        except Exception as e:
            raise SandboxError(f"E2B sandbox {self.id}: could not upload {src} to {dest}: {e}") from e
