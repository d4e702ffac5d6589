"""The time budget ends a run on a whole step, saved, and says how long a control must run."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("transformers")
from transformers import TrainerControl  # noqa: E402

from dagent.errors import ConfigError  # noqa: E402
from dagent.train.budget import TimeBudget  # noqa: E402


def test_the_first_step_past_the_budget_saves_and_stops() -> None:
    now = [100.0]
    budget = TimeBudget(minutes=1, clock=lambda: now[0])
    control = TrainerControl()
    budget.on_train_begin(None, SimpleNamespace(global_step=0), control)
    for step, t in ((1, 130.0), (2, 159.9)):
        now[0] = t
        budget.on_step_end(None, SimpleNamespace(global_step=step), control)
        assert not control.should_training_stop and not budget.expired
    now[0] = 160.0
    budget.on_step_end(None, SimpleNamespace(global_step=3), control)
    assert control.should_training_stop and control.should_save
    assert budget.expired and budget.steps_done == 3


def test_a_budget_of_nothing_is_refused() -> None:
    with pytest.raises(ConfigError, match="--max-minutes"):
        TimeBudget(minutes=0)
