"""The sync trainer's rows (dagent.train.blackbox.rollouts), pure: TRL's own conversion of a captured agent
chain, the exact-token audit, None rewards, forked chains, the reward function."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dagent.errors import ConfigError, TrajectoryError
from dagent.train.blackbox.rollouts import chain_sequences, env_reward, rollout_metrics, row_of, token_audit


def entry(node: str, prompt: list[int], completion: list[int]) -> dict:
    return {
        "request": {"messages": [{"role": "user", "content": "q"}], "tools": None},
        "response": {"choices": [{"message": {"role": "assistant", "content": "a"}, "finish_reason": "stop"}]},
        "prompt_token_ids": prompt,
        "completion_token_ids": completion,
        "per_token_logps": [-0.5] * len(completion),
        "loss_mask": [0] * len(prompt) + [1] * len(completion),
        "metadata": {"node_id": node},
    }


def rollout(entries: list[dict], *, reward=1.2, outcome="correct", cause=None, roles=("agent",)):
    return SimpleNamespace(
        trace_entries=lambda: entries,
        trajectory=SimpleNamespace(roles=roles),
        task_id="t",
        outcome=outcome,
        cause=cause,
        reward=reward,
        tool_calls=1,
    )


PLACEHOLDER = lambda: ([7], [7])  # noqa: E731
CHAIN = [entry("a", [1, 2, 3], [10, 11]), entry("b", [1, 2, 3, 10, 11, 20, 21], [30])]  # turn 2 appends a tool result


def test_a_clean_chain_is_one_row_the_engines_tokens_trained_and_the_tool_result_masked():
    row = row_of(rollout(CHAIN, roles=("agent", "agent", "auxiliary")), "opencode", 1024, PLACEHOLDER)
    assert row.prompt_ids == (1, 2, 3) and row.completion_ids == (10, 11, 20, 21, 30)
    assert row.env_mask == (1, 1, 0, 0, 1) and row.logprobs == (-0.5, -0.5, 0.0, 0.0, -0.5)
    assert row.audit == "exact" and row.sequences == 1 and row.reward == 1.2 and row.other_calls == 1
    seqs, tally = chain_sequences(CHAIN, 1024)  # TRL's own conversion, the same row
    assert len(seqs) == 1 and seqs[0].input_ids == [1, 2, 3, 10, 11, 20, 21, 30] and tally["clean"] == 1


@pytest.mark.failure_mode("F32")
def test_an_ungraded_rollout_keeps_none_and_trains_nothing():
    row = row_of(rollout([], reward=None, outcome="ungraded", cause="engine_unreachable: x"), "pi", 1024, PLACEHOLDER)
    assert row.reward is None and row.env_mask == (0,) and row.dropped == "ungraded: engine_unreachable: x"
    assert env_reward([], [], env_reward=[None, 0.0, 1.2]) == [None, 0.0, 1.2]
    with pytest.raises(ConfigError):
        env_reward([], [])
    metrics = rollout_metrics([row])
    assert metrics["ungraded/total"] == 1.0 and metrics["ungraded/engine_unreachable"] == 1.0


@pytest.mark.failure_mode("F02")
def test_a_forked_chain_cannot_be_one_row_so_it_leaves_the_baseline_instead_of_training_half():
    forked = [entry("a", [1, 2, 3], [10, 11]), entry("b", [9, 9, 9, 9], [30])]  # re-rendered from scratch
    row = row_of(rollout(forked), "opencode", 0, PLACEHOLDER)
    assert row.sequences == 2 and row.reward is None and row.dropped.startswith("forked")
    assert rollout_metrics([row])["blackbox/forked_dropped"] == 1.0


def test_the_audit_names_a_trained_token_the_engine_never_produced():
    assert token_audit([10, 11, 20, 30], [1, 1, 0, 1], [[10, 11], [30]]) == "exact"
    assert "call 0: trained token 1 differs" in token_audit([10, 12, 20, 30], [1, 1, 0, 1], [[10, 11], [30]])
    assert "1 trained runs for 2 engine calls" in token_audit([10, 11, 30], [1, 1, 1], [[10, 11], [30]])


def test_a_realigned_call_trains_the_engines_prefix_and_keeps_the_rest_as_context():
    """A harness that re-serialises its last answer (pi writes tool-call arguments compactly): TRL
    realigns, the drifted tail of that call becomes context (mask 0). Trained tokens are still the
    engine's own; the audit says how many of its tokens became context (measured on a pi rollout)."""
    chain = [entry("a", [1, 2, 3], [10, 11, 12, 13]), entry("b", [1, 2, 3, 10, 11, 99, 98, 20], [30])]
    row = row_of(rollout(chain), "pi", 1024, PLACEHOLDER)
    assert row.sequences == 1 and row.tally["realign"] == 1
    assert row.completion_ids == (10, 11, 99, 98, 20, 30) and row.env_mask == (1, 1, 0, 0, 0, 1)
    assert row.audit == "exact; 1 realigned: 2 engine tokens kept as context"


def test_a_row_whose_tokens_differ_from_the_capture_is_refused(monkeypatch):
    from dagent.train.blackbox import rollouts

    monkeypatch.setattr(rollouts, "token_audit", lambda *a: "trained token 0 differs")
    with pytest.raises(TrajectoryError, match="nothing from this run may be trained"):
        row_of(rollout(CHAIN), "opencode", 1024, PLACEHOLDER)


def test_metrics_per_harness_and_the_reference_receipts():
    a = row_of(rollout(CHAIN), "opencode", 1024, PLACEHOLDER)
    b = row_of(rollout(CHAIN, reward=0.0, outcome="wrong"), "pi", 1024, PLACEHOLDER)
    m = rollout_metrics([a, b])
    assert m["blackbox/samples_per_rollout"] == 1.0 and m["blackbox/fork_frac"] == 0.0
    assert m["harness/opencode/reward_mean"] == 1.2 and m["harness/pi/reward_mean"] == 0.0
    assert m["harness/pi/rollouts"] == 1.0 and m["blackbox/trained_tokens"] == 3.0
