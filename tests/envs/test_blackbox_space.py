"""The black-box Space as shipped (spaces/data-agent-blackbox/): its metadata, where its capture
proxy is published, and the Dockerfile's exact start command run from an INSTALLED wheel (F44)
serving a real opencode rollout through the capture proxy, passing `openenv validate` at runtime,
with capture also reachable on the Space's own port under /capture."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml

from dagent.envs.blackbox_server import capture_public_url
from dagent.errors import ConfigError
from dagent.serving import free_port, stop_process
from dagent.settings import BlackboxServerSettings
from tests.envs.test_space import image_extras, installed_space, openenv_validate
from tests.factories import wait_serving

ROOT = Path(__file__).resolve().parents[2]
SPACE = ROOT / "spaces" / "data-agent-blackbox"


def test_space_metadata_agrees_with_itself_and_the_env_extra():
    front = yaml.safe_load(re.match(r"---\n(.*?)\n---", (SPACE / "README.md").read_text(), re.S).group(1))
    manifest = yaml.safe_load((SPACE / "openenv.yaml").read_text())
    docker = (SPACE / "Dockerfile").read_text()
    assert front["sdk"] == "docker" and front["app_port"] == manifest["port"] == 8000
    assert manifest["name"] == "data_agent_blackbox" and manifest["validation"]["capabilities"]["declared_tools"] == [
        "run_rollout"
    ]
    assert "COPY --chown=user spaces/data-agent-blackbox/ /app/" in docker and "WORKDIR /app" in docker
    from dagent.sandbox.image import OPENCODE_PACKAGE, PI_PACKAGE

    assert f" {OPENCODE_PACKAGE} {PI_PACKAGE} " in docker  # the versions dagent writes configs for
    assert image_extras(docker) == {"server", "cloud", "demo"}  # e2b sandboxes, the gradio tunnel


@pytest.mark.failure_mode("F08")
def test_capture_is_published_on_the_spaces_own_url_unless_an_explicit_one_or_a_tunnel_is_asked_for():
    def url(**environ: str) -> str | None:
        return capture_public_url(BlackboxServerSettings.from_env({"DAGENT_ENGINE_URL": "http://e:1/v1", **environ}))

    remote = {"DAGENT_SANDBOX": "e2b"}
    assert url() is None  # local sandboxes: the socket bridge
    assert url(**remote, SPACE_HOST="me-bb.hf.space") == "https://me-bb.hf.space/capture"
    assert url(**remote, SPACE_HOST="me-bb.hf.space", PUBLIC_URL="https://x.example/") == "https://x.example/capture"
    assert url(**remote, SPACE_HOST="me-bb.hf.space", EXPOSE="gradio") is None
    with pytest.raises(ConfigError, match="F08"):
        url(**remote)


@pytest.mark.harness
@pytest.mark.slow
@pytest.mark.failure_mode("F44")
def test_the_dockerfile_command_serves_a_rollout_from_the_installed_wheel(tmp_path, suite_dir):
    from benchmarks.rollouts import steered_engine
    from dagent.harness.opencode import find_opencode
    from tests.envs.test_blackbox import need_opencode

    need_opencode()
    engine = steered_engine()
    port = free_port()
    app_dir, env, cmd = installed_space(
        tmp_path,
        SPACE,
        port,
        DAGENT_SUITE=str(suite_dir),
        DAGENT_ENGINE_URL=engine.url,
        DAGENT_OPENCODE_BIN=str(find_opencode()),
        DAGENT_MAX_OUTPUT_TOKENS="256",
        DAGENT_MAX_ROLLOUTS="2",
    )
    log = open(tmp_path / "server.log", "w")
    proc = subprocess.Popen(cmd, cwd=app_dir, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_serving(proc, f"{url}/health", log=tmp_path / "server.log", timeout_s=180)
        health = httpx.get(f"{url}/health").json()
        assert health["status"] == "healthy" and health["sandbox"]["backend"] == "local"
        assert health["sandbox"]["isolation"] in ("bwrap", "mountns") and health["capture"]["how"] == "bridge"
        info = httpx.get(f"{url}/data_agent_blackbox/info").json()  # DAGENT_PRESET unset: the gpu recipe's conditions
        assert info["sampling"]["temperature"] == 0.8  # what training samples with, not a default of 1.0 (F47)
        probe = httpx.get(f"{url}/data_agent_blackbox/engine").json()
        assert probe["reachable"] and probe["served"] == ["tiny-qwen3-steered"]  # DAGENT_MODEL read off the engine
        models = httpx.get(f"{url}/capture/v1/models", timeout=30)  # the proxy on the Space's own port
        assert models.status_code == 200 and models.json()["data"][0]["id"] == "tiny-qwen3-steered"
        report = openenv_validate("--url", url, "--level", "runtime")
        assert report["passed"] and not report["summary"]["failed_criteria"], report["summary"]
        r = httpx.post(
            f"{url}/data_agent_blackbox/rollout",
            json={"split": "train", "index": 0, "include_trace": True},
            timeout=600,
        ).json()
        assert r.get("outcome") == "correct" and r["reward"] > 1.0 and r["trace_entries"], r
        assert r["roles"][0] == "auxiliary" or "auxiliary" in r["roles"]  # opencode's title call, not trained
    finally:
        stop_process(proc, 30)
        log.close()
        engine.stop()
