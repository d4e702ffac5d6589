"""Black-box GRPO, sync mode, on CPU: 1 step of TRL's GRPOTrainer(rollout_func=...) where every
rollout is the REAL opencode in a local sandbox, its model calls through the capture proxy to the
trainer's OWN module served in-process, converted by TRL's own conversion; with its receipts.

The tiny Qwen3 emits noise, so the served module is STEERED (its real forward pass on every token
plus a bias towards a script: look at the table, write an answer, close; benchmarks/rollouts.py),
and every other answer step writes the header-inclusive line count (4, wrong) instead of the data
rows (3, right): the group of 2 then holds 1 right and 1 wrong, so groups carry variance and a
gradient. This checks the plumbing and the receipts, not a policy.
"""

from __future__ import annotations

import itertools
import json

import pytest

from dagent.harness.opencode import OpencodeConfig  # noqa: F401  (import check of the harness module)

WRONG = {
    "command": "wc -l < /workdir/input/t.csv > /workdir/answer.txt",
    "description": "Count the lines into the answer file",
}


def alternating(model, tokenizer):
    """The live module, steered towards the rollout script (benchmarks/rollouts.py SteeredPolicy);
    every other answer step writes the header-inclusive line count (4, wrong)."""
    from benchmarks.rollouts import SteeredPolicy, script_for, tool_call

    writes = itertools.count()

    def script(prompt: str) -> str:
        text = script_for(prompt)
        return tool_call(WRONG) if "answer.txt" in text and next(writes) % 2 else text

    return SteeredPolicy(model, tokenizer, tokenizer.convert_tokens_to_ids("<|im_end|>"), script=script)


@pytest.mark.harness
@pytest.mark.slow
@pytest.mark.failure_mode("F03")
@pytest.mark.failure_mode("F32")
def test_a_sync_step_trains_on_the_engines_own_tokens(rowcount_suite, tmp_path):
    torch = pytest.importorskip("torch")
    from tests.envs.test_blackbox import need_opencode

    need_opencode()
    from dagent.engine.models import tiny_qwen3
    from dagent.recipes import BlackboxRecipe
    from dagent.train.blackbox.trainer import build_sync_trainer

    recipe = BlackboxRecipe.cpu(
        split="train",
        max_steps=1,
        save_steps=1,
        num_generations=2,
        groups_per_step=1,
        learning_rate=1e-3,
        warmup_steps=0,
        agent_steps=6,
        max_output_tokens=256,
        beta=0.0,
        bf16=False,
    )
    run = build_sync_trainer(
        tiny_qwen3(),
        rowcount_suite,
        recipe,
        tmp_path,
        policy=alternating,
        served_name="tiny-qwen3-steered",
        sandbox_dir=tmp_path / "sandboxes",
    )
    assert [c.name for c in run.checks] == ["split", "step_cap", "group_size"]
    assert run.engine.dtype == next(run.trainer.model.parameters()).dtype  # the engine IS the trainer's module (F06)
    before = {k: v.detach().clone() for k, v in run.trainer.model.named_parameters()}
    try:
        run.trainer.train()
    finally:
        run.stop()
    # receipts: the checkpoint holds the optimizer state, the weights moved
    ckpt = tmp_path / "checkpoint-1"
    assert {"optimizer.pt", "scheduler.pt", "trainer_state.json"} <= {p.name for p in ckpt.iterdir()}
    changed = [k for k, v in run.trainer.model.named_parameters() if not torch.equal(v.detach(), before[k])]
    assert changed, "no parameter moved: the groups carried no reward variance"
    rows = run.rollouts.rows
    assert len(rows) == 2 and all(r.harness == "opencode" for r in rows)
    graded = [r for r in rows if r.outcome != "ungraded"]
    assert {r.outcome for r in graded} == {"correct", "wrong"}, [r.receipt() for r in rows]
    for r in graded:  # exact-token audit, one row per rollout, the title call never trained (F03)
        assert r.audit == "exact" and r.sequences == 1 and r.dropped is None
        assert r.other_calls >= 1 and r.agent_turns >= 2 and r.trained_tokens > 0
        assert len(r.completion_ids) == len(r.env_mask) == len(r.logprobs) > r.trained_tokens  # tool results masked
        assert all(lp == 0.0 for lp, m in zip(r.logprobs, r.env_mask) if not m)
    receipts = [json.loads(line) for line in (tmp_path / "receipts.jsonl").read_text().splitlines()]
    assert len(receipts) == 2 and {x["audit"] for x in receipts if x["outcome"] != "ungraded"} == {"exact"}
    logs = [h for h in run.trainer.state.log_history if "blackbox/samples_per_rollout" in h]
    assert len(logs) == 1 and logs[0]["reward_std"] > 0
    assert all(h["blackbox/samples_per_rollout"] <= 1.0 and h["blackbox/fork_frac"] == 0.0 for h in logs)
    assert all("harness/opencode/rollouts" in h and "frac_reward_zero_std" in h for h in logs)
    run.health.raise_if_stopped()
