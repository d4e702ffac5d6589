"""The step timer's pieces: nested phase totals, the exclusive split, and the environment and sandbox
seconds an in-process episode reports (real local sandbox, real tools). The trainer side (TRL's
methods timed, `time/*` in the logged metrics) is asserted in the 2-step GRPO smoke."""

from __future__ import annotations

import time

import pytest

from dagent.clock import PhaseClock
from dagent.envs.whitebox_runtime import white_box_env
from dagent.sandbox.timed import TimedBackend

pytest.importorskip("transformers")


def test_phases_accumulate_and_take_resets():
    clock = PhaseClock()
    with clock.phase("outer"):
        with clock.phase("inner"):
            time.sleep(0.02)
        nested = clock.totals["inner"]
        time.sleep(0.03)
    with clock.phase("inner"):
        time.sleep(0.01)
    raw = clock.take()
    assert raw["inner"] >= nested + 0.01 and nested >= 0.02
    assert raw["outer"] >= nested + 0.03  # the outer phase holds the inner one and its own time
    assert clock.take() == {}


def test_the_exclusive_split_subtracts_what_each_phase_contains():
    from dagent.train.timing import EXCLUSIVE, exclusive

    raw = {"step": 10.0, "rollout": 7.0, "generation": 4.0, "env": 2.0, "sandbox_tools": 1.2, "sandbox_setup": 0.5}
    split = exclusive(raw)
    assert split == pytest.approx(
        {
            "generation": 4.0,
            "sandbox_tools": 1.2,
            "sandbox_setup": 0.5,
            "env_overhead": 0.3,
            "scoring": 1.0,
            "optimizer": 3.0,
            "step": 10.0,
        }
    )
    assert sum(split[k] for k in EXCLUSIVE) == pytest.approx(split["step"])


def test_an_episode_reports_environment_and_sandbox_seconds(suite, backend):
    clock = PhaseClock()
    env = white_box_env(suite, backend=backend, clock=clock)()
    env.reset(split="train", index=0)
    setup = clock.totals["sandbox_setup"]
    assert setup > 0 and clock.totals["sandbox_tools"] == 0
    assert env.bash(command="sleep 0.2; ls input") == "t.csv"
    assert clock.totals["sandbox_tools"] >= 0.2
    env.submit_solution(answer="3")
    assert env.get_reward() is not None
    raw = clock.take()
    assert raw["env"] >= raw["sandbox_tools"] + raw["sandbox_setup"]
    assert raw["sandbox_setup"] > setup  # closing the sandbox counts as set-up too


def test_the_timed_backend_is_the_wrapped_backend_to_its_callers(backend):
    timed = TimedBackend(backend, PhaseClock())
    assert (timed.name, timed.remote, timed.home, timed.describe()) == (
        backend.name,
        backend.remote,
        backend.home,
        backend.describe(),
    )
    with timed.create() as box:
        assert box.workdir == "/workdir" and box.exec("echo hi").stdout.strip() == "hi"
