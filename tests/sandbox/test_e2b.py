"""E2B backend, checked offline against the installed e2b SDK.

Every call the backend makes is bound against the real SDK signature (`Sandbox.create`,
`Commands.run`, `Filesystem.write/read`), and outcomes are the SDK's own classes
(`CommandResult`, `CommandExitException`, `TimeoutException`, `FileNotFoundException`).

NOT covered offline (needs E2B_API_KEY and network): a real sandbox round trip; that a template
has `/workdir` writable after the root `chown`; that envd reports a SIGKILLed command as a
negative code with "signal: killed"; that `timeout=0` keeps a background command alive past 60 s
on the live service (the SDK maps 0 to "no deadline": `e2b.envd.utils.timeout_to_ms`).
"""

from __future__ import annotations

import inspect
import logging
import sys
from pathlib import Path

import e2b
import pytest
from e2b.sandbox_sync.commands.command import Commands
from e2b.sandbox_sync.filesystem.filesystem import Filesystem

from dagent.errors import ConfigError, MissingDependencyError, SandboxError, StagingError
from dagent.sandbox import describe_secrets, get_backend, sandbox_home, secret_env
from dagent.sandbox.base import Resources
from dagent.sandbox.e2b import E2BBackend, E2BSandbox

CREATE_SIG = inspect.signature(e2b.Sandbox.create)
RUN_SIG = inspect.signature(Commands.run)
WRITE_SIG = inspect.signature(Filesystem.write)
READ_SIG = inspect.signature(Filesystem.read)
API_KEY = "e2b_TEST_KEY_0123456789"
HF_SECRET = "hf_SECRET_abcdef123456"


def outcome(kw, stdout="", stderr="", exit_code=0, error=None):
    """What the SDK's `commands.run` does: stream to the callbacks, raise on a non-zero exit."""
    if stdout and kw.get("on_stdout"):
        kw["on_stdout"](stdout)
    if stderr and kw.get("on_stderr"):
        kw["on_stderr"](stderr)
    keep = kw.get("retain_output", True)
    fields = dict(stdout=stdout if keep else None, stderr=stderr if keep else None, exit_code=exit_code, error=error)
    if exit_code != 0:
        raise e2b.CommandExitException(**fields)
    return e2b.CommandResult(**fields)


class FakeE2B:
    """One fake sandbox: `commands`, `files`, `kill`, with every call bound to the real signature."""

    def __init__(self, script=None):
        self.sandbox_id = "sbx-test"
        self.commands, self.files = self, self
        self.script = script or (lambda cmd, kw: outcome(kw))
        self.setup = lambda cmd, kw: outcome(kw)  # the root command that prepares /workdir
        self.runs: list[tuple[str, dict]] = []
        self.store: dict[str, bytes] = {}
        self.write_failures: list[Exception] = []
        self.kills = 0

    def run(self, cmd, **kw):
        RUN_SIG.bind(None, cmd, **kw)
        self.runs.append((cmd, kw))
        if kw.get("background"):
            return type("Handle", (), {"pid": 321})()
        if cmd.startswith("cd /workdir/input && find"):
            names = [p[len("/workdir/input/") :] for p in self.store if p.startswith("/workdir/input/")]
            return outcome(kw, stdout="".join(f"./{n}\n" for n in names))
        return (self.setup if kw.get("user") == "root" else self.script)(cmd, kw)

    def write(self, path, data, **kw):
        WRITE_SIG.bind(None, path, data, **kw)
        if self.write_failures:
            raise self.write_failures.pop(0)
        self.store[path] = data.read() if hasattr(data, "read") else (data.encode() if isinstance(data, str) else data)

    def read(self, path, **kw):
        READ_SIG.bind(None, path, **kw)
        if path not in self.store:
            raise e2b.FileNotFoundException(f"{path} not found")
        return bytearray(self.store[path])

    def kill(self):
        self.kills += 1
        return True


@pytest.fixture
def e2b_api(monkeypatch):
    """Patch `e2b.Sandbox.create`; returns the record of its calls and the fake it hands out."""
    monkeypatch.setenv("E2B_API_KEY", API_KEY)
    state = {"fake": FakeE2B(), "creates": []}

    def create(**kw):
        CREATE_SIG.bind(**kw)
        state["creates"].append(kw)
        return state["fake"]

    monkeypatch.setattr(e2b.Sandbox, "create", staticmethod(create))
    return state


def scripted(e2b_api, script):
    e2b_api["fake"].script = script
    return E2BBackend().create(Resources(timeout_s=30))


def test_create_takes_template_lifetime_and_env(e2b_api):
    backend = E2BBackend("data-agent-opencode", lifetime_s=1200, env={"HF_TOKEN": HF_SECRET})
    sb = backend.create(Resources(timeout_s=30))
    (kw,) = e2b_api["creates"]
    assert kw["template"] == "data-agent-opencode"
    assert kw["timeout"] == 1200  # the sandbox's lifetime, not a command's timeout
    assert kw["envs"] == {"HF_TOKEN": HF_SECRET}
    assert kw["api_key"] == API_KEY and "E2B_API_KEY" not in kw["envs"]
    assert "api_key" in e2b.ApiParams.__annotations__  # the SDK takes it through **opts
    setup_cmd, setup_kw = e2b_api["fake"].runs[0]
    assert setup_kw["user"] == "root" and "mkdir -p /workdir/input" in setup_cmd and "chown" in setup_cmd
    assert isinstance(sb, E2BSandbox) and backend.remote and backend.name == "e2b"


def test_exec_takes_command_timeout_never_the_sdk_default(e2b_api):
    sb = E2BBackend(lifetime_s=900).create(Resources(timeout_s=30))
    sb.exec("echo hi", timeout_s=45)
    sb.exec("echo default")
    runs = [kw for cmd, kw in e2b_api["fake"].runs if cmd.startswith("echo")]
    assert [kw["timeout"] for kw in runs] == [45, 30]
    assert all(kw["cwd"] == "/workdir" for kw in runs)
    assert sb.exec_background("serve --port 1") == 321
    _, bg = e2b_api["fake"].runs[-1]
    assert bg["background"] is True and bg["timeout"] == 0  # 0 = no deadline; default 60 s would kill it


@pytest.mark.failure_mode("F17")
def test_exit_zero_is_success(e2b_api):
    sb = scripted(e2b_api, lambda cmd, kw: outcome(kw, stdout="42\n"))
    r = sb.exec("python -c 'print(42)'")
    assert r.exit_code == 0 and r.ok and r.failure_cause is None and r.stdout == "42\n"


def test_nonzero_exit_keeps_its_code(e2b_api):
    sb = scripted(e2b_api, lambda cmd, kw: outcome(kw, stderr="no such file", exit_code=2, error="exit status 2"))
    r = sb.exec("cat missing")
    assert (r.exit_code, r.ok, r.failure_cause, r.stderr) == (2, False, "exit_2", "no such file")
    assert not r.oom_killed and not r.timed_out


@pytest.mark.failure_mode("F18")
@pytest.mark.parametrize("code, error", [(137, "exit status 137"), (-1, "signal: killed")])
def test_sigkill_is_oom(e2b_api, code, error):
    sb = scripted(e2b_api, lambda cmd, kw: outcome(kw, exit_code=code, error=error))
    r = sb.exec("python big.py")
    assert r.exit_code == 137 and r.oom_killed and r.failure_cause == "sandbox_oom"


@pytest.mark.failure_mode("F18")
def test_sdk_timeout_is_timed_out_without_code(e2b_api):
    def script(cmd, kw):
        kw["on_stdout"]("partial")
        raise e2b.TimeoutException("context deadline exceeded")

    r = scripted(e2b_api, script).exec("sleep 100", timeout_s=1)
    assert r.timed_out and r.exit_code is None and r.failure_cause == "sandbox_timeout" and r.stdout == "partial"


def test_other_sdk_errors_raise_sandbox_error(e2b_api):
    def script(cmd, kw):
        raise e2b.SandboxException("sandbox not running")

    sb = scripted(e2b_api, script)
    with pytest.raises(SandboxError, match="sandbox not running"):
        sb.exec("true")


def test_failed_setup_closes_the_sandbox(e2b_api):
    e2b_api["fake"].setup = lambda cmd, kw: outcome(kw, stderr="Permission denied", exit_code=1)
    with pytest.raises(SandboxError, match="Permission denied"):
        E2BBackend().create()
    assert e2b_api["fake"].kills == 1


def test_staging_is_retried_once(e2b_api, tmp_path, caplog):
    table = tmp_path / "t.csv"
    table.write_text("a,b\n1,2\n")
    sb = E2BBackend().create()
    e2b_api["fake"].write_failures = [e2b.TimeoutException("stream timed out after 60 s")]
    with caplog.at_level(logging.WARNING):
        sb.stage({"t.csv": table})
    assert e2b_api["fake"].store["/workdir/input/t.csv"] == b"a,b\n1,2\n"
    assert "attempt 1/2 failed" in caplog.text and "60 s" in caplog.text
    _, check = e2b_api["fake"].runs[-1]
    assert check["timeout"] >= 600  # the staging check never runs under the SDK's 60 s default


@pytest.mark.failure_mode("F21")
def test_staging_fails_loudly_after_the_retry(e2b_api, tmp_path):
    table = tmp_path / "t.csv"
    table.write_text("x\n")
    sb = E2BBackend().create()
    e2b_api["fake"].write_failures = [e2b.TimeoutException("timeout")] * 2
    with pytest.raises(StagingError, match="directory empty.*after 2 attempts"):
        sb.stage({"t.csv": table})
    with pytest.raises(StagingError, match="directory empty: no input files"):
        sb.stage({})


def test_files_round_trip_and_close(e2b_api):
    sb = E2BBackend().create()
    sb.write_file("/home/user/.config/x.json", "{}")
    assert sb.read_file("/home/user/.config/x.json") == b"{}"
    assert sb.read_file("/workdir/answer.txt") is None
    with pytest.raises(SandboxError, match="absolute"):
        sb.read_file("answer.txt")
    sb.close()
    sb.close()
    assert e2b_api["fake"].kills == 1
    with pytest.raises(SandboxError, match="closed"):
        sb.exec("true")


@pytest.mark.failure_mode("F22")
def test_secrets_only_through_env_and_logs_show_presence(e2b_api, monkeypatch, caplog):
    monkeypatch.setenv("HF_TOKEN", HF_SECRET)
    with caplog.at_level(logging.DEBUG):
        sb = E2BBackend(env=secret_env(["HF_TOKEN", "UNSET_SECRET"])).create()
        sb.exec("python stage.py", env={"BUCKET_TOKEN": "bucket-SECRET"})
    assert e2b_api["creates"][0]["envs"] == {"HF_TOKEN": HF_SECRET}
    cmd, kw = e2b_api["fake"].runs[-1]
    assert kw["envs"] == {"BUCKET_TOKEN": "bucket-SECRET"}
    for cmd, _ in e2b_api["fake"].runs:
        assert HF_SECRET not in cmd and "bucket-SECRET" not in cmd and API_KEY not in cmd
    assert "HF_TOKEN: present" in caplog.text
    assert HF_SECRET not in caplog.text and API_KEY not in caplog.text
    assert describe_secrets(["HF_TOKEN", "UNSET_SECRET"]) == "HF_TOKEN: present, UNSET_SECRET: absent"


def test_missing_api_key_names_the_variable(monkeypatch):
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="E2B_API_KEY"):
        E2BBackend()


def test_missing_sdk_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "e2b", None)
    with pytest.raises(MissingDependencyError, match=r"dagent\[cloud\]"):
        get_backend("e2b", api_key=API_KEY)


@pytest.mark.failure_mode("F20")
def test_home_differs_by_backend_and_is_known_in_one_place():
    assert sandbox_home("e2b") == E2BBackend.home == E2BSandbox.home == "/home/user"
    assert sandbox_home("hf") == "/root" != sandbox_home("e2b")
    with pytest.raises(ConfigError, match="unknown sandbox backend"):
        sandbox_home("docker")
    package = Path(__file__).resolve().parents[2] / "dagent"
    literal = [
        p.relative_to(package).as_posix()
        for p in package.rglob("*.py")
        if '"/home/user"' in p.read_text() or "'/home/user'" in p.read_text()
    ]
    assert literal == ["sandbox/e2b.py"], f"E2B's home written outside its backend: {literal}"
