"""F24: many long rollouts against one environment server process must hold, and an evaluation
reports its exclusions before its score.

64 episodes run at once over real HTTP through the training client (`white_box_client`, what
`GRPOTrainer(environment_factory=...)` and an evaluation by `--env-url` use), each making 16 `bash`
calls and then submitting: every episode must come back graded (0 transport exclusions), and the
summary of their records must say so before the score.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from dagent.core.outcome import EvalRecord, outcome_of, summarize
from dagent.envs.whitebox_client import white_box_client
from dagent.envs.whitebox_server import SERVE_SETTINGS, create_app
from tests.factories import LiveServer

EPISODES, CALLS = 64, 16


@pytest.mark.slow
@pytest.mark.failure_mode("F24")
def test_64_concurrent_16_call_rollouts_through_the_server_end_with_no_transport_exclusion(suite, backend):
    live = LiveServer(create_app(suite, max_episodes=EPISODES, backend=backend), **SERVE_SETTINGS)  # as deployed
    Env = white_box_client(live.url, timeout_s=300)

    def episode(i: int) -> EvalRecord:
        env, started = Env(), time.monotonic()
        try:
            env.reset(split="train", index=i % 4)
            outputs = [env.bash(command="tail -n +2 input/t.csv | wc -l") for _ in range(CALLS)]
            submitted = env.submit_solution(answer=outputs[-1].strip())
            reward, cause = env.get_reward(), None
            outputs.append(f"{submitted} | infra: {env._infra_error}")
        except Exception as e:  # noqa: BLE001 - a transport failure is exactly what is measured
            reward, cause = None, "sandbox_error"
            outputs = [f"{type(e).__name__}: {e}"]
        correct = None if reward is None else reward > 0
        from dagent.grading.value import Grade

        grade = Grade(reward=reward, correct=correct, method="server" if cause is None else "ungraded", note="")
        return EvalRecord(
            task_id=f"demo.t{i % 4}",
            split="train",
            index=i % 4,
            difficulty_tier="easy",
            agent="load",
            outcome=outcome_of(grade),
            reward=reward,
            correct=correct,
            method=grade.method,
            note=outputs[-1][:200],
            cause=cause,
            tool_calls=CALLS,
            duration_s=round(time.monotonic() - started, 3),
        )

    try:
        with ThreadPoolExecutor(max_workers=EPISODES) as pool:
            records = list(pool.map(episode, range(EPISODES)))
    finally:
        live.stop()
    summary = summarize(records)
    assert summary.ungraded == 0, [r.note for r in records if r.outcome == "ungraded"][:3]
    assert summary.graded == EPISODES and summary.excluded_fraction == 0.0
    lines = summary.lines()
    assert lines[0].startswith(f"tasks {EPISODES}  graded {EPISODES}  ungraded 0 (0.0% excluded)")
    assert next(i for i, l in enumerate(lines) if "accuracy" in l) > 0  # exclusions before the score
