"""Held-out pass@1 at each saved checkpoint, one line per training seed, with 95% CIs: what
`dagent eval watch` measured, read back from its directories (the warm start, `baseline`, at step
0; `checkpoint-N` at step N), or from the records a sitting published of them (`scripts/learning_run.sh`
publish: `docs/runs/lr-LOOP/seed-S/watch/baseline.jsonl`, `checkpoint-N.jsonl`, scored here the way the
watch scored them). A task-level bootstrap CI per point; a point with no graded task is left out of
its line, never drawn at 0.

    python -m dagent.eval.watch_curves runs/lr-whitebox/watch-0 runs/lr-whitebox/watch-1 \\
        --label "seed 0" --label "seed 1" --out runs/lr-whitebox/watch_curves.png
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dagent.errors import ConfigError
from dagent.eval.report import load_records
from dagent.eval.scoring import Scores, task_scores

__all__ = ["WatchPoint", "figure", "plot", "points"]


@dataclass(frozen=True)
class WatchPoint:
    step: int
    pass1: float | None
    ci: tuple[float, float] | None
    graded_tasks: int


def _step(name: str) -> int | None:
    if name == "baseline":
        return 0
    head, _, tail = name.partition("-")
    return int(tail) if head == "checkpoint" and tail.isdigit() else None


def points(watch_dir: Path | str) -> list[WatchPoint]:
    """The arms of one `dagent eval watch --out` directory (or of its published records), by step."""
    watch_dir = Path(watch_dir)
    found = []
    for entry in sorted(watch_dir.iterdir()) if watch_dir.is_dir() else []:
        if entry.is_dir() and (step := _step(entry.name)) is not None and (entry / "scores.json").is_file():
            s = Scores.model_validate(next(iter(json.loads((entry / "scores.json").read_text()).values())))
        elif entry.suffix == ".jsonl" and entry.is_file() and (step := _step(entry.stem)) is not None:
            s = task_scores(load_records(entry), arm=entry.stem)  # published: the records, scored as the watch did
        else:
            continue
        found.append(WatchPoint(step, s.pass_at.get(1), s.pass1_ci, s.graded_tasks))
    if not found:
        raise ConfigError(
            f"no evaluated checkpoint in {watch_dir}: pass the --out directory of `dagent eval watch`, "
            "or a published seed-S/watch folder of checkpoint-N.jsonl records"
        )
    return sorted(found, key=lambda p: p.step)


def plot(
    series: dict[str, list[WatchPoint]], out: Path | str, *, title: str = "held-out pass@1 at each checkpoint"
) -> Path:
    """`figure(series)` written to `out` (PNG)."""
    fig = figure(series, title=title)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    return out


def figure(series: dict[str, list[WatchPoint]], *, title: str = "held-out pass@1 at each checkpoint") -> Any:
    """One line per series (a seed): pass@1 by step with its interval; ungraded points left out."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.2))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    width = max((p.step for pts in series.values() for p in pts), default=1) or 1
    for i, (label, pts) in enumerate(series.items()):
        shown = [p for p in pts if p.pass1 is not None]
        offset = (i - (len(series) - 1) / 2) * width * 0.012  # overlapping error bars side by side
        xs = [p.step + offset for p in shown]
        lo = [p.pass1 - p.ci[0] if p.ci else 0.0 for p in shown]
        hi = [p.ci[1] - p.pass1 if p.ci else 0.0 for p in shown]
        ax.errorbar(xs, [p.pass1 for p in shown], yerr=[lo, hi], marker="o", capsize=3, label=label)
    ax.set_xlabel("training step (0 = the warm start)")
    ax.set_ylabel("pass@1 over graded tasks")
    ax.set_ylim(0, 1)
    ax.set_title(f"{title} (95% bootstrap CI over tasks)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "watch_dirs",
        nargs="+",
        type=Path,
        help="`dagent eval watch --out` directories (or published seed-S/watch folders), one per seed.",
    )
    ap.add_argument(
        "--label", action="append", default=None, help="A line's label, in order (default: the directory's name)."
    )
    ap.add_argument("--title", default="held-out pass@1 at each checkpoint")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_intermixed_args(argv)  # a --label after each directory
    labels = args.label or [d.name for d in args.watch_dirs]
    if len(labels) != len(args.watch_dirs):
        raise ConfigError(
            f"{len(labels)} --label for {len(args.watch_dirs)} directories: give one per directory or none"
        )
    print(plot({label: points(d) for label, d in zip(labels, args.watch_dirs)}, args.out, title=args.title))


if __name__ == "__main__":
    main()
