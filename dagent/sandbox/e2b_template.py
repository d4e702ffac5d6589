"""The E2B template the data-agent tasks need, as code (`e2b.Template`, the pinned e2b's builder).

E2B's default `base` template fails the tasks in two ways before an agent runs (measured by the
published system): `huggingface_hub` is absent, so bucket staging cannot run, and `/workdir` is not
writable by `user`, so set-up dies; both hand the agent an empty input directory, which scores like
a wrong answer. CPU and memory are fixed when a template is built, not per sandbox. This template:

- `FROM python:<the version the golds were measured with>`;
- the table packages the reference programs import, at the versions that built the golds
  (`dagent.sandbox.image`), and `huggingface_hub` at this environment's version for staging;
- curl, Node.js and opencode from npm at the pinned version (`dagent.harness.opencode.OPENCODE_PACKAGE`);
- `/workdir/input` made and `/workdir` owned by `user`, the user E2B runs commands as;
- sized from the suite's largest task (its measured `cpus` / `memory_mb`, F18), never below
  E2B's 2 CPU / 2 GB floor, unless `--cpu` / `--memory-mb` say otherwise.

`dagent sandbox template e2b --alias NAME [--cpu N --memory-mb M] [--dry-run]` builds it
(`Template.build`, a real call that needs E2B_API_KEY) or prints it offline (`Template.to_dockerfile`).
The HF sandbox image is the same recipe run as root (`dagent.sandbox.hf_image`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

from dagent.core.suite import TaskSuite
from dagent.errors import ConfigError, MissingDependencyError, SandboxError
from dagent.sandbox.base import INPUT_DIR, WORKDIR
from dagent.sandbox.image import OPENCODE_PACKAGE, TABLE_PACKAGES, pins, python_version

__all__ = [
    "DEFAULT_TEMPLATE",
    "E2BTemplateSpec",
    "build_template",
    "render_template",
    "template_builder",
    "template_spec",
]

DEFAULT_TEMPLATE = "dagent-data-agent"  # the alias E2BBackend uses unless told otherwise
STAGING_PACKAGES = ("huggingface_hub",)
MIN_CPUS, MIN_MEMORY_MB = 2, 2048  # E2B's smallest template size
_USER = "user"


@dataclass(frozen=True)
class E2BTemplateSpec:
    alias: str
    python: str  # image tag: the interpreter version the golds were measured with
    packages: tuple[str, ...]  # name==version
    npm: tuple[str, ...]  # name@version, installed globally
    cpus: int
    memory_mb: int
    user: str = _USER


def template_spec(
    suite: TaskSuite | None = None,
    *,
    alias: str = DEFAULT_TEMPLATE,
    cpus: int | None = None,
    memory_mb: int | None = None,
) -> E2BTemplateSpec:
    """The template for `suite`'s tasks: sized from its largest task unless given."""
    tasks = [t for base in (suite.bases if suite else ()) for t in suite.tasks(base)]
    need_cpus = max([MIN_CPUS, *(t.cpus for t in tasks)])
    need_mb = max([MIN_MEMORY_MB, *(t.memory_mb for t in tasks)])
    cpus, memory_mb = cpus or need_cpus, memory_mb or need_mb
    if cpus < need_cpus or memory_mb < need_mb:
        raise ConfigError(
            f"--cpu {cpus} / --memory-mb {memory_mb} is smaller than the suite's largest task "
            f"({need_cpus} cpu / {need_mb} MB, measured): a sandbox that small is OOM-killed "
            "on it (F18); build at least that size"
        )
    return E2BTemplateSpec(
        alias=alias,
        python=python_version(),
        packages=tuple(pins((*TABLE_PACKAGES, *STAGING_PACKAGES))),
        npm=(OPENCODE_PACKAGE,),
        cpus=cpus,
        memory_mb=memory_mb,
    )


def e2b_sdk() -> Any:
    try:
        import e2b
    except ImportError as e:
        raise MissingDependencyError("e2b", extra="cloud", purpose="building the E2B template") from e
    return e2b


def template_builder(spec: E2BTemplateSpec) -> Any:
    """The `e2b.Template` for `spec` (nothing is sent anywhere)."""
    e2b = e2b_sdk()
    return (
        e2b.Template()
        .from_python_image(spec.python)
        .apt_install(["curl", "nodejs", "npm"], no_install_recommends=True)
        .pip_install(list(spec.packages))
        .npm_install(list(spec.npm), g=True)
        .run_cmd(
            f"id -u {spec.user} >/dev/null 2>&1 || useradd --create-home --shell /bin/bash {spec.user}", user="root"
        )
        .make_dir(INPUT_DIR, user="root")
        .run_cmd(f"chown -R {spec.user}:{spec.user} {WORKDIR}", user="root")
        .set_user(spec.user)
        .set_workdir(WORKDIR)
    )


def render_template(spec: E2BTemplateSpec) -> str:
    """What `--dry-run` prints: the template as a Dockerfile, and the size it is built at."""
    e2b = e2b_sdk()
    return (
        f"# E2B template {spec.alias!r}: {spec.cpus} cpu / {spec.memory_mb} MB (fixed at build time)\n"
        + e2b.Template.to_dockerfile(template_builder(spec))
    )


def build_template(
    spec: E2BTemplateSpec, *, api_key: str | None = None, on_log: Callable[[str], None] = lambda _line: None
) -> Any:
    """Build and register the template with E2B (a real call; E2B_API_KEY). Returns its BuildInfo."""
    e2b = e2b_sdk()
    key = api_key or os.environ.get("E2B_API_KEY")
    if not key:
        raise ConfigError(
            "E2B_API_KEY is not set: export E2B_API_KEY=<your key from the E2B dashboard>, "
            "or print the template offline with --dry-run"
        )
    try:
        return e2b.Template.build(
            template_builder(spec),
            alias=spec.alias,
            cpu_count=spec.cpus,
            memory_mb=spec.memory_mb,
            on_build_logs=lambda entry: on_log(str(entry)),
            api_key=key,
        )
    except Exception as e:
        raise SandboxError(f"E2B could not build template {spec.alias!r}: {e}") from e
