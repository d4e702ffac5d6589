"""Token-chain analysis on synthetic captures: linking, drift classes, root labels, flattening.

The fakes below are clients as the capture proxy sees them: an appending client, a
messages-reconstructing client whose re-render drifts a few tokens, a re-rendering client, a
tool-less title call, a sub-agent. TRL's own reconciler (`_chain_to_sequences`) is the reference
the flattening is checked against.
"""

from __future__ import annotations

import os
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dagent.trajectory import (
    AGENT,
    AUXILIARY,
    CLEAN,
    DISCARDED,
    FORK,
    REALIGN,
    SUBAGENT,
    CapturedTurn,
    analyse,
    measure_drift,
    turns_from_openenv,
)

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

SYSTEM = {"role": "system", "content": "You are a data agent."}
SYSTEM_IDS = tuple(range(100, 140))  # 40 ids: longer than the linker's HEAD
RNG = random.Random(7)


def toks(n: int) -> tuple[int, ...]:
    return tuple(RNG.randrange(1000, 50_000) for _ in range(n))


def turn(i, prompt, completion, *, tools=3, system=SYSTEM, hint=None, logprobs="ok", seq=None):
    lp = tuple(-0.05 - 0.01 * j for j in range(len(completion))) if logprobs == "ok" else logprobs
    return CapturedTurn(
        turn_id=f"t{i}",
        session_id="s1",
        seq=i if seq is None else seq,
        prompt_token_ids=None if prompt is None else tuple(prompt),
        completion_token_ids=tuple(completion),
        logprobs=lp,
        messages=(system, {"role": "user", "content": "task"}),
        tools_offered=tools,
        role_hint=hint,
    )


def appending(n, *, start=0, head=SYSTEM_IDS, comp=12, tool=20):
    """An appending client: prompt k = prompt k-1 + completion k-1 + tool result."""
    out, prompt = [], head + toks(30)
    for k in range(n):
        completion = toks(comp)
        out.append(turn(start + k, prompt, completion))
        prompt = prompt + completion + toks(tool)
    return out


def reconstructing(n, *, drift=6, comp=14):
    """A messages-reconstructing client: the engine re-renders history and the last `drift` tokens
    of each reply come back different (Qwen3 drops the <think> block the model sampled)."""
    out, prompt = [], SYSTEM_IDS + toks(30)
    for k in range(n):
        completion = toks(comp)
        out.append(turn(k, prompt, completion))
        prompt = prompt + completion[: comp - drift] + toks(3) + toks(20)
    return out


def assert_invariant(trajectory):
    """Module docstring INVARIANT, checked turn by turn."""
    links = dict(zip(trajectory.agent_chain[1:], trajectory.chain_transitions))
    for seg in trajectory.sequences():
        turns = [trajectory.turn(t) for t in seg.turn_ids]
        last = turns[-1]
        assert seg.input_ids == last.prompt_token_ids + last.completion_token_ids
        for i, t in enumerate(turns):
            p = len(t.prompt_token_ids)
            assert seg.input_ids[:p] == t.prompt_token_ids
            nxt = links.get(turns[i + 1].turn_id) if i + 1 < len(turns) else None
            kept = len(t.completion_token_ids) if nxt is None or nxt.kind == CLEAN else nxt.matched - p
            assert seg.input_ids[p : p + kept] == t.completion_token_ids[:kept]
            assert list(seg.loss_mask[p : p + kept]) == [1] * kept
            assert tuple(seg.logprobs[p : p + kept]) == t.logprobs[:kept]
        kept_total = 0
        for i, t in enumerate(turns):
            nxt = links.get(turns[i + 1].turn_id) if i + 1 < len(turns) else None
            kept_total += (
                len(t.completion_token_ids)
                if nxt is None or nxt.kind == CLEAN
                else nxt.matched - len(t.prompt_token_ids)
            )
        assert sum(seg.loss_mask) == kept_total
        assert all(lp == 0.0 for m, lp in zip(seg.loss_mask, seg.logprobs) if m == 0)


def test_appending_client_is_one_clean_root():
    tr = analyse(appending(5))
    assert len(tr.roots) == 1 and tr.roots[0].label == AGENT
    assert tr.agent_chain == ("t0", "t1", "t2", "t3", "t4")
    assert [t.kind for t in tr.chain_transitions] == [CLEAN] * 4
    assert tr.stats.samples_per_rollout == 1 and tr.stats.drift_max == 0
    assert not tr.findings
    (seg,) = tr.sequences()
    for t in tr.turns:  # CLEAN: the flat prefix up to each turn's end is that turn's engine ids
        end = t.prompt_token_ids + t.completion_token_ids
        assert seg.input_ids[: len(end)] == end
    assert_invariant(tr)


def test_arrival_order_not_input_order():
    turns = appending(4)
    tr = analyse(list(reversed(turns)))
    assert tr.agent_chain == ("t0", "t1", "t2", "t3") and tr.stats.clean == 3


@pytest.mark.failure_mode("F02")
@pytest.mark.parametrize("drift", [6, 7, 8])
def test_reconstructing_client_small_drift_is_realign_not_fork(drift):
    tr = analyse(reconstructing(4, drift=drift))
    assert len(tr.roots) == 1
    assert [t.kind for t in tr.chain_transitions] == [REALIGN] * 3
    assert {t.drift for t in tr.chain_transitions} == {drift}
    assert tr.stats.samples_per_rollout == 1 and tr.stats.realign_frac == 1.0
    assert tr.stats.fork == 0 and "realign" in tr.codes() and "fork" not in tr.codes()
    assert_invariant(tr)


@pytest.mark.failure_mode("F02")
def test_large_drift_forks_into_a_new_root():
    turns = appending(3)
    head = tuple(turns[-1].prompt_token_ids[:60])  # history rewritten after token 60: ~hundreds lost
    turns.append(turn(3, head + toks(40), toks(10)))
    tr = analyse(turns, fork_threshold_tokens=64)
    assert tr.chain_transitions[-1].kind == FORK and tr.chain_transitions[-1].drift > 64
    assert len(tr.roots) == 2 and all(r.label == AGENT for r in tr.roots)
    # the root records the earlier call with the SMALLEST drift: t0 (82 held, 60 kept), not t2
    assert (tr.roots[1].forked_from, tr.roots[1].drift) == ("t0", 22)
    assert tr.stats.samples_per_rollout == 2 and tr.stats.fork_frac == pytest.approx(1 / 3)
    assert "fork" in tr.codes()
    assert_invariant(tr)


@pytest.mark.failure_mode("F02")
def test_threshold_is_strict_like_trl():
    turns = reconstructing(2, drift=8)
    assert analyse(turns, fork_threshold_tokens=9).chain_transitions[0].kind == REALIGN
    assert analyse(turns, fork_threshold_tokens=8).chain_transitions[0].kind == FORK
    assert analyse(turns, fork_threshold_tokens=0).chain_transitions[0].kind == FORK


@pytest.mark.failure_mode("F02")
def test_small_drift_reaching_into_the_prompt_forks_as_in_trl():
    """A re-rendered generation prompt (Qwen3.5's `<think>\\n\\n</think>\\n\\n`) drifts inside the
    parent's PROMPT: TRL's reconciler only realigns drift inside the last completion."""
    t0 = turn(0, SYSTEM_IDS + toks(30) + (7, 8, 9, 10), toks(4))  # ends with a 4-token gen prompt
    t1 = turn(1, tuple(t0.prompt_token_ids[:-4] + t0.completion_token_ids) + toks(20), toks(5))
    tr = analyse([t0, t1])
    (link,) = tr.chain_transitions
    assert link.kind == FORK and link.drift == 8
    detail = next(f.detail for f in tr.findings if f.code == "fork")
    assert "reach into the previous call's prompt" in detail


@pytest.mark.failure_mode("F03")
def test_toolless_title_call_arriving_last_is_an_excluded_auxiliary_root():
    turns = appending(4)
    title = turn(9, tuple(range(500, 560)), toks(6), tools=0, system={"role": "system", "content": "Generate a title."})
    tr = analyse([*turns, title])
    assert tr.agent_chain[-1] == "t3"  # the title call is not mistaken for the final turn
    assert tr.roles[-1] == AUXILIARY and tr.stats.auxiliary_roots == 1
    assert tr.stats.samples_per_rollout == 1 and {"multiple_roots", "auxiliary_root"} <= tr.codes()
    assert all("t9" not in s.turn_ids for s in tr.sequences())


@pytest.mark.failure_mode("F03")
def test_title_hint_and_summariser_extending_the_chain_are_auxiliary():
    turns = appending(3)
    last = turns[-1]
    summary = turn(3, tuple(last.prompt_token_ids + last.completion_token_ids) + toks(9), toks(30), hint="summary")
    tr = analyse([*turns, summary])
    assert tr.roles[-1] == AUXILIARY and tr.agent_chain == ("t0", "t1", "t2")


@pytest.mark.failure_mode("F03")
def test_subagent_with_its_own_system_prompt_is_excluded():
    agent = appending(4)
    sub_system = {"role": "system", "content": "You are a search sub-agent."}
    sub = [
        turn(10 + k, tuple(range(700, 740)) + tuple(t.prompt_token_ids[40:]), t.completion_token_ids, system=sub_system)
        for k, t in enumerate(appending(2))
    ]
    tr = analyse([*agent, *sub])
    assert tr.agent_chain == ("t0", "t1", "t2", "t3")
    assert tr.stats.subagent_roots == 1 and "subagent_root" in tr.codes()
    roles = dict(zip((t.turn_id for t in tr.turns), tr.roles))
    assert (roles["t10"], roles["t11"]) == (SUBAGENT, SUBAGENT)


@pytest.mark.failure_mode("F04")
def test_rerendering_client_is_per_turn_capture_only():
    turns, history = [], toks(30)
    for k in range(5):  # every call re-renders its history differently from token 45 on
        prompt = SYSTEM_IDS + toks(5) + history
        turns.append(turn(k, prompt, toks(10)))
        history = history + toks(25)
    tr = analyse(turns, fork_threshold_tokens=16)
    assert tr.per_turn_capture_only and len(tr.roots) == 5
    assert "per_turn_capture_only" in tr.codes() and "multiple_roots" not in tr.codes()
    assert tr.stats.samples_per_rollout == 5


def test_retry_of_the_same_call_realigns_like_trl():
    turns = appending(3)
    t2 = turns[2]
    retry = turn(3, t2.prompt_token_ids, toks(12))
    tr = analyse([*turns, retry])
    assert tr.chain_transitions[-1].kind == REALIGN and tr.chain_transitions[-1].parent_id == "t2"
    assert_invariant(tr)


def test_long_abandoned_attempt_links_to_its_exact_parent_and_is_discarded():
    turns = appending(3)
    t1 = turns[1]
    long_fail = turn(2, turns[2].prompt_token_ids, toks(300))  # replaces t2
    redo = turn(3, tuple(long_fail.prompt_token_ids) + toks(5), toks(8))  # t1's end + new context
    tr = analyse([turns[0], t1, long_fail, redo], fork_threshold_tokens=100)
    assert tr.agent_chain == ("t0", "t1", "t3") and tr.roles[2] == DISCARDED
    assert tr.chain_transitions[-1].kind == CLEAN and "discarded_turns" in tr.codes()


@pytest.mark.failure_mode("F01")
def test_missing_prompt_ids_and_logprobs_are_fatal():
    turns = appending(3)
    broken = [
        turns[0],
        turn(1, None, turns[1].completion_token_ids),
        turn(2, turns[2].prompt_token_ids, turns[2].completion_token_ids, logprobs=None),
    ]
    tr = analyse(broken)
    assert {"missing_prompt_ids", "missing_logprobs"} <= {f.code for f in tr.fatal}
    bad = turn(0, turns[0].prompt_token_ids, toks(4), logprobs=(-0.1, -0.2))
    assert "logprob_length_mismatch" in {f.code for f in analyse([bad]).fatal}
    assert "invalid_logprob" in {
        f.code for f in analyse([turn(0, turns[0].prompt_token_ids, toks(2), logprobs=(0.5, float("nan")))]).fatal
    }


def test_empty_capture_is_fatal():
    tr = analyse([])
    assert [f.code for f in tr.fatal] == ["empty"] and tr.sequences() == ()


def test_no_tools_anywhere_means_tools_carry_no_signal():
    turns = [turn(t.seq, t.prompt_token_ids, t.completion_token_ids, tools=0) for t in appending(3)]
    tr = analyse(turns)
    assert tr.roles == (AGENT,) * 3 and tr.stats.samples_per_rollout == 1


def test_many_rerendered_calls_stay_fast():
    """Bounded candidates per head: 600 re-rendered calls must not compare all pairs."""
    import time

    history, turns = toks(2_000), []
    for k in range(600):
        turns.append(turn(k, SYSTEM_IDS + toks(3) + history, toks(5)))
    start = time.perf_counter()
    tr = analyse(turns, fork_threshold_tokens=64)
    assert tr.per_turn_capture_only and time.perf_counter() - start < 5.0


# --- OpenEnv interop ---------------------------------------------------------------------------
def test_from_openenv_graph_and_trace_entries():
    from openenv.core.harness.capture.graph import RolloutGraph, TurnNode

    turns = appending(3)
    graph = RolloutGraph()
    for t in turns:
        graph.add_turn(
            TurnNode(
                node_id=t.turn_id,
                prompt_ids=list(t.prompt_token_ids),
                sampled_ids=list(t.completion_token_ids),
                sampled_logprobs=list(t.logprobs),
                n_tools=2,
                request_messages=[SYSTEM],
                finish_reason="stop",
            )
        )
    graph.add_turn(
        TurnNode(
            node_id="title",
            prompt_ids=list(range(500, 540)),
            sampled_ids=[1, 2],
            sampled_logprobs=[-0.1, -0.2],
            n_tools=0,
        )
    )
    graph.add_turn(TurnNode(node_id="noids", prompt_ids=[], sampled_ids=[3], sampled_logprobs=None))
    captured = turns_from_openenv(graph, session_id="s1")
    assert captured[0].prompt_token_ids == turns[0].prompt_token_ids and captured[0].seq == 0
    assert captured[-1].prompt_token_ids is None and captured[-1].logprobs is None
    tr = analyse(captured)
    assert tr.agent_chain == ("t0", "t1", "t2") and len(graph.roots()) == len(tr.roots)
    assert "missing_prompt_ids" in tr.codes()

    entry = {
        "request": {"messages": [SYSTEM], "tools": [{"type": "function"}]},
        "response": {"choices": [{"message": {"content": "x"}, "finish_reason": "length"}]},
        "prompt_token_ids": [1, 2, 3],
        "completion_token_ids": [4, 5],
        "per_token_logps": [],
        "loss_mask": [0, 0, 0, 1, 1],
        "metadata": {"node_id": "n7", "index": 4, "n_tools": 1},
    }
    (t,) = turns_from_openenv({"session_id": "s9", "entries": [entry]})
    assert (t.turn_id, t.session_id, t.seq, t.tools_offered) == ("n7", "s9", 0, 1)
    assert t.logprobs is None and t.finish_reason == "length" and t.tools == ({"type": "function"},)


# --- properties ----------------------------------------------------------------------------------
STEP = st.tuples(
    st.sampled_from(["clean", "realign", "prompt", "fresh"]),
    st.integers(1, 12),  # drift or cut size
    st.integers(0, 8),  # completion length
    st.integers(0, 6),  # new context length
)


def build(steps, seed):
    rng = random.Random(seed)

    def ids(n):  # mostly distinct, sometimes colliding ids
        return tuple(rng.randrange(5) if rng.random() < 0.1 else rng.randrange(1000, 1100) for _ in range(n))

    turns, prompt = [], SYSTEM_IDS + ids(4)
    for k, (kind, cut, comp, ctx) in enumerate(steps):
        completion = ids(comp)
        turns.append(turn(k, prompt, completion))
        held = prompt + completion
        if kind == "clean":
            prompt = held + ids(ctx)
        elif kind == "realign":
            prompt = held[: len(held) - min(cut, comp)] + ids(ctx)
        elif kind == "prompt":
            prompt = held[: max(len(SYSTEM_IDS), len(held) - cut - comp)] + ids(ctx + 1)
        else:
            prompt = SYSTEM_IDS + ids(ctx + 5)
    return turns


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(STEP, min_size=1, max_size=10), st.integers(0, 10**6), st.sampled_from([0, 4, 1024]))
def test_property_chain_reproduces_engine_ids_and_matches_trl(steps, seed, threshold):
    from trl.experimental.async_grpo.async_rollout_worker import TurnRecord, _chain_to_sequences

    tr = analyse(build(steps, seed), fork_threshold_tokens=threshold)
    assert_invariant(tr)
    assert set(tr.roles) <= {AGENT, DISCARDED}
    for link in tr.chain_transitions:  # each class is TRL's rule applied to the engine ids
        a, b = tr.turn(link.parent_id), tr.turn(link.turn_id)
        assert measure_drift(a.prompt_token_ids, a.completion_token_ids, b.prompt_token_ids, threshold) == (
            link.kind,
            link.drift,
            link.matched,
        )
    records = [
        TurnRecord(list(t.prompt_token_ids), list(t.completion_token_ids), list(t.logprobs)) for t in tr.chain_turns()
    ]
    rows, tally = _chain_to_sequences(records, "r", threshold)
    ours = [s for s in tr.sequences() if s.n_trainable]
    assert [(list(s.input_ids), list(s.loss_mask), list(s.logprobs)) for s in ours] == [
        (r.input_ids, r.completion_mask, r.old_log_probs) for r in rows
    ]
    assert (tally["clean"], tally["realign"], tally["fork"], tally["drift_max"]) == (
        tr.stats.clean,
        tr.stats.realign,
        tr.stats.fork,
        tr.stats.drift_max,
    )
    assert tr.stats.samples_per_rollout == len(rows)
    assert tr.stats.trainable_tokens == sum(s.n_trainable for s in ours)
