"""Episodes: budget, submission, grading and reward end to end, rewording, the module registry."""

from __future__ import annotations

import shutil

import pytest

from dagent.core.reward import reward
from dagent.envs.whitebox_runtime import Runtime, environment_class, white_box_env
from dagent.tools import episode as ep_mod
from dagent.tools import select
from dagent.tools.episode import SUBMIT_SENTENCE, CapacityError, EpisodeConfig, reword_submission
from tests.factories import SHELL_EXAMPLE


@pytest.fixture()
def env_cls(suite, backend):
    return white_box_env(suite, backend=backend)


def small_budget(suite, backend, steps=2):
    return white_box_env(Runtime(suite, backend=backend, config=EpisodeConfig(max_steps=steps)))


@pytest.mark.failure_mode("F28")
@pytest.mark.parametrize(
    "before,after",
    [
        ("Q? Write only the value to /workdir/answer.txt.", f"Q? {SUBMIT_SENTENCE}"),
        (
            f"How many? Data is in /workdir/input. {SHELL_EXAMPLE}",
            f"How many? Data is in /workdir/input. {SUBMIT_SENTENCE}",
        ),
        (
            "Mean, e.g. 2.5 here.\nPut the result in `/workdir/answer.txt`.\nThanks.",
            f"Mean, e.g. 2.5 here.\n{SUBMIT_SENTENCE}\nThanks.",
        ),
        (
            "Round to 2 dp. Save it to /workdir/answer.txt, e.g. `printf 3.14 > /workdir/answer.txt`. "
            "Nothing else goes in answer.txt.",
            f"Round to 2 dp. {SUBMIT_SENTENCE}",
        ),
    ],
)
def test_the_submission_sentence_is_reworded(before, after):
    assert reword_submission(before) == after


@pytest.mark.failure_mode("F28")
def test_instructions_without_a_file_are_untouched_and_reset_returns_the_reworded_text(env_cls, suite):
    plain = "What is the mean of a? Submit just the number. (e.g. 2.5)"
    assert reword_submission(plain) is plain
    env = env_cls()
    text = env.reset(split="train", index=1)
    assert "answer.txt" not in text and "submit_solution" in text and "<value>" not in text
    assert text.startswith("[0] What is the sum of column b")
    assert env.reset(split="train", index=2) == suite.task_at("train", 2).instruction
    env.get_reward()


@pytest.mark.failure_mode("F26")
def test_submit_is_exempt_from_the_step_budget(suite, backend):
    env = small_budget(suite, backend, steps=2)()
    env.reset(split="train", index=0)
    assert env.bash(command="ls input") == "t.csv"
    assert env.ls(path="input").startswith("t.csv")
    refused = env.bash(command="tail -n +2 input/t.csv | wc -l")
    assert refused.startswith("Error:") and "step budget of 2" in refused and "submit_solution" in refused
    assert env.submit_solution(answer="3").startswith("Answer submitted")
    summary = ep_mod.close_episode(env._episode_id)
    assert summary["correct"] is True and summary["tool_calls"] == 2 and summary["refused_calls"] == 1
    assert summary["reward"] == reward(True, 2)


@pytest.mark.failure_mode("F27")
@pytest.mark.parametrize("answer,correct", [(3, True), ("3", True), (3.0, True), (3.5, False), (" 3 ", True)])
def test_numbers_and_strings_submit_and_grade(env_cls, answer, correct):
    env = env_cls()
    env.reset(split="train", index=0)  # gold "3"
    assert env.submit_solution(answer=answer).startswith("Answer submitted")
    got = env.get_reward()
    assert (got > 1.0) if correct else (got == 0.0)


@pytest.mark.failure_mode("F32")
def test_staging_failure_is_ungraded_none_not_zero(suite_dir, tmp_path, backend):
    broken = tmp_path / "suite"
    shutil.copytree(suite_dir, broken)
    shutil.rmtree(broken / "tables")  # the tables the tasks name are missing
    env = white_box_env(broken, backend=backend)()
    text = env.reset(split="train", index=0)
    assert text  # the agent still gets its instruction
    assert "sandbox is unavailable" in env.bash(command="ls")
    assert env.submit_solution(answer=3).startswith("Answer submitted")
    assert env.get_reward() is None
    summary = ep_mod.close_episode(env._episode_id)
    assert summary["reward"] is None and summary["correct"] is None and summary["cause"].startswith("staging_failed")


@pytest.mark.failure_mode("F32")
def test_a_sandbox_lost_mid_episode_without_submission_is_none(env_cls):
    env = env_cls()
    env.reset(split="train", index=0)
    ep_mod.get_episode(env._episode_id).sandbox.close()  # the sandbox dies under the agent
    assert "sandbox failed" in env.bash(command="ls")
    assert env.get_reward() is None


@pytest.mark.failure_mode("F32")
def test_no_submission_is_graded_wrong_not_ungraded(env_cls):
    env = env_cls()
    env.reset(split="train", index=0)
    env.bash(command="ls")
    assert env.get_reward() == 0.0
    summary = ep_mod.close_episode(env._episode_id)
    assert summary["correct"] is False and summary["note"] == "no answer was submitted"


@pytest.mark.failure_mode("F33")
def test_reward_multiplies_correctness_by_efficiency(env_cls):
    def play(calls: int, answer: str) -> float:
        env = env_cls()
        env.reset(split="train", index=0)
        for _ in range(calls):
            env.bash(command="true")
        env.submit_solution(answer=answer)
        return env.get_reward()

    quick, slow, wrong_quick = play(0, "3"), play(3, "3"), play(0, "4")
    assert quick > slow > wrong_quick == 0.0
    assert quick == reward(True, 0) and slow == reward(True, 3)


@pytest.mark.failure_mode("F34")
def test_tool_calls_are_counted_by_the_episode(env_cls):
    env = env_cls()
    env.reset(split="train", index=3)  # gold "yes"
    env.bash(command="ls")
    env._call("not_a_tool", {})  # a malformed call costs a step too
    env.read(path="nope")
    env.submit_solution(answer="yes")
    summary = ep_mod.close_episode(env._episode_id)
    assert summary["tool_calls"] == 3 and summary["reward"] == reward(True, 3)
    assert ep_mod.get_episode.__module__ == "dagent.tools.episode"


def test_calls_after_submission_are_refused(env_cls):
    env = env_cls()
    env.reset(split="train", index=0)
    env.submit_solution(answer=3)
    assert "episode is over" in env.bash(command="ls")
    assert "episode is over" in env.submit_solution(answer=4)
    assert env.get_reward() == reward(True, 0)


def test_sessions_live_at_module_scope_not_on_the_instance(suite, backend):
    from dagent.envs.whitebox_runtime import configure, mcp_server

    configure(Runtime(suite, backend=backend, config=EpisodeConfig(tools=select())))
    cls = environment_class(select())
    obs = cls().reset(split="test", index=0)  # openenv discards this instance after the request
    tool = mcp_server(select())
    from openenv.core.env_server.mcp_environment import get_server_tools

    out = get_server_tools(tool)["bash"].fn(episode_id=obs.episode_id, command="ls input")
    assert out == {"ok": True, "output": "t.csv"}
    cls().close()
    assert ep_mod.close_episode(obs.episode_id)["tool_calls"] == 1


def test_capacity_and_idle_reaping(suite, backend):
    task = suite.task_at("train", 0)
    files = suite.files_for(task)
    cfg = EpisodeConfig()
    before = ep_mod.active_episodes()
    first = ep_mod.open_episode(task, files, backend, split="train", index=0, config=cfg, max_episodes=before + 1)
    with pytest.raises(CapacityError, match="DAGENT_MAX_EPISODES"):
        ep_mod.open_episode(task, files, backend, split="train", index=0, config=cfg, max_episodes=before + 1)
    first.last_active -= 10_000
    assert first.episode_id in ep_mod.reap_idle(60)
    assert first.sandbox is None and ep_mod.close_episode(first.episode_id)["reward"] == 0.0


@pytest.mark.failure_mode("F28")
def test_the_suite_builders_own_submission_sentences_are_reworded():
    from dagent.core.task import ANSWER_PATH
    from datasets_build.instructions import EXAMPLES

    intro = "The directory /workdir/input/ holds t.csv: flights, e.g. delays. What is the mean (to 2 d.p.)?"
    for example in ("", *EXAMPLES):
        text = f"{intro} Write only the value to {ANSWER_PATH}{' ' + example if example else ''}."
        assert reword_submission(text) == f"{intro} {SUBMIT_SENTENCE}"


@pytest.mark.failure_mode("F32")
def test_an_unexpected_sandbox_exception_is_data_and_leaves_the_episode_ungraded(env_cls, monkeypatch):
    env = env_cls()
    env.reset(split="train", index=0)
    sandbox = ep_mod.get_episode(env._episode_id).sandbox

    def broken(*a, **k):
        raise ValueError("filedescriptor out of range in select()")  # seen under 256-episode load

    monkeypatch.setattr(sandbox, "exec", broken)
    out = env.bash(command="ls")
    assert out.startswith("Error: internal error in bash: ValueError")
    assert env.get_reward() is None
