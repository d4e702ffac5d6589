"""The `dagent` command line: thin calls into the library.

Errors print `Error: ...` and exit 1 (set DAGENT_DEBUG=1 for the traceback); Ctrl-C exits 130.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import click
import typer

from dagent import settings
from dagent.cli.common import SuiteOpt, console, load_suite, out
from dagent.cli.eval import eval_app
from dagent.cli.launch import jobs_app, sandbox_app, space_app
from dagent.cli.suite import export_app, suite_app, tasks_app
from dagent.engine.server import serve
from dagent.errors import DagentError
from dagent.eval.recordings import append_recording
from dagent.eval.stack import run_rollout
from dagent.jobargs import parse
from dagent.recipes import Recipes
from dagent.reproduce.pipeline import failed_receipts, reproduce
from dagent.reproduce.stages import StageError
from dagent.train.blackbox.args import BlackboxArgs
from dagent.train.blackbox.trainer import train_blackbox
from dagent.train.whitebox.grpo import WhiteboxArgs, train_whitebox

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Train and evaluate LLM data agents.")
engine_app = typer.Typer(no_args_is_help=True, help="A local OpenAI-compatible engine on CPU.")
train_app = typer.Typer(no_args_is_help=True, help="Train a policy with GRPO (white-box) or warm-start it (SFT).")
app.add_typer(train_app, name="train")
app.add_typer(suite_app, name="suite")
app.add_typer(tasks_app, name="tasks")
app.add_typer(engine_app, name="engine")
app.add_typer(export_app, name="export")
app.add_typer(sandbox_app, name="sandbox")
app.add_typer(jobs_app, name="jobs")
app.add_typer(space_app, name="space")
app.add_typer(eval_app, name="eval")


@app.command("rollout")
def rollout_cmd(
    task: Annotated[str, typer.Option("--task", help="Task id (dagent tasks list).")],
    harness: Annotated[str, typer.Option(help="Agent harness: opencode.")] = "opencode",
    model: Annotated[str, typer.Option(help="Local engine model when no --engine-url.")] = "tiny-qwen3",
    engine_url: Annotated[
        Optional[str], typer.Option("--engine-url", help="OpenAI-compatible engine (default: start the local one).")
    ] = None,
    suite: SuiteOpt = None,
    harbor: Annotated[
        Optional[str],
        typer.Option(
            "--harbor",
            help=(
                "A catalog from `dagent export harbor`: run the rollout as `harbor run` of the task's directory there "
                "(docs/harbor.md)."
            ),
        ),
    ] = None,
    out_dir: Annotated[
        Optional[Path],
        typer.Option(
            "--out",
            help=(
                "Append the record and its capture log (traces/) to this recording directory; the demo's Replay tab "
                "opens it."
            ),
        ),
    ] = None,
) -> None:
    """One black-box rollout: outcome, turns, drift summary, findings."""
    if harness != "opencode":
        raise DagentError(f"unknown harness {harness!r}; available: opencode")
    rollout = run_rollout(
        task,
        load_suite(suite),
        recipes=Recipes.of("gpu"),
        model=model,
        engine_url=engine_url,
        harbor_catalog=harbor,
        echo=lambda line: out.print(line, markup=False, highlight=False),
    )
    if out_dir is not None:
        path = append_recording(out_dir, rollout.record, rollout.trajectory if rollout.turns else None)
        out.print(f"recorded in {path}", markup=False, highlight=False)


@train_app.command(
    "whitebox", context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}
)
def train_whitebox_cmd(ctx: typer.Context) -> None:
    """White-box GRPO (jobs/train_whitebox.py's arguments; --help lists them)."""
    train_whitebox(
        parse(WhiteboxArgs, ctx.args, "dagent train whitebox: white-box GRPO"),
        echo=lambda line: console.print(line, markup=False, highlight=False),
    )


@train_app.command(
    "blackbox", context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}
)
def train_blackbox_cmd(ctx: typer.Context) -> None:
    """Black-box GRPO, sync (CPU) or async (GPUs) (jobs/train_blackbox.py's arguments; --help lists them)."""
    train_blackbox(
        parse(BlackboxArgs, ctx.args, "dagent train blackbox: black-box GRPO"),
        echo=lambda line: console.print(line, markup=False, highlight=False),
    )


@app.command("reproduce")
def reproduce_cmd(
    profile: Annotated[
        str,
        typer.Option(
            help=(
                "cpu: this machine, SmolLM2-135M, small sizes (about an hour on 2 cores); gpu: the published recipes "
                "(an HF Job)."
            )
        ),
    ] = "cpu",
    out_dir: Annotated[
        Path, typer.Option("--out", help="Where every stage writes, with results.md and validation.md.")
    ] = Path("runs/reproduce"),
    model: Annotated[Optional[str], typer.Option(help="The base model (default: the profile's).")] = None,
    suite: SuiteOpt = None,
    start: Annotated[
        Optional[str], typer.Option("--from", help="Rerun from this stage (earlier ones must have completed in --out).")
    ] = None,
    stop: Annotated[Optional[str], typer.Option("--to", help="Stop after this stage.")] = None,
) -> None:
    """Build the suite, smoke every loop, evaluate, train both loops, evaluate paired, write receipts."""
    try:
        stages = reproduce(
            profile,
            str(out_dir),
            model=model,
            suite=suite,
            start=start,
            stop=stop,
            load_suite=load_suite,
            echo=lambda line: console.print(line, markup=False, highlight=False),
        )
    except StageError as e:
        console.print(str(e), markup=False, highlight=False)
        raise typer.Exit(1) from None
    failed = failed_receipts(stages)
    if failed:  # a run whose receipts failed is not a reproduction, whatever each stage exited with
        console.print(f"{failed} receipt(s) FAIL: see {out_dir / 'validation.md'}", markup=False, highlight=False)
        raise typer.Exit(1)


@engine_app.command("serve")
def engine_serve(
    model: Annotated[str, typer.Option(help="tiny-qwen3, smollm2-135m, or a local model directory.")] = "tiny-qwen3",
    host: str = "127.0.0.1",
    port: int = 8000,
) -> None:
    """Serve an OpenAI-compatible chat endpoint that answers like vLLM (token ids, logprobs)."""
    serve(model, host=host, port=port)


def main() -> None:
    try:
        app(standalone_mode=False)
    except KeyboardInterrupt:
        console.print("Interrupted.")
        sys.exit(130)
    except (DagentError, typer.BadParameter) as e:
        if settings.read("DAGENT_DEBUG"):
            raise
        console.print(f"[red]Error:[/] {e}")
        sys.exit(1)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except Exception as e:  # click usage errors
        if isinstance(e, click.exceptions.ClickException):
            e.show()
            sys.exit(e.exit_code)
        if isinstance(e, click.exceptions.Abort):
            sys.exit(130)
        raise


if __name__ == "__main__":
    main()
