"""HF Jobs that install THIS project, at a pinned revision.

PyPI's `dagent` is an unrelated package: a job script whose PEP 723 header names a bare `dagent`
installs the wrong thing without an error. So the scripts under `jobs/` declare no dagent at all,
and the launcher adds it as `--with "dagent[EXTRAS] @ git+<project url>@<full commit sha>"` (the
repository or Hub repo holding this code, at the commit checked out here; a dirty tree is
refused, because the job would not run what is on disk). EXTRAS is the job environment of its
hardware (`JOB_EXTRAS`): on a GPU flavour `gpu` (vLLM beside TRL in the trainer's process, the
set tests/launch/test_environments.py resolves for Linux x86_64 with CUDA), on a CPU flavour the
same set less vLLM.

    spec = job_spec("eval", ["--agent", "oracle", "--split", "test"], flavor="cpu-upgrade",
                    secrets=["HF_TOKEN"])
    print(spec.hf_command())          # the equivalent `hf jobs uv run ...` line (what --dry-run prints)
    info = submit(spec)               # HfApi.run_uv_job, secrets read by NAME from the environment
    for line in logs(info.id, follow=True): print(line)

Secrets travel by name: the spec and every printed line hold names only; values are read from
this process's environment at submission (F22).
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dagent import settings
from dagent.errors import ConfigError
from dagent.launch.ports import ENGINE_PORT_VARIABLE, EXPOSED_ENGINE_PORT
from dagent.provenance import git
from dagent.sandbox.image import python_version

__all__ = ["JOB_EXTRAS", "JOB_SCRIPTS", "JobSpec", "extras_for", "job_spec", "logs", "project_requirement", "submit"]

ROOT = Path(__file__).resolve().parents[2]
JOB_SCRIPTS = {
    "eval": "jobs/eval.py",
    "train-whitebox": "jobs/train_whitebox.py",
    "train-blackbox": "jobs/train_blackbox.py",
    "sft": "jobs/sft_warmstart.py",
}
PINNED = re.compile(r"^dagent(\[[a-z,-]+\])? @ (git\+\S+@[0-9a-f]{40}|\S+\.whl)$")
#: The extras a job installs, by hardware (pyproject.toml's extras; `gpu` adds vLLM and aiohttp).
JOB_EXTRAS = {"cpu": "engine,env,cloud,report", "gpu": "gpu"}


def extras_for(flavor: str) -> str:
    """The job environment of an HF Jobs flavour: `cpu-basic`/`cpu-upgrade` get the CPU set."""
    return JOB_EXTRAS["cpu" if flavor.startswith("cpu") else "gpu"]


@dataclass(frozen=True)
class JobSpec:
    """One HF Job: a script of `jobs/`, its arguments, and how and where it runs."""

    script: str  # path relative to the project root
    args: tuple[str, ...]
    requirement: str  # the pinned dagent: `dagent[EXTRAS] @ git+URL@SHA`
    flavor: str = "cpu-basic"
    timeout: str | None = None
    python: str = field(default_factory=lambda: python_version(micro=False))  # the golds' interpreter
    env: tuple[tuple[str, str], ...] = ()
    secrets: tuple[str, ...] = ()  # names only; values come from the environment at submission
    labels: tuple[tuple[str, str], ...] = ()
    expose: tuple[int, ...] = ()  # container ports reachable through the jobs proxy (a remote Space's callers)
    image: str | None = None  # a Docker image with uv (the black-box image brings Node, opencode and pi)

    def hf_command(self) -> list[str]:
        """The `hf jobs uv run` argv this spec is (what `--dry-run` prints, shell-quoted)."""
        argv = ["hf", "jobs", "uv", "run", "--flavor", self.flavor, "--python", self.python]
        if self.timeout:
            argv += ["--timeout", self.timeout]
        for key, value in self.env:
            argv += ["-e", f"{key}={value}"]
        for name in self.secrets:
            argv += ["--secrets", name]
        for key, value in self.labels:
            argv += ["--label", f"{key}={value}"]
        for port in self.expose:
            argv += ["--expose", str(port)]
        if self.image:
            argv += ["--image", self.image]
        # `--` before the script: without it hf takes a job argument that shares a name with one of
        # its own options (eval's --timeout 60) as its own, silently (a 60-second job)
        return [*argv, "--with", self.requirement, "--", self.script, *self.args]

    def hf_line(self) -> str:
        return shlex.join(self.hf_command())

    @property
    def script_url(self) -> str | None:
        """The job script at the pinned commit, for a project on GitHub: the job runs exactly that
        commit's script, fetched by uv (no upload of a local copy through Xet storage)."""
        m = re.match(
            r"^dagent(?:\[[a-z,-]+\])? @ git\+https://github\.com/([\w.-]+)/([\w.-]+?)(?:\.git)?@([0-9a-f]{40})$",
            self.requirement,
        )
        return f"https://raw.githubusercontent.com/{m[1]}/{m[2]}/{m[3]}/{self.script}" if m else None


def _git(*args: str) -> str | None:
    return git(*args)


def project_requirement(
    url: str | None = None, revision: str | None = None, *, extras: str = JOB_EXTRAS["gpu"], allow_dirty: bool = False
) -> str:
    """`dagent[extras] @ git+URL@SHA`: URL from the argument, $DAGENT_PROJECT_URL or the git remote
    `origin`; SHA the full commit (default: the checked-out one, and then a clean tree)."""
    url = url or settings.read("DAGENT_PROJECT_URL") or _git("remote", "get-url", "origin")
    if not url:
        raise ConfigError(
            "no project URL for the job to install dagent from: pass --project-url "
            "https://github.com/OWNER/dagent (or a Hub repo holding it), or set DAGENT_PROJECT_URL"
        )
    if revision is None:
        revision = _git("rev-parse", "HEAD")
        if not allow_dirty and _git("status", "--porcelain", "--untracked-files=no"):
            raise ConfigError(
                "the working tree has uncommitted changes the job would not run: commit and push "
                "them, or pass --revision SHA of a pushed commit"
            )
    if not revision or not re.fullmatch(r"[0-9a-f]{40}", revision):
        raise ConfigError(
            f"--revision must be a full 40-character commit sha (got {revision!r}): a branch or "
            "tag moves, and the job would install something else later"
        )
    url = url.removeprefix("git+")
    requirement = f"dagent[{extras}] @ git+{url}@{revision}"
    assert PINNED.match(requirement), requirement
    return requirement


def job_spec(
    name: str,
    args: Sequence[str] = (),
    *,
    flavor: str = "cpu-basic",
    timeout: str | None = None,
    env: Mapping[str, str] | None = None,
    secrets: Iterable[str] = (),
    requirement: str | None = None,
    project_url: str | None = None,
    revision: str | None = None,
    extras: str | None = None,
    expose: Iterable[int] = (),
    image: str | None = None,
) -> JobSpec:
    """The spec of job `name` (one of JOB_SCRIPTS) with this project pinned, in the job environment
    of its flavour (`extras` overrides it). A black-box training job whose episodes run on a remote
    server (`--env-url`) has that server call back into the job's engine: its port is pinned
    (`DAGENT_ENGINE_PORT`) and exposed through the jobs proxy."""
    if name not in JOB_SCRIPTS:
        raise ConfigError(f"unknown job {name!r}: use one of {', '.join(JOB_SCRIPTS)}")
    requirement = requirement or project_requirement(project_url, revision, extras=extras or extras_for(flavor))
    if not PINNED.match(requirement):
        raise ConfigError(
            f"{requirement!r} does not pin dagent: give 'dagent[gpu] @ git+URL@<40-hex sha>' or a wheel URL"
        )
    sha = requirement.rsplit("@", 1)[-1][:12] if "git+" in requirement else "wheel"
    env = dict(env or {})
    exposed = tuple(expose)
    if name == "train-blackbox" and "--env-url" in args:
        env.setdefault(ENGINE_PORT_VARIABLE, str(EXPOSED_ENGINE_PORT))
        exposed = tuple(dict.fromkeys((*exposed, int(env[ENGINE_PORT_VARIABLE]))))
    return JobSpec(
        script=JOB_SCRIPTS[name],
        args=tuple(args),
        requirement=requirement,
        flavor=flavor,
        timeout=timeout,
        env=tuple(sorted(env.items())),
        secrets=tuple(secrets),
        labels=(("app", "dagent"), ("job", name), ("revision", sha)),
        expose=exposed,
        image=image,
    )


def submit(
    spec: JobSpec, *, api: Any = None, namespace: str | None = None, environ: Mapping[str, str] | None = None
) -> Any:
    """`HfApi.run_uv_job` of `spec` (a real call; HF_TOKEN). Returns the JobInfo."""
    environ = os.environ if environ is None else environ
    missing = [n for n in spec.secrets if not environ.get(n)]
    if missing:
        raise ConfigError(
            f"secret(s) {', '.join(missing)} not set in this environment: export them (they are "
            "sent by name, encrypted, never on a command line)"
        )
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi()
    return api.run_uv_job(
        spec.script_url or str(ROOT / spec.script),
        script_args=list(spec.args),
        dependencies=[spec.requirement],
        python=spec.python,
        image=spec.image,
        env=dict(spec.env) or None,
        secrets={n: environ[n] for n in spec.secrets} or None,
        flavor=spec.flavor,
        timeout=spec.timeout,
        labels=dict(spec.labels),
        namespace=namespace,
        expose=list(spec.expose) or None,
    )


def logs(job_id: str, *, follow: bool = False, api: Any = None, namespace: str | None = None) -> Iterable[str]:
    """The job's log lines (`HfApi.fetch_job_logs`), following until it ends when `follow`."""
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi()
    return api.fetch_job_logs(job_id=job_id, follow=follow, namespace=namespace)
