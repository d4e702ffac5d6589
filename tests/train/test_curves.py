"""Training curves from a trainer_state.json: a PNG with the four panels' data; clear errors otherwise."""

import json

import pytest

from dagent.errors import ConfigError
from dagent.train.curves import PHASES, history, plot

pytest.importorskip("matplotlib")


def state(tmp_path, steps=6):
    log = [{"step": i, "loss": 0.1, "rewards/Env/mean": i / 10, "reward_std": 0.2, "frac_reward_zero_std": 0.5,
            "tools/call_frequency": 2.0, "completions/mean_length": 130, "entropy": 0.1,
            **{f"time/{p}": 1.0 + i for p in PHASES}} for i in range(1, steps + 1)]
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
