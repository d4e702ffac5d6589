"""Hugging Face sandbox backend, checked offline against the installed huggingface_hub.

`Sandbox.create` is patched (its keyword arguments are bound to the real signature) to return a
REAL `huggingface_hub.Sandbox` whose HTTP client talks to a fake in-job server through
`httpx2.MockTransport`. So the SDK's own `run()`, `files.write/upload/read` build the requests
and parse the NDJSON exec stream; the fake answers at the wire level. (It reaches into the SDK's
private `_SandboxServer` to swap the client; a change there breaks the fixture, not the backend.)

NOT covered offline (needs HF_TOKEN with Jobs access and network): starting a real HF Job, the
sbx-server's real answers (exit codes and signals for an OOM kill, `timed_out` on a real timeout),
idle-timeout behaviour, and that the image's default user is root.
"""

from __future__ import annotations

import inspect
import json
import logging

import httpx2
import huggingface_hub
import pytest
from huggingface_hub import HfApi
from huggingface_hub._sandbox import _SandboxServer

from dagent.errors import ConfigError, SandboxError, StagingError
from dagent.sandbox import get_backend, sandbox_home
from dagent.sandbox.base import Resources
from dagent.sandbox.hf import HFBackend, HFSandbox

CREATE_SIG = inspect.signature(huggingface_hub.Sandbox.create)
HF_SECRET = "hf_SECRET_abcdef123456"


def exit_event(exit_code=0, **kw):
    return {"event": "exit", "exit_code": exit_code, "duration_ms": 3, **kw}


class JobServer:
    """The in-job sbx-server at the HTTP level, as huggingface_hub.Sandbox talks to it."""

    def __init__(self):
        self.execs: list[dict] = []
        self.background: list[dict] = []
        self.files: dict[str, bytes] = {}
        self.write_failures = 0
        self.cancelled = 0
        self.script = lambda payload: [exit_event(0)]

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        path, q = request.url.path.removeprefix("/v1"), dict(request.url.params)
        body = request.read()
        if path == "/exec":
            payload = json.loads(body)
            self.execs.append(payload)
            events = self.respond(payload)
            return httpx2.Response(200, content="".join(json.dumps(e) + "\n" for e in events).encode())
        if path == "/processes" and request.method == "POST":
            self.background.append(json.loads(body))
            return httpx2.Response(200, json={"id": "proc-1", "pid": 4242})
        if path == "/files/write":
            if self.write_failures:
                self.write_failures -= 1
                return httpx2.Response(503, json={"error": "upstream timed out"})
            self.files[q["path"]] = body
            return httpx2.Response(200, json={})
        if path == "/files/stat":
            if q["path"] not in self.files:
                return httpx2.Response(404, json={"error": "no such file"})
            return httpx2.Response(
                200,
                json={
                    "name": q["path"].rsplit("/", 1)[-1],
                    "path": q["path"],
                    "type": "file",
                    "size": len(self.files[q["path"]]),
                },
            )
        if path == "/files/read":
            data, off = self.files[q["path"]], int(q.get("offset", 0))
            return httpx2.Response(200, content=data[off : off + int(q.get("length", len(data)))])
        return httpx2.Response(404, json={"error": f"unexpected {request.method} {path}"})

    def respond(self, payload: dict) -> list[dict]:
        cmd = payload["cmd"]
        if cmd[-1].startswith("cd /workdir/input && find"):
            names = [p[len("/workdir/input/") :] for p in self.files if p.startswith("/workdir/input/")]
            return [{"event": "stdout", "data": "".join(f"./{n}\n" for n in names)}, exit_event(0)]
        if cmd[-1].startswith("mkdir -p /workdir/input"):
            return [exit_event(0)]
        return self.script(payload)


@pytest.fixture
def hub(monkeypatch):
    """Patch `huggingface_hub.Sandbox.create` to hand out a real Sandbox over a fake server."""
    monkeypatch.setenv("HF_TOKEN", HF_SECRET)
    server, creates = JobServer(), []

    def create(*args, **kw):
        CREATE_SIG.bind(*args, **kw)
        creates.append(kw)
        transport = _SandboxServer(
            job_id="job-1",
            owner="me",
            image=kw["image"],
            nonce="n",
            base_url="https://job-1--49983.hf.space",
            sandbox_token="sbx-token",
            api=HfApi(token="hf_unused"),
        )
        transport._client.close()
        transport._client = httpx2.Client(transport=httpx2.MockTransport(server))
        transport.cancel_job = lambda: setattr(server, "cancelled", server.cancelled + 1)
        return huggingface_hub.Sandbox(id="job-1", server=transport, local_id=None, owns_sandbox=True, owns_server=True)

    monkeypatch.setattr(huggingface_hub.Sandbox, "create", staticmethod(create))
    return server, creates


def test_create_takes_image_flavor_idle_timeout_and_secrets(hub):
    server, creates = hub
    sb = HFBackend("ghcr.io/me/data-stack:1", env={"HF_TOKEN": HF_SECRET}).create(Resources(timeout_s=1800))
    (kw,) = creates
    assert kw["image"] == "ghcr.io/me/data-stack:1" and kw["flavor"] == "cpu-basic"
    assert kw["idle_timeout"] == 1860  # a foreground command is not activity: idle > command timeout
    assert kw["secrets"] == {"HF_TOKEN": HF_SECRET} and kw["forward_hf_token"] is False
    assert kw["token"] == HF_SECRET
    assert server.execs[0]["cmd"] == ["bash", "-c", "mkdir -p /workdir/input"]
    assert isinstance(sb, HFSandbox) and sb.id == "job-1"


def test_exec_sends_command_timeout_cwd_and_env(hub):
    server, _ = hub
    sb = HFBackend().create(Resources(timeout_s=30))
    sb.exec("echo hi", timeout_s=45, env={"A": "1"})
    sb.exec("echo default")
    first, second = server.execs[1:]
    assert first == {
        "cmd": ["bash", "-c", "echo hi"],
        "shell": False,
        "env": {"A": "1"},
        "cwd": "/workdir",
        "timeout": 45,
    }
    assert second["timeout"] == 30
    assert sb.exec_background("serve") == 4242
    assert server.background == [{"cmd": ["bash", "-c", "serve"], "shell": False, "cwd": "/workdir"}]


@pytest.mark.failure_mode("F17")
def test_exit_zero_is_success(hub):
    server, _ = hub
    server.script = lambda p: [{"event": "stdout", "data": "42\n"}, exit_event(0)]
    r = HFBackend().create().exec("python -c 'print(42)'")
    assert r.exit_code == 0 and r.ok and r.stdout == "42\n"


def test_nonzero_exit_keeps_its_code(hub):
    server, _ = hub
    server.script = lambda p: [{"event": "stderr", "data": "boom"}, exit_event(3)]
    r = HFBackend().create().exec("exit 3")
    assert (r.exit_code, r.ok, r.failure_cause, r.stderr) == (3, False, "exit_3", "boom")


@pytest.mark.failure_mode("F18")
@pytest.mark.parametrize("event", [exit_event(137), exit_event(None, signal=9)])
def test_sigkill_is_oom(hub, event):
    server, _ = hub
    server.script = lambda p: [event]
    r = HFBackend().create().exec("python big.py")
    assert r.exit_code == 137 and r.oom_killed and r.failure_cause == "sandbox_oom"


@pytest.mark.failure_mode("F18")
def test_timeout_is_timed_out_without_code(hub):
    server, _ = hub
    server.script = lambda p: [exit_event(None, signal=9, timed_out=True)]
    r = HFBackend().create().exec("sleep 100", timeout_s=1)
    assert r.timed_out and r.exit_code is None and r.failure_cause == "sandbox_timeout"


def test_lost_stream_raises_sandbox_error(hub):
    server, _ = hub
    server.script = lambda p: [{"event": "stdout", "data": "half"}]  # no exit event
    with pytest.raises(SandboxError, match="connection lost"):
        HFBackend().create().exec("true")


def test_staging_is_retried_once(hub, tmp_path, caplog):
    server, _ = hub
    (tmp_path / "t.csv").write_text("a\n1\n")
    sb = HFBackend().create()
    server.write_failures = 1
    with caplog.at_level(logging.WARNING):
        sb.stage({"t.csv": tmp_path / "t.csv"})
    assert server.files["/workdir/input/t.csv"] == b"a\n1\n"
    assert "attempt 1/2 failed" in caplog.text and "503" in caplog.text


@pytest.mark.failure_mode("F21")
def test_staging_fails_loudly_after_the_retry(hub, tmp_path):
    server, _ = hub
    (tmp_path / "t.csv").write_text("a\n")
    sb = HFBackend().create()
    server.write_failures = 2
    with pytest.raises(StagingError, match="directory empty.*after 2 attempts"):
        sb.stage({"t.csv": tmp_path / "t.csv"})


def test_files_round_trip_and_close(hub):
    server, _ = hub
    sb = HFBackend().create()
    sb.write_file("/root/.config/opencode/opencode.json", b"{}")
    assert sb.read_file("/root/.config/opencode/opencode.json") == b"{}"
    assert sb.read_file("/workdir/answer.txt") is None
    sb.close()
    sb.close()
    assert server.cancelled == 1
    with pytest.raises(SandboxError, match="closed"):
        sb.exec("true")


@pytest.mark.failure_mode("F22")
def test_secrets_only_through_env_and_logs_show_presence(hub, caplog):
    server, creates = hub
    with caplog.at_level(logging.DEBUG):
        sb = HFBackend(env={"HF_TOKEN": HF_SECRET}).create()
        sb.exec("python stage.py", env={"BUCKET_TOKEN": "bucket-SECRET"})
    assert creates[0]["secrets"] == {"HF_TOKEN": HF_SECRET}
    assert server.execs[-1]["env"] == {"BUCKET_TOKEN": "bucket-SECRET"}
    for payload in server.execs:
        assert HF_SECRET not in " ".join(payload["cmd"]) and "bucket-SECRET" not in " ".join(payload["cmd"])
    assert "HF_TOKEN: present" in caplog.text and HF_SECRET not in caplog.text


def test_missing_token_names_the_variable(monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    with pytest.raises(ConfigError, match="HF_TOKEN"):
        get_backend("hf")


def test_resources_beyond_the_flavor_are_refused(hub):
    with pytest.raises(ConfigError, match="flavor"):
        HFBackend().create(Resources(cpus=4, memory_mb=4096))


@pytest.mark.failure_mode("F20")
def test_home_is_root_and_read_from_the_backend():
    assert sandbox_home("hf") == HFBackend.home == HFSandbox.home == "/root"
    assert HFBackend.remote and HFBackend.name == "hf"
