"""The HTTP server: routes by path, 4xx that name the range, envelopes, real concurrency."""

from __future__ import annotations

import threading

import httpx
import pytest

from dagent.core.reward import reward
from dagent.envs.whitebox_client import EnvServerError, WhiteBoxHTTP, unwrap, unwrap_tool_result, white_box_client
from dagent.envs.whitebox_server import create_app
from dagent.tools import ToolResult
from tests.factories import LiveServer

RPC = {"jsonrpc": "2.0", "id": 1}


@pytest.fixture(scope="module")
def server(suite, backend):
    live = LiveServer(create_app(suite, max_episodes=12, backend=backend))
    yield live
    live.stop()


@pytest.mark.failure_mode("F30")
def test_task_api_lives_under_the_environment_name(server):
    health = httpx.get(f"{server.url}/health").json()
    assert health["status"] == "healthy"  # and which sandbox backend serves, with what isolation
    assert health["sandbox"]["backend"] == "local" and health["sandbox"]["isolation"] in ("bwrap", "mountns")
    assert health["sandbox"]["remote"] is False
    assert httpx.get(f"{server.url}/splits").status_code == 404  # the route copied from another env
    splits = httpx.get(f"{server.url}/data_agent/splits").json()
    assert [s["name"] for s in splits][:4] == ["train", "train:easy", "train:medium", "train:hard"]
    assert not any(s["name"].count(":") > 1 for s in splits)  # never double-tiered (F13)
    r = httpx.post(f"{server.url}/data_agent/num_tasks", json={"split": "train:easy"})
    assert r.json() == {"num_tasks": 2}
    task = httpx.post(f"{server.url}/data_agent/task", json={"split": "train", "index": 1}).json()["task"]
    assert task["task_id"] == "demo.t1" and "gold" not in task and "solution" not in task  # F14
    assert httpx.get(f"{server.url}/data_agent/capacity").json()["max"] == 12
    http = WhiteBoxHTTP(server.url)
    assert http.splits()[0] == "train" and http.num_tasks("test") == 2


@pytest.mark.failure_mode("F30")
def test_a_wrong_path_is_named_as_such_by_the_client(server):
    http = WhiteBoxHTTP(server.url)
    with pytest.raises(EnvServerError, match=r"404.*/data_agent/"):
        http._request("GET", "/splits")


@pytest.mark.parametrize(
    "body,status,words",
    [
        ({"split": "nope", "index": 0}, 400, "valid splits: train, train:easy"),
        ({"split": "train", "index": 4}, 400, "valid 0..3"),
        ({"split": "train:hard", "index": 1}, 400, "valid 0..0"),
        ({"split": "train", "index": -1}, 400, "valid 0..3"),
        ({"index": 0}, 400, "needs the row's `split` and `index`"),
        ({"split": "train", "index": 0, "task_id": "demo.t9"}, 409, "rebuild the rows"),
    ],
)
def test_bad_rows_get_a_4xx_naming_the_valid_range(server, body, status, words):
    r = httpx.post(f"{server.url}/reset", json=body)
    assert r.status_code == status and words in r.json()["detail"]
    r = httpx.post(f"{server.url}/data_agent/task", json={"split": "train", "index": 9})
    assert r.status_code == 400 and "valid 0..3" in r.json()["detail"]


def test_one_episode_over_http(server):
    Env = white_box_client(server.url)
    env = Env()
    text = env.reset(split="train", index=1, task_id="demo.t1", prompt=[{"role": "user", "content": ""}])
    assert "submit_solution" in text and "answer.txt" not in text
    assert env.bash(command="awk -F, 'NR>1{s+=$2} END{print s}' input/t.csv") == "12"
    assert env.read(path="nope").startswith("Error: no such file")
    assert env.submit_solution(answer=12).startswith("Answer submitted")
    assert env.get_reward() == reward(True, 2) == env.get_reward()
    assert "episode" in env.bash(command="ls")  # after the reward the episode is gone


@pytest.mark.failure_mode("F29")
@pytest.mark.parametrize(
    "payload,value",
    [
        (
            {**RPC, "result": {"content": [{"type": "text", "text": '{"ok": true, "output": "3"}'}]}},
            {"ok": True, "output": "3"},
        ),
        (
            {**RPC, "result": {"content": [], "structuredContent": {"ok": False, "output": "x"}, "isError": True}},
            {"ok": False, "output": "x"},
        ),
        (
            {
                **RPC,
                "result": {
                    "content": [{"type": "text", "text": "7"}],
                    "structured_content": {"result": 7},
                    "data": 7,
                    "is_error": False,
                    "meta": None,
                },
            },
            7,
        ),
        ({**RPC, "result": {"content": [{"type": "text", "text": "plain"}]}}, "plain"),
        ({**RPC, "result": {"result": {"sandboxes": ["local"]}}}, {"sandboxes": ["local"]}),
        ({**RPC, "result": {"tools": [{"name": "bash"}]}}, {"tools": [{"name": "bash"}]}),
        ({"result": "bare"}, "bare"),
    ],
)
def test_envelopes_are_unwrapped_to_plain_values(payload, value):
    assert unwrap(payload)[0] == value


@pytest.mark.failure_mode("F29")
def test_tool_results_come_back_plain_from_either_mcp_handler(suite, backend, server):
    assert unwrap_tool_result(
        {**RPC, "result": {"content": [{"type": "text", "text": "oops"}], "isError": True}}
    ) == ToolResult(False, "oops")
    with pytest.raises(EnvServerError, match="JSON-RPC error -32601"):
        unwrap({**RPC, "error": {"code": -32601, "message": "method not found"}})
    for url in (server.url, None):
        live = (
            LiveServer(create_app(suite, max_episodes=4, backend=backend, mcp_handler="openenv"))
            if url is None
            else None
        )
        http = WhiteBoxHTTP(url or live.url)
        try:
            assert [t["name"] for t in http.list_tools()][0] == "bash"
            obs = http.reset("train", 0)
            assert http.call_tool(obs["episode_id"], "bash", {"command": "ls input"}) == ToolResult(True, "t.csv")
            bad = http.call_tool(obs["episode_id"], "read", {"path": "/etc/passwd"})
            assert not bad.ok and "outside /workdir" in bad.output
            assert http.finish(obs["episode_id"])["tool_calls"] == 2
        finally:
            if live:
                live.stop()
                create_app(suite, max_episodes=12, backend=backend)  # give the module's server its runtime back


def test_malformed_mcp_calls_are_answered_not_raised(server):
    post = lambda body: httpx.post(f"{server.url}/mcp", json=body).json()  # noqa: E731
    obs = WhiteBoxHTTP(server.url).reset("test", 0)
    call = lambda name, args: post({**RPC, "method": "tools/call", "params": {"name": name, "arguments": args}})  # noqa: E731
    assert "unknown tool 'python'" in call("python", {})["result"]["content"][0]["text"]
    assert call("bash", {"episode_id": obs["episode_id"], "cmd": "ls"})["result"]["isError"] is True
    missing = call("bash", {"command": "ls"})["error"]  # no session, no episode: say both ways in
    assert missing["code"] == -32602 and "episode_id" in missing["message"] and "initialize" in missing["message"]
    assert "unknown episode" in call("bash", {"command": "ls", "episode_id": "nope"})["result"]["content"][0]["text"]
    assert httpx.post(f"{server.url}/mcp", content=b"{not json").json()["error"]["code"] == -32700
    assert post({**RPC, "method": "nope/nope", "params": {}})["error"]["code"] == -32601
    assert httpx.delete(f"{server.url}/data_agent/episodes/{obs['episode_id']}").json()["tool_calls"] == 1
    assert httpx.get(f"{server.url}/data_agent/episodes/nope").status_code == 404


@pytest.mark.failure_mode("F23")
def test_concurrency_must_be_declared_to_be_raised(suite, backend):
    from openenv.core.env_server import CallToolAction, CallToolObservation, ConcurrencyConfigurationError
    from openenv.core.env_server import create_app as openenv_create_app

    from dagent.envs.whitebox_runtime import environment_class
    from dagent.tools import select

    undeclared = type("Undeclared", (environment_class(select()),), {"SUPPORTS_CONCURRENT_SESSIONS": False})
    with pytest.raises(ConcurrencyConfigurationError):
        openenv_create_app(undeclared, CallToolAction, CallToolObservation, max_concurrent_envs=8)


@pytest.mark.failure_mode("F23")
def test_several_concurrent_episodes_over_http(server):
    Env = white_box_client(server.url)
    results: dict[int, object] = {}

    def play(i: int) -> None:
        try:
            env = Env()
            env.reset(split="train", index=i % 4)
            assert env.write(path=f"mine-{i}.txt", content=str(i)).startswith("wrote")
            seen = env.bash(command="cat mine-*.txt")
            assert seen == str(i), f"episode {i} saw {seen!r}"  # one sandbox per episode
            env.submit_solution(answer=["3", "12", "3", "yes"][i % 4])
            results[i] = env.get_reward()
        except Exception as e:  # noqa: BLE001 - collected and asserted below
            results[i] = e

    threads = [threading.Thread(target=play, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert results == {i: reward(True, 2) for i in range(8)}


@pytest.mark.failure_mode("F23")
def test_capacity_is_refused_loudly_with_the_numbers(suite, backend):
    from dagent.tools.episode import close_all

    close_all()  # the registry is the process's: an episode an earlier test left open would count here
    live = LiveServer(create_app(suite, max_episodes=2, backend=backend))
    try:
        http = WhiteBoxHTTP(live.url)
        a, b = http.reset("train", 0), http.reset("train", 1)
        with pytest.raises(EnvServerError, match=r"503.*2/2 episodes.*DAGENT_MAX_EPISODES"):
            http.reset("train", 2)
        http.finish(a["episode_id"])
        c = http.reset("train", 2)
        for obs in (b, c):
            http.finish(obs["episode_id"])
    finally:
        live.stop()


@pytest.mark.failure_mode("F32")
def test_ungraded_stays_none_over_the_wire(suite_dir, tmp_path, backend):
    import shutil

    broken = tmp_path / "suite"
    shutil.copytree(suite_dir, broken)
    app = create_app(broken, max_episodes=4, backend=backend)  # starts: its sandboxes run the oracle
    shutil.rmtree(broken / "tables")  # then staging fails: the episode cannot be graded
    live = LiveServer(app)
    try:
        env = white_box_client(live.url)()
        env.reset(split="train", index=0)
        assert "sandbox is unavailable" in env.bash(command="ls")
        env.submit_solution(answer=3)
        assert env.get_reward() is None  # JSON null, never 0.0
        lost = white_box_client(live.url)()
        lost.reset(split="train", index=1)
    finally:
        live.stop()
    assert "environment server failed" in lost.bash(command="ls")  # the server is gone mid-episode
    assert lost.get_reward() is None
