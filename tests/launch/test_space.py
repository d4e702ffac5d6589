"""`dagent space deploy|duplicate` against a real local HTTP endpoint (tests/fake_hub.py) recording
what huggingface_hub 2.4 sends: a Docker Space created, the files its Dockerfile builds from
uploaded with the Dockerfile and card at the root, secrets set BY NAME from the environment, a
restart, then /health awaited (here: the white-box server itself, served locally). Not covered:
the real Hub's build of the image and its network."""

from __future__ import annotations

import pytest
from huggingface_hub import HfApi

from dagent.errors import ConfigError
from dagent.launch.space import ROOT, SpaceNotHealthy, deploy, dockerfile, duplicate, plan, wait_healthy
from tests.factories import LiveServer
from tests.fake_hub import FakeHub


@pytest.mark.failure_mode("F22")
def test_deploy_creates_uploads_sets_secrets_by_name_restarts_and_waits_for_health(suite, backend, monkeypatch):
    from dagent.envs.whitebox_server import create_app

    monkeypatch.setenv("E2B_API_KEY", "e2b_secret_value")
    server = LiveServer(create_app(suite, max_episodes=2, backend=backend))
    lines: list[str] = []
    try:
        with FakeHub() as hub:
            api = HfApi(endpoint=hub.url, token=hub.token)
            p = plan(
                "whitebox",
                "fake-user/data-agent",
                secrets=["E2B_API_KEY"],
                variables={"DAGENT_SANDBOX": "e2b", "DAGENT_SUITE": "fake-user/suite"},
            )
            health = deploy(p, api=api, health_url=f"{server.url}/health", timeout_s=60, echo=lines.append)
            files = hub.files("fake-user/data-agent", "space")
            settings = hub.settings("fake-user/data-agent", "space")
    finally:
        server.stop()
    assert health["status"] == "healthy" and health["sandbox"]["backend"] == "local"
    assert settings["sdk"] == "docker" and settings["secrets"] == {"E2B_API_KEY": "e2b_secret_value"}
    assert settings["variables"] == {"DAGENT_SANDBOX": "e2b", "DAGENT_SUITE": "fake-user/suite"}
    assert settings["restarts"] == 1
    assert {
        "Dockerfile",
        "README.md",
        "pyproject.toml",
        "dagent/envs/whitebox_server.py",
        "datasets_build/__main__.py",
        "spaces/data-agent/server/app.py",
    } <= set(files)
    assert b"COPY --chown=user spaces/data-agent/ /app/" in files["Dockerfile"] and b"sdk: docker" in files["README.md"]
    # one self-contained Dockerfile: the shared base's stages, then the Space's image FROM the first
    uploaded = files["Dockerfile"].decode()
    assert (
        uploaded.index(" AS dagent-base\n")
        < uploaded.index(" AS dagent-suite\n")
        < uploaded.index("\nFROM dagent-base\n")
    )
    assert uploaded.endswith((ROOT / "spaces/data-agent/Dockerfile").read_text())
    assert not any(b"e2b_secret_value" in data for data in files.values())  # the value only as a secret (F22)
    assert not any("e2b_secret_value" in line for line in lines) and "E2B_API_KEY" in " ".join(lines)


def test_a_deploy_without_a_suite_is_refused_naming_the_setting():
    with pytest.raises(ConfigError, match=r"--var DAGENT_SUITE=OWNER/NAME.*dagent suite push"):
        plan("whitebox", "fake-user/data-agent", variables={"DAGENT_SANDBOX": "e2b"})


def test_a_missing_secret_is_refused_before_anything_is_created(monkeypatch):
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    with FakeHub() as hub:
        api = HfApi(endpoint=hub.url, token=hub.token)
        with pytest.raises(ConfigError, match="E2B_API_KEY is not set"):
            deploy(
                plan("blackbox", "fake-user/bb", secrets=["E2B_API_KEY"], variables={"DAGENT_SUITE": "u/s"}),
                api=api,
                timeout_s=1,
            )
        assert ("space", "fake-user/bb") not in hub.repos


def test_duplicate_copies_the_space_and_sends_the_copys_secrets(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_value")
    with FakeHub() as hub:
        api = HfApi(endpoint=hub.url, token=hub.token)
        api.create_repo("fake-user/bb", repo_type="space", space_sdk="docker")
        api.upload_file(
            path_or_fileobj=b"FROM python", path_in_repo="Dockerfile", repo_id="fake-user/bb", repo_type="space"
        )
        url = duplicate(
            "fake-user/bb",
            "fake-user/bb-copy",
            secrets=["HF_TOKEN"],
            variables={"DAGENT_ENGINE_URL": "https://e/v1"},
            api=api,
            echo=lambda _l: None,
        )
        copy = hub.settings("fake-user/bb-copy", "space")
        assert url.endswith("spaces/fake-user/bb-copy") and hub.files("fake-user/bb-copy", "space")["Dockerfile"]
        assert copy["duplicated_from"] == "fake-user/bb" and copy["secrets"] == {"HF_TOKEN": "hf_value"}
        assert copy["variables"] == {"DAGENT_ENGINE_URL": "https://e/v1"}


def test_a_space_that_never_answers_is_reported_with_its_stage():
    now = [0.0]
    with pytest.raises(SpaceNotHealthy, match="did not answer within 10 s"):
        wait_healthy(
            "http://127.0.0.1:9/health",
            timeout_s=10,
            clock=lambda: now[0],
            sleep=lambda s: now.__setitem__(0, now[0] + s),
        )

    class Broken:
        def get_space_runtime(self, repo_id):
            return type("R", (), {"stage": "BUILD_ERROR"})()

    with pytest.raises(SpaceNotHealthy, match="BUILD_ERROR"):
        wait_healthy(
            "http://127.0.0.1:9/health",
            timeout_s=10,
            api=Broken(),
            repo_id="o/n",
            clock=lambda: 0.0,
            sleep=lambda s: None,
        )


def test_a_space_dockerfile_that_does_not_start_from_the_shared_base_is_refused(tmp_path):
    (tmp_path / "spaces/base").mkdir(parents=True)
    (tmp_path / "spaces/base/Dockerfile").write_text((ROOT / "spaces/base/Dockerfile").read_text())
    (tmp_path / "spaces/own").mkdir()
    (tmp_path / "spaces/own/Dockerfile").write_text('FROM python:3.11-slim-trixie\nCMD ["true"]\n')
    with pytest.raises(ConfigError, match="must start its image FROM dagent-base"):
        dockerfile("spaces/own", root=tmp_path)
    (tmp_path / "spaces/own/Dockerfile").write_text('FROM dagent-base\nCMD ["true"]\n')
    assert dockerfile("spaces/own", root=tmp_path).endswith('FROM dagent-base\nCMD ["true"]\n')
