"""Every training option reaches every launch path or is refused there (F59, dagent.train.options).

The static half reads each path's source: every field of the path's args dataclass must be read
(`args.NAME`, or through an args method that reads `self.NAME`) or named in the path's refusals.
The run-time half: the async path refuses `--control permuted` (it once trained ordinary GRPO
under a control's name), the sync path refuses the async-only options, each naming what to run."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from dagent.recipes import resolve
from dagent.train import assembly
from dagent.train.args import TrainArgs
from dagent.train.blackbox import async_trainer as blackbox_async
from dagent.train.blackbox import plan
from dagent.train.blackbox import trainer as blackbox
from dagent.train.blackbox.args import BlackboxArgs
from dagent.train.options import OptionRefused, Refusal, refuse, unread
from dagent.train.whitebox import grpo
from dagent.train.whitebox.grpo import WhiteboxArgs

PATHS = {
    "white-box": ([grpo.train_whitebox, assembly.run_dir], WhiteboxArgs, ()),
    # both modes read the arguments in one place (plan_run) and build from the plan it makes
    "black-box sync": (
        [blackbox.train_blackbox, plan.plan_run, assembly.run_dir],
        BlackboxArgs,
        blackbox.SYNC_REFUSED,
    ),
    "black-box async": (
        [blackbox.train_blackbox, plan.plan_run, assembly.run_dir],
        BlackboxArgs,
        blackbox_async.ASYNC_REFUSED,
    ),
}


@pytest.mark.failure_mode("F59")
@pytest.mark.parametrize("path", list(PATHS))
def test_every_option_is_read_or_refused_on_every_path(path):
    functions, args_cls, refused = PATHS[path]
    assert unread(functions, args_cls, refused) == [], f"{path} drops these options silently"


# each mode's builder, taking the plan: every field of the plan it is given is read, or its options refused
MODE_BUILDERS = {
    "black-box sync": ([blackbox.train_blackbox, blackbox.build_sync], blackbox.SYNC_REFUSED),
    "black-box async": (
        [blackbox.train_blackbox, blackbox_async.launch_async, blackbox_async._launch],
        blackbox_async.ASYNC_REFUSED,
    ),
}


@pytest.mark.failure_mode("F59")
@pytest.mark.parametrize("path", list(MODE_BUILDERS))
def test_every_field_of_the_plan_reaches_each_modes_builder_or_its_options_are_refused(path):
    functions, refused = MODE_BUILDERS[path]
    assert plan.unread_plan(functions, refused) == [], f"{path} drops these fields of the plan"


@pytest.mark.failure_mode("F59")
def test_the_detector_finds_the_async_control_the_launcher_once_dropped():
    """Planted: the async path as it was (no refusal of --control): the async builder never reads
    the plan's control, and the plan-level check names it (the arguments are read once, by plan_run,
    so the arguments-level check alone cannot see a mode dropping what the plan carries)."""
    functions, refused = MODE_BUILDERS["black-box async"]
    without = tuple(r for r in refused if r.name != "control")
    assert plan.unread_plan(functions, without) == ["control"]
    sync_functions, sync_refused = MODE_BUILDERS["black-box sync"]  # and the sync builder without its refusals
    assert plan.unread_plan(sync_functions, ()) == ["launch"]

    # and an option read nowhere at all is named on every path
    @dataclasses.dataclass
    class Extra(BlackboxArgs):
        new_knob: int = 0

    functions, args_cls, refused = PATHS["black-box async"]
    assert unread(functions, Extra, refused) == ["new_knob"]


@pytest.mark.failure_mode("F59")
@pytest.mark.parametrize(
    "option, value, refused",
    [
        ("control", "permuted", r"F59: --control 'permuted' .* black-box async .*--mode sync"),
        ("generation_dtype", "float32", r"F59: --generation-dtype 'float32' .* vLLM"),
    ],
)
def test_async_refuses_what_it_cannot_honour_before_anything_starts(option, value, refused, monkeypatch):
    args = BlackboxArgs(mode="async", dry_run=True, harness="pi", **{option: value})
    monkeypatch.setattr(blackbox_async, "job_ports", lambda: pytest.fail("the launcher started before refusing"))
    with pytest.raises(OptionRefused, match=refused):
        blackbox.train_blackbox(args, echo=lambda _: None)


@pytest.mark.failure_mode("F59")
@pytest.mark.parametrize(
    "option, value",
    [
        ("dry_run", True),
        ("env_url", "http://127.0.0.1:1"),
        ("engine_url", "http://127.0.0.1:2"),
        ("engine_devices", "1"),
        ("accelerate_config", "zero2"),
    ],
)
def test_sync_refuses_the_async_only_options(option, value, monkeypatch):
    args = dataclasses.replace(BlackboxArgs(mode="sync", harness="pi"), **{option: value})
    monkeypatch.setattr(plan, "load_tasks", lambda *_: pytest.fail("the sync run started before refusing"))
    with pytest.raises(OptionRefused, match="F59: --" + option.replace("_", "-")):
        blackbox.train_blackbox(args, echo=lambda _: None)


def test_refuse_lets_defaults_through():
    refuse(BlackboxArgs(), "black-box async", blackbox_async.ASYNC_REFUSED)  # nothing given, nothing refused
    with pytest.raises(OptionRefused, match=r"F59: --seed 3 .*\(why\).*refused: instead"):
        refuse(BlackboxArgs(seed=3), "p", [Refusal("seed", "why", "instead")])


# -- the recipe fields the options set reach every path's trainer config ---------------------------
# TrainArgs.overrides() turns options into recipe fields; each path's config builder must carry every
# one of them into TRL's config (the async builder once left out warmup_steps: an async run trained
# with no warm-up whatever the recipe said). The truth is the options given, not the builders.
GIVEN = TrainArgs(
    split="train:medium", max_steps=37, num_generations=2, learning_rate=3.3e-6, warmup_steps=7, save_steps=11, seed=5
)


def _async_config(recipe: Any) -> Any:
    from trl.experimental.async_grpo import AsyncGRPOConfig

    return AsyncGRPOConfig(
        **blackbox_async.config_kwargs(recipe, "/tmp/out", engine_url="http://127.0.0.1:1"), use_cpu=True
    )  # use_cpu only so that it builds on this machine


BUILDERS = {
    "white-box": ("whitebox", "cpu", lambda r: grpo.grpo_config(r, "/tmp/out")),
    "black-box sync": ("blackbox", "cpu", lambda r: blackbox.sync_config(r, "/tmp/out")),
    "black-box async": ("blackbox", "gpu", _async_config),
}


def dropped(config: Any, given: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """The given recipe fields (other than the split, which picks rows) the config does not carry."""
    return {
        k: (v, getattr(config, k, None)) for k, v in given.items() if k != "split" and getattr(config, k, None) != v
    }


@pytest.mark.failure_mode("F59")
@pytest.mark.parametrize("path", list(BUILDERS))
def test_every_recipe_field_an_option_sets_reaches_the_paths_trainer_config(path):
    loop, preset, build = BUILDERS[path]
    given = GIVEN.overrides()
    assert set(given) >= {"max_steps", "num_generations", "learning_rate", "warmup_steps", "save_steps", "seed"}
    recipe = resolve(loop, preset, **given)
    assert dropped(build(recipe), given) == {}, f"{path}'s trainer config drops options"


@pytest.mark.failure_mode("F59")
def test_the_config_check_catches_a_builder_that_drops_the_warm_up(monkeypatch):
    """Planted: the async builder as it was (every field but warmup_steps): the check names it."""
    real = assembly.config_kwargs

    def without_warmup(*a: Any, **kw: Any) -> dict[str, Any]:
        return {k: v for k, v in real(*a, **kw).items() if k != "warmup_steps"}

    monkeypatch.setattr(assembly, "config_kwargs", without_warmup)
    loop, preset, build = BUILDERS["black-box async"]
    given = GIVEN.overrides()
    assert set(dropped(build(resolve(loop, preset, **given)), given)) == {"warmup_steps"}
