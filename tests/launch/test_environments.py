"""The GPU jobs' environments resolve against the package index, for the hardware they run on
(Linux x86_64, CUDA builds from PyPI), as `hf jobs uv run --with "dagent[gpu] @ ..."` and the Slurm
script resolve them (F50: a job that cannot install dies in its first minute on paid hardware).

Resolution only: nothing is installed here (no CUDA). `uv pip compile` reads this checkout's
pyproject.toml, so a pin that breaks the set fails here first. What each set must hold: vLLM in
the trainer's own environment (TRL 1.16 imports it there: colocated generation, the server
mode's NCCL weight sync, AsyncGRPOTrainer's weight transfer), TRL, openenv (the async worker's
TrainingTrace) and aiohttp; a CPU flavour's set the same less vLLM.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dagent.launch.job import JOB_EXTRAS

ROOT = Path(__file__).resolve().parents[2]
INDEX = "https://pypi.org/simple"
PLATFORM = "x86_64-manylinux_2_28"  # HF Jobs' and a Slurm node's Linux on x86_64


def uv() -> str:
    found = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if not found:
        pytest.skip("uv is not installed: `bash scripts/setup.sh --tests` puts it in .venv (the test extra)")
    return found


def compile_set(
    extras: str, python: str, tmp_path: Path, *extra_requirements: str, plant: tuple[str, str] | None = None
) -> dict[str, str]:
    """`uv pip compile` of this project's extras (and `extra_requirements`) for the job platform:
    the resolved pins, name -> version; an AssertionError with uv's explanation when it cannot
    resolve. `plant`: (old, new) replaced in the copied pyproject.toml."""
    project = tmp_path / "project"  # the project's metadata alone: no build of the package itself
    (project / "dagent").mkdir(parents=True)
    (project / "dagent" / "__init__.py").write_text("")
    text = (ROOT / "pyproject.toml").read_text()
    if plant:
        assert plant[0] in text, plant
        text = text.replace(*plant)
    (project / "pyproject.toml").write_text(text)
    shutil.copy(ROOT / "README.md", project)
    more = tmp_path / "more.in"
    more.write_text("".join(f"{r}\n" for r in extra_requirements))
    argv = [
        uv(),
        "pip",
        "compile",
        str(project / "pyproject.toml"),
        str(more),
        "--python-version",
        python,
        "--python-platform",
        PLATFORM,
        "--quiet",
        "--no-header",
        "--no-annotate",
        "--index-url",
        INDEX,
    ]
    argv += [a for e in extras.split(",") for a in ("--extra", e)]
    need_index()  # asked before, not read from uv's error: a real resolution failure is a failure
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"dagent[{extras}] does not resolve for {PLATFORM}, Python {python}:\n{r.stderr[-3000:]}"
    pins = {}
    for line in r.stdout.splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split(";")[0].strip().split("==")
            pins[name.lower()] = version
    return pins


@pytest.mark.index
@pytest.mark.parametrize("python", ["3.11", "3.12"])
def test_the_gpu_job_environment_resolves_with_vllm_beside_trl_and_openenv(python, tmp_path):
    pins = compile_set(JOB_EXTRAS["gpu"], python, tmp_path)
    assert pins["vllm"] == "0.29.0" and pins["trl"] == "1.16.0" and pins["openenv"] == "0.10.0"
    assert pins["aiohttp"] and pins["torch"] == "2.13.0" and pins["transformers"] == "5.24.0"
    assert int(pins["mcp"].split(".")[0]) < 2  # openenv's fastmcp 3 (vLLM 0.30+ would need mcp 2)


@pytest.mark.index
def test_the_cpu_job_environment_resolves_without_vllm(tmp_path):
    pins = compile_set(JOB_EXTRAS["cpu"], "3.11", tmp_path)
    assert "vllm" not in pins and pins["trl"] == "1.16.0" and pins["openenv"] == "0.10.0"


@pytest.mark.index
@pytest.mark.failure_mode("F50")
def test_a_vllm_outside_what_openenv_allows_is_caught_here(tmp_path):
    """The planted fault: vLLM 0.31 (inside TRL's supported range) beside openenv 0.10 cannot install."""
    with pytest.raises(AssertionError, match="mcp"):
        compile_set(JOB_EXTRAS["gpu"], "3.11", tmp_path, plant=('"vllm==0.29.0"', '"vllm==0.31.0"'))


def need_index(url: str = INDEX) -> None:
    """Skip when the package index does not answer at all (this machine's kind may be offline)."""
    import httpx

    try:
        httpx.get(f"{url}/pip/", timeout=15, follow_redirects=True).raise_for_status()
    except httpx.HTTPError as e:
        pytest.skip(f"the package index {url} does not answer ({type(e).__name__}: {e})"[:300])


def cpu_torch_links() -> str:
    """A find-links directory holding a CPU build of torch (PyPI's Linux torch is the CUDA one,
    about 3 GB with its libraries): this machine's pip configuration names one."""
    import os

    for folder in os.environ.get("PIP_FIND_LINKS", "").split():
        if any(Path(folder).glob("torch-*+cpu-*.whl")):
            return folder
    pytest.skip("no CPU torch wheel in PIP_FIND_LINKS: the job's install would fetch PyPI's CUDA torch (~3 GB)")


@pytest.mark.index
@pytest.mark.slow
def test_the_jobs_own_install_and_start_path_runs_end_to_end_on_cpu(tmp_path, suite_dir):
    """What HF Jobs runs for a CPU flavour, from an empty environment: `uv run --with "dagent[...] @
    git+URL@SHA" jobs/eval.py ...`, here with this checkout's commit as the URL, on 2 tasks with the
    local engine. The one difference: torch's CPU build comes from a local wheel directory."""
    import json
    import os

    from dagent.launch.job import extras_for, project_requirement

    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    if not sha:
        pytest.skip("not a git checkout: the job installs dagent from a commit")
    requirement = project_requirement(f"file://{ROOT}", sha, extras=extras_for("cpu-upgrade"))
    out = tmp_path / "out"
    argv = [
        uv(),
        "run",
        "--no-project",
        "--python",
        "3.11",
        "--find-links",
        cpu_torch_links(),
        "--with",
        requirement,
        "--",
        str(ROOT / "jobs" / "eval.py"),
        "--agent",
        "tools",
        "--model",
        "tiny-qwen3",
        "--preset",
        "cpu",
        "--suite",
        str(suite_dir),
        "--split",
        "test",
        "--limit",
        "2",
        "--workers",
        "1",
        "--out",
        str(out),
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH"))}
    r = subprocess.run(argv, capture_output=True, text=True, timeout=1500, cwd=tmp_path, env=env)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-3000:])
    (arm,) = [p for p in out.iterdir() if (p / "summary.json").is_file()]
    summary = json.loads((arm / "summary.json").read_text())
    assert summary["tasks"] == 2 and summary["model"]["name"] == "tiny-qwen3"
    assert summary["provenance"]["project"]["revision"] == sha  # the job ran the pinned commit
