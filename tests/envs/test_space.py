"""The Space as shipped: the Dockerfile's exact start command, run from an INSTALLED wheel (F44).

The package is built into a wheel from the files git would ship, installed into a throwaway venv
(no source tree on its path; dependencies come from the project venv through a .pth line), the
Space folder is copied as the Dockerfile copies it, and the CMD parsed from the Dockerfile is run
verbatim. One episode is then played over HTTP.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import httpx
import pytest
import yaml

from dagent.serving import free_port, stop_process
from dagent.tools import select
from tests.factories import wait_serving

ROOT = Path(__file__).resolve().parents[2]
SPACE = ROOT / "spaces" / "data-agent"


def dockerfile() -> str:
    return (SPACE / "Dockerfile").read_text()


def docker_cmd() -> list[str]:
    lines = [ln for ln in dockerfile().splitlines() if ln.startswith("CMD ")]
    assert len(lines) == 1, "the Dockerfile must have exactly one CMD"
    return json.loads(lines[0][4:])


def test_space_metadata_agrees_with_itself():
    front = yaml.safe_load(re.match(r"---\n(.*?)\n---", (SPACE / "README.md").read_text(), re.S).group(1))
    manifest = yaml.safe_load((SPACE / "openenv.yaml").read_text())
    assert front["sdk"] == "docker" and front["app_port"] == manifest["port"] == 8000
    assert "PORT=8000" in dockerfile()
    assert manifest["validation"]["capabilities"]["declared_tools"] == list(select())
    assert "COPY --chown=user spaces/data-agent/ /app/" in dockerfile() and "WORKDIR /app" in dockerfile()


def image_extras(text: str) -> set[str]:
    """The extras a Dockerfile installs the package with (`pip install ".[a,b]"`)."""
    return {x for group in re.findall(r'"\.\[([\w,]+)\]"', text) for x in group.split(",")}


def test_the_image_installs_the_server_extra_which_is_the_env_extra_without_the_trainer():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert image_extras(dockerfile()) == {"server", "cloud"}  # cloud: DAGENT_SANDBOX=e2b
    assert sorted(extras["env"]) == ["dagent[server]", "trl==1.16.0"]  # trl would pull torch into the image
    assert not re.findall(r'"[\w-]+==[\w.]+"', dockerfile())  # no second copy of a pin to drift


def _shipped_tree(dest: Path) -> Path:
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.split()
    for rel in files:
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


def installed_space(tmp_path: Path, space: Path, port: int, **settings: str) -> tuple[Path, dict[str, str], list[str]]:
    """The package built into a wheel from the files git ships, installed into a throwaway venv (its
    dependencies from this venv through a .pth line), the Space folder copied as its Dockerfile
    copies it: (the app directory, the environment, the Dockerfile's CMD). Checks that `dagent`
    imports from the INSTALLED copy there (F44)."""
    src = _shipped_tree(tmp_path / "src")
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", str(src), "-w", str(tmp_path / "wheels")]
    if subprocess.run([*build, "--no-build-isolation"], capture_output=True).returncode != 0:
        subprocess.run(build, check=True, capture_output=True)  # this venv's setuptools is too old
    wheel = next((tmp_path / "wheels").glob("dagent-*.whl"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "zz_project_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")  # deps only
    app_dir = tmp_path / "app"
    shutil.copytree(space, app_dir)  # COPY spaces/<name>/ /app/ ; WORKDIR /app
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(
        PATH=f"{venv / 'bin'}:{env.get('PATH', '')}", HOST="127.0.0.1", PORT=str(port), LOG_LEVEL="warning", **settings
    )
    where = subprocess.run(
        ["python", "-c", "import dagent.envs.whitebox_server, sys; print(dagent.__file__)"],
        cwd=app_dir,
        env=env,
        capture_output=True,
        text=True,
    )
    assert where.returncode == 0, where.stderr
    assert where.stdout.strip().startswith(str(site)), f"not the installed copy: {where.stdout}"
    lines = [ln for ln in (space / "Dockerfile").read_text().splitlines() if ln.startswith("CMD ")]
    assert len(lines) == 1, "the Dockerfile must have exactly one CMD"
    return app_dir, env, json.loads(lines[0][4:])


def openenv_validate(target: str, *args: str) -> dict:
    """`openenv validate TARGET ... --json` (the CLI of the openenv this venv pins)."""
    out = subprocess.run(
        [str(Path(sys.executable).parent / "openenv"), "validate", target, *args, "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return json.loads(out.stdout[out.stdout.index("{") :])


def test_both_spaces_pass_openenv_validate_statically():
    for space in (SPACE, ROOT / "spaces" / "data-agent-blackbox"):
        report = openenv_validate(str(space), "--level", "static", "--skip-build")
        assert report["verdict"] == "pass" and report["manifest"]["name"] in ("data_agent", "data_agent_blackbox")
        assert [r["status"] for r in report["results"] if r["status"] not in ("skip",)] == ["pass"], report["results"]


@pytest.mark.slow
@pytest.mark.failure_mode("F44")
def test_the_dockerfile_command_serves_an_episode_from_the_installed_wheel(tmp_path, suite_dir):
    port = free_port()
    app_dir, env, cmd = installed_space(tmp_path, SPACE, port, DAGENT_SUITE=str(suite_dir), DAGENT_MAX_EPISODES="4")
    log = open(tmp_path / "server.log", "w")
    proc = subprocess.Popen(cmd, cwd=app_dir, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_serving(proc, f"{url}/health", log=tmp_path / "server.log")
        assert httpx.get(f"{url}/data_agent/splits").status_code == 200
        report = openenv_validate("--url", url, "--level", "runtime")
        assert report["passed"] and not report["summary"]["failed_criteria"], report["summary"]
        from dagent.envs.whitebox_client import white_box_client

        env_ = white_box_client(url)()
        assert "submit_solution" in env_.reset(split="test", index=0)
        assert env_.bash(command="tail -n +2 input/t.csv | wc -l") == "3"
        assert env_.submit_solution(answer=3).startswith("Answer submitted")
        assert env_.get_reward() > 1.0
    finally:
        stop_process(proc, 20)
        log.close()
