"""pi, the second real agent harness (`@mariozechner/pi-coding-agent` from npm).

Unmarked tests are pure. Tests marked `harness` run the real pi (Node) against the real local
engine through the capture proxy: its effective configuration read back from pi itself (F31), a
rollout in a bubblewrap sandbox over the steered tiny Qwen3 (benchmarks/rollouts.py), its
compaction summariser labelled auxiliary and never trained (F03), and groups of a rollout batch
routed to opencode and pi by group id with rows TRL's own conversion made (F40).
"""

from __future__ import annotations

import json

import pytest

from dagent.errors import HarnessError
from dagent.harness.pi import (
    KEY_VARIABLE,
    PiConfig,
    check_effective,
    find_pi,
    parse_events,
    pi_role_hints,
    render_models,
    render_settings,
)
from dagent.trajectory.turn import CapturedTurn


def turn(system: str) -> CapturedTurn:
    return CapturedTurn(
        turn_id="t",
        session_id="s",
        seq=0,
        messages=({"role": "system", "content": system}, {"role": "user", "content": "x"}),
        prompt_token_ids=(1, 2),
        completion_token_ids=(3,),
        logprobs=(-0.1,),
    )


def test_models_json_names_the_key_variable_never_the_key_and_calls_chat_completions():
    models = render_models(PiConfig(model="m", max_output_tokens=256, context_tokens=4096), "http://127.0.0.1:9/v1")
    provider = models["providers"]["dagent"]
    assert provider["apiKey"] == KEY_VARIABLE and provider["api"] == "openai-completions"
    assert provider["baseUrl"] == "http://127.0.0.1:9/v1" and provider["compat"]["maxTokensField"] == "max_tokens"
    assert provider["models"][0] | {"id": "m", "contextWindow": 4096, "maxTokens": 256} == provider["models"][0]
    settings = render_settings(PiConfig())
    assert settings["compaction"] == {"enabled": False} and settings["retry"]["enabled"] is False
    assert render_settings(PiConfig(compaction_reserve_tokens=200))["compaction"]["enabled"] is True


def test_events_give_tool_uses_the_stop_reason_and_errors():
    events = [
        {"type": "tool_execution_start"},
        {"type": "turn_end"},
        {"type": "tool_execution_start"},
        {
            "type": "message_end",
            "message": {"role": "assistant", "stopReason": "error", "errorMessage": "Connection error.", "content": []},
        },
        {
            "type": "message_end",
            "message": {"role": "assistant", "stopReason": "stop", "content": [{"type": "text", "text": "done"}]},
        },
    ]
    out = parse_events("noise\n" + "\n".join(json.dumps(e) for e in events))
    assert out["tool_uses"] == 2 and out["turns"] == 1 and out["stop"] == "stop" and out["text"] == "done"
    assert out["errors"] == ["Connection error."]


@pytest.mark.failure_mode("F03")
def test_the_compaction_summariser_is_labelled_auxiliary_and_the_agent_is_not():
    agent, aux = pi_role_hints(
        [
            turn("You are an expert coding assistant operating inside pi, a coding agent"),
            turn("You are a context summarization assistant. Summarize..."),
        ]
    )
    assert agent.role_hint is None and aux.role_hint == "compaction"


@pytest.mark.failure_mode("F31")
def test_an_effective_configuration_other_than_asked_is_refused_by_name():
    config = PiConfig(model="m", steps=5, tools=("bash", "read", "websearch"))
    good = {
        "model": {"id": "m", "api": "openai-completions"},
        "activeTools": ["bash", "read", "websearch"],
        "maxTurns": 5,
    }
    check_effective(good, config)
    with pytest.raises(HarnessError, match="tools_not_applied.*F31"):
        check_effective({**good, "activeTools": ["bash", "read"]}, config)  # pi dropped a name it does not know
    with pytest.raises(HarnessError, match="model_not_applied"):
        check_effective({**good, "model": {"id": "other", "api": "openai-completions"}}, config)
    with pytest.raises(HarnessError, match="step_limit_not_applied"):
        check_effective({**good, "maxTurns": 0}, config)


# -- the real pi ------------------------------------------------------------------------------
def need_pi():
    try:
        return find_pi()
    except HarnessError as e:
        pytest.skip(f"pi is not installed ({e})")


@pytest.mark.harness
@pytest.mark.failure_mode("F31")
def test_pi_itself_reports_what_it_runs_with_and_drops_an_unknown_tool():
    from dagent.harness.pi import effective_config

    cli = need_pi()
    asked = PiConfig(model="tiny-qwen3", steps=7)
    effective = effective_config(cli, asked)
    check_effective(effective, asked)
    assert effective["model"]["baseUrl"] == "http://127.0.0.1:1/v1" and effective["maxTurns"] == 7
    wrong = PiConfig(model="tiny-qwen3", tools=("bash", "read", "websearch"))
    assert sorted(effective_config(cli, wrong)["activeTools"]) == ["bash", "read"]  # silently dropped by pi
    with pytest.raises(HarnessError, match="tools_not_applied"):
        check_effective(effective_config(cli, wrong), wrong)


@pytest.fixture(scope="module")
def steered():
    need_pi()
    from benchmarks.rollouts import steered_engine

    engine = steered_engine()
    yield engine
    engine.stop()


def pi_runtime(suite, url, tmp_path, **pi):
    from dagent.runtime.blackbox import BlackBoxRuntime

    return BlackBoxRuntime(
        suite,
        url,
        model="tiny-qwen3-steered",
        harness="pi",
        timeout_s=300,
        pi=PiConfig(model="tiny-qwen3-steered", **{"max_output_tokens": 256, **pi}),
        sandbox_dir=tmp_path / "sandboxes",
    )


@pytest.mark.harness
@pytest.mark.slow
@pytest.mark.failure_mode("F03")
def test_a_pi_rollout_through_capture_is_graded_with_an_exact_chain_and_its_summariser_is_not_trained(
    suite, steered, tmp_path
):
    from tests.envs.test_blackbox import assert_exact_chain

    with pi_runtime(suite, steered.url, tmp_path) as rt:
        r = rt.run_rollout("train", 0)
    assert r.agent == "pi" and r.outcome == "correct" and r.answer == "3\n", r.summary()
    assert r.agent_turns == 3 and r.tool_calls == 2 == r.metadata["pi"]["tool_uses"]
    assert_exact_chain(r)
    assert r.gate.tier == "train" and r.gate.samples_per_rollout == 1 and not r.findings
    # a context small enough that pi compacts: its summariser call is captured, labelled, left out
    with pi_runtime(
        suite, steered.url, tmp_path, max_output_tokens=64, context_tokens=1100, compaction_reserve_tokens=200
    ) as rt:
        r = rt.run_rollout("train", 0)
    aux = [t for t in r.turns if t.role_hint == "compaction"]
    assert len(aux) == 1 and r.trajectory.roles[r.turns.index(aux[0])] == "auxiliary"
    assert aux[0].turn_id not in r.trajectory.agent_chain and r.outcome == "correct"
    assert [e["metadata"]["node_id"] for e in r.trace_entries()] == list(r.trajectory.agent_chain)


@pytest.mark.harness
@pytest.mark.slow
@pytest.mark.failure_mode("F40")
@pytest.mark.failure_mode("F61")
def test_a_rollout_batch_routes_each_group_to_one_harness_and_trains_each_chain_as_trl_converts_it(
    suite, steered, tmp_path, monkeypatch
):
    from dagent.harness.opencode import OpencodeConfig
    from dagent.runtime.blackbox import BlackBoxRuntime
    from dagent.train.blackbox.rollouts import BlackBoxRollouts
    from tests.envs.test_blackbox import need_opencode

    need_opencode()
    instruction = suite.task_at("train", 0).instruction
    prompts = [[{"role": "user", "content": instruction}]] * 4  # two groups of two, as TRL's sampler repeats
    opencode = BlackBoxRuntime(
        suite,
        steered.url,
        model="tiny-qwen3-steered",
        timeout_s=300,
        opencode=OpencodeConfig(model="tiny-qwen3-steered", max_output_tokens=256),
        sandbox_dir=tmp_path / "oc",
    )
    with opencode, pi_runtime(suite, steered.url, tmp_path) as pi:
        rollouts = BlackBoxRollouts({"opencode": opencode, "pi": pi}, "train", steered_tokenizer(), num_generations=2)
        out = rollouts(prompts)
        # F61 planted: every rollout drawn as the same sample (the default the sync path once had)
        from dagent.train.blackbox import rollouts as module

        monkeypatch.setattr(module, "rollout_sample", lambda seed, step, ordinal: 0)
        with pytest.raises(module.SharedSeedError, match="same seed"):
            BlackBoxRollouts({"pi": pi}, "train", steered_tokenizer(), num_generations=2)(prompts[:2])
    rows = rollouts.rows
    # each rollout its own draw, as capture recorded the seed of its first call (F61)
    assert None not in [r.seed for r in rows] and len({r.seed for r in rows}) == 4
    assert [r.harness for r in rows] == ["opencode", "opencode", "pi", "pi"]  # constant within a group
    assert out["env_reward"] == [r.reward for r in rows] and all(r.outcome == "correct" for r in rows)
    for r, prompt_ids, completion_ids, mask in zip(rows, out["prompt_ids"], out["completion_ids"], out["env_mask"]):
        assert r.audit == "exact" and r.sequences == 1 and len(completion_ids) == len(mask)
        assert list(r.prompt_ids) == prompt_ids and sum(mask) == r.trained_tokens > 0
    assert rows[0].other_calls >= 1 and rows[2].other_calls == 0  # opencode's title call; pi makes none


def steered_tokenizer():
    from transformers import AutoTokenizer

    from dagent.engine.models import tiny_qwen3

    return AutoTokenizer.from_pretrained(str(tiny_qwen3()))


@pytest.mark.harness
@pytest.mark.slow
def test_pi_is_evaluated_like_opencode(suite, steered, tmp_path):
    """`dagent eval --agent pi`: the same stack as opencode (capture, the local sandbox, the grader),
    pi as the harness, under the black-box recipe's conditions (its step cap the one the report counts
    cut-offs against)."""
    import json

    from dagent.eval.args import EvalArgs
    from dagent.eval.experiment import Arm, run_experiment
    from dagent.recipes import BlackboxRecipe, Recipes

    run_experiment(
        suite,
        [Arm("pi", agent="pi", engine_url=steered.url)],
        tmp_path / "out",
        EvalArgs(split="train", limit=1, workers=1, timeout_s=300),
    )
    (record,) = [json.loads(line) for line in (tmp_path / "out" / "pi" / "records.jsonl").read_text().splitlines()]
    assert record["agent"] == "pi" and record["outcome"] == "correct" and record["tool_calls"] == 2
    assert Recipes.of("gpu").step_cap("pi") == BlackboxRecipe.gpu().agent_steps  # the conditions it trains under (F47)
