"""Training curves from a trainer_state.json: a PNG with the four panels' data; clear errors otherwise."""

import json

import pytest

from dagent.errors import ConfigError
from dagent.train.curves import BLACKBOX_PHASES, PHASES, history, phases, plot, tool_calls

pytest.importorskip("matplotlib")


def state(tmp_path, steps=6):
    log = [
        {
            "step": i,
            "loss": 0.1,
            "rewards/Env/mean": i / 10,
            "reward_std": 0.2,
            "frac_reward_zero_std": 0.5,
            "tools/call_frequency": 2.0,
            "completions/mean_length": 130,
            "entropy": 0.1,
            **{f"time/{p}": 1.0 + i for p in PHASES},
        }
        for i in range(1, steps + 1)
    ]
    ckpt = tmp_path / "checkpoint-6"
    ckpt.mkdir()
    (ckpt / "trainer_state.json").write_text(json.dumps({"log_history": log + [{"train_runtime": 9.0}]}))
    return ckpt


def test_the_curves_are_drawn_from_every_logged_step(tmp_path):
    ckpt = state(tmp_path)
    assert [h["step"] for h in history(ckpt)] == [1, 2, 3, 4, 5, 6]  # the run summary entry is not a step
    data = plot(ckpt, tmp_path / "c.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_a_directory_without_a_trainer_state_is_named(tmp_path):
    with pytest.raises(ConfigError, match="no trainer_state.json"):
        history(tmp_path)


def test_a_black_box_run_fills_the_tool_call_line_and_the_phase_panel():
    # what the black-box trainer logs: its harnesses' tool calls and its rollouts' seconds inside
    # TRL's step_time (no white-box phase split, no tools/call_frequency)
    steps = [
        {"step": i, "loss": 0.0, "blackbox/tool_calls": 3.0 + i, "time/rollouts_s": 50.0 + i, "step_time": 80.0 + 2 * i}
        for i in (1, 2)
    ]
    assert tool_calls(steps) == [4.0, 5.0]
    assert phases(steps) == {"rollouts": [51.0, 52.0], "scoring + optimizer": [31.0, 32.0]}
    assert tuple(phases(steps)) == BLACKBOX_PHASES


def test_white_box_phases_win_and_a_run_without_timings_has_none(tmp_path):
    steps = history(state(tmp_path))
    assert tuple(phases(steps)) == PHASES and phases(steps)["optimizer"][0] == 2.0
    assert tool_calls(steps) == [2.0] * 6
    assert phases([{"step": 1, "loss": 0.0, "time/rollouts_s": 5.0}]) == {}
