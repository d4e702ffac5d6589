"""A run keeps every checkpoint's weights and the newest's optimizer state (dagent.train.retention):
a real Trainer saving every 2 steps, the older checkpoints pruned after each save, the newest one
resuming with the optimizer state it saved."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from dagent.train.retention import LatestOptimizerOnly, prune_optimizer_states  # noqa: E402
from tests.train.test_hub_checkpoints import tiny_trainer  # noqa: E402


def test_older_checkpoints_keep_their_weights_and_lose_only_the_optimizer_state(tmp_path):
    keep = LatestOptimizerOnly()
    tiny_trainer(tmp_path / "run", 6, [keep]).train()
    ckpts = {p.name: p for p in (tmp_path / "run").glob("checkpoint-*")}
    assert sorted(ckpts) == ["checkpoint-2", "checkpoint-4", "checkpoint-6"]
    assert [p.name for p in keep.pruned] == ["checkpoint-2", "checkpoint-4"]
    for name in ("checkpoint-2", "checkpoint-4"):
        assert not (ckpts[name] / "optimizer.pt").exists()
        assert (ckpts[name] / "model.safetensors").is_file() and (ckpts[name] / "trainer_state.json").is_file()
        assert "resume from checkpoint-" in (ckpts[name] / "pruned.txt").read_text()
    assert (ckpts["checkpoint-6"] / "optimizer.pt").is_file() and not (ckpts["checkpoint-6"] / "pruned.txt").exists()
    assert prune_optimizer_states(tmp_path / "run") == []  # nothing left to prune

    # the newest resumes with its moments: the same state as the run that saved it
    saved = torch.load(ckpts["checkpoint-6"] / "optimizer.pt", weights_only=False)["state"]
    resumed = tiny_trainer(tmp_path / "resumed", 8)
    resumed.train(resume_from_checkpoint=str(ckpts["checkpoint-6"]))
    assert resumed.state.global_step == 8 and len(saved) > 0
    assert all(float(s["exp_avg_sq"].abs().sum()) > 0 for s in saved.values())
