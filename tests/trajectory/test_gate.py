"""The trainability gate on synthetic captures: train / eval_only / reject, and the figures."""

from __future__ import annotations

import random

import pytest

from dagent.trajectory import CapturedTurn, analyse
from dagent.trajectory.gate import gate

SYSTEM = {"role": "system", "content": "You are a data agent."}
HEAD = tuple(range(100, 140))
RNG = random.Random(11)


def toks(n):
    return tuple(RNG.randrange(1000, 50_000) for _ in range(n))


def turn(i, prompt, completion, *, tools=2, logprobs="ok", system=SYSTEM):
    lp = tuple(-0.2 for _ in completion) if logprobs == "ok" else logprobs
    return CapturedTurn(
        f"t{i}",
        "s",
        i,
        None if prompt is None else tuple(prompt),
        tuple(completion),
        lp,
        messages=(system,),
        tools_offered=tools,
    )


def chain(n, *, drift=0, comp=12):
    """drift 0: an appending client; drift d: a reconstructing client losing d reply tokens."""
    out, prompt = [], HEAD + toks(20)
    for k in range(n):
        completion = toks(comp)
        out.append(turn(k, prompt, completion))
        prompt = prompt + completion[: comp - drift] + toks(drift and 2) + toks(15)
    return out


def test_clean_chain_trains_with_its_figures():
    verdict = gate(analyse(chain(4)))
    assert verdict.tier == "train" and verdict.trainable and verdict.reasons == ()
    assert (verdict.turns, verdict.agent_turns, verdict.samples_per_rollout) == (4, 4, 1)
    assert verdict.drift_max == 0 and verdict.fork_frac == 0.0 and verdict.trainable_tokens == 48
    assert "tier train" in verdict.report()


@pytest.mark.failure_mode("F02")
@pytest.mark.parametrize("drift", [6, 8])
def test_small_legitimate_drift_still_trains(drift):
    verdict = gate(analyse(chain(5, drift=drift)))
    assert verdict.tier == "train" and verdict.samples_per_rollout == 1
    assert verdict.realign_frac == 1.0 and verdict.drift_mean == drift == verdict.drift_max
    assert "realigned" in verdict.reasons[0]


@pytest.mark.failure_mode("F02")
def test_drift_past_the_threshold_is_not_trained():
    turns = chain(3)
    turns.append(turn(3, tuple(turns[-1].prompt_token_ids[:45]) + toks(30), toks(5)))
    verdict = gate(analyse(turns, fork_threshold_tokens=32))
    assert verdict.tier == "eval_only" and not verdict.trainable
    assert verdict.samples_per_rollout == 2 and verdict.fork_frac == pytest.approx(1 / 3)
    assert "forks 1 time" in verdict.reasons[0]


@pytest.mark.failure_mode("F02")
def test_lossless_capture_threshold_zero_forks_any_drift():
    """TRL's HarnessRolloutWorker forces fork_threshold_tokens=0 under lossless_capture=True."""
    assert gate(analyse(chain(3, drift=6), fork_threshold_tokens=0)).tier == "eval_only"


@pytest.mark.failure_mode("F03")
def test_title_call_last_is_excluded_and_the_agent_still_trains():
    turns = chain(3)
    title = turn(3, tuple(range(600, 650)), toks(5), tools=0, system={"role": "system", "content": "Write a title."})
    verdict = gate(analyse([*turns, title]))
    assert verdict.tier == "train" and verdict.auxiliary_roots_excluded == 1
    assert verdict.agent_turns == 3 and verdict.samples_per_rollout == 1


@pytest.mark.failure_mode("F03")
def test_subagent_is_excluded_and_reported():
    sub_system = {"role": "system", "content": "You are a sub-agent."}
    sub = turn(9, tuple(range(700, 760)), toks(4), system=sub_system)
    verdict = gate(analyse([*chain(3), sub]))
    assert verdict.tier == "train" and verdict.subagent_roots_excluded == 1
    assert any("subagent_root" in r for r in verdict.reasons)


@pytest.mark.failure_mode("F04")
def test_rerendering_harness_is_eval_only():
    turns = [turn(k, HEAD + toks(3) + toks(40 + 10 * k), toks(6)) for k in range(4)]
    verdict = gate(analyse(turns, fork_threshold_tokens=16))
    assert verdict.tier == "eval_only" and verdict.samples_per_rollout == 4
    assert any(r.startswith("per_turn_capture_only") for r in verdict.reasons)


@pytest.mark.failure_mode("F01")
def test_missing_prompt_ids_reject():
    turns = chain(3)
    turns[1] = turn(1, None, turns[1].completion_token_ids)
    verdict = gate(analyse(turns))
    assert verdict.tier == "reject" and "missing_prompt_ids" in verdict.reasons[0]


def test_missing_or_misaligned_logprobs_reject():
    turns = chain(2)
    no_lp = turn(1, turns[1].prompt_token_ids, turns[1].completion_token_ids, logprobs=None)
    assert gate(analyse([turns[0], no_lp])).tier == "reject"
    short = turn(1, turns[1].prompt_token_ids, turns[1].completion_token_ids, logprobs=(-0.1,))
    assert gate(analyse([turns[0], short])).tier == "reject"


def test_nothing_captured_rejects():
    verdict = gate(analyse([]))
    assert verdict.tier == "reject" and verdict.turns == 0 and "empty" in verdict.reasons[0]
