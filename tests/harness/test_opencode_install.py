"""opencode where the image lacks it (HF sandboxes): installed at run time once per sandbox, the
pinned version asked first, exit codes deciding (F17); a failed install leaves the rollout
UNGRADED with its cause before any model call. And the empty-input probe every episode passes
through before its agent starts (F21).

The remote sandbox here is scripted (no HF Job offline); the install script itself runs for real
in bash against a stand-in `npm` that records its arguments. NOT covered: `apt-get install nodejs
npm` and `npm install -g opencode-ai` on a real HF image (network).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from dagent.harness.captured import CapturedAgent
from dagent.harness.opencode import INSTALL_SCRIPT, OpencodeConfig, OpencodeHarness
from dagent.harness.play import INPUT_PROBE, play
from dagent.sandbox.base import ExecResult, Resources, SandboxBackend
from dagent.sandbox.image import OPENCODE_PACKAGE, OPENCODE_VERSION
from dagent.sandbox.remote import RemoteSandbox

VERSION_PROBE = '"opencode" --version'


class ScriptedRemote(RemoteSandbox):
    """A remote sandbox whose commands answer from `script(command) -> ExecResult`."""

    label, home = "HF", "/root"

    def __init__(self, script):
        self.script, self.commands, self.files = script, [], {}
        self.id, self.resources, self.sdk_sandbox = "scripted", Resources(), self

    def kill(self):  # what RemoteSandbox.close calls on the SDK sandbox
        pass

    def _run(self, command, *, timeout_s, env, cwd):
        self.commands.append((command, dict(env or {})))
        return self.script(command)

    def _upload(self, src, dest):
        self.files[dest] = Path(src).read_bytes()

    def write_file(self, path, data):
        self.files[path] = data

    def read_file(self, path):
        return self.files.get(path)

    def exec_background(self, command, *, env=None, cwd=None):
        raise AssertionError("not used")


def answers(version_codes, install_code=0, install_err=""):
    """--version answers the pinned version once `version_codes` runs out of failures."""
    codes = list(version_codes)

    def script(command):
        if command == VERSION_PROBE:
            code = codes.pop(0) if codes else 0
            return ExecResult(
                exit_code=code,
                stdout=OPENCODE_VERSION + "\n" if code == 0 else "",
                stderr="" if code == 0 else "opencode: command not found",
            )
        if command == INSTALL_SCRIPT:
            return ExecResult(exit_code=install_code, stdout="", stderr=install_err)
        if command.startswith("cd /workdir/input && find"):
            return ExecResult(exit_code=0, stdout="./t.csv\n", stderr="")
        if command == INPUT_PROBE:
            return ExecResult(exit_code=0, stdout="/workdir/input/t.csv\n", stderr="")
        raise AssertionError(f"unexpected command {command!r}")

    return script


def run_commands(sb):
    return [c for c, _ in sb.commands]


@pytest.mark.failure_mode("F17")
def test_present_at_the_pinned_version_means_no_install_and_once_per_sandbox():
    harness, sb = OpencodeHarness(OpencodeConfig()), ScriptedRemote(answers([]))
    assert harness.ensure_installed(sb) is None and harness.ensure_installed(sb) is None
    assert run_commands(sb) == [VERSION_PROBE]  # asked once; nothing installed


@pytest.mark.failure_mode("F17")
def test_missing_is_installed_then_asked_again():
    harness, sb = OpencodeHarness(OpencodeConfig()), ScriptedRemote(answers([127]))
    assert harness.ensure_installed(sb) is None
    assert run_commands(sb) == [VERSION_PROBE, INSTALL_SCRIPT, VERSION_PROBE]
    assert sb.commands[1][1] == {"DAGENT_OPENCODE": OPENCODE_PACKAGE}  # the pin, through the environment
    assert harness.ensure_installed(sb) is None and len(sb.commands) == 3


@pytest.mark.parametrize(
    "codes,install,expect",
    [
        ([127], 1, "installing opencode-ai@1.18.33 exited 1: E404 no such package"),
        ([127, 127], 0, "answered exit 127"),  # exit 0 from npm, yet no binary: still a failure, named
    ],
)
def test_a_failed_install_is_named(codes, install, expect):
    sb = ScriptedRemote(answers(codes, install, "E404 no such package"))
    cause = OpencodeHarness(OpencodeConfig()).ensure_installed(sb)
    assert cause.startswith("harness_install_failed: ") and expect in cause


class NoCapture:
    """A capture proxy that must not be asked for a session."""

    model = "m"

    def open_session(self, *a, **kw):
        raise AssertionError("a session was opened before the harness was installed")


class OneSandbox(SandboxBackend):
    name, remote, home = "hf", True, "/root"

    def __init__(self, sb):
        self.sb = sb

    def create(self, resources=None):
        return self.sb


@pytest.mark.failure_mode("F07")
def test_a_failed_install_leaves_the_rollout_ungraded_before_any_model_call(suite):
    sb = ScriptedRemote(answers([127], 1, "npm: not found"))
    agent = CapturedAgent(OpencodeHarness(OpencodeConfig()), NoCapture(), reach=None)
    record = play(suite, "train", 0, agent, OneSandbox(sb)).record
    assert (record.outcome, record.reward, record.cause, record.model_calls) == (
        "ungraded",
        None,
        "harness_install_failed",
        0,
    ), record
    assert "npm: not found" in record.note


def test_the_install_script_asks_npm_for_the_pin_and_its_exit_code_decides(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "npm.log"
    npm = bin_dir / "npm"
    npm.write_text(f'#!/bin/sh\necho "$@" > {log}\nexit "${{NPM_EXIT:-0}}"\n')
    npm.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "DAGENT_OPENCODE": OPENCODE_PACKAGE}
    ok = subprocess.run(["bash", "-c", INSTALL_SCRIPT], env=env, capture_output=True, text=True)
    assert ok.returncode == 0 and log.read_text().split() == [
        "install",
        "-g",
        "--no-fund",
        "--no-audit",
        OPENCODE_PACKAGE,
    ]
    bad = subprocess.run(["bash", "-c", INSTALL_SCRIPT], env={**env, "NPM_EXIT": "3"}, capture_output=True)
    assert bad.returncode == 3


@pytest.mark.failure_mode("F21")
def test_an_input_directory_empty_inside_the_sandbox_stops_the_episode_before_the_agent(suite, backend, monkeypatch):
    """Staging reported success, yet nothing is in /workdir/input where the agent looks."""
    from dagent.sandbox.local import LocalSandbox

    monkeypatch.setattr(LocalSandbox, "stage", lambda self, files: (self.host_workdir / "input").mkdir())

    class MustNotRun:
        name, model = "probe", "m"

        def run(self, *a, **kw):
            raise AssertionError("the agent ran on an empty input directory")

    record = play(suite, "train", 0, MustNotRun(), backend).record
    assert (record.outcome, record.reward, record.cause, record.model_calls) == (
        "ungraded",
        None,
        "staging_failed",
        None,
    ), record
    assert "directory empty" in record.note and "before the agent started" in record.note
