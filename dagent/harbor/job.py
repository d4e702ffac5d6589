"""Run `harbor run` on exported tasks (its own Python 3.12 venv) and read its job directory back.

`run_harbor` starts Harbor as a subprocess with dagent's sandbox provider (no Docker), so the
caller (dagent's own venv: the evaluator, the black-box trainer) never imports Harbor. `read_job`
turns the job's per-trial `result.json` files into frozen `HarborTrial` records, where a trial
whose verifier wrote no reward (an exception, an ungraded task) keeps reward None, never 0.0 (F32).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from dagent import settings
from dagent.errors import ConfigError, DagentError

PROVIDER = "dagent.harbor.provider:SandboxEnvironment"
_ROOT = Path(__file__).resolve().parents[2]


class HarborError(DagentError):
    """Harbor could not be run, or its job directory is not what `harbor run` writes."""


@dataclass(frozen=True)
class HarborTrial:
    task: str  # the task directory's name (dagent's task id)
    trial: str
    reward: float | None  # None: no reward was written (F32), see `error`
    correct: float | None
    error: str | None  # Harbor's exception type and message, when the trial failed
    path: str = ""  # the trial directory (agent/, verifier/, artifacts/)

    def file(self, rel: str) -> bytes | None:
        """A file the trial left (`verifier/grade.json`, `artifacts/workdir/answer.txt`), or None."""
        p = Path(self.path, rel)
        return p.read_bytes() if self.path and p.is_file() else None


def harbor_binary() -> Path:
    """`harbor` of .venv-harbor (made by `bash scripts/setup.sh --tests`), or $DAGENT_HARBOR."""
    path = Path(settings.read("DAGENT_HARBOR") or _ROOT / ".venv-harbor" / "bin" / "harbor")
    if not path.exists():
        raise ConfigError(
            f"Harbor is not installed at {path}: run `bash scripts/setup.sh --tests` "
            "(Harbor needs Python 3.12 or 3.13, in its own venv) or set DAGENT_HARBOR"
        )
    return path


def run_harbor(
    path: str | Path,
    jobs_dir: str | Path,
    *,
    agent: str = "oracle",
    concurrency: int = 2,
    model: str | None = None,
    agent_kwargs: Mapping[str, str] | None = None,
    env_kwargs: Mapping[str, str] | None = None,
    include: Sequence[str] = (),
    extra_env: Mapping[str, str] | None = None,
    timeout_s: float = 3600.0,
) -> list[HarborTrial]:
    """`harbor run -p PATH -a AGENT -e <dagent's provider>`; returns the job's trials."""
    jobs_dir = Path(jobs_dir)
    before = set(jobs_dir.iterdir()) if jobs_dir.is_dir() else set()
    argv = [
        str(harbor_binary()),
        "run",
        "-p",
        str(path),
        "-a",
        agent,
        "-e",
        PROVIDER,
        "-o",
        str(jobs_dir),
        "-n",
        str(concurrency),
        "--quiet",
        "--yes",
    ]
    if model:
        argv += ["-m", model]
    for key, value in (agent_kwargs or {}).items():
        argv += ["--ak", f"{key}={value}"]
    for key, value in (env_kwargs or {}).items():
        argv += ["--ek", f"{key}={value}"]
    for pattern in include:
        argv += ["-i", pattern]
    # LiteLLM (imported by Harbor) fetches a price list from GitHub at start-up, retrying for ~10 s
    env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", **os.environ, **(extra_env or {})}
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired as e:
        raise HarborError(f"harbor run did not finish in {timeout_s:.0f} s") from e
    new = sorted(set(jobs_dir.iterdir()) - before) if jobs_dir.is_dir() else []
    if not new:
        raise HarborError(
            f"harbor run wrote no job under {jobs_dir} (exit {r.returncode}): {(r.stderr or r.stdout).strip()[-800:]}"
        )
    return read_job(new[-1])


def read_job(job_dir: str | Path) -> list[HarborTrial]:
    """The trials of one Harbor job directory, sorted by task."""
    job_dir = Path(job_dir)
    results = sorted(p for p in job_dir.glob("*/result.json"))
    if not results:
        raise HarborError(f"no trial results under {job_dir}: is it a `harbor run` job directory?")
    trials = []
    for path in results:
        r = json.loads(path.read_text())
        rewards = (r.get("verifier_result") or {}).get("rewards") or {}
        exc = r.get("exception_info")
        error = f"{exc.get('exception_type')}: {exc.get('exception_message', '')[:300]}" if exc else None
        name = (r.get("task_name") or "").split("/")[-1] or Path((r.get("task_id") or {}).get("path", "")).name
        trials.append(
            HarborTrial(
                task=name,
                trial=r.get("trial_name", path.parent.name),
                reward=rewards.get("reward"),
                correct=rewards.get("correct"),
                error=error,
                path=str(path.parent),
            )
        )
    return sorted(trials, key=lambda t: (t.task, t.trial))
