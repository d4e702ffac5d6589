"""The demo's sessions over real episodes, a real sandbox, the real capture proxy and the real tiny
engine (steered towards scripted agent turns while its forward pass runs, tests/capture/engines.py)."""

from __future__ import annotations

import json

import pytest

from dagent.core.reward import reward
from dagent.demo import views
from dagent.demo.session import Demo, DemoError
from dagent.eval.recordings import load_recording, read_trace
from dagent.tools.episode import SUBMIT_SENTENCE, active_episodes
from dagent.trajectory import analyse

BASH = '<tool_call>\n{"name": "bash", "arguments": {"command": "wc -l input/t.csv"}}\n</tool_call>'
SUBMIT = '<tool_call>\n{"name": "submit_solution", "arguments": {"answer": "3"}}\n</tool_call>'


@pytest.fixture()
def demo(suite, backend):
    state = Demo(backend, suite=suite)
    yield state
    state.shutdown()


@pytest.fixture(scope="module")
def engine():
    from tests.capture.engines import LocalBackend

    backend = LocalBackend()
    yield backend
    backend.close()


def test_by_hand_the_tools_answer_as_the_episode_does_and_the_grade_carries_the_reward(demo):
    before = active_episodes()
    demo.open("tab", None, "train", 0)
    assert active_episodes() == before + 1
    instruction, reworded = demo.instructions("tab")
    assert "answer.txt" in instruction and SUBMIT_SENTENCE in reworded
    result, step = demo.call("tab", "bash", {"command": "wc -l input/t.csv"})
    assert result.ok and result.output == "4 input/t.csv" and step == 1
    result, step = demo.call("tab", "read", {"path": "input/t.csv", "offset": None, "limit": 2})
    assert result.ok and "1\ta,b" in result.output and "offset=3" in result.output and step == 2
    result, step = demo.call("tab", "write", {"path": "input/x", "content": "no"})
    assert not result.ok and "read-only" in result.render() and step == 3
    result, _ = demo.call("tab", "bash", {"cmd": "ls"})  # a wrong argument name: the model's message
    assert not result.ok and "unexpected argument(s) 'cmd'; call it as bash(command)" in result.output
    grade = demo.submit("tab", "3")
    assert grade.correct is True
    episode = demo.get("tab").episode
    md = views.format_grade(grade, tool_calls=episode.tool_calls)
    assert f"reward **{reward(True, 4):.4g}**" in md and "4 tool calls" in md
    with pytest.raises(DemoError, match="already has its grade"):
        demo.submit("tab", "3")
    assert demo.close("tab") and active_episodes() == before


def test_a_hung_command_is_killed_and_the_session_keeps_working(suite, backend):
    from dagent.tools.episode import EpisodeConfig

    state = Demo(backend, suite=suite, config=EpisodeConfig(command_timeout_s=1.0))
    try:
        state.open("tab", None, "train", 0)
        result, _ = state.call("tab", "bash", {"command": "sleep 30"})
        assert not result.ok and "timed out after 1s" in result.output
        result, _ = state.call("tab", "bash", {"command": "yes | head -c 100000"})  # huge output: clipped
        assert "characters cut" in result.output and len(result.output) < 1500
    finally:
        state.shutdown()


def test_tasks_are_found_by_id_or_words_and_bad_references_say_what_to_do(demo):
    hits = demo.search(None, "train", "any", "sum of column")
    assert [h[2] for h in hits] == ["demo.t1"]
    assert [h[2] for h in demo.search(None, "train", "hard", "")] == ["demo.t2"]
    assert demo.search(None, "train", "any", "demo.t3")[0][:2] == ("train", 3)
    assert demo.locate(None, "test", "test#1") == ("test", 1)
    assert demo.locate(None, "train", "demo.t101") == ("test", 1)
    with pytest.raises(DemoError, match="unknown task id 'nope'"):
        demo.locate(None, "train", "nope")
    with pytest.raises(DemoError, match="outside split 'train'"):
        demo.locate(None, "train", "train#9")
    with pytest.raises(DemoError, match="load a task first"):
        demo.call("other-tab", "bash", {"command": "ls"})


def test_sessions_are_capped_freed_on_close_and_reaped_when_idle(suite, backend):
    state = Demo(backend, suite=suite, max_sessions=2, idle_s=3600)
    try:
        before = active_episodes()
        state.open("a", None, "train", 0)
        state.open("b", None, "train", 1)
        with pytest.raises(DemoError, match="already runs 2 sessions"):
            state.open("c", None, "train", 2)
        state.open("a", None, "train", 3)  # a tab loading again replaces its own session
        assert state.sessions() == 2 and active_episodes() == before + 2
        state.get("a").last_active -= 7200
        assert state.reap() == ["a"] and state.sessions() == 1
        assert active_episodes() == before + 1
    finally:
        state.shutdown()
    assert active_episodes() == before


def test_a_model_step_goes_through_capture_and_the_chain_is_what_the_trainer_gets(demo, engine, tmp_path):
    demo.open("tab", None, "train", 0)
    demo.call("tab", "bash", {"command": "ls"})  # by hand first: the model gets a fresh episode
    first_episode = demo.get("tab").episode.episode_id
    engine.steer(BASH)
    try:
        run = demo.model_step("tab", "tiny-qwen3", engine.url)
        session = demo.get("tab")
        assert session.episode.episode_id != first_episode and session.episode.tool_calls == 1
        assert run.stop is None and run.transcript.messages[-1] == {
            "role": "tool",
            "name": "bash",
            "content": "4 input/t.csv",
        }
        trajectory, findings, verdict = demo.analysis("tab")
        assert len(trajectory.agent_chain) == 1 and verdict.trainable
        engine.steer(SUBMIT)
        run = demo.model_step("tab", "tiny-qwen3", engine.url)
    finally:
        engine.steer(None)
    assert run.stop == "submitted" and session.episode.grade.correct is True
    assert session.episode.reward == reward(True, 1)
    trajectory, findings, verdict = demo.analysis("tab")
    assert len(trajectory.agent_chain) == 2 and verdict.tier == "train"
    (seq,) = trajectory.sequences()
    last = trajectory.chain_turns()[-1]
    assert list(seq.input_ids) == list(last.prompt_token_ids) + list(last.completion_token_ids)
    html = views.format_token_chain(trajectory, None)
    assert html.count("data-mask='1'") == seq.n_trainable > 0
    assert html.count("data-mask='0'") == len(seq.input_ids) - seq.n_trainable
    assert "CLEAN drift 0" in html or "REALIGN" in html
    with pytest.raises(DemoError, match="a model is playing"):
        demo.call("tab", "bash", {"command": "ls"})

    # saved, then read back: the same record and the same chain
    demo.save("tab", tmp_path)
    (item,) = load_recording(tmp_path)
    assert item.record["outcome"] == "correct" and item.record["agent"] == "tools" and item.trace
    replayed = analyse(read_trace(item.trace))
    assert [list(s.loss_mask) for s in replayed.sequences()] == [list(seq.loss_mask)]
    assert json.loads((tmp_path / "records.jsonl").read_text())["model_calls"] == 2


def test_an_engine_that_is_down_is_a_clear_message(demo):
    demo.open("tab", None, "train", 0)
    with pytest.raises(DemoError, match="engine is not available"):
        demo.model_step("tab", "tiny-qwen3", "http://127.0.0.1:9")


def test_the_demo_starts_with_a_real_model_or_the_newest_checkpoint(tmp_path):
    from dagent.demo.session import default_model, local_model

    assert default_model({}, runs=tmp_path / "none") == "smollm2-135m"  # not the tiny Qwen3's noise
    older, newer = tmp_path / "runs" / "sft" / "final", tmp_path / "runs" / "grpo" / "final"
    for d in (older, newer):
        d.mkdir(parents=True)
        (d / "config.json").write_text("{}")
    import os

    os.utime(older / "config.json", (1, 1))
    os.utime(older, (1, 1))
    assert default_model({}, runs=tmp_path / "runs") == str(newer) and local_model(str(newer))
    assert default_model({"DAGENT_DEMO_MODEL": "tiny-qwen3"}, runs=tmp_path / "runs") == "tiny-qwen3"
    assert not local_model(str(tmp_path / "nothing"))


def test_the_page_says_an_untrained_model_acts_like_one_and_how_to_get_one_that_works(tmp_path):
    from dagent.demo.session import model_note

    assert "untrained" in model_note("smollm2-135m") and "rarely calls a tool" in model_note("smollm2-135m")
    assert "random weights" in model_note("tiny-qwen3")
    for untrained in ("smollm2-135m", "tiny-qwen3"):  # each names the ways to a model that works
        assert "final/" in model_note(untrained) and "DAGENT_DEMO_MODEL" in model_note(untrained)
    (tmp_path / "final").mkdir()
    (tmp_path / "final" / "config.json").write_text("{}")
    assert "a local checkpoint" in model_note(str(tmp_path / "final"))
    assert "untrained" not in model_note(str(tmp_path / "final"))


def test_a_hub_checkpoint_is_a_model_the_demo_serves_itself_and_a_deployment_can_default_to(monkeypatch):
    """A deployment names its trained agent by Hub id ($DAGENT_DEMO_MODEL): the model step starts the
    local engine for it (which downloads it once), and the page says what it is; before, a Hub id was
    refused unless an engine URL served it."""
    import dagent.demo.session as session

    hub = "someone/data-agent-grpo@checkpoint-40"
    assert session.default_model({"DAGENT_DEMO_MODEL": hub}, runs="/nonexistent") == hub
    assert session.local_model(hub) and "a Hub checkpoint" in session.model_note(hub)
    started = []

    class Engine:
        def __init__(self, model):
            started.append(model)
            self.proc, self.url = None, "http://127.0.0.1:1"

        def start(self):
            return self

    monkeypatch.setattr(session, "LocalEngineProcess", Engine)
    monkeypatch.setattr(session, "served_model", lambda url: "served")
    engines = session.Engines()
    assert engines.upstream(hub, None) == ("http://127.0.0.1:1", "served")
    assert started == [hub]
