"""Durable capture sessions: the proxy killed (SIGKILL, a real process) in the middle of a rollout
and started again on its journal loses nothing: the agent's next call with the same key continues
the same session, the trace is whole and exact, and the budget counts survive."""

from __future__ import annotations

import signal
import subprocess
import sys
from typing import Any

import httpx
import pytest

from dagent.capture.journal import Journal
from dagent.capture.server import CaptureServer
from dagent.serving import free_port
from dagent.trajectory import CLEAN
from tests.capture.engines import PINNED, SYSTEM, TASK, TOOL_TURN, TOOLS, LocalBackend, agent, call, tool_result

PROXY = """
import sys, time
from dagent.capture.server import CaptureServer
from dagent.core.sampling import Sampling
CaptureServer(sys.argv[1], sampling=Sampling(temperature=0.7), port=int(sys.argv[2]),
              admin_token="admin", journal=sys.argv[3]).start()
print("ready", flush=True)
time.sleep(3600)
"""


@pytest.fixture(scope="module")
def engine() -> Any:
    backend = LocalBackend()
    yield backend
    backend.close()


def test_a_proxy_killed_mid_rollout_resumes_the_same_session_from_its_journal(engine, tmp_path) -> None:
    engine.steer(TOOL_TURN)
    db, port = tmp_path / "capture.db", free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", PROXY, engine.url, str(port), str(db)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        admin = {"authorization": "Bearer admin"}
        created = httpx.post(
            f"http://127.0.0.1:{port}/sessions", headers=admin, json={"max_model_calls": 3, "metadata": {"task": "t"}}
        ).json()
        session = type("S", (), {"base_url": created["base_url"], "api_key": created["api_key"]})
        messages = [SYSTEM, TASK]
        with agent(session) as client:
            first = call(client, messages, tools=TOOLS)["choices"][0]["message"]
        messages = [*messages, first, tool_result(0)]
    finally:
        proc.send_signal(signal.SIGKILL)  # no shutdown, no flush: what a crash leaves
        proc.wait(timeout=10)

    with CaptureServer(engine.url, sampling=PINNED, port=port, admin_token="admin", journal=db) as capture:
        sid = created["session_id"]
        assert capture.session_ids() == [sid]
        with agent(session) as client:  # the same key, the same base URL: the agent never knew
            second = call(client, messages, tools=TOOLS)["choices"][0]["message"]
            third = call(client, [*messages, second, tool_result(1)], tools=TOOLS)
            stopped = call(
                client, [*messages, second, tool_result(1), third["choices"][0]["message"], tool_result(2)], tools=TOOLS
            )
        engine.steer(None)
        turns = capture.turns(sid)
        assert [t.seq for t in turns] == [0, 1, 2]  # numbering continued across the restart
        for a, b in zip(turns, turns[1:]):  # exact: prompt k+1 = prompt k + completion k + tool result
            held = a.prompt_token_ids + a.completion_token_ids
            assert b.prompt_token_ids[: len(held)] == held
        trajectory = capture.trajectory(sid)
        assert len(trajectory.roots) == 1 and [t.kind for t in trajectory.chain_transitions] == [CLEAN, CLEAN]
        assert all(t.logprobs is not None and len(t.logprobs) == len(t.completion_token_ids) for t in turns)
        stats = capture.stats(sid)  # the budget of 3 held across the restart: the 4th call was stopped
        assert (stats.requests, stats.model_calls, stats.budget_stops) == (4, 3, 1)
        assert stopped["choices"][0]["finish_reason"] == "stop" and engine.hits() >= 3
        assert turns[0].metadata["response_message"] == first
        capture.close_session(sid)
    assert Journal(db).reopen() == []  # a closed session is not reopened


def test_without_a_journal_nothing_is_written_and_a_restart_starts_empty(engine, tmp_path) -> None:
    with CaptureServer(engine.url, sampling=PINNED) as capture:
        assert capture.journal is None
        capture.open_session()
    with CaptureServer(engine.url, sampling=PINNED) as capture:
        assert capture.session_ids() == []
    assert not list(tmp_path.iterdir())


def test_a_call_recorded_after_the_last_saved_counters_still_counts(tmp_path) -> None:
    from dagent.capture.store import SessionState, TurnRecord

    journal = Journal(tmp_path / "j.db")
    state = SessionState("s1", 5, {})
    journal.opened(state)
    state.requests, state.model_calls = 1, 1
    journal.counted(state)
    for seq in (0, 1):  # the second call was recorded, then the proxy died before its counters
        journal.recorded(
            "s1",
            TurnRecord(
                seq,
                (None, 0, [1, 2, 3 + seq]),
                [7, 8],
                [-0.1, -0.2],
                "stop",
                [{"role": "user", "content": "q"}],
                None,
                {},
            ),
        )
    (back,) = journal.reopen()
    assert (back.requests, back.model_calls) == (2, 2) and len(back.turns()) == 2
    assert list(back.turns()[1].prompt_token_ids) == [1, 2, 4]
