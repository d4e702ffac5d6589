"""One trainer assembly for every GRPO launch path: white-box (`dagent.train.whitebox.grpo`), black-box sync
(`dagent.train.blackbox.trainer`) and black-box async (`dagent.train.blackbox.async_trainer`).

What the paths build alike is built here once, so an option added once reaches every path, or
that path refuses it by name (F59, `dagent.train.options`; tests/train/test_options.py):

- `training_rows`: the split's rows; under `--mixed-only` the tasks whose measured rate is mixed,
  with the rates the group-size check reads narrowed to them (F55); padded so that several
  harnesses routed per group each see every task (F40);
- `config_kwargs`: the trainer config's fields every path sets alike (steps, group size, learning
  rate and warm-up, checkpoints, reporting, seed, and the sampling of `RECIPE_SAMPLING`, F05);
- `Callbacks`: the run's callbacks as a named record (health watch, provenance stamp, checkpoint
  retention, step timer, time budget, Hub pusher, the control's moved check, F52);
- `train_and_save`: resume, train, save `final/` once, close what the run opened on any exit,
  report a spent time budget, raise what the health watch saw;
- `run_dir`: the project URL and trackio's store, set before anything is built.

    rows, rates = training_rows(suite.prompt_rows(split), rates, mixed_only=True)
    calls = callbacks(suite, model_dir, summary, control="none", max_minutes=60)
    trainer = GRPOTrainer(..., args=GRPOConfig(**config_kwargs(recipe, out)), callbacks=calls.listed())
    train_and_save(trainer, calls, out, resume_from=None, echo=print, close=stop_everything)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dagent.core.sampling import RECIPE_SAMPLING
from dagent.core.suite import TaskSuite
from dagent.engine.models import model_source
from dagent.errors import ConfigError
from dagent.provenance import provenance
from dagent.train.preflight import TaskRates, selected_rows
from dagent.train.routing import pad_coprime

__all__ = [
    "Callbacks",
    "callbacks",
    "config_kwargs",
    "resolve_resume",
    "run_dir",
    "save_final",
    "train_and_save",
    "training_rows",
]


def run_dir(args: Any) -> Path:
    """The run's output directory (`args.out`, a `TrainArgs`), with what every path sets before it
    builds anything: the project URL model cards name, trackio's offline store under it."""
    args.apply_project_url()
    out = Path(args.out)
    if args.report_to == "trackio":
        os.environ.setdefault("TRACKIO_DIR", str(out / "trackio"))
    return out


def training_rows(
    rows: Sequence[dict[str, Any]], rates: TaskRates | None, *, mixed_only: bool, harnesses: int = 0
) -> tuple[list[dict[str, Any]], TaskRates | None]:
    """The rows a run trains on and the per-task rates its group-size check reads (F55): with
    `mixed_only`, the tasks `rates` measured between 0.2 and 0.8. `harnesses` > 0 (black-box): padded
    until every harness routed per group meets every task (F40)."""
    out, rates = selected_rows(rows, rates, mixed_only=mixed_only)
    if harnesses and out:
        out = pad_coprime(out, harnesses)
    return out, rates


def config_kwargs(
    recipe: Any,
    output_dir: str | Path,
    *,
    report_to: str = "none",
    run_name: str | None = None,
    project: str = "dagent",
) -> dict[str, Any]:
    """The fields of TRL's trainer config (GRPOConfig or AsyncGRPOConfig: both are TrainingArguments)
    that every path takes from its recipe alike; each path adds its own after these."""
    kwargs: dict[str, Any] = dict(
        output_dir=str(output_dir),
        max_steps=recipe.max_steps,
        num_generations=recipe.num_generations,
        learning_rate=recipe.learning_rate,
        warmup_steps=recipe.warmup_steps,
        save_strategy="steps",
        save_steps=recipe.save_steps,
        save_only_model=False,  # optimizer, scheduler and RNG state: resumable
        report_to=report_to,
        run_name=run_name,
        project=project,
        seed=recipe.seed,
        log_completions=False,
        **RECIPE_SAMPLING.as_trl(),
    )
    if report_to == "trackio":
        kwargs.update(trackio_space_id=None)  # the offline store; a Space only when asked for
    return kwargs


@dataclass(frozen=True)
class Callbacks:
    """A run's callbacks by name; `listed()` in the order the trainer runs them."""

    health: Any  # dagent.train.health.HealthWatch
    stamp: Any  # dagent.train.stamp.ProvenanceStamp
    retention: Any  # dagent.train.retention.LatestOptimizerOnly
    timer: Any = None  # dagent.train.timing.StepTimer (white-box)
    budget: Any = None  # dagent.train.budget.TimeBudget (--max-minutes)
    pusher: Any = None  # dagent.train.hub_checkpoints.CheckpointPusher (--push-to-hub)
    moved: Any = None  # dagent.train.control's check that a control run moved its weights (F52)

    def listed(self) -> list[Any]:
        return [
            c
            for c in (self.health, self.timer, self.stamp, self.pusher, self.budget, self.retention, self.moved)
            if c is not None
        ]


def callbacks(
    suite: TaskSuite,
    model_dir: str | Path,
    summary: dict[str, Any],
    *,
    control: str = "none",
    push_to_hub: str | None = None,
    max_minutes: float | None = None,
    timer: Any = None,
    hub_api: Any = None,
) -> Callbacks:
    """Every path's callbacks: `summary` is the recipe as the checkpoints' provenance records it."""
    from dagent.train.budget import TimeBudget
    from dagent.train.control import control_moved_callback
    from dagent.train.health import HealthWatch
    from dagent.train.retention import LatestOptimizerOnly
    from dagent.train.stamp import ProvenanceStamp

    stamped, source = provenance(suite), model_source(model_dir)  # each once: a Hub id resolves once
    pusher = None
    if push_to_hub:
        from dagent.train.hub_checkpoints import CheckpointPusher

        base = source["repo"] or source["name"]  # how a model card names the start: its Hub repo, else the name
        pusher = CheckpointPusher(push_to_hub, base, summary, stamped, api=hub_api)
    return Callbacks(
        health=HealthWatch(),
        stamp=ProvenanceStamp({**stamped, "recipe": summary, "model": source, "control": control}),
        retention=LatestOptimizerOnly(),  # every checkpoint's weights, the newest's optimizer state
        timer=timer,
        budget=TimeBudget(max_minutes) if max_minutes is not None else None,
        pusher=pusher,
        moved=control_moved_callback() if control != "none" else None,
    )  # F52: a control that never moved


def resolve_resume(spec: str | None, cache: Path, *, api: Any = None) -> str | None:
    """`PATH` or `OWNER/NAME@checkpoint-N` -> a local checkpoint directory (TRL resumes from local
    paths only: a Hub checkpoint is downloaded first; `CheckpointPusher` put it there)."""
    if not spec:
        return None
    if Path(spec).exists():
        return spec
    if "@" not in spec:
        raise ConfigError(f"--resume-from {spec!r} is neither a local checkpoint nor OWNER/NAME@checkpoint-N")
    from huggingface_hub import HfApi

    repo, folder = spec.split("@", 1)
    root = (api or HfApi()).snapshot_download(
        repo, allow_patterns=[f"{folder}/*"], local_dir=cache / repo.replace("/", "--")
    )
    if not (Path(root) / folder / "trainer_state.json").is_file():
        raise ConfigError(
            f"{repo} holds no {folder}/ with trainer state: push checkpoints with --push-to-hub "
            "(each as checkpoint-N/), then name one of them"
        )
    return str(Path(root) / folder)


def save_final(trainer: Any, folder: Path) -> None:
    """`final/` (the model and its tokenizer), written once however many processes trained; then the
    process group is closed, so no rank aborts on exit with gloo/NCCL threads still running."""
    trainer.save_model(str(folder))  # every rank takes part (sharded states), the main one writes
    if trainer.is_world_process_zero():
        trainer.processing_class.save_pretrained(str(folder))
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def train_and_save(
    trainer: Any,
    calls: Callbacks,
    out: Path,
    *,
    resume_from: str | None,
    echo: Callable[[str], Any],
    close: Callable[[], Any] | None = None,
) -> None:
    """Train (from `resume_from` when given), save `final/`; `close` runs on any exit (sandboxes,
    servers, engines the run opened). Then a spent time budget says where it stopped, and a run the
    health watch stopped raises."""
    try:
        trainer.train(resume_from_checkpoint=resolve_resume(resume_from, out / ".resume"))
        save_final(trainer, out / "final")
    finally:
        if close is not None:
            close()
    if calls.budget is not None and calls.budget.expired:
        echo(
            f"time budget of {calls.budget.minutes:g} min reached after {calls.budget.steps_done} steps "
            f"(checkpoint-{calls.budget.steps_done}); a control of the same length: --max-steps "
            f"{calls.budget.steps_done}"
        )
    calls.health.raise_if_stopped()
