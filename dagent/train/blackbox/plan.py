"""A black-box run resolved once, at the door: `plan_run(args, refused)` reads every option of the
job's arguments (`BlackboxArgs`) into one frozen `BlackboxPlan`, and both modes build from the plan,
never from the arguments. So an option is read in one place and reaches the sync trainer and the
async launcher alike, or is refused before anything starts (F59, `dagent.train.options`):

    plan = plan_run(args, SYNC_REFUSED)   # refusals, recipe, suite, rows (F55), preflight, config, callbacks
    run = build_sync(plan)                # or launch_async(plan): the mode's own engine and trainer
    train_and_save(run.trainer, plan.callbacks, plan.out, resume_from=plan.resume_from, close=run.stop)

The trainer config's fields every path sets alike (`dagent.train.assembly.config_kwargs`) and the
callbacks (health watch, provenance, retention, the time budget, the Hub pusher, the control's F52
check) are built here; each mode adds only its own config fields and its own trainer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dagent.core.sampling import RECIPE_SAMPLING
from dagent.core.suite import TaskSuite
from dagent.engine.models import model_dir
from dagent.errors import ConfigError
from dagent.recipes import BlackboxRecipe
from dagent.suites.sources import load_tasks
from dagent.train.assembly import Callbacks, callbacks, config_kwargs, run_dir
from dagent.train.blackbox.args import BlackboxArgs
from dagent.train.options import Refusal, refuse, unread
from dagent.train.preflight import Check, blackbox_checks, selected_rows
from dagent.train.routing import pad_coprime

MODES = ("sync", "async")
#: The plan's fields that carry options straight from the arguments, by the options they carry: a
#: mode that refuses every option of a field need not read it; any other field a mode's builder does
#: not read is an option dropped on that mode (F59, `unread_plan`).
CARRIES = {
    "launch": ("env_url", "engine_url", "engine_devices", "dry_run"),
    "control": ("control",),
    "resume_from": ("resume_from",),
}


@dataclass(frozen=True)
class AsyncOptions:
    """What only the async launcher reads (the sync path refuses each, F59)."""

    env_url: str | None = None  # a running black-box server or Space
    engine_url: str | None = None  # where the job's vLLM answers, as that server sees it
    engine_devices: str = "0"  # the engine's CUDA devices; the trainer takes the one left
    dry_run: bool = False  # build and check, print the engine command, start nothing


@dataclass(frozen=True)
class BlackboxPlan:
    """Everything a black-box run trains from, resolved once (module docstring)."""

    mode: str  # "sync" or "async"
    recipe: BlackboxRecipe
    out: Path
    suite: TaskSuite
    model: str  # as given: a name built here, a local directory or a Hub id
    path: Path | None  # its local directory (`dagent.engine.models.model_dir`); None on a dry run
    served: str  # the model name the engine serves and the harnesses ask for
    harnesses: tuple[str, ...]
    rows: tuple[dict[str, Any], ...]  # the tasks trained (mixed only where asked, F55; padded for routing, F40)
    checks: tuple[Check, ...]  # the preflight, passed (a failed one raised)
    config: dict[str, Any]  # the trainer config's fields every path sets alike
    callbacks: Callbacks | None  # None on a dry run (nothing trains)
    control: str = "none"
    resume_from: str | None = None
    launch: AsyncOptions = field(default_factory=AsyncOptions)

    @property
    def summary(self) -> dict[str, Any]:
        """The recipe as the checkpoints' provenance records it."""
        return {
            **asdict(self.recipe),
            "mode": f"black-box {self.mode}",
            "harnesses": list(self.harnesses),
            "sampling": RECIPE_SAMPLING.as_request(),
        }


def plan_run(args: BlackboxArgs, refused: Sequence[Refusal]) -> BlackboxPlan:
    """Refuse what the mode cannot honour, then resolve every option once (module docstring)."""
    if args.mode not in MODES:
        raise ConfigError(f"unknown mode {args.mode!r}: use sync or async")
    refuse(args, f"black-box {args.mode}", refused)
    rates, harnesses, recipe = args.rates(), args.harnesses(), args.recipe()
    if args.env_url and len(harnesses) > 1:
        raise ConfigError(
            "--env-url names one running server, which runs one harness: route several harnesses "
            "(--harness opencode,pi) with the servers this job starts (leave --env-url out)"
        )
    suite = load_tasks(args.suite)
    prompts = suite.prompt_rows(recipe.split) if suite.tasks(recipe.split) else []
    selected, rates = selected_rows(prompts, rates, mixed_only=args.mixed_only)
    checks = blackbox_checks(recipe, len(selected), base_pass1=args.base_pass1, force=args.force, rates=rates)
    rows = pad_coprime(selected, len(harnesses)) if selected else []  # every harness meets every task (F40)
    out = run_dir(args)
    plan = BlackboxPlan(
        mode=args.mode,
        recipe=recipe,
        out=out,
        suite=suite,
        model=args.model,
        path=None,
        served=args.model,
        harnesses=harnesses,
        rows=tuple(rows),
        checks=tuple(checks),
        config={**config_kwargs(recipe, out, report_to=args.report_to, run_name=args.run_name), **args.trackio()},
        callbacks=None,
        control=args.control,
        resume_from=args.resume_from,
        launch=AsyncOptions(args.env_url, args.engine_url, args.engine_devices, args.dry_run),
    )
    if args.dry_run:  # a dry run trains nothing: no callbacks, no model fetched
        return plan
    calls = callbacks(
        suite,
        args.model,
        plan.summary,
        control=args.control,
        push_to_hub=args.push_to_hub,
        max_minutes=args.max_minutes,
    )
    path = model_dir(args.model)  # a Hub id: fetched once, where the callbacks' provenance resolved it
    return dataclasses.replace(plan, path=path, callbacks=calls)


def unread_plan(functions: Sequence[Any], refused: Sequence[Refusal]) -> list[str]:
    """The plan's fields a mode's builder (`functions`, taking the plan as `plan`) never reads and
    whose options the mode does not refuse (F59: read into the plan, then dropped by one mode)."""
    names = {r.name for r in refused}
    excused = [Refusal(name, "refused", "") for name, options in CARRIES.items() if set(options) <= names]
    return unread(functions, BlackboxPlan, excused, param="plan")
