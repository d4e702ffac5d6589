"""Evaluation through a running white-box server (`dagent eval --env-url`): a real uvicorn server over
the real suite, sandboxes and grader; the engine scripted (tests/harness/test_toolloop.py). The
same scripted policy played in process and through the server must give the same record."""

from __future__ import annotations

import pytest

from dagent.envs.whitebox_client import WhiteBoxHTTP
from dagent.envs.whitebox_server import create_app
from dagent.errors import ConfigError
from dagent.eval.remote import check_surface, play_remote
from dagent.harness.play import play
from dagent.tools.episode import EpisodeConfig
from tests.factories import LiveServer
from tests.harness.test_toolloop import ScriptedEngine, call

SCRIPT = (
    {"content": "", "tool_calls": [call("bash", command="tail -n +2 input/t.csv | wc -l")]},
    {"content": "", "tool_calls": [call("submit_solution", answer=3)]},
)
SAME = (
    "task_id",
    "split",
    "index",
    "difficulty_tier",
    "sample",
    "outcome",
    "reward",
    "correct",
    "method",
    "answer",
    "tool_calls",
    "model_calls",
    "cause",
)


@pytest.fixture(autouse=True)
def no_episode_left_open():
    """Episodes live in a module-level registry: one left open here would fill another test's server."""
    yield
    from dagent.tools.episode import close_all

    close_all()


@pytest.fixture(scope="module")
def server(suite, backend):
    live = LiveServer(create_app(suite, backend=backend))
    yield live
    live.stop()


@pytest.mark.parametrize(
    "script,outcome",
    [
        (SCRIPT, "correct"),
        ((SCRIPT[0], {"content": "", "tool_calls": [call("submit_solution", answer=4)]}), "wrong"),
        ((SCRIPT[0], {"content": "I am done."}), "wrong"),
    ],
)
def test_through_the_server_the_record_is_the_in_process_record(server, suite, backend, script, outcome):
    local = play(suite, "train", 0, ScriptedEngine(*script).agent(), backend, sample=1).record
    remote_engine = ScriptedEngine(*script)
    remote = play_remote(WhiteBoxHTTP(server.url), "train", 0, remote_engine.agent(), sample=1)
    assert remote.outcome == outcome
    assert {k: getattr(remote, k) for k in SAME} == {k: getattr(local, k) for k in SAME}
    http = WhiteBoxHTTP(server.url)
    obs = http.reset("train", 0)
    http.finish(obs["episode_id"])
    assert remote_engine.requests[0]["messages"][0]["content"] == obs["instruction"]  # reset()'s text


def test_the_servers_clipping_reaches_the_model(server):
    engine = ScriptedEngine(
        {"content": "", "tool_calls": [call("bash", command="seq 1 5000")]},
        {"content": "", "tool_calls": [call("submit_solution", answer=3)]},
    )
    play_remote(WhiteBoxHTTP(server.url), "train", 0, engine.agent())
    seen = engine.requests[1]["messages"][-1]["content"]
    assert "characters cut: output is limited to" in seen and len(seen) < 2000


@pytest.mark.failure_mode("F32")
def test_a_server_lost_mid_episode_voids_the_episode(suite, backend):
    live = LiveServer(create_app(suite, backend=backend))
    engine = ScriptedEngine(*SCRIPT)
    agent = engine.agent()
    real = agent._generate

    def generate(messages, seed, turn):
        if turn == 1:
            live.stop()  # the server goes away between the two turns
        return real(messages, seed, turn)

    agent._generate = generate
    rec = play_remote(WhiteBoxHTTP(live.url, timeout_s=5), "train", 0, agent)
    assert (rec.outcome, rec.reward, rec.correct, rec.cause) == ("ungraded", None, None, "env_unreachable")
    assert rec.model_calls == 2 and rec.note.startswith("env_unreachable: ")


@pytest.mark.failure_mode("F25")
def test_a_loop_offering_other_tools_than_the_server_serves_is_refused(server):
    check_surface(WhiteBoxHTTP(server.url), EpisodeConfig().tools, EpisodeConfig())
    with pytest.raises(ConfigError, match="serves .* but the loop offers"):
        check_surface(WhiteBoxHTTP(server.url), ("bash", "submit_solution"))


def test_a_server_clipping_otherwise_than_the_preset_is_refused(server):
    from dagent.recipes import WhiteboxRecipe

    cpu = WhiteboxRecipe.cpu(tools="all").episode  # clips at 600 characters; the server at 1200
    with pytest.raises(ConfigError, match="runs episodes with .*'output_chars': 1200.* the preset trains with"):
        check_surface(WhiteBoxHTTP(server.url), cpu.tools, cpu)


def test_an_unknown_task_is_an_ungraded_record_not_a_crash(server):
    rec = play_remote(WhiteBoxHTTP(server.url), "train", 99, ScriptedEngine(*SCRIPT).agent())
    assert (rec.outcome, rec.cause, rec.task_id) == ("ungraded", "env_unreachable", "train[99]")


def test_only_the_tools_agent_evaluates_through_a_server(suite):
    from dagent.eval.args import EvalArgs
    from dagent.eval.experiment import Arm, evaluate_arms

    with pytest.raises(ConfigError, match="--agent tools"):
        evaluate_arms(suite, [Arm("o", "oracle")], EvalArgs(split="test", env_url="http://127.0.0.1:9"))
