"""Hugging Face sandboxes through `huggingface_hub.Sandbox` (huggingface_hub 2.4.0, experimental).

What an HF sandbox is, as the installed SDK defines it:

- `Sandbox.create(image=..., flavor=..., idle_timeout=..., env=..., secrets=..., token=...)`
  starts one HF Job running the pinned `sbx-server`; commands and files go over HTTPS to it.
  Sizing is the FLAVOR (`cpu-basic` is 2 vCPU / 16 GB; `hf jobs hardware` lists the rest), and
  the image is any Docker image with `/bin/sh`. The default `python:3.12` carries no pandas:
  use an image with the data stack (`image=`, or `DAGENT_SANDBOX_IMAGE`; `dagent sandbox image hf
  OWNER/NAME` publishes ours as `hf.co/spaces/OWNER/NAME`, dagent.sandbox.hf_image); servers run one task's
  oracle through the backend before serving and refuse an image that cannot (F51).
- No lifetime knob: a job lives at most 24 h and `idle_timeout` ends an idle one. The SDK does
  not count a running foreground command as activity, so `idle_timeout_s` is raised to at least
  the command timeout plus a minute; it stays distinct from `timeout_s`, one command's limit.
- `run(cmd, env=, cwd=, timeout=, check=False)` returns `SandboxCommandResult(exit_code, signal,
  timed_out, ...)`; the server kills the command's process group at `timeout`. Mapped to
  `ExecResult`: 0 stays 0 (F17), timed out -> no code + `timed_out`, a signal -> 128+N, 137 ->
  `oom_killed` (F18). `background=True` takes no timeout at all.
- Commands run as root with home `/root` (F20), assuming the image's default user is root (as in
  `python:3.12`).
- Secrets are passed as `secrets=` (encrypted server-side, in every command's environment) and
  `forward_hf_token` stays False: HF_TOKEN authenticates the SDK and enters the sandbox only if
  the caller puts it in `env` (F22). Logs say presence only.
- Staging uploads each file with `files.upload` and checks the input dir, retried once.
- Egress is NOT limited: `Sandbox.create` in huggingface_hub 2.4 has no network setting (the job
  must reach its own control plane anyway), so an agent in an HF sandbox reaches the internet.
  The suite and golds are never in these sandboxes (only the task's tables are uploaded).
- opencode is not in the default image: the black-box harness installs it once per sandbox at
  run time (`dagent.harness.opencode.OpencodeHarness.ensure_installed`, exit codes decide).
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dagent import settings
from dagent.errors import ConfigError, MissingDependencyError, SandboxError
from dagent.sandbox import OutputBuffer, describe_secrets
from dagent.sandbox.base import INPUT_DIR, WORKDIR, ExecResult, Resources, SandboxBackend
from dagent.sandbox.remote import RemoteSandbox

__all__ = ["HFBackend", "HFSandbox"]

_LOG = logging.getLogger(__name__)
_HOME = "/root"  # HF sandboxes run as root (F20); read it through sandbox_home("hf")
_CPU_BASIC = (2, 16 * 1024)  # cpus, memory_mb of the default flavor
SETUP_TIMEOUT_S = 60.0
# huggingface_hub's own default: it has no pandas, so a server refuses it at start-up (its oracle
# check, F51) until DAGENT_SANDBOX_IMAGE names an image with the data stack
DEFAULT_IMAGE = "python:3.12"


def _import_hub() -> Any:
    try:
        import huggingface_hub
        import huggingface_hub.errors  # noqa: F401
        from huggingface_hub import Sandbox as _  # noqa: F401  (2.x only)
    except ImportError as e:
        raise MissingDependencyError(
            "huggingface_hub", purpose="Hugging Face sandboxes (huggingface_hub.Sandbox, 2.4.0 or later)"
        ) from e
    return huggingface_hub


class HFBackend(SandboxBackend):
    """Creates dedicated Hugging Face sandboxes (one HF Job each).

    `env` is the environment of every command (sent as encrypted job secrets): put secrets there.
    `token` defaults to `$HF_TOKEN`.
    """

    name = "hf"
    remote = True
    home = _HOME
    label = "HF"
    ends_when = "at its idle timeout"

    def __init__(
        self,
        image: str | None = None,
        *,
        flavor: str = "cpu-basic",
        idle_timeout_s: int = 900,
        env: Mapping[str, str] | None = None,
        token: str | None = None,
    ) -> None:
        self.sdk = _import_hub()
        self.token = token or os.environ.get("HF_TOKEN")
        if not self.token:
            raise ConfigError(
                "HF_TOKEN is not set: export HF_TOKEN=<a token with Jobs access> or pass HFBackend(token=...)"
            )
        # DAGENT_SANDBOX_IMAGE selects it where a server builds the backend from settings (a Space)
        self.image = image or settings.read("DAGENT_SANDBOX_IMAGE") or DEFAULT_IMAGE
        self.flavor, self.idle_timeout_s = flavor, int(idle_timeout_s)
        self.env = dict(env or {})

    def describe(self) -> str:
        return (
            f"hf: remote HF Job sandbox, image {self.image!r}, flavor {self.flavor}, "
            f"idle timeout {self.idle_timeout_s} s, commands as root in {_HOME}, egress not limited "
            "(huggingface_hub's Sandbox has no network setting)"
        )

    def create(self, resources: Resources | None = None) -> HFSandbox:
        res = resources or Resources()
        if self.flavor == "cpu-basic" and (res.cpus > _CPU_BASIC[0] or res.memory_mb > _CPU_BASIC[1]):
            raise ConfigError(
                f"the task asks for {res.cpus} cpu / {res.memory_mb} MB but flavor cpu-basic has "
                "2 vCPU / 16 GB: pass HFBackend(flavor=...) (see `hf jobs hardware`)"
            )
        idle_timeout_s = max(self.idle_timeout_s, math.ceil(res.timeout_s) + 60)
        try:
            sdk_sandbox = self.sdk.Sandbox.create(
                image=self.image,
                flavor=self.flavor,
                idle_timeout=idle_timeout_s,  # ends an idle sandbox; not a command's timeout
                secrets=self.env or None,
                labels={"app": "dagent"},
                forward_hf_token=False,
                token=self.token,
            )
        except Exception as e:
            raise SandboxError(
                f"could not create a Hugging Face sandbox from {self.image!r} ({self.flavor}): {e}"
            ) from e
        _LOG.info(
            "hf sandbox %s from %r (%s), idle timeout %d s; env: %s",
            getattr(sdk_sandbox, "id", "?"),
            self.image,
            self.flavor,
            idle_timeout_s,
            describe_secrets(sorted(self.env), self.env),
        )
        return HFSandbox(sdk_sandbox, self, res)


class HFSandbox(RemoteSandbox):
    """One live Hugging Face sandbox; commands run with bash as root, cwd `/workdir`."""

    home = _HOME

    def __init__(self, sdk_sandbox: Any, backend: HFBackend, resources: Resources) -> None:
        self.sdk_sandbox, self.resources = sdk_sandbox, resources
        self._hub_error = backend.sdk.errors.SandboxError
        self.id = str(getattr(sdk_sandbox, "id", "?"))
        self._closed = False
        setup = self._run(f"mkdir -p {INPUT_DIR}", timeout_s=SETUP_TIMEOUT_S, env=None, cwd="/")
        if not setup.ok:
            self.close()
            raise SandboxError(
                f"could not prepare {WORKDIR} in HF sandbox {self.id} "
                f"({setup.failure_cause}): {setup.stderr.strip()[-300:]}"
            )

    def _run(self, command: str, *, timeout_s: float, env: Mapping[str, str] | None, cwd: str) -> ExecResult:
        out, err = OutputBuffer(), OutputBuffer()
        start = time.monotonic()
        try:
            r = self.sdk_sandbox.run(
                ["bash", "-c", command],
                shell=False,
                env=dict(env) if env else None,
                cwd=cwd,
                timeout=timeout_s,
                check=False,
                capture_output=False,
                on_stdout=out,
                on_stderr=err,
            )
        except Exception as e:
            raise SandboxError(f"HF sandbox {self.id}: could not run a command: {e}") from e
        duration = time.monotonic() - start
        if r.timed_out:
            return ExecResult(exit_code=None, stdout=out.text(), stderr=err.text(), timed_out=True, duration_s=duration)
        code = r.exit_code
        if code is None and r.signal is not None:
            code = 128 + int(r.signal)  # killed by signal N, as a shell reports it
        return ExecResult(
            exit_code=code, stdout=out.text(), stderr=err.text(), oom_killed=code == 137, duration_s=duration
        )

    def exec_background(self, command: str, *, env: Mapping[str, str] | None = None, cwd: str | None = None) -> int:
        """Start `command` without waiting and return its pid; it lives as long as the sandbox."""
        self._check_open()
        try:
            process = self.sdk_sandbox.run(
                ["bash", "-c", command],
                shell=False,
                env=dict(env) if env else None,
                cwd=cwd or WORKDIR,
                background=True,
            )
        except Exception as e:
            raise SandboxError(f"HF sandbox {self.id}: could not start a background command: {e}") from e
        return int(process.pid)

    def write_file(self, path: str, data: bytes | str) -> None:
        self._check_path(path)
        try:
            self.sdk_sandbox.files.write(path, data)
        except Exception as e:
            raise SandboxError(f"HF sandbox {self.id}: could not write {path}: {e}") from e

    def read_file(self, path: str) -> bytes | None:
        self._check_path(path)
        try:
            return bytes(self.sdk_sandbox.files.read(path))
        except self._hub_error as e:
            if e.status_code == 404:
                return None
            raise SandboxError(f"HF sandbox {self.id}: could not read {path}: {e}") from e
        except Exception as e:
            raise SandboxError(f"HF sandbox {self.id}: could not read {path}: {e}") from e

    def _upload(self, src: Path, dest: str) -> None:
        try:
            self.sdk_sandbox.files.upload(src, dest)
        except Exception as e:
            raise SandboxError(f"HF sandbox {self.id}: could not upload {src} to {dest}: {e}") from e
