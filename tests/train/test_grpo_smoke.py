"""A 2-step white-box GRPO smoke on CPU with the tiny Qwen3 (random weights, real Qwen3 tokenizer and
template), through dagent.train.whitebox.grpo.build_trainer: the preflight passes, the checkpoint holds the
optimizer, scheduler and trainer state, and the weights changed.

A random model emits noise and would never call a tool, so generation is steered with transformers'
`sequence_bias` towards two submit_solution calls that differ only in the answer digit (3, the gold
of train[0], or 4): every shared prefix gets a bias growing with its length, and the two digits the
same bias, so each rollout submits 3 or 4 at about even odds. Groups then carry reward variance and
a gradient. This checks the plumbing, not a policy.
"""

from __future__ import annotations

import pytest

from scripts.gpu_check import steer  # the one definition of the steering biases (the GPU check uses it too)


@pytest.mark.slow
def test_two_grpo_steps_checkpoint_the_optimizer_and_change_the_weights(suite, backend, tmp_path):
    torch = pytest.importorskip("torch")
    from transformers import AutoTokenizer

    from dagent.engine.models import tiny_qwen3
    from dagent.envs.contract import REWARD_COLUMN
    from dagent.recipes import WhiteboxRecipe
    from dagent.tools.episode import close_all
    from dagent.train.whitebox.grpo import build_trainer

    model_dir = tiny_qwen3()
    recipe = WhiteboxRecipe.cpu(
        split="train",
        max_steps=2,
        save_steps=2,
        num_generations=4,
        per_device_train_batch_size=4,
        max_completion_length=192,
        output_chars=100,
        max_tool_calling_iterations=2,
        learning_rate=1e-3,
        warmup_steps=0,
    )
    run = build_trainer(
        model_dir,
        suite,
        recipe,
        tmp_path,
        backend=backend,
        generation_kwargs={"sequence_bias": steer(AutoTokenizer.from_pretrained(model_dir))},
    )
    assert [c.name for c in run.checks] == ["split", "step_cap", "completion_length", "group_size", "template"]
    before = {k: v.detach().clone() for k, v in run.trainer.model.named_parameters()}
    try:
        run.trainer.train()
    finally:
        close_all()
    ckpt = tmp_path / "checkpoint-2"
    assert {"optimizer.pt", "scheduler.pt", "trainer_state.json", "rng_state.pth"} <= {p.name for p in ckpt.iterdir()}
    import json

    stamped = json.loads((ckpt / "provenance.json").read_text())  # what made this checkpoint
    assert stamped["global_step"] == 2 and stamped["recipe"]["max_steps"] == 2 and stamped["grader"]
    assert stamped["libraries"]["trl"] and stamped["suite"]["digest"]
    changed = [k for k, v in run.trainer.model.named_parameters() if not torch.equal(v.detach(), before[k])]
    assert changed, "no parameter moved: the groups carried no reward variance"
    logs = [h for h in run.trainer.state.log_history if f"rewards/{REWARD_COLUMN}/mean" in h]
    assert len(logs) == 2 and all("frac_reward_zero_std" in h and "ungraded/total" in h for h in logs)
    assert max(h["reward_std"] for h in logs) > 0
    run.health.raise_if_stopped()
    # the step timer split every step, and the exclusive phases add up to the step
    from dagent.train.timing import EXCLUSIVE

    assert run.timer.split and len(run.timer.steps) == 2
    for step in run.timer.steps:
        assert step["generation"] > 0 and step["optimizer"] > 0 and step["sandbox_setup"] > 0
        assert sum(step[k] for k in EXCLUSIVE) == pytest.approx(step["step"], rel=0.02)
    assert all("time/generation" in h and "time/env_overhead" in h for h in logs)
