"""Spaces: deploy an environment server, or duplicate one, with huggingface_hub's real calls.

`deploy(kind, OWNER/NAME)`: create a Docker Space, upload the repository files its Dockerfile
builds from (the package, the suite builder, the Space folder) with the Dockerfile (the shared
base's stages, then the Space's own: `dockerfile`) and the Space card at the repo root, set secrets
BY NAME from this process's environment (values never printed, F22) and plain variables, restart
it, and wait until its `/health` answers (the Space's own URL, `https://OWNER-NAME.hf.space`).
`duplicate(FROM, TO)`: `HfApi.duplicate_repo(..., repo_type="space")` with the secrets and
variables a copy needs (secrets are not copied by the Hub).

`--dry-run` prints the plan (files, secret NAMES, variables, the health URL) and calls nothing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from dagent.errors import ConfigError, DagentError

ROOT = Path(__file__).resolve().parents[2]
SPACES = {"whitebox": "spaces/data-agent", "blackbox": "spaces/data-agent-blackbox"}
SOURCES = ("pyproject.toml", "dagent", "datasets_build")
#: The base every Space image starts FROM: its stages `dagent-base` and `dagent-suite` (spaces/base/Dockerfile).
BASE_DOCKERFILE = "spaces/base/Dockerfile"
BASE_STAGES = ("dagent-base", "dagent-suite")


class SpaceNotHealthy(DagentError):
    """The Space did not answer /health in time; the message names its last stage."""


@dataclass(frozen=True)
class DeployPlan:
    kind: str
    repo_id: str
    files: tuple[str, ...]
    secrets: tuple[str, ...]  # names only
    variables: dict[str, str] = field(default_factory=dict)
    private: bool = False

    @property
    def health_url(self) -> str:
        return f"https://{self.repo_id.replace('/', '-').replace('_', '-').lower()}.hf.space/health"

    def lines(self) -> list[str]:
        return [
            f"space {self.repo_id} (docker, {'private' if self.private else 'public'}): {self.kind} server "
            f"from {SPACES[self.kind]}/",
            f"upload {len(self.files)} files: Dockerfile and README.md (the Space card) at the root, "
            f"{', '.join(SOURCES)}, {SPACES[self.kind]}/",
            "secrets (by name, from this environment): " + (", ".join(self.secrets) or "none"),
            "variables: " + (", ".join(f"{k}={v}" for k, v in sorted(self.variables.items())) or "none"),
            f"restart, then wait for {self.health_url}",
        ]


def _shipped(paths: Sequence[str]) -> list[str]:
    """The files git ships under `paths` (tracked and untracked-not-ignored)."""
    out = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "--", *paths], cwd=ROOT, capture_output=True, text=True
    )
    if out.returncode != 0:
        raise ConfigError(f"cannot list the files to upload (git ls-files failed): {out.stderr.strip()}")
    return [p for p in out.stdout.split() if (ROOT / p).is_file()]


def plan(
    kind: str,
    repo_id: str,
    *,
    secrets: Sequence[str] = (),
    variables: dict[str, str] | None = None,
    private: bool = False,
) -> DeployPlan:
    if kind not in SPACES:
        raise ConfigError(f"unknown Space {kind!r}: use whitebox or blackbox")
    if repo_id.count("/") != 1:
        raise ConfigError(f"{repo_id!r} is not OWNER/NAME")
    if not (variables or {}).get("DAGENT_SUITE"):  # the images carry no suite: it comes at start-up
        raise ConfigError(
            "the Space's image carries no task suite: pass --var DAGENT_SUITE=OWNER/NAME (a dataset "
            "that `dagent suite push OWNER/NAME` made; the Space downloads it when it starts)"
        )
    files = ["Dockerfile", "README.md", *_shipped([*SOURCES, SPACES[kind]])]
    return DeployPlan(kind, repo_id, tuple(files), tuple(secrets), dict(variables or {}), private)


def dockerfile(space_dir: str, root: Path = ROOT) -> str:
    """The one Dockerfile a Space on the Hub builds: the shared base's stages (spaces/base/Dockerfile),
    then the Space's own Dockerfile, whose `FROM dagent-base` and `COPY --from=dagent-suite` then name
    those stages (locally they name the images built from them; a Space cannot pull a local image)."""
    base = (root / BASE_DOCKERFILE).read_text()
    own = (root / space_dir / "Dockerfile").read_text()
    missing = [f"AS {stage}" for stage in BASE_STAGES if f" AS {stage}\n" not in base]
    if missing or not re.search(r"^FROM dagent-base\s*$", own, re.MULTILINE):
        raise ConfigError(
            f"{space_dir}/Dockerfile must start its image FROM dagent-base and {BASE_DOCKERFILE} must define the "
            f"stages {', '.join(BASE_STAGES)} (missing: {', '.join(missing) or 'FROM dagent-base'})"
        )
    return f"{base.rstrip()}\n\n# ---- the Space's own image ({space_dir}/Dockerfile)\n{own}"


def stage_files(p: DeployPlan, dest: Path) -> Path:
    """The Space repo's tree: what the Dockerfile's COPY lines read, from the repository root; the
    Dockerfile itself is the base's stages and the Space's own (`dockerfile`)."""
    space = ROOT / SPACES[p.kind]
    for rel in p.files:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        if rel == "Dockerfile":
            (dest / rel).write_text(dockerfile(SPACES[p.kind]))
            continue
        shutil.copy2(space / "README.md" if rel == "README.md" else ROOT / rel, dest / rel)
    return dest


def secret_values(names: Sequence[str], environ: dict[str, str] | None = None) -> dict[str, str]:
    env = os.environ if environ is None else environ
    missing = [n for n in names if not env.get(n)]
    if missing:
        raise ConfigError(
            f"secret {', '.join(missing)} is not set in this environment: export it (it is sent by "
            "name, never written to a file or a command line)"
        )
    return {n: env[n] for n in names}


def wait_healthy(
    url: str,
    *,
    timeout_s: float,
    api: Any = None,
    repo_id: str | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict:
    deadline = clock() + timeout_s
    stage = "unknown"
    while clock() < deadline:
        try:
            r = httpx.get(url, timeout=10)
            if r.status_code == 200:
                return r.json()
        except httpx.HTTPError:
            pass
        if api is not None and repo_id is not None:
            try:
                stage = str(api.get_space_runtime(repo_id).stage)
            except Exception:  # noqa: BLE001 - the stage is only for the message
                pass
            if stage in ("BUILD_ERROR", "RUNTIME_ERROR", "CONFIG_ERROR"):
                raise SpaceNotHealthy(f"{repo_id} stopped in stage {stage}: read its logs on the Hub")
        sleep(5)
    raise SpaceNotHealthy(f"{url} did not answer within {timeout_s:.0f} s (last stage {stage})")


def deploy(
    p: DeployPlan,
    *,
    api: Any = None,
    health_url: str | None = None,
    timeout_s: float = 1800.0,
    echo: Callable[[str], None] = print,
) -> dict:
    from huggingface_hub import HfApi

    api = api or HfApi()
    values = secret_values(p.secrets)  # before anything is created
    api.create_repo(p.repo_id, repo_type="space", space_sdk="docker", private=p.private, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="dagent-space-") as tmp:
        api.upload_folder(
            repo_id=p.repo_id,
            repo_type="space",
            folder_path=str(stage_files(p, Path(tmp))),
            commit_message=f"dagent {p.kind} environment server",
        )
    echo(f"uploaded {len(p.files)} files to spaces/{p.repo_id}")
    for name, value in values.items():
        api.add_space_secret(p.repo_id, name, value)
    for key, value in p.variables.items():
        api.add_space_variable(p.repo_id, key, value)
    if values or p.variables:
        echo(f"set secrets {', '.join(values) or 'none'}; variables {', '.join(p.variables) or 'none'}")
    api.restart_space(p.repo_id)
    url = health_url or p.health_url
    echo(f"restarted; waiting for {url}")
    health = wait_healthy(url, timeout_s=timeout_s, api=api, repo_id=p.repo_id)
    echo(f"healthy: {health}")
    return health


def duplicate(
    from_id: str,
    to_id: str,
    *,
    secrets: Sequence[str] = (),
    variables: dict[str, str] | None = None,
    private: bool = False,
    api: Any = None,
    echo: Callable[[str], None] = print,
) -> str:
    from huggingface_hub import HfApi

    api = api or HfApi()
    values = secret_values(secrets)
    url = api.duplicate_repo(
        from_id,
        to_id,
        repo_type="space",
        private=private,
        exist_ok=True,
        space_secrets=[{"key": k, "value": v} for k, v in values.items()] or None,
        space_variables=[{"key": k, "value": v} for k, v in (variables or {}).items()] or None,
    )
    echo(f"duplicated spaces/{from_id} -> {url} (secrets {', '.join(values) or 'none'})")
    return str(url)
