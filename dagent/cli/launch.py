"""`dagent jobs ...` and `dagent sandbox ...`: running dagent elsewhere (HF Jobs, Slurm) and the
sandboxes it runs in (the isolation self-check, the E2B template). Registered on `dagent.cli.app.app`."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from dagent.cli.common import SuiteOpt, console, load_suite, out
from dagent.errors import DagentError
from dagent.launch.job import job_spec, logs, submit
from dagent.launch.slurm import sbatch_script
from dagent.launch.space import deploy, duplicate, plan
from dagent.sandbox.e2b_template import build_template, render_template, template_spec
from dagent.sandbox.hf_image import publish_image, sandbox_dockerfile
from dagent.sandbox.isolation import check_isolation, suite_paths
from dagent.sandbox.local import LocalBackend

sandbox_app = typer.Typer(no_args_is_help=True, help="Sandbox images and checks.")
template_app = typer.Typer(no_args_is_help=True, help="Build the sandbox template a cloud backend starts from.")
sandbox_app.add_typer(template_app, name="template")
image_app = typer.Typer(no_args_is_help=True, help="Publish the image a cloud backend's sandboxes run.")
sandbox_app.add_typer(image_app, name="image")
jobs_app = typer.Typer(no_args_is_help=True, help="Run dagent's jobs on HF Jobs, with this project pinned at a commit.")


@jobs_app.command("run", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def jobs_run(
    ctx: typer.Context,
    name: Annotated[
        str, typer.Argument(help="eval, train-whitebox, train-blackbox or sft; the job's own arguments follow.")
    ],
    flavor: Annotated[str, typer.Option("--flavor", help="HF Jobs hardware (`hf jobs hardware`).")] = "cpu-basic",
    timeout: Annotated[
        Optional[str], typer.Option("--job-timeout", help="Longest the job may run: 300, 5m, 2h, 1d.")
    ] = None,
    secret: Annotated[
        Optional[list[str]], typer.Option("--secret", help="Secret sent by NAME from this environment (repeatable).")
    ] = None,
    env: Annotated[
        Optional[list[str]], typer.Option("--env", help="KEY=VALUE for the job (repeatable; no secrets).")
    ] = None,
    project_url: Annotated[
        Optional[str],
        typer.Option(
            "--project-url",
            help="Repository the job installs dagent from (default: $DAGENT_PROJECT_URL, else git remote origin).",
        ),
    ] = None,
    revision: Annotated[
        Optional[str],
        typer.Option("--revision", help="Full commit sha (default: the checked-out commit; a dirty tree is refused)."),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the equivalent `hf jobs uv run` line; submit nothing.")
    ] = False,
    detach: Annotated[bool, typer.Option("--detach", help="Submit and return; do not follow the logs.")] = False,
    expose: Annotated[
        Optional[list[int]],
        typer.Option(
            "--expose",
            help=(
                "A container port reachable through the jobs proxy (repeatable; a train-blackbox job with --env-url "
                "exposes its engine itself)."
            ),
        ),
    ] = None,
    image: Annotated[
        Optional[str],
        typer.Option(
            help=(
                "A Docker image with uv to run the job in: the black-box image (spaces/data-agent-blackbox/Dockerfile, "
                "pushed to a registry) brings Node, opencode and pi for black-box jobs without --env-url."
            )
        ),
    ] = None,
) -> None:
    """Submit a job script of jobs/ to HF Jobs (HfApi.run_uv_job), with dagent pinned at a commit."""
    pairs = dict(e.split("=", 1) for e in env or [] if "=" in e)
    if len(pairs) != len(env or []):
        raise DagentError("--env takes KEY=VALUE")
    spec = job_spec(
        name,
        ctx.args,
        flavor=flavor,
        timeout=timeout,
        env=pairs,
        secrets=secret or [],
        project_url=project_url,
        revision=revision,
        expose=expose or (),
        image=image,
    )
    if dry_run:
        typer.echo(spec.hf_line())
        return
    info = submit(spec)
    out.print(f"job {info.id} submitted: {getattr(info, 'url', '')}", markup=False, highlight=False)
    if not detach:
        for line in logs(info.id, follow=True):
            typer.echo(line)


@jobs_app.command("slurm", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def jobs_slurm(
    ctx: typer.Context,
    name: Annotated[
        str, typer.Argument(help="eval, train-whitebox or train-blackbox; the job's own arguments follow.")
    ],
    gpus: Annotated[int, typer.Option("--gpus", help="GPUs on the node.")] = 8,
    engine_gpus: Annotated[
        int, typer.Option("--engine-gpus", help="Of those, the ones serving the policy (training).")
    ] = 1,
    model: Annotated[
        Optional[str], typer.Option("--serve", help="The model the engine serves (training: the trainer's --model).")
    ] = None,
    time_limit: Annotated[str, typer.Option("--time", help="Slurm time limit.")] = "24:00:00",
    partition: Annotated[Optional[str], typer.Option("--partition", help="Slurm partition.")] = None,
    secret: Annotated[
        Optional[list[str]],
        typer.Option("--secret", help="Secret the job needs, by NAME (checked at start, never written)."),
    ] = None,
    project_url: Annotated[
        Optional[str],
        typer.Option(
            "--project-url",
            help="Repository to install dagent from (default: $DAGENT_PROJECT_URL, else git remote origin).",
        ),
    ] = None,
    revision: Annotated[
        Optional[str], typer.Option("--revision", help="Full commit sha (default: the checked-out commit).")
    ] = None,
) -> None:
    """Print an sbatch script for the job (ports from the job id, GPUs split between engine and trainer)."""
    spec = job_spec(name, ctx.args, secrets=secret or [], project_url=project_url, revision=revision, extras="gpu")
    typer.echo(
        sbatch_script(spec, gpus=gpus, engine_gpus=engine_gpus, model=model, time=time_limit, partition=partition),
        nl=False,
    )


@jobs_app.command("logs")
def jobs_logs(
    job_id: str, follow: Annotated[bool, typer.Option("--follow", help="Keep reading until the job ends.")] = False
) -> None:
    """A job's logs (HfApi.fetch_job_logs)."""
    for line in logs(job_id, follow=follow):
        typer.echo(line)


@sandbox_app.command("check")
def sandbox_check(
    isolation: Annotated[
        str,
        typer.Option(
            "--isolation",
            help=(
                "auto (bubblewrap -> mountns -> landlock -> none, the first that works; or DAGENT_ISOLATION), landlock "
                "(no namespaces: Landlock + seccomp) or rlimits (the no-user-namespace path)."
            ),
        ),
    ] = "auto",
    suite: SuiteOpt = None,
) -> None:
    """The isolation self-check the servers run at start-up: from inside a local sandbox, try to read
    the suite's gold, list the suite, read this process's environment, reach a host port and the
    outside. Exit 1 if any of them works."""
    root = load_suite(suite).tables_root.parent  # a local build, or the downloaded Hub snapshot
    backend = LocalBackend(isolation=isolation, hidden=suite_paths(root))  # type: ignore[arg-type]
    report = check_isolation(backend, suite_dir=root)
    out.print(f"tier: {backend.tier} ({report.backend})", markup=False, highlight=False)
    for probe in report.probes:
        out.print(
            f"  {probe.name:<14} {'ESCAPED: ' + probe.detail if probe.escaped else 'refused'}",
            markup=False,
            highlight=False,
        )
    out.print(report.summary(), markup=False, highlight=False)
    if not report.ok:
        raise typer.Exit(1)


@template_app.command("e2b")
def template_e2b(
    alias: Annotated[
        str, typer.Option("--alias", help="Template name E2BBackend(template=...) starts sandboxes from.")
    ] = "dagent-data-agent",
    cpu: Annotated[
        Optional[int], typer.Option("--cpu", help="vCPUs (default: the suite's largest task, at least 2).")
    ] = None,
    memory_mb: Annotated[
        Optional[int],
        typer.Option("--memory-mb", help="Memory in MB (default: the suite's largest task, at least 2048)."),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Print the template (as a Dockerfile) instead of building it; needs no key."),
    ] = False,
    suite: SuiteOpt = None,
) -> None:
    """The E2B template the tasks need (pinned table packages, huggingface_hub, opencode, /workdir owned by `user`)."""
    spec = template_spec(load_suite(suite), alias=alias, cpus=cpu, memory_mb=memory_mb)
    if dry_run:
        typer.echo(render_template(spec), nl=False)  # verbatim: no console wrapping inside a Dockerfile
        return
    info = build_template(spec, on_log=lambda line: console.print(line, markup=False, highlight=False))
    out.print(
        f"built E2B template {alias!r} ({spec.cpus} cpu / {spec.memory_mb} MB): {getattr(info, 'template_id', info)}"
    )


@image_app.command("hf")
def image_hf(
    repo: Annotated[str, typer.Argument(help="The Docker Space (OWNER/NAME) whose image HF sandboxes will run.")],
    private: Annotated[bool, typer.Option("--private", help="Create the Space private.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the Dockerfile instead of publishing it.")] = False,
    suite: SuiteOpt = None,
) -> None:
    """The HF sandbox image: the E2B template's recipe (root, as HF sandboxes run) as a Docker Space."""
    spec = template_spec(load_suite(suite))
    if dry_run:
        typer.echo(sandbox_dockerfile(spec), nl=False)
        return
    image = publish_image(repo, spec, private=private)
    out.print(
        f"published {repo}; once Hugging Face has built it, select it with DAGENT_SANDBOX_IMAGE={image}",
        markup=False,
        highlight=False,
    )


space_app = typer.Typer(no_args_is_help=True, help="Deploy or duplicate the environment Spaces.")


def _pairs(items: Optional[list[str]]) -> dict[str, str]:
    out_: dict[str, str] = {}
    for item in items or []:
        if "=" not in item:
            raise typer.BadParameter(f"{item!r} is not KEY=VALUE")
        key, value = item.split("=", 1)
        out_[key] = value
    return out_


@space_app.command("deploy")
def space_deploy(
    kind: Annotated[str, typer.Argument(help="whitebox (the trainer owns the loop) or blackbox (the agent does).")],
    repo_id: Annotated[str, typer.Argument(help="OWNER/NAME of the Space.")],
    secret: Annotated[
        Optional[list[str]],
        typer.Option(
            "--secret", help="Secret by NAME, its value read from this environment (E2B_API_KEY, HF_TOKEN, ...)."
        ),
    ] = None,
    var: Annotated[
        Optional[list[str]],
        typer.Option("--var", help="Variable KEY=VALUE (DAGENT_SANDBOX=e2b, DAGENT_ENGINE_URL=...)."),
    ] = None,
    private: Annotated[bool, typer.Option(help="A private Space.")] = False,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for /health after the restart.")] = 1800.0,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan; call nothing.")] = False,
) -> None:
    """Create a Docker Space, upload what it builds from, set secrets by name, restart, wait for /health."""
    p = plan(kind, repo_id, secrets=secret or [], variables=_pairs(var), private=private)
    for line in p.lines():
        typer.echo(line)
    if not dry_run:
        try:
            deploy(p, timeout_s=timeout, echo=typer.echo)
        except DagentError as e:
            console.print(str(e), markup=False, highlight=False)
            raise typer.Exit(1) from None


@space_app.command("duplicate")
def space_duplicate(
    from_id: Annotated[str, typer.Argument(help="The Space to copy (OWNER/NAME).")],
    to_id: Annotated[str, typer.Argument(help="The new Space (OWNER/NAME).")],
    secret: Annotated[
        Optional[list[str]], typer.Option("--secret", help="Secret by NAME for the copy (the Hub copies none).")
    ] = None,
    var: Annotated[Optional[list[str]], typer.Option("--var", help="Variable KEY=VALUE for the copy.")] = None,
    private: Annotated[bool, typer.Option(help="A private copy.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print what would be called; call nothing.")] = False,
) -> None:
    """Duplicate an environment Space (huggingface_hub's duplicate_repo), with its secrets by name."""
    if dry_run:
        typer.echo(
            f"duplicate spaces/{from_id} -> spaces/{to_id} ({'private' if private else 'public'}); secrets "
            f"{', '.join(secret or []) or 'none'}; variables {', '.join(_pairs(var)) or 'none'}"
        )
        return
    duplicate(from_id, to_id, secrets=secret or [], variables=_pairs(var), private=private, echo=typer.echo)
