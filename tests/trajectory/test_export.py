"""Export to what trainers consume, fed through TRL's and OpenEnv's own conversion code."""

from __future__ import annotations

import os
import random

import pytest

from dagent.errors import CaptureError
from dagent.trajectory import CapturedTurn, analyse, turns_from_openenv
from dagent.trajectory.export import to_capture_log, to_rollout_document, to_trace_entries, to_training_trace

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
SYSTEM = {"role": "system", "content": "You are a data agent."}
HEAD = tuple(range(100, 140))
RNG = random.Random(5)


def toks(n):
    return tuple(RNG.randrange(1000, 50_000) for _ in range(n))


def turn(i, prompt, completion, *, tools=2, system=SYSTEM):
    return CapturedTurn(
        f"t{i}",
        "s1",
        i,
        None if prompt is None else tuple(prompt),
        tuple(completion),
        tuple(-0.1 - j / 100 for j in range(len(completion))),
        messages=(system, {"role": "user", "content": "task"}),
        tools_offered=tools,
        finish_reason="stop",
        metadata={"response_message": {"role": "assistant", "content": f"r{i}"}},
    )


def chain(n, drift=0, comp=10):
    out, prompt = [], HEAD + toks(20)
    for k in range(n):
        completion = toks(comp)
        out.append(turn(k, prompt, completion))
        prompt = prompt + completion[: comp - drift] + toks(drift and 2) + toks(15)
    return out


def title_call(i):
    return turn(i, tuple(range(600, 650)), toks(4), tools=0, system={"role": "system", "content": "Write a title."})


def trl_sequences(trace, threshold=1024):
    """What TRL's HarnessRolloutWorker does with `fetch_training_trace()`'s value."""
    from trl.experimental.async_grpo.async_rollout_worker import _chain_to_sequences
    from trl.experimental.async_grpo.openenv_harness import _turns_from_training_trace

    return _chain_to_sequences(_turns_from_training_trace(trace), "rollout", threshold)


def test_trace_entries_carry_engine_ids_and_masks_for_the_agent_chain_only():
    turns = chain(3)
    entries = to_trace_entries(analyse([*turns, title_call(3)]))
    assert [e["metadata"]["node_id"] for e in entries] == ["t0", "t1", "t2"]
    for entry, t in zip(entries, turns):
        assert entry["prompt_token_ids"] == list(t.prompt_token_ids)
        assert entry["completion_token_ids"] == list(t.completion_token_ids)
        assert entry["per_token_logps"] == list(t.logprobs)
        assert entry["loss_mask"] == [0] * len(t.prompt_token_ids) + [1] * len(t.completion_token_ids)
        message = entry["response"]["choices"][0]["message"]
        assert message["content"] == "r" + entry["metadata"]["node_id"][1:]


def test_the_capture_log_keeps_every_call_and_reads_back_to_the_same_analysis():
    import dataclasses
    import json

    turns = chain(3)
    hinted = dataclasses.replace(turn(3, tuple(range(700, 740)), toks(3)), role_hint="title")  # tools, but a title
    retry = dataclasses.replace(turns[1], turn_id="t1r", seq=4)  # a retry of t1: off the chain
    original = analyse([*turns, hinted, retry])
    log = json.loads(json.dumps(to_capture_log(original)))  # through a file's JSON
    assert [e["metadata"]["node_id"] for e in log] == ["t0", "t1", "t2", "t3", "t1r"]
    assert [e["metadata"]["role"] for e in log] == list(original.roles)
    replayed = analyse(turns_from_openenv(log, session_id="s1"))
    assert replayed.roles == original.roles and replayed.agent_chain == original.agent_chain
    assert {f.code for f in replayed.findings} == {f.code for f in original.findings}
    assert [list(s.loss_mask) for s in replayed.sequences()] == [list(s.loss_mask) for s in original.sequences()]
    assert replayed.turn("t3").role_hint == "title" and "auxiliary" in original.roles
    assert replayed.turn("t2").metadata["response_message"] == {"role": "assistant", "content": "r2"}


@pytest.mark.failure_mode("F03")
@pytest.mark.parametrize("n_turns", [2, 3])
def test_trl_turns_a_clean_chain_into_one_sequence_with_the_right_mask(n_turns):
    turns = chain(n_turns)
    trajectory = analyse([*turns, title_call(n_turns)])  # the title call arrives last
    sequences, tally = trl_sequences(to_training_trace(trajectory))
    assert len(sequences) == 1 and tally["fork"] == 0 and tally["clean"] == n_turns - 1
    (seq,) = sequences
    last = turns[-1]
    assert seq.input_ids == list(last.prompt_token_ids + last.completion_token_ids)
    expected = [0] * len(seq.input_ids)
    for t in turns:
        start = len(t.prompt_token_ids)
        expected[start : start + len(t.completion_token_ids)] = [1] * len(t.completion_token_ids)
    assert seq.completion_mask == expected
    assert sum(seq.completion_mask) == 10 * n_turns
    (ours,) = trajectory.sequences()
    assert (seq.input_ids, seq.completion_mask, seq.old_log_probs) == (
        list(ours.input_ids),
        list(ours.loss_mask),
        list(ours.logprobs),
    )


@pytest.mark.failure_mode("F02")
def test_trl_reconciles_a_realigning_chain_exactly_as_we_flatten_it():
    trajectory = analyse(chain(4, drift=7))
    sequences, tally = trl_sequences(to_training_trace(trajectory))
    assert tally["realign"] == 3 and len(sequences) == 1 == trajectory.stats.samples_per_rollout
    (ours,) = trajectory.sequences()
    assert sequences[0].input_ids == list(ours.input_ids)
    assert sequences[0].completion_mask == list(ours.loss_mask)
    # TRL under lossless_capture (threshold 0) forks the same trace: analyse with the trainer's value
    assert len(trl_sequences(to_training_trace(trajectory), 0)[0]) == 4
    assert analyse(chain(4, drift=7), fork_threshold_tokens=0).stats.samples_per_rollout == 4


@pytest.mark.failure_mode("F01")
def test_training_trace_refuses_a_capture_with_fatal_findings():
    turns = chain(2)
    turns[1] = turn(1, None, turns[1].completion_token_ids)
    with pytest.raises(CaptureError, match="missing_prompt_ids"):
        to_training_trace(analyse(turns))


def test_rollout_document_round_trips_through_openenv():
    from openenv.core.harness.capture.contract import to_trace_entries as openenv_entries
    from openenv.core.harness.capture.export import summarise
    from openenv.core.harness.capture.graph import RolloutGraph, TurnNode

    turns = chain(3)
    sub = turn(7, tuple(range(700, 760)), toks(4), system={"role": "system", "content": "Sub."})
    title = title_call(8)
    trajectory = analyse([*turns, sub, title])
    document = to_rollout_document(trajectory, include_messages=True)
    assert document["trainable"] and document["rollout_type"] == "train"
    roles = [(row["role"], row["label"]) for row in document["sequences"]]
    assert roles == [("agent", "agent"), ("auxiliary", "subagent"), ("auxiliary", "auxiliary")]
    assert [t["role"] for t in document["turns"]] == ["agent"] * 3 + ["subagent", "auxiliary"]

    graph = RolloutGraph()
    for t in trajectory.turns:
        graph.add_turn(
            TurnNode(
                node_id=t.turn_id,
                prompt_ids=list(t.prompt_token_ids),
                sampled_ids=list(t.completion_token_ids),
                sampled_logprobs=list(t.logprobs),
                n_tools=t.tools_offered,
            )
        )
    entries = openenv_entries(graph, document)
    assert [e["metadata"]["node_id"] for e in entries] == ["t0", "t1", "t2"]
    ours = to_trace_entries(trajectory)
    assert [e["loss_mask"] for e in entries] == [e["loss_mask"] for e in ours]
    text = summarise(document)  # OpenEnv's own one-screen reader accepts the document
    assert "trainable=True" in text and "[agent" in text and "[auxiliary" in text


def test_rollout_document_of_a_forked_chain_is_not_trainable():
    turns = chain(3)
    turns.append(turn(3, tuple(turns[-1].prompt_token_ids[:45]) + toks(30), toks(5)))
    document = to_rollout_document(analyse(turns, fork_threshold_tokens=32))
    assert not document["trainable"] and document["metadata"]["gate"] == "eval_only"
    assert [row["n_turns"] for row in document["sequences"]] == [3, 1]
    assert document["stats"]["n_forks"] == 1
