"""Common random numbers through capture: a session opened with a sample's seed seeds each call
(`dagent.core.sampling.call_seed`), against dagent's local engine and a real vLLM (conftest.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from dagent.capture import wire
from tests.capture.engines import MODEL, SYSTEM, TASK, TOOLS, agent, call, local_only

httpx = pytest.importorskip("httpx")


def test_a_seeded_session_seeds_each_call_so_the_same_sample_draws_the_same_tokens(capture: Any, engine: Any) -> None:
    """An evaluation opens each sample's session with its sample seed (`wire.SAMPLING_SEED`): call k
    is sampled with `call_seed(seed, k)`, so two evaluations of the same weights on the same sample
    draw the same tokens (common random numbers for a paired comparison), whichever engine serves."""
    drawn, seeds = [], []
    for seed in (7, 7, 8):
        session = capture.open_session(metadata={wire.SAMPLING_SEED: seed})
        with agent(session) as client:
            for _ in range(2):
                call(client, [SYSTEM, TASK], tools=TOOLS, max_tokens=16)
        turns = capture.turns(session.session_id)
        drawn.append([list(t.completion_token_ids) for t in turns])
        seeds.append([t.metadata["sampling_params"]["seed"] for t in turns])
    assert drawn[0] == drawn[1] and seeds[0] == seeds[1] == [7, 8]
    assert drawn[0][0] != drawn[0][1]  # the same prompt twice: each call its own stream
    assert drawn[2] != drawn[0] and seeds[2] == [8, 9]
    unseeded = capture.open_session()
    with agent(unseeded) as client:
        call(client, [SYSTEM, TASK], tools=TOOLS, max_tokens=4)
    assert "seed" not in capture.turns(unseeded.session_id)[0].metadata["sampling_params"]


@local_only  # reads the bodies the engine received
def test_the_session_seed_overrides_a_clients_and_an_agent_run_passes_its_sample_seed(
    capture: Any, engine: Any
) -> None:
    from dagent.harness.base import AgentRun
    from dagent.harness.captured import CapturedAgent

    session = capture.open_session(metadata={wire.SAMPLING_SEED: 2**31 - 1})
    start = len(engine.recorder.bodies)
    with agent(session) as client:
        call(client, [SYSTEM, TASK], max_tokens=4, seed=99)
        call(client, [SYSTEM, TASK], max_tokens=4)
    assert [b["seed"] for b in engine.recorder.bodies[start:]] == [2**31 - 1, 0]  # 31 bits, wrapped

    class TwoCalls:  # a loop-owning harness reduced to its model calls
        name, config = "two-calls", SimpleNamespace(steps=4)

        def launch(self, instruction, sandbox, reach, api_key, *, timeout_s=None):
            with httpx.Client(base_url=capture.base_url, headers={"authorization": f"Bearer {api_key}"}) as c:
                for _ in range(2):
                    c.post("/chat/completions", json={"model": MODEL, "messages": [SYSTEM, TASK], "max_tokens": 3})
            return AgentRun()

        def role_hints(self, turns):
            return list(turns)

    task = SimpleNamespace(task_id="t", instruction="?")
    start = len(engine.recorder.bodies)
    CapturedAgent(TwoCalls(), capture, reach=None).run(task, sandbox=None, seed=40)
    CapturedAgent(TwoCalls(), capture, reach=None).run(task, sandbox=None)  # training's rollouts: unseeded
    assert [b.get("seed") for b in engine.recorder.bodies[start:]] == [40, 41, None, None]
