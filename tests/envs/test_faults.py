"""Faults in the middle of a rollout, on real components over loopback: each ends UNGRADED with its
cause (never a 0.0 reward) or recovers, and nothing already captured is lost.

The other faults of this family are tested where their component lives: the capture proxy killed
and restarted mid-rollout (tests/capture/test_journal.py), the environment server lost mid-episode
(tests/eval/test_remote.py), a sandbox out of memory (tests/harness/test_play.py,
tests/envs/test_blackbox.py), staging answering 503 then recovering (tests/sandbox/test_staging.py),
a tunnel that hangs at start (tests/envs/test_blackbox.py).
"""

from __future__ import annotations

import httpx

from dagent.capture.server import CaptureServer
from dagent.harness.play import play
from dagent.harness.toolloop import ToolLoopAgent
from tests.capture.engines import PINNED, LocalBackend

BASH = '<tool_call>\n{"name": "bash", "arguments": {"command": "wc -l input/t.csv"}}\n</tool_call>'


def test_an_engine_killed_mid_rollout_is_ungraded_and_the_captured_calls_are_kept(suite, backend):
    engine = LocalBackend()  # its own: this test kills it
    engine.steer(BASH)
    try:
        with CaptureServer(engine.url, sampling=PINNED) as capture:
            session = capture.open_session()
            agent = ToolLoopAgent(
                f"http://127.0.0.1:{capture.port}",
                "tiny-qwen3",
                client=httpx.Client(timeout=60, headers={"authorization": f"Bearer {session.api_key}"}),
            )
            real_call = agent.step

            def step(t, seed, call):  # the engine dies right after its first answer was used
                stop = real_call(t, seed, call)
                if t.model_calls == 1:
                    engine.stop()
                return stop

            agent.step = step
            record = play(suite, "train", 0, agent, backend).record
            turns = capture.turns(session.session_id)
            findings = {f.code for f in capture.findings(session.session_id)}
            stats = capture.stats(session.session_id)
    finally:
        engine.close()
    assert (record.outcome, record.reward, record.correct, record.cause) == (
        "ungraded",
        None,
        None,
        "engine_unreachable",
    )
    assert record.model_calls == 1 and record.tool_calls == 1
    assert len(turns) == 1 and turns[0].logprobs is not None and len(turns[0].completion_token_ids) > 0
    assert stats.engine_errors == 1 and "engine_error" in findings  # the proxy names the failure


def _space_server(suite_dir, port: int, log):
    """The white-box Space's own start command (spaces/data-agent), a real process on `port`."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from tests.factories import wait_serving

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "DAGENT_SUITE": str(suite_dir), "HOST": "127.0.0.1", "PORT": str(port), "LOG_LEVEL": "warning"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "server.app"],
        cwd=root / "spaces" / "data-agent",
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    wait_serving(proc, f"http://127.0.0.1:{port}/health", log=log.name)
    return proc


def test_an_environment_server_restarted_mid_episode_voids_the_episode_never_a_zero(suite_dir, tmp_path):
    import signal

    from dagent.envs.whitebox_client import WhiteBoxHTTP
    from dagent.eval.remote import play_remote
    from dagent.serving import free_port
    from tests.harness.test_toolloop import ScriptedEngine, call

    port = free_port()
    log = open(tmp_path / "server.log", "w")
    procs = [_space_server(suite_dir, port, log)]
    engine = ScriptedEngine(
        {"content": "", "tool_calls": [call("bash", command="tail -n +2 input/t.csv | wc -l")]},
        {"content": "", "tool_calls": [call("submit_solution", answer=3)]},
    )
    agent = engine.agent()
    real = agent._generate

    def generate(messages, seed, turn):
        if turn == 1:  # killed and back on the same port between the two turns: the episode is gone
            procs[0].send_signal(signal.SIGKILL)
            procs[0].wait(timeout=10)
            procs.append(_space_server(suite_dir, port, log))
        return real(messages, seed, turn)

    agent._generate = generate
    try:
        rec = play_remote(WhiteBoxHTTP(f"http://127.0.0.1:{port}", timeout_s=10), "train", 0, agent)
    finally:
        for p in procs:
            p.kill()
            p.wait(timeout=10)
        log.close()
    assert len(procs) == 2 and engine.requests[1]["messages"][-1]["content"] == "3"  # the first turn ran
    assert (rec.outcome, rec.reward, rec.correct, rec.cause) == ("ungraded", None, None, "env_unreachable")
