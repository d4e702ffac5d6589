"""The sync trainer's rows (dagent.train.blackbox.rollouts), pure: TRL's own conversion of a captured agent
chain, the exact-token audit, None rewards, forked chains, the reward function."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dagent.errors import ConfigError, TrajectoryError
from dagent.harness.base import sample_seed
from dagent.train.blackbox.rollouts import (
    BlackBoxRollouts,
    SharedSeedError,
    chain_sequences,
    check_group_seeds,
    env_reward,
    identical_groups,
    rollout_metrics,
    row_of,
    token_audit,
)


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


def rollout(entries: list[dict], *, reward=1.2, outcome="correct", cause=None, roles=("agent",), seed=None):
    first = SimpleNamespace(metadata={"sampling_params": {"temperature": 0.8, **({"seed": seed} if seed else {})}})
    return SimpleNamespace(
        trace_entries=lambda: entries,
        trajectory=SimpleNamespace(roles=roles, chain_turns=lambda: [first] if entries else []),
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


@pytest.mark.failure_mode("F61")
def test_two_rollouts_of_one_group_drawn_from_one_seed_are_refused():
    rows = [row_of(rollout(CHAIN, seed=s), "pi", 1024, PLACEHOLDER) for s in (11, 12, 13, 13)]
    check_group_seeds(rows[:2], 2)  # distinct seeds in a group: fine
    check_group_seeds(rows[1:3], 1)  # groups of one never collide
    check_group_seeds([rows[0], row_of(rollout(CHAIN), "pi", 1024, PLACEHOLDER)] * 1, 2)  # unseeded: None
    with pytest.raises(SharedSeedError, match=r"group 1 \(t\): rollouts sampled from the same seed 13 \(2 of 2\)"):
        check_group_seeds(rows, 2)
    assert identical_groups(rows, 2) == 1.0  # the same tokens (one CHAIN) in both groups
    assert identical_groups([rows[0], row_of(rollout(CHAIN[:1]), "pi", 1024, PLACEHOLDER)], 2) == 0.0


class SeededRuntime:
    """A runtime whose rollouts carry the seed capture records for a call of sample `sample`
    (`dagent.harness.captured.CapturedAgent`: `call_seed(sample_seed(task, sample), 0)`); `honour`
    False plants the fault: every rollout drawn as sample 0 of its task, as play() did by default."""

    def __init__(self, honour: bool = True) -> None:
        self.honour, self.samples = honour, []
        self.suite = SimpleNamespace(resolve_prompt=lambda split, instruction: (int(instruction[-1]), None))

    def run_rollout(self, split, index, *, timeout_s=None, sample=None):
        self.samples.append(sample)
        drawn = sample if self.honour else 0
        return rollout(CHAIN, seed=None if drawn is None else sample_seed(f"task{index}", drawn))


@pytest.mark.failure_mode("F61")
def test_every_rollout_of_a_step_is_its_own_sample_and_one_drawn_twice_stops_the_step():
    runtime = SeededRuntime()
    rollouts = BlackBoxRollouts({"pi": runtime}, "train", None, num_generations=4, seed=3)
    trainer = SimpleNamespace(state=SimpleNamespace(global_step=5))
    rollouts(["task 1"] * 4 + ["task 2"] * 4, trainer)
    rollouts(["task 1"] * 4, trainer)
    assert len(set(runtime.samples)) == 12  # no two rollouts of the run share a sample
    again = SeededRuntime()
    BlackBoxRollouts({"pi": again}, "train", None, num_generations=4, seed=3)(["task 1"] * 4 + ["task 2"] * 4, trainer)
    assert again.samples == runtime.samples[:8]  # a rerun draws the same samples
    other = SeededRuntime()
    BlackBoxRollouts({"pi": other}, "train", None, num_generations=4, seed=4)(["task 1"] * 4, trainer)
    assert not set(other.samples) & set(runtime.samples)  # another seed, other draws
    planted = BlackBoxRollouts({"pi": SeededRuntime(honour=False)}, "train", None, num_generations=4)
    with pytest.raises(SharedSeedError, match="group 0"):
        planted(["task 1"] * 4, trainer)


@pytest.mark.failure_mode("F61")
def test_a_served_rollout_without_a_sample_is_its_own_draw(suite, monkeypatch):
    """The black-box server's rollouts (TRL's async worker asks with no sample; its `seed=group_id`
    is the same for a whole group) each get a fresh sample number, recorded in their record; a named
    sample is kept. Planted: the default this path once had (sample 0 for every rollout)."""
    from dagent.runtime import blackbox

    class Played(Exception):
        pass

    seen: list[int] = []

    def play(*args, sample, **kwargs):
        seen.append(sample)
        raise Played

    monkeypatch.setattr(blackbox, "play", play)
    runtime = blackbox.BlackBoxRuntime(suite, "http://127.0.0.1:9", model="m")
    runtime.reach, runtime.backend = object(), object()  # started, as far as run_rollout looks
    for sample in (None, None, 3):
        with pytest.raises(Played):
            runtime.run_rollout("train", 0, sample=sample)
    assert seen[0] != seen[1] and seen[2] == 3 and all(type(s) is int for s in seen)
    monkeypatch.setattr(blackbox.secrets, "randbits", lambda bits: 0)  # planted: one sample for every rollout
    for _ in range(2):
        with pytest.raises(Played):
            runtime.run_rollout("train", 0)
    assert seen[-1] == seen[-2]  # what check_group_seeds refuses on the sync path
