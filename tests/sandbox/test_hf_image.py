"""The HF sandbox image (dagent.sandbox.hf_image): the E2B template's recipe, shipped as
spaces/sandbox/Dockerfile, published as a Docker Space, and run by HF sandboxes (F51).

With Docker: the shipped Dockerfile is built here (FROM the golds' python:3.11.7; where no registry
answers, scripts/docker_base.sh's stand-in with this machine's CPython 3.11.7), and
`huggingface_hub.Sandbox` (the real SDK, its HTTP client) is pointed at an sbx-server stand-in that
runs each command with `docker exec` in a container of that image, as root as HF sandboxes do. The
servers' start-up check (`check_image`) then plays a task's oracle through `HFBackend` and grades it
correct; the SDK's default `python:3.12`-like image (here: the same image with pandas removed) is
refused. Not covered: Hugging Face building the Space, a real sandbox job pulling its image.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import httpx2
import huggingface_hub
import pytest
from huggingface_hub import HfApi
from huggingface_hub._sandbox import _SandboxServer

from dagent.errors import ConfigError
from dagent.harness.readiness import SandboxImageError, check_image
from dagent.sandbox.e2b_template import template_spec
from dagent.sandbox.hf import HFBackend
from dagent.sandbox.hf_image import SHIPPED, image_name, publish_image, sandbox_dockerfile
from tests.fake_hub import FakeHub
from tests.sandbox.test_hf import CREATE_SIG
from tests.spaces.docker import LOCK, need_docker

ROOT = Path(__file__).resolve().parents[2]
TAG = "dagent-test-sandbox"


def test_the_shipped_dockerfile_is_the_recipe_run_as_root():
    shipped = (ROOT / SHIPPED).read_text()
    assert shipped == sandbox_dockerfile(template_spec()), (
        f"{SHIPPED} is not the recipe any more: regenerate it with "
        f"`dagent sandbox image hf OWNER/NAME --dry-run > {SHIPPED}`"
    )
    spec = template_spec()
    assert f"FROM python:{spec.python}\n" in shipped and "USER root\n" in shipped  # HF sandboxes run as root (F20)
    assert f"RUN pip install {' '.join(spec.packages)}\n" in shipped and "curl" in shipped
    assert "pandas==" in shipped and "huggingface_hub==" in shipped  # the data stack and staging


def test_publishing_creates_a_docker_space_named_as_the_image(tmp_path):
    with FakeHub() as hub:
        api = HfApi(endpoint=hub.url, token=hub.token)
        image = publish_image("fake-user/data-agent-sandbox", template_spec(), api=api)
        files = hub.files("fake-user/data-agent-sandbox", "space")
        settings = hub.settings("fake-user/data-agent-sandbox", "space")
    assert image == "hf.co/spaces/fake-user/data-agent-sandbox"  # what huggingface_hub.Sandbox accepts as image=
    assert settings["sdk"] == "docker"
    assert files["Dockerfile"].decode() == (ROOT / SHIPPED).read_text()
    assert b"DAGENT_SANDBOX_IMAGE=hf.co/spaces/fake-user/data-agent-sandbox" in files["README.md"]
    assert b"app_port: 7860" in files["README.md"]
    with pytest.raises(ConfigError, match="OWNER/NAME"):
        image_name("no-owner")


# -- with Docker -----------------------------------------------------------------------------------
def docker(*args: str, input: bytes | None = None, timeout: float | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], input=input, capture_output=True, timeout=timeout)


class DockerJobServer:
    """An sbx-server stand-in at the HTTP level (the routes huggingface_hub.Sandbox calls, as in
    tests/sandbox/test_hf.py), running everything in a container of `image` with `docker exec`."""

    def __init__(self, image: str) -> None:
        self.image, self.name = image, f"dagent-sbx-{uuid.uuid4().hex[:8]}"
        r = docker(
            "run", "-d", "--rm", "--name", self.name, "--network", "none", "--entrypoint", "sleep", image, "infinity"
        )
        assert r.returncode == 0, r.stderr.decode()[-500:]
        self.users: list[str] = []

    def stop(self) -> None:
        docker("rm", "-f", self.name)

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        path, q = request.url.path.removeprefix("/v1"), dict(request.url.params)
        body = request.read()
        if path == "/exec":
            payload = json.loads(body)
            flags = [a for k, v in (payload.get("env") or {}).items() for a in ("-e", f"{k}={v}")]
            try:
                r = docker(
                    "exec",
                    "-w",
                    payload.get("cwd") or "/",
                    *flags,
                    self.name,
                    *payload["cmd"],
                    timeout=payload.get("timeout"),
                )
                events = [
                    {"event": "stdout", "data": r.stdout.decode(errors="replace")},
                    {"event": "stderr", "data": r.stderr.decode(errors="replace")},
                    {"event": "exit", "exit_code": r.returncode, "duration_ms": 1},
                ]
            except subprocess.TimeoutExpired:
                events = [{"event": "exit", "exit_code": None, "timed_out": True, "duration_ms": 1}]
            return httpx2.Response(200, content="".join(json.dumps(e) + "\n" for e in events).encode())
        if path == "/files/write":
            target = q["path"]
            r = docker(
                "exec", "-i", self.name, "sh", "-c", f'mkdir -p "$(dirname "{target}")" && cat > "{target}"', input=body
            )
            return httpx2.Response(200 if r.returncode == 0 else 500, json={})
        if path == "/files/stat":
            r = docker("exec", self.name, "stat", "-c", "%s", q["path"])
            if r.returncode:
                return httpx2.Response(404, json={"error": "no such file"})
            return httpx2.Response(
                200,
                json={"name": q["path"].rsplit("/", 1)[-1], "path": q["path"], "type": "file", "size": int(r.stdout)},
            )
        if path == "/files/read":
            r = docker("exec", self.name, "cat", q["path"])
            if r.returncode:
                return httpx2.Response(404, json={"error": "no such file"})
            off = int(q.get("offset", 0))
            return httpx2.Response(200, content=r.stdout[off : off + int(q.get("length", len(r.stdout)))])
        return httpx2.Response(404, json={"error": f"unexpected {request.method} {path}"})


@pytest.fixture
def sandbox_image():
    need_docker()
    if docker("image", "inspect", TAG).returncode:
        base = (ROOT / SHIPPED).read_text().split("FROM ", 1)[1].split()[0]
        r = subprocess.run(
            ["flock", LOCK, "bash", str(ROOT / "scripts" / "docker_base.sh")],
            capture_output=True,
            text=True,
            env={**os.environ, "DAGENT_BASE_IMAGE": base},
        )
        assert r.returncode == 0, r.stderr[-2000:]
    # under the lock: scripts/docker_images.sh may be building it right now (then this is a cache hit)
    r = subprocess.run(
        ["flock", LOCK, "docker", "build", "-q", "--network", "host", "-t", TAG, str(ROOT / "spaces" / "sandbox")],
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    return TAG


@pytest.fixture
def hf_sandboxes(monkeypatch):
    """`huggingface_hub.Sandbox.create` handing out the real SDK object over a DockerJobServer."""
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    servers: list[DockerJobServer] = []

    def create(*args, **kw):
        CREATE_SIG.bind(*args, **kw)
        server = DockerJobServer(kw["image"])
        servers.append(server)
        transport = _SandboxServer(
            job_id=server.name,
            owner="me",
            image=kw["image"],
            nonce="n",
            base_url=f"https://{server.name}--49983.hf.space",
            sandbox_token="sbx-token",
            api=HfApi(token="hf_unused"),
        )
        transport._client.close()
        transport._client = httpx2.Client(transport=httpx2.MockTransport(server))
        transport.cancel_job = server.stop
        return huggingface_hub.Sandbox(
            id=server.name, server=transport, local_id=None, owns_sandbox=True, owns_server=True
        )

    monkeypatch.setattr(huggingface_hub.Sandbox, "create", staticmethod(create))
    yield servers
    for server in servers:
        server.stop()


@pytest.mark.docker
@pytest.mark.failure_mode("F51")
def test_hf_sandboxes_from_the_published_image_pass_the_oracle_check(sandbox_image, hf_sandboxes, solvable_suite):
    who = docker("run", "--rm", "--entrypoint", "sh", sandbox_image, "-c", "id -u; python --version; command -v curl")
    assert who.stdout.decode().split("\n")[:2] == ["0", "Python 3.11.7"], who.stdout  # root, the golds' Python
    record = check_image(solvable_suite, HFBackend(image=sandbox_image))
    assert record.outcome == "correct" and hf_sandboxes[0].image == sandbox_image
    # the planted image: the same one without pandas, as huggingface_hub's default python:3.12 is
    bare = f"{sandbox_image}-no-pandas"
    r = subprocess.run(
        ["docker", "build", "-q", "-t", bare, "-"],
        input=f"FROM {sandbox_image}\nRUN pip uninstall -y -q pandas\n",
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-1000:]
    try:
        with pytest.raises(SandboxImageError, match="DAGENT_SANDBOX_IMAGE=hf.co/spaces/OWNER/NAME"):
            check_image(solvable_suite, HFBackend(image=bare))
    finally:
        docker("rmi", "-f", bare)
