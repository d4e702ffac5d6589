"""The white-box tool loop used for evaluation runs under training's conditions (one source).

The engine is faked with httpx's MockTransport (a scripted OpenAI-compatible answerer in this file);
the sandbox, the tools, the episode and the grader are the real ones.
"""

from __future__ import annotations

import json

import httpx
import pytest

from dagent.core.sampling import RECIPE_SAMPLING, call_seed
from dagent.envs.whitebox_runtime import white_box_env
from dagent.harness.base import sample_seed
from dagent.harness.play import play
from dagent.harness.toolloop import LoopLimits, ToolLoopAgent, tool_schemas
from dagent.tools.episode import EpisodeConfig


def call(name: str, **arguments) -> dict:
    return {"id": f"c-{name}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


class ScriptedEngine:
    """Answers each chat request with the next scripted assistant message; records the requests."""

    def __init__(self, *replies: dict, prompt_tokens: int = 100, completion_tokens: int = 20) -> None:
        self.replies, self.requests = list(replies), []
        self.prompt_tokens, self.completion_tokens = prompt_tokens, completion_tokens

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.requests.append(body)
        message = self.replies.pop(0) if self.replies else {"role": "assistant", "content": "done"}
        n = len(self.requests)
        return httpx.Response(
            200,
            json={
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", **message},
                        "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
                    }
                ],
                "usage": {"prompt_tokens": self.prompt_tokens * n, "completion_tokens": self.completion_tokens},
            },
        )

    def agent(self, **kw) -> ToolLoopAgent:
        return ToolLoopAgent("http://engine", "m", client=httpx.Client(transport=httpx.MockTransport(self)), **kw)


def trl_view(suite, backend, config: EpisodeConfig):
    """What TRL's GRPOTrainer(environment_factory=...) gets: the class, its tool schemas, reset()."""
    from transformers.utils import get_json_schema

    cls = white_box_env(suite, None, backend=backend, config=config)  # the default selection
    env = cls()
    schemas = [get_json_schema(getattr(env, name)) for name in config.tools]  # as TRL derives them
    return env, schemas


def test_the_loop_offers_trainings_tools_and_instruction_and_samples_like_the_trainer(suite, backend):
    config = EpisodeConfig()
    env, schemas = trl_view(suite, backend, config)
    instruction = env.reset(split="train", index=1)
    env.get_reward()
    engine = ScriptedEngine({"content": "", "tool_calls": [call("submit_solution", answer=12)]})
    rec = play(suite, "train", 1, engine.agent(config=config), backend).record
    first = engine.requests[0]
    assert first["tools"] == schemas == tool_schemas(config.tools)  # one registry (F25)
    assert first["messages"] == [{"role": "user", "content": instruction}]  # reset()'s text (F28)
    assert "submit_solution" in instruction and "answer.txt" not in instruction
    assert (
        (first["temperature"], first["top_p"], first["top_k"])
        == (0.8, 1.0, 0)
        == tuple(RECIPE_SAMPLING.as_request().values())
    )
    assert first["seed"] == call_seed(sample_seed(rec.task_id, 0), 0)  # turn 0 of sample 0
    assert (rec.outcome, rec.answer, rec.tool_calls, rec.model_calls) == ("correct", "12", 0, 1)


def test_tool_results_are_the_episodes_clipped_output_appended_as_trl_does(suite, backend):
    config = EpisodeConfig(output_chars=50)
    engine = ScriptedEngine(
        {"content": "", "tool_calls": [call("bash", command="seq 1 500")]},
        {"content": "", "tool_calls": [call("submit_solution", answer="3")]},
    )
    rec = play(suite, "train", 0, engine.agent(config=config), backend).record
    # each turn its own stream, fixed by the sample: call_seed(sample's seed, turn), so arms evaluated
    # on the same sample draw the same numbers turn by turn, and turns never repeat a stream
    base = sample_seed(suite.task_at("train", 0).task_id, 0)
    assert [r["seed"] for r in engine.requests] == [call_seed(base, 0), call_seed(base, 1)]
    assert engine.requests[0]["seed"] != engine.requests[1]["seed"]
    tool_msg = engine.requests[1]["messages"][-1]
    assert tool_msg["role"] == "tool" and tool_msg["name"] == "bash"
    assert "characters cut: output is limited to 50 characters" in tool_msg["content"]  # the registry's marker
    from dagent.tools import ToolResult, clip

    assert tool_msg["content"] == ToolResult(True, clip("\n".join(map(str, range(1, 501))), 50)).render()
    assert (rec.outcome, rec.tool_calls) == ("correct", 1)


@pytest.mark.failure_mode("F26")
def test_the_step_budget_is_the_episodes_and_the_terminator_is_exempt(suite, backend):
    config = EpisodeConfig(max_steps=2)
    engine = ScriptedEngine(
        *[{"content": "", "tool_calls": [call("bash", command="true")]}] * 3,
        {"content": "", "tool_calls": [call("submit_solution", answer=3)]},
    )
    agent = engine.agent(config=config)
    played = play(suite, "train", 0, agent, backend)
    refusal = engine.requests[3]["messages"][-1]["content"]
    assert "step budget of 2 tool calls is spent" in refusal
    assert (played.record.outcome, played.record.tool_calls) == ("correct", 2)
    assert played.run.metadata["refused_calls"] == 1 and played.run.metadata["step_capped"]


def test_the_completion_budget_counts_tool_tokens_and_ends_the_loop(suite, backend):
    engine = ScriptedEngine(*[{"content": "", "tool_calls": [call("bash", command="true")]}] * 5, prompt_tokens=1000)
    played = play(suite, "train", 0, engine.agent(limits=LoopLimits(max_completion_length=2500)), backend)
    assert played.run.metadata["stop"] == "completion_budget" and len(engine.requests) == 4
    assert played.record.outcome == "wrong"  # nothing submitted


def test_malformed_arguments_come_back_to_the_model_and_are_counted(suite, backend):
    bad = {"id": "x", "type": "function", "function": {"name": "bash", "arguments": "{not json"}}
    engine = ScriptedEngine(
        {"content": "", "tool_calls": [bad]}, {"content": "", "tool_calls": [call("submit_solution", answer=3)]}
    )
    played = play(suite, "train", 0, engine.agent(), backend)
    assert "not valid JSON" in engine.requests[1]["messages"][-1]["content"]
    assert played.run.metadata["malformed_calls"] == 1 and played.record.outcome == "correct"


@pytest.mark.failure_mode("F07")
def test_an_engine_that_never_answers_is_zero_model_calls_ungraded(suite, backend):
    def down(request):
        raise httpx.ConnectError("connection refused")

    agent = ToolLoopAgent("http://engine", "m", client=httpx.Client(transport=httpx.MockTransport(down)))
    rec = play(suite, "train", 0, agent, backend).record
    assert (rec.outcome, rec.reward, rec.cause) == ("ungraded", None, "zero_model_calls")


@pytest.mark.failure_mode("F07")
def test_an_engine_lost_mid_episode_voids_the_episode(suite, backend):
    engine = ScriptedEngine({"content": "", "tool_calls": [call("bash", command="echo 3 > answer.txt")]})

    def flaky(request):
        if engine.requests:
            return httpx.Response(503, text="overloaded")
        return engine(request)

    agent = ToolLoopAgent("http://engine", "m", client=httpx.Client(transport=httpx.MockTransport(flaky)))
    rec = play(suite, "train", 0, agent, backend).record
    assert (rec.outcome, rec.reward, rec.cause) == ("ungraded", None, "engine_unreachable")


@pytest.mark.parametrize("preset", ["gpu", "cpu"])
def test_the_evaluated_loop_runs_under_the_presets_training_conditions(suite, monkeypatch, preset):
    """`dagent eval --preset P` measures a checkpoint under the limits `dagent train whitebox --preset P`
    trained it with: the same Recipe object supplies both (clip, completion budget, tool iterations)."""
    import dagent.engine.process as process
    from dagent.eval.stack import agent_stack
    from dagent.recipes import Recipes, resolve

    monkeypatch.setattr(process, "served_model", lambda url: "m")
    recipe = resolve("whitebox", preset)
    with agent_stack("tools", suite, engine_url="http://engine", recipes=Recipes.of(preset)) as stack:
        agent = stack.agent
    assert agent.limits == recipe.limits and agent.config == recipe.episode
    assert (
        agent.config.output_chars,
        agent.limits.max_completion_length,
        agent.limits.max_tool_calling_iterations,
    ) == (recipe.output_chars, recipe.max_completion_length, recipe.max_tool_calling_iterations)
    from dagent.errors import ConfigError

    with pytest.raises(ConfigError, match="preset 'gpu-steps25' has no whitebox recipe"):  # a black-box preset
        with agent_stack("tools", suite, engine_url="http://engine", recipes=Recipes.of("gpu-steps25")):
            pass
