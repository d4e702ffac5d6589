"""The black-box environment: real opencode + local engine + capture + local sandbox, end to end.

Unmarked tests are pure or use fakes (a remote backend that creates nothing, tunnels that hang or
record). Tests marked `harness` run the real opencode binary in bubblewrap sandboxes against the
real local engine, reached through the capture proxy and its socket bridge. The random tiny Qwen3
emits noise, so opencode stops after one agent turn; the multi-turn tests serve the same tiny
Qwen3 STEERED (benchmarks/rollouts.py `SteeredPolicy`: the real network's forward pass on every
token plus a bias towards a script chosen from the prompt: look at the table, write the row count,
close), inside the real engine with the real Qwen3 tokenizer, template, sampling and tool-call
parser, behind the SAME capture path. The synthetic suite's task 0 asks for the row count (the
script's answer: right); task 1 asks for a sum (the same script: wrong).
"""

from __future__ import annotations

import functools
import json
import pickle
import threading
import time
from types import SimpleNamespace

import httpx
import pytest

from dagent.capture.reach import GradioTunnel, Publisher, PublishError, TunnelStartTimeout, start_bounded
from dagent.core.reward import reward
from dagent.envs.blackbox_server import create_app
from dagent.errors import ConfigError, HarnessError
from dagent.harness.captured import infra_cause
from dagent.harness.opencode import OpencodeConfig, find_opencode
from dagent.runtime.blackbox import BlackBoxRuntime
from dagent.sandbox.base import ExecResult, SandboxBackend
from dagent.trajectory import CLEAN, REALIGN, Finding
from tests.factories import LiveServer

CONFIG = OpencodeConfig(model="tiny-qwen3-steered", max_output_tokens=256)
SCRIPTED = OpencodeConfig(model="scripted", max_output_tokens=256)


def said(r) -> str:
    """A rollout's summary as the failure message: a string, which pytest prints whole (a dict it cuts short)."""
    return json.dumps(r.summary())


class RemoteBackend(SandboxBackend):
    """A remote backend like e2b: its sandboxes reach only the hosts its egress policy allows
    (`allow_out`, as E2B's); the one sandbox a runtime creates is its reach check (F45)."""

    name, remote, home = "e2b", True, "/home/user"

    def __init__(self) -> None:
        self.allow_out: tuple[str, ...] = ()
        self.created = 0

    def create(self, resources=None):
        self.created += 1
        return ReachingSandbox(self)


class ReachingSandbox:
    """Answers the capture reach probe as a sandbox behind `allow_out` would; anything else (the
    image check's oracle, F51) runs in a real local sandbox, as an image with the data stack would."""

    def __init__(self, backend: RemoteBackend) -> None:
        self.backend, self._inner = backend, None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._inner is not None:
            self._inner.close()

    def inner(self):
        if self._inner is None:
            from dagent.sandbox.local import LocalBackend

            self._inner = LocalBackend().create()
        return self._inner

    def __getattr__(self, name):  # stage, write_file, read_file: the real sandbox's
        return getattr(self.inner(), name)

    def exec(self, command, timeout_s=None, **kw):
        import shlex
        from urllib.parse import urlsplit

        if "urlopen" not in command:
            return self.inner().exec(command, timeout_s=timeout_s, **kw)
        host = urlsplit(shlex.split(command)[-1]).hostname
        if host in self.backend.allow_out:
            return ExecResult(0, "reached\n", "")
        return ExecResult(1, "", f"urlopen error: connection to {host} refused by the egress policy")


class Tunnel:
    def __init__(self, hang: bool = False, fail: bool = False, log: list | None = None) -> None:
        self.hang, self.fail, self.log, self.release = hang, fail, log if log is not None else [], threading.Event()

    def start(self, host: str, port: int) -> str:
        if self.hang:
            self.release.wait(60)
        if self.fail:
            raise OSError("no route to the share server")
        self.log.append("tunnel-start")
        return "https://abc123.gradio.live"

    def stop(self) -> None:
        self.log.append("tunnel")
        self.release.set()


# -- causes, pure ----------------------------------------------------------------------------
def run_of(**kw) -> SimpleNamespace:
    return SimpleNamespace(exec_result=ExecResult(**{"exit_code": 0, "stdout": "", "stderr": "", **kw}), cause=None)


@pytest.mark.failure_mode("F18")
def test_infrastructure_causes_in_order():
    some = [object()]
    fatal = [Finding("fatal", "engine_error", "x")]
    assert infra_cause(run_of(exit_code=137, oom_killed=True), [], [], None) == "sandbox_oom"
    assert infra_cause(run_of(exit_code=None, timed_out=True), some, [], None) == "sandbox_timeout"
    assert infra_cause(run_of(), [], [], b"3") == "zero_model_calls"  # an answer no model wrote (F07, F19)
    assert infra_cause(run_of(exit_code=1), some, fatal, None) == "engine_unreachable"
    assert infra_cause(run_of(exit_code=1), some, [], None) == "harness_crash"
    assert infra_cause(run_of(exit_code=1), some, [], b"3") is None  # it answered before dying: grade it
    assert infra_cause(run_of(), some, [], None) is None  # no answer file, clean exit: graded wrong


# -- start-up refusals -------------------------------------------------------------------------
@pytest.mark.failure_mode("F08")
def test_a_loopback_proxy_url_for_a_remote_backend_is_refused_at_start_up(solvable_suite):
    runtime = BlackBoxRuntime(solvable_suite, "http://127.0.0.1:1", backend=RemoteBackend(), opencode=CONFIG)
    with pytest.raises(ConfigError, match=r"(?s)e2b sandboxes.*zero model calls.*DAGENT_CAPTURE_PUBLIC_URL.*F08"):
        runtime.start()
    assert runtime.capture._server is None and runtime.backend.created == 0  # nothing left listening, no sandbox
    bad = BlackBoxRuntime(
        solvable_suite,
        "http://127.0.0.1:1",
        backend=RemoteBackend(),
        opencode=CONFIG,
        public_url="http://10.0.0.5:8000",
    )
    with pytest.raises(ConfigError, match="F08"):
        bad.start()
    good = BlackBoxRuntime(
        solvable_suite,
        "http://127.0.0.1:1",
        backend=RemoteBackend(),
        opencode=CONFIG,
        public_url="https://capture.example.org/",
        publish="gradio",
        tunnel=Tunnel(hang=True),
    )
    with good:  # the explicit URL wins: no tunnel is even started
        assert (good.reach.base_url, good.reach.how) == ("https://capture.example.org/v1", "public_url")


@pytest.mark.failure_mode("F08")
def test_local_bubblewrap_sandboxes_are_only_given_the_bridge():
    class LocalBwrap(SandboxBackend):
        name, remote, tier, loopback_only = "local", False, "bwrap", True

        def create(self, resources=None):
            raise AssertionError

    with pytest.raises(ConfigError, match="loopback only.*cannot reach https://capture.example.org/v1"):
        Publisher(LocalBwrap(), "127.0.0.1", 9, public_url="https://capture.example.org").start()
    tunnel = Tunnel()
    with pytest.raises(ConfigError, match="publish mode 'direct'"):
        Publisher(LocalBwrap(), "127.0.0.1", 9, mode="gradio", tunnel=tunnel).start()
    assert tunnel.log == ["tunnel-start", "tunnel"]  # the tunnel it did start is stopped again


@pytest.mark.failure_mode("F09")
def test_a_hanging_tunnel_is_bounded_and_named():
    tunnel = Tunnel(hang=True)
    publisher = Publisher(RemoteBackend(), "127.0.0.1", 9, mode="gradio", tunnel=tunnel, tunnel_timeout_s=0.5)
    started = time.monotonic()
    with pytest.raises(TunnelStartTimeout, match=r"tunnel_start_timeout.*DAGENT_CAPTURE_PUBLIC_URL"):
        publisher.start()
    assert time.monotonic() - started < 5 and "tunnel" in tunnel.log  # bounded, and told to stop
    with pytest.raises(PublishError, match="tunnel_start_failed.*no route"):
        Publisher(RemoteBackend(), "127.0.0.1", 9, mode="gradio", tunnel=Tunnel(fail=True)).start()


@pytest.mark.slow
@pytest.mark.failure_mode("F09")
def test_the_real_gradio_tunnel_offline_fails_within_its_bound():
    started = time.monotonic()
    with pytest.raises(PublishError, match="tunnel_start_(timeout|failed)"):
        start_bounded(GradioTunnel(), "127.0.0.1", 9, timeout_s=3)
    assert time.monotonic() - started < 8


@pytest.mark.failure_mode("F09")
@pytest.mark.failure_mode("F45")
def test_remote_egress_goes_to_the_url_the_tunnel_resolved_and_is_checked_from_a_sandbox(solvable_suite):
    from dagent.capture.reach import EgressError

    runtime = BlackBoxRuntime(
        solvable_suite,
        "http://127.0.0.1:1",
        backend=RemoteBackend(),
        opencode=CONFIG,
        publish="gradio",
        tunnel=Tunnel(),
    )
    with runtime:  # the tunnel's URL is known only once it started: egress is decided then
        # two sandboxes: the reach check, then the image check (F51)
        assert runtime.backend.allow_out == ("abc123.gradio.live",) and runtime.backend.created == 2

    class Frozen(RemoteBackend):  # the planted fault: egress decided before the URL was known
        @property
        def allow_out(self):
            return ()

        @allow_out.setter
        def allow_out(self, value):
            pass

    frozen = BlackBoxRuntime(
        solvable_suite, "http://127.0.0.1:1", backend=Frozen(), opencode=CONFIG, publish="gradio", tunnel=Tunnel()
    )
    with pytest.raises(EgressError, match=r"(?s)cannot reach the capture proxy at https://abc123.gradio.live/v1.*F45"):
        frozen.start()
    assert frozen.capture._server is None  # nothing left running


def test_shutdown_stops_the_tunnel_before_the_proxy(solvable_suite):
    log: list[str] = []
    runtime = BlackBoxRuntime(
        solvable_suite,
        "http://127.0.0.1:1",
        backend=RemoteBackend(),
        opencode=CONFIG,
        publish="gradio",
        tunnel=Tunnel(log=log),
    )
    runtime.start()
    assert (runtime.reach.base_url, runtime.reach.how) == ("https://abc123.gradio.live/v1", "gradio")
    stop = runtime.capture.stop
    runtime.capture.stop = lambda: (log.append("capture"), stop())[1]
    runtime.stop()
    assert log == ["tunnel-start", "tunnel", "capture"]


@pytest.mark.failure_mode("F35")
def test_a_step_cap_above_the_budget_refuses_the_runtime(suite):
    with pytest.raises(ConfigError, match="step_cap_above_budget"):  # the environment serves 30 tool calls
        BlackBoxRuntime(suite, "http://127.0.0.1:1", opencode=OpencodeConfig(steps=31))


# -- real rollouts -------------------------------------------------------------------------------
def need_opencode() -> None:
    try:
        find_opencode()
    except HarnessError as e:
        pytest.skip(f"opencode is not installed ({e})")


@pytest.fixture(scope="module")
def steered():
    need_opencode()
    from benchmarks.rollouts import steered_engine

    engine = steered_engine()
    yield engine
    engine.stop()


@pytest.fixture(scope="module")
def runtime(suite, steered, tmp_path_factory):
    rt = BlackBoxRuntime(
        suite,
        steered.url,
        model="tiny-qwen3-steered",
        opencode=CONFIG,
        timeout_s=300,
        sandbox_dir=tmp_path_factory.mktemp("bb-sandboxes"),
    ).start()
    yield rt
    rt.stop()


def assert_exact_chain(rollout) -> None:
    traj = rollout.trajectory
    for t in rollout.turns:  # every call: the engine's own prompt ids, one logprob per sampled token
        assert t.prompt_token_ids and t.logprobs is not None and len(t.logprobs) == len(t.completion_token_ids)
    chain = traj.chain_turns()
    for prev, link, nxt in zip(chain, traj.chain_transitions, chain[1:]):
        assert link.kind in (CLEAN, REALIGN) and link.drift < traj.fork_threshold_tokens
        if link.kind == CLEAN:  # turn k+1's prompt IS turn k's prompt + completion, then more
            held = prev.prompt_token_ids + prev.completion_token_ids
            assert nxt.prompt_token_ids[: len(held)] == held


@pytest.mark.harness
@pytest.mark.slow
@pytest.mark.failure_mode("F03")
def test_a_rollout_end_to_end(runtime, tmp_path):
    r = runtime.run_rollout("train", 0)
    assert runtime.reach.how in ("bridge", "loopback")
    assert r.outcome == "correct" and r.answer == "3\n" and r.cause is None, said(r)
    assert r.agent_turns >= 2 and r.tool_calls == 2 == r.metadata["opencode"]["tool_uses"]  # counted from the trace
    assert r.reward == reward(True, 2)
    assert_exact_chain(r)
    title = [t for t, role in zip(r.turns, r.trajectory.roles) if t.role_hint == "title"]
    assert len(title) == 1 and title[0].tools_offered == 0
    assert r.trajectory.roles[r.turns.index(title[0])] == "auxiliary"
    assert title[0].turn_id not in r.trajectory.agent_chain  # excluded from training
    entries = r.trace_entries()
    assert [e["metadata"]["node_id"] for e in entries] == list(r.trajectory.agent_chain)
    assert all(e["metadata"]["role"] == "agent" and e["per_token_logps"] for e in entries)
    assert not [f for f in r.findings if f.level == "fatal"] and r.gate.tier == "train"
    assert r.gate.samples_per_rollout == 1 and r.gate.auxiliary_roots_excluded == 1
    assert r.exit_code == 0 and r.model_calls == len(r.turns) and r.budget_stops == 0
    # recorded (`dagent rollout --out`), read back for a replay: the same roles, chain and mask
    from dagent.eval.recordings import append_recording, load_recording, read_trace
    from dagent.trajectory import analyse

    append_recording(tmp_path, r.record, r.trajectory)
    (item,) = load_recording(tmp_path)
    replayed = analyse(read_trace(item.trace), r.trajectory.fork_threshold_tokens)
    assert item.record["outcome"] == "correct" and replayed.roles == r.trajectory.roles
    assert replayed.agent_chain == r.trajectory.agent_chain
    assert [list(q.loss_mask) for q in replayed.sequences()] == [list(q.loss_mask) for q in r.trajectory.sequences()]


@pytest.mark.harness
@pytest.mark.slow
@pytest.mark.failure_mode("F03")
def test_a_rollout_on_a_bundled_task_end_to_end(built, steered, tmp_path_factory):
    """The same path on a task of the BUNDLED suite (real tables, built this session): the script
    answers a row count, so most tasks are graded wrong, which must read 0.0, never None."""
    from dagent.suites.sources import load_tasks

    bundled = load_tasks(built[0])
    tasks = bundled.tasks("test")
    index = next(i for i, t in enumerate(tasks) if all(n.endswith(".csv") for n in bundled.files_for(t)))
    with BlackBoxRuntime(
        bundled,
        steered.url,
        model="tiny-qwen3-steered",
        opencode=CONFIG,
        timeout_s=300,
        sandbox_dir=tmp_path_factory.mktemp("bb-bundled"),
    ) as rt:
        r = rt.run_rollout("test", index)
    assert r.task_id == tasks[index].task_id and r.cause is None, said(r)
    assert r.outcome in ("correct", "wrong") and r.reward == (reward(True, r.tool_calls) if r.correct else 0.0)
    assert r.agent_turns >= 2 and r.tool_calls == 2
    assert_exact_chain(r)
    assert r.trajectory.stats.auxiliary_roots == 1 and "title" in {t.role_hint for t in r.turns}
    assert not [f for f in r.findings if f.level == "fatal"] and r.gate.tier == "train"


@pytest.mark.harness
@pytest.mark.slow
def test_a_rollout_on_the_no_user_namespace_path(suite, steered, tmp_path_factory):
    """No bubblewrap (forced): opencode runs as the sandbox's unprivileged uid in private mount,
    network and pid namespaces, reaches capture only through the bridge, and still solves."""
    with BlackBoxRuntime(
        suite,
        steered.url,
        model="tiny-qwen3-steered",
        opencode=CONFIG,
        timeout_s=300,
        sandbox_dir=tmp_path_factory.mktemp("bb-mountns"),
        isolation="rlimits",
    ) as rt:
        if rt.backend.tier != "mountns":
            pytest.skip(f"the no-user-namespace path needs root here: {rt.backend.describe()}")
        r = rt.run_rollout("train", 0)
        assert rt.reach.how == "bridge"
    assert r.outcome == "correct" and r.cause is None and r.tool_calls == 2, said(r)
    assert_exact_chain(r)
    assert r.gate.tier == "train"


@pytest.mark.harness
@pytest.mark.slow
def test_a_rollout_on_the_landlock_tier(suite, steered, tmp_path_factory):
    """No namespaces at all (forced): opencode runs confined by Landlock + seccomp as the server's uid,
    reaches capture over TCP on the one port its sandbox may connect to, and still solves."""
    from dagent.errors import SandboxError

    try:
        rt = BlackBoxRuntime(
            suite,
            steered.url,
            model="tiny-qwen3-steered",
            opencode=CONFIG,
            timeout_s=300,
            sandbox_dir=tmp_path_factory.mktemp("bb-landlock"),
            isolation="landlock",
        ).start()
    except SandboxError as e:
        pytest.skip(f"no landlock tier on this kernel: {e}")
    try:
        assert rt.backend.tier == "landlock" and rt.reach.how == "loopback"
        assert rt.backend.tcp_connect == (rt.capture.port,)
        r = rt.run_rollout("train", 0)
    finally:
        rt.stop()
    assert r.outcome == "correct" and r.cause is None and r.tool_calls == 2, said(r)
    assert_exact_chain(r)
    assert r.gate.tier == "train"


@pytest.mark.harness
@pytest.mark.slow
def test_a_wrong_answer_is_graded_zero_not_none(runtime):
    r = runtime.run_rollout("train", 1)  # a sum is asked; the script writes the row count
    assert (r.outcome, r.reward, r.correct, r.cause) == ("wrong", 0.0, False, None), said(r)
    assert r.answer == "3\n" and r.agent_turns >= 2


@pytest.mark.harness
@pytest.mark.failure_mode("F18")
def test_an_out_of_memory_sandbox_is_ungraded_with_its_cause(runtime):
    if runtime.backend.tier == "cwd" or not runtime.backend.cgroups:
        pytest.skip("needs a memory cgroup (or a private mount namespace) to bound the sandbox")
    r = runtime.run_rollout("train", 0, memory_mb=256)  # opencode alone needs ~300 MB resident
    assert (r.outcome, r.reward, r.cause, r.exit_code) == ("ungraded", None, "sandbox_oom", 137), said(r)


@pytest.mark.harness
@pytest.mark.failure_mode("F21")
def test_a_table_that_cannot_be_staged_is_ungraded_before_the_agent_starts(runtime, monkeypatch, tmp_path):
    monkeypatch.setattr(runtime.suite, "files_for", lambda task: {"t.csv": tmp_path / "gone.csv"})
    r = runtime.run_rollout("train", 0)
    assert (r.outcome, r.reward, r.cause, r.exit_code) == ("ungraded", None, "staging_failed", None), said(r)
    assert "gone.csv" in r.note and not r.turns and r.model_calls == 0


@pytest.mark.harness
@pytest.mark.slow
@pytest.mark.failure_mode("F07")
def test_an_engine_stopped_before_the_rollout_gives_zero_model_calls_ungraded(suite, tmp_path_factory):
    need_opencode()
    from benchmarks.rollouts import scripted_engine

    engine = scripted_engine()
    rt = BlackBoxRuntime(
        suite,
        engine.url,
        model="scripted",
        opencode=SCRIPTED,
        timeout_s=300,
        sandbox_dir=tmp_path_factory.mktemp("bb-dead"),
    ).start()
    try:
        engine.stop()  # healthy at start-up, gone when the agent calls
        r = rt.run_rollout("train", 0)
    finally:
        rt.stop()
    assert (r.outcome, r.reward, r.cause) == ("ungraded", None, "zero_model_calls"), said(r)
    assert not r.turns and r.metadata["engine_errors"] >= 1 and r.trace_entries() == []
    assert {f.code for f in r.findings} >= {"engine_error", "empty"}


@pytest.mark.harness
@pytest.mark.slow
def test_the_real_tiny_qwen3_runs_through_the_same_path(suite, tmp_path_factory):
    need_opencode()
    torch = pytest.importorskip("torch")
    from benchmarks.rollouts import EngineThread
    from dagent.engine.server import create_app as engine_app

    torch.set_num_threads(1)
    engine = EngineThread(engine_app("tiny-qwen3", max_model_len=32_768))
    config = OpencodeConfig(model="tiny-qwen3", max_output_tokens=48)
    try:
        with BlackBoxRuntime(
            suite,
            engine.url,
            model="tiny-qwen3",
            opencode=config,
            timeout_s=300,
            sandbox_dir=tmp_path_factory.mktemp("bb-tiny"),
        ) as rt:
            r = rt.run_rollout("train", 0)
    finally:
        engine.stop()
    # noise up to the token cap, no tool call, no answer file: graded WRONG, 0.0, not ungraded
    assert (r.outcome, r.reward, r.cause) == ("wrong", 0.0, None), said(r)
    assert r.agent_turns == 1 and [t.role_hint for t in r.turns].count("title") == 1
    assert_exact_chain(r)
    assert r.gate.tier == "train" and r.gate.trainable_tokens == len(r.trajectory.chain_turns()[0].completion_token_ids)


# -- TRL's loop-owning path ----------------------------------------------------------------------
@pytest.mark.harness
@pytest.mark.slow
@pytest.mark.failure_mode("F05")
def test_trl_harness_worker_consumes_our_sessions(runtime, suite):
    pytest.importorskip("trl")
    from openenv.core.harness.capture.upstream import training_sampling
    from trl.experimental.async_grpo.openenv_harness import _HarnessRolloutLoop

    from dagent.envs.blackbox_session import BlackBoxSessionFactory

    server = LiveServer(create_app(runtime))
    try:
        factory = functools.partial(BlackBoxSessionFactory, server.url, split="train")
        factory = pickle.loads(pickle.dumps(factory))  # TRL builds it in a spawned child
        with pytest.raises(ConfigError, match="F05"):
            factory(sampling=training_sampling({"temperature": 0.8}))
        made = factory(sampling=training_sampling({"temperature": 1.0}))
        loop = SimpleNamespace(
            _factory=made,
            _stop_event=threading.Event(),
            _adapter=None,
            _rollout_reward_fn=None,
            _fork_threshold_tokens=0,
            _live_sessions=set(),
        )
        prompt = suite.prompt_rows("train")[0]["prompt"]  # what the trainer forwards: the prompt only
        (completion, ids, sequences, n_tools, n_failed, env_reward), metrics = _HarnessRolloutLoop._run_session(
            loop, prompt, 0
        )
    finally:
        server.stop()
    assert env_reward == reward(True, 2) and n_tools == 2 and n_failed == 0
    assert metrics["turns"] >= 2 and len(sequences) == 1  # one conversation, one training row
    row = sequences[0]
    assert len(row.input_ids) == len(row.completion_mask) == len(row.old_log_probs)
    assert sum(row.completion_mask) == len(ids)  # every sampled agent token trains, nothing else
    assert completion[-1]["role"] == "assistant" and completion[0]["role"] == "system"


@pytest.mark.harness
@pytest.mark.slow
def test_the_mcp_sdk_runs_a_graded_rollout_over_streamable_http(runtime):
    """An MCP client (the SDK's ClientSession, Streamable HTTP) lists run_rollout and runs one: graded
    server side; a bad split is a tool error naming the valid ones, not a transport failure."""
    import asyncio

    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    server = LiveServer(create_app(runtime))

    async def play() -> tuple:
        async with (
            streamable_http_client(f"{server.url}/mcp") as (read, write, _),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            listed = [t.name for t in (await session.list_tools()).tools]
            bad = await session.call_tool("run_rollout", {"split": "nope", "index": 0})
            done = await session.call_tool("run_rollout", {"split": "train", "index": 0})
            return listed, bad, done

    try:
        listed, bad, done = asyncio.run(play())
        from openenv.core.env_server.mcp_types import ListToolsAction
        from openenv.core.generic_client import GenericEnvClient
        from openenv.core.mcp_client import MCPToolClient

        with MCPToolClient(base_url=server.url).sync() as env:  # OpenEnv's production mode
            described = env.reset().observation.metadata["describe"]
            assert [t.name for t in env.list_tools()] == ["run_rollout"]
            by_openenv = env.call_tool("run_rollout", split="train", index=0)
        with GenericEnvClient(base_url=server.url).sync() as env:  # and its WebSocket
            env.reset()
            step = env.step(ListToolsAction().model_dump())
            assert [t["name"] for t in step.observation["tools"]] == ["run_rollout"]
    finally:
        server.stop()
    assert described and by_openenv["outcome"] == "correct" and by_openenv["reward"] == reward(True, 2)
    assert listed == ["run_rollout"]
    assert bad.isError and "train:easy" in bad.content[0].text
    assert not done.isError and done.structuredContent["outcome"] == "correct"
    assert done.structuredContent["reward"] == reward(True, 2)


@pytest.mark.slow
@pytest.mark.failure_mode("F32")
def test_an_ungraded_rollout_reaches_trl_as_none_with_an_empty_trace():
    from dagent.envs.blackbox_session import BlackBoxSessionFactory

    payload = {
        "exit_code": None,
        "reward": None,
        "outcome": "ungraded",
        "cause": "zero_model_calls",
        "trace_entries": [],
    }
    factory = BlackBoxSessionFactory("http://bb.invalid", split="train")
    factory._client = httpx.Client(
        base_url="http://bb.invalid", transport=httpx.MockTransport(lambda request: httpx.Response(200, json=payload))
    )
    session = factory.create({"split": "train", "index": 0})
    assert session.wait_for_completion(10) == -1
    assert session.fetch_training_trace().turns == []
    verdict = session.verify([])
    assert verdict.env_reward is None and verdict.metrics["cause"] == "zero_model_calls"  # F32
    session.close()
    with pytest.raises(ConfigError, match="cannot tell which task"):
        factory.create(42)


# -- the openenv face ------------------------------------------------------------------------------
@pytest.mark.failure_mode("F30")
def test_the_server_serves_the_task_api_under_its_name_and_the_rollout_tool(solvable_suite):
    from fastapi.testclient import TestClient

    from dagent.runtime.blackbox import ENV_NAME

    runtime = BlackBoxRuntime(
        solvable_suite,
        "http://127.0.0.1:1",
        backend=RemoteBackend(),
        opencode=CONFIG,
        public_url="https://capture.example.org",
    )
    with runtime, TestClient(create_app(runtime)) as client:
        assert client.get("/health").status_code == 200
        assert client.get("/splits").status_code == 404
        splits = [s["name"] for s in client.get(f"/{ENV_NAME}/splits").json()]
        assert splits[:2] == ["train", "train:easy"]
        assert client.post(f"/{ENV_NAME}/num_tasks", json={"split": "train"}).json() == {"num_tasks": 4}
        task = client.post(f"/{ENV_NAME}/task", json={"split": "train", "index": 1}).json()["task"]
        assert task["task_id"] == "demo.t1" and "gold" not in task and "solution" not in task  # F14
        info = client.get(f"/{ENV_NAME}/info").json()
        assert info["sampling"] == {"temperature": 1.0, "top_p": 1.0, "top_k": 0} and info["steps"] == 15
        listed = client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).json()
        assert [t["name"] for t in listed["result"]["tools"]] == ["run_rollout"]
        bad = client.post(f"/{ENV_NAME}/rollout", json={"split": "nope", "index": 0})
        assert bad.status_code == 400 and "train:easy" in bad.json()["detail"]
        unknown = client.post(f"/{ENV_NAME}/rollout", json={"split": "train", "instruction": "no such task"})
        assert unknown.status_code == 400 and "no task in split" in unknown.json()["detail"]


@pytest.mark.harness
@pytest.mark.slow
def test_the_rollout_command_prints_outcome_turns_drift_and_findings(steered, suite_dir):
    from dagent.eval.stack import run_rollout
    from dagent.recipes import Recipes
    from dagent.suites.sources import load_tasks

    lines: list[str] = []
    r = run_rollout(
        "demo.t0",
        load_tasks(str(suite_dir)),
        recipes=Recipes.of("gpu"),
        engine_url=steered.url,
        timeout_s=300,
        max_output_tokens=256,
        echo=lines.append,
    )
    text = "\n".join(lines)
    assert r.outcome == "correct" and "CORRECT  reward" in text and "(bridge)" in text
    assert ":auxiliary(" in text and ":agent(" in text  # turns with their roles
    assert "drift mean 0.00 max 0" in text and "tier train" in text and "[WARN] multiple_roots" in text
