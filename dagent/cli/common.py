"""What every `dagent` command module shares: the two consoles, the progress bar, the `--suite`
option and loading the suite (building the bundled one on first use)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from dagent.suites.sources import default_suite_dir, load_tasks

console = Console(stderr=True)
out = Console()

SuiteOpt = Annotated[
    Optional[str],
    typer.Option("--suite", help="Local build dir, Hub repo id or hf://datasets/... (default: the bundled build)."),
]


def progress_bar() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )


def build_with_progress(out_dir: Path) -> dict:
    """Build the suite into `out_dir` with a progress bar per stage."""
    from datasets_build.build import build_suite

    with progress_bar() as bar:
        ids: dict[str, object] = {}

        def progress(stage: str, done: int, total: int) -> None:
            if stage not in ids:
                ids[stage] = bar.add_task(stage, total=total)
            bar.update(ids[stage], completed=done, total=total)

        return build_suite(out_dir, progress=progress)


def load_suite(source: str | None):
    """The suite at `source` (Hub id, path); the bundled build by default, built on first use."""
    if source is None and not (default_suite_dir() / "data").is_dir():
        console.print(f"[yellow]No bundled suite at {default_suite_dir()} yet: building it (one time).[/]")
        build_with_progress(default_suite_dir())
    return load_tasks(source)
