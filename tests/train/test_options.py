"""Every training option reaches every launch path or is refused there (F59, dagent.train.options).

The static half reads each path's source: every field of the path's args dataclass must be read
(`args.NAME`, or through an args method that reads `self.NAME`) or named in the path's refusals.
The run-time half: the async path refuses `--control permuted` (it once trained ordinary GRPO
under a control's name), the sync path refuses the async-only options, each naming what to run."""

from __future__ import annotations

import dataclasses

import pytest

from dagent.train import blackbox, blackbox_async, grpo
from dagent.train.blackbox_args import BlackboxArgs
from dagent.train.grpo import WhiteboxArgs
from dagent.train.options import OptionRefused, Refusal, refuse, unread

PATHS = {
    "white-box": ([grpo.train_whitebox], WhiteboxArgs, ()),
    "black-box sync": ([blackbox.train_blackbox, blackbox.train_sync], BlackboxArgs, blackbox.SYNC_REFUSED),
    "black-box async": ([blackbox.train_blackbox, blackbox_async.train_async, blackbox_async._launch,
                         blackbox_async.async_callbacks], BlackboxArgs, blackbox_async.ASYNC_REFUSED),
}


@pytest.mark.failure_mode("F59")
@pytest.mark.parametrize("path", list(PATHS))
def test_every_option_is_read_or_refused_on_every_path(path):
    functions, args_cls, refused = PATHS[path]
    assert unread(functions, args_cls, refused) == [], f"{path} drops these options silently"


@pytest.mark.failure_mode("F59")
def test_the_detector_finds_the_async_control_the_launcher_once_dropped():
    """Planted: the async path as it was (no refusal of --control): the static check names it."""
    functions, args_cls, refused = PATHS["black-box async"]
    without = tuple(r for r in refused if r.name != "control")
    assert unread(functions, args_cls, without) == ["control"]
    # and an option read nowhere at all is named on every path
    @dataclasses.dataclass
    class Extra(BlackboxArgs):
        new_knob: int = 0
    assert unread(functions, Extra, refused) == ["new_knob"]


@pytest.mark.failure_mode("F59")
@pytest.mark.parametrize("option, value, refused", [
    ("control", "permuted", r"F59: --control 'permuted' .* black-box async .*--mode sync"),
    ("generation_dtype", "float32", r"F59: --generation-dtype 'float32' .* vLLM")])
def test_async_refuses_what_it_cannot_honour_before_anything_starts(option, value, refused, monkeypatch):
    args = BlackboxArgs(mode="async", dry_run=True, harness="pi", **{option: value})
    monkeypatch.setattr(blackbox_async, "job_ports", lambda: pytest.fail("the launcher started before refusing"))
    with pytest.raises(OptionRefused, match=refused):
        blackbox.train_blackbox(args, echo=lambda _: None)


@pytest.mark.failure_mode("F59")
@pytest.mark.parametrize("option, value", [("dry_run", True), ("env_url", "http://127.0.0.1:1"),
                                           ("engine_url", "http://127.0.0.1:2"), ("engine_devices", "1"),
                                           ("accelerate_config", "zero2")])
def test_sync_refuses_the_async_only_options(option, value, monkeypatch):
    args = dataclasses.replace(BlackboxArgs(mode="sync", harness="pi"), **{option: value})
    monkeypatch.setattr(blackbox, "load_tasks", lambda *_: pytest.fail("the sync run started before refusing"))
    with pytest.raises(OptionRefused, match="F59: --" + option.replace("_", "-")):
        blackbox.train_blackbox(args, echo=lambda _: None)


def test_refuse_lets_defaults_through():
    refuse(BlackboxArgs(), "black-box async", blackbox_async.ASYNC_REFUSED)  # nothing given, nothing refused
    with pytest.raises(OptionRefused, match=r"F59: --seed 3 .*\(why\).*refused: instead"):
        refuse(BlackboxArgs(seed=3), "p", [Refusal("seed", "why", "instead")])
