"""The environments spoken to by the clients people already use, each against a running server:
the `mcp` SDK (Streamable HTTP, sessions), OpenEnv's `MCPToolClient` and `GenericEnvClient`, TRL's
`environment_factory` written as TRL's documentation writes it, and opencode with the server as a
remote MCP server. Each plays a task and sees it graded. Plus the protocol's bad inputs: each gets
a JSON-RPC error that names the fix, never a 500."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess

import httpx
import pytest

from dagent.core.reward import reward
from dagent.envs.contract import EPISODE_HEADER
from dagent.envs.whitebox_server import create_app
from dagent.tools import select
from tests.factories import LiveServer

COUNT = "tail -n +2 input/t.csv | wc -l"  # train[0] asks for t.csv's data rows: 3
ACCEPT = {"accept": "application/json, text/event-stream"}
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "curl", "version": "0"}},
}


@pytest.fixture(scope="module")
def server(suite, backend):
    live = LiveServer(create_app(suite, max_episodes=12, backend=backend))
    yield live
    live.stop()


def answer(response: httpx.Response) -> dict:
    """The JSON-RPC message of an MCP POST, answered as JSON or as an SSE stream."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
        return json.loads([d for d in data if d][-1])
    return response.json()


def episode(server, episode_id: str) -> dict:
    return httpx.get(f"{server.url}/data_agent/episodes/{episode_id}").json()


def test_the_mcp_sdk_plays_a_task_in_one_session(server):
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async def play() -> tuple:
        async with (
            streamable_http_client(f"{server.url}/mcp") as (read, write, session_id),
            ClientSession(read, write) as session,
        ):
            init = await session.initialize()
            listed = [t.name for t in (await session.list_tools()).tools]
            started = (await session.call_tool("start_episode", {"split": "train", "index": 0})).structuredContent
            counted = (await session.call_tool("bash", {"command": COUNT})).structuredContent  # no episode_id
            submitted = await session.call_tool("submit_solution", {"answer": "3"})
            finished = (await session.call_tool("finish_episode", {})).structuredContent
            return init, listed, started, counted, submitted, finished, session_id()

    init, listed, started, counted, submitted, finished, sid = asyncio.run(play())
    assert init.serverInfo.name == "data_agent" and init.protocolVersion  # negotiated by the SDK
    assert listed == ["start_episode", *select(), "finish_episode"]
    assert started["task_id"] == "demo.t0" and "How many data rows" in started["instruction"]
    assert counted == {"ok": True, "output": "3"} and not submitted.isError
    assert finished["episode_id"] == started["episode_id"] and finished["correct"] is True
    assert finished["reward"] == reward(True, 1) and sid  # graded server side, in the session


def test_a_session_ends_with_delete_and_finishes_its_episode(server):
    with httpx.Client(base_url=server.url, headers=ACCEPT, timeout=30) as http:
        init = http.post("/mcp", json=INIT)
        sid = init.headers["mcp-session-id"]
        assert init.status_code == 200 and sid
        assert answer(init)["result"]["protocolVersion"] == "2025-06-18"  # asked for, and supported
        ack = http.post(
            "/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers={"mcp-session-id": sid}
        )
        assert ack.status_code == 202
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "start_episode", "arguments": {"task_id": "demo.t1"}},
        }
        started = http.post("/mcp", json=call, headers={"mcp-session-id": sid})
        eid = answer(started)["result"]["structuredContent"]["episode_id"]
        assert episode(server, eid)["done"] is False and episode(server, eid)["task_id"] == "demo.t1"
        assert http.delete("/mcp", headers={"mcp-session-id": sid}).status_code == 200
        closed = episode(server, eid)
        assert closed["done"] is True and closed["submitted"] is False and closed["reward"] == 0.0
        gone = http.post("/mcp", json={**call, "id": 3}, headers={"mcp-session-id": sid})
        assert gone.status_code == 404 and "send `initialize` again" in gone.json()["error"]["message"]


def test_an_episode_from_reset_is_named_to_an_mcp_session_by_header(server):
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    eid = httpx.post(f"{server.url}/reset", json={"split": "train", "index": 0}).json()["observation"]["episode_id"]

    async def play() -> tuple:
        async with (
            httpx.AsyncClient(headers={EPISODE_HEADER: eid}, timeout=httpx.Timeout(30, read=300)) as http,
            streamable_http_client(f"{server.url}/mcp", http_client=http) as (r, w, _),
            ClientSession(r, w) as session,
        ):
            await session.initialize()
            await session.call_tool("submit_solution", {"answer": 3})
            graded = (await session.call_tool("finish_episode", {})).structuredContent
            # an episode this session starts is the one its calls act on from then on, header or not
            started = (await session.call_tool("start_episode", {"split": "train", "index": 1})).structuredContent
            await session.call_tool("bash", {"command": "ls"})
            return graded, started

    graded, started = asyncio.run(play())
    assert graded["reward"] == reward(True, 0) == episode(server, eid)["reward"]
    assert episode(server, started["episode_id"])["tool_calls"] == 1 and episode(server, eid)["tool_calls"] == 0


@pytest.mark.parametrize(
    "body,status,code,words",
    [
        (b"{not json", 200, -32700, "send one JSON-RPC 2.0 object"),
        (b"[1, 2]", 200, -32600, "send one JSON-RPC 2.0 object"),
        (b"{}", 200, -32600, "with a `method`"),  # what `openenv validate --url` posts
        (
            json.dumps({"jsonrpc": "2.0", "id": 1, "method": "resources/list"}).encode(),
            200,
            -32601,
            "send `initialize` first",
        ),
        # a tool call before initialize, with no episode to act on
        (
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "tools/call",
                    "params": {"name": "bash", "arguments": {"command": "ls"}},
                }
            ).encode(),
            200,
            -32602,
            "needs `episode_id`",
        ),
        (
            json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": [1]}).encode(),
            200,
            -32602,
            "params must be an object",
        ),
    ],
)
def test_bad_protocol_input_gets_a_json_rpc_error_naming_the_fix(server, body, status, code, words):
    r = httpx.post(f"{server.url}/mcp", content=body, headers={"content-type": "application/json", **ACCEPT})
    assert r.status_code == status and r.json()["error"]["code"] == code and words in r.json()["error"]["message"]


def test_an_unknown_session_and_a_session_tool_without_an_episode_are_named(server):
    r = httpx.post(
        f"{server.url}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"mcp-session-id": "no-such-session", **ACCEPT},
    )
    assert r.status_code == 404 and "'no-such-session'" in r.json()["error"]["message"]
    assert httpx.delete(f"{server.url}/mcp", headers={"mcp-session-id": "gone"}).status_code == 404
    assert httpx.get(f"{server.url}/mcp").status_code in (400, 405, 406)  # a stream needs a session

    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async def no_episode() -> tuple:
        async with streamable_http_client(f"{server.url}/mcp") as (r, w, _), ClientSession(r, w) as session:
            await session.initialize()
            bash = await session.call_tool("bash", {"command": "ls"})
            bad = await session.call_tool("start_episode", {"split": "nope", "index": 0})
            return bash.structuredContent, bad

    bash, bad = asyncio.run(no_episode())
    assert bash["ok"] is False and "call start_episode first" in bash["output"]
    assert bad.isError and "valid splits: train" in bad.content[0].text


def test_openenv_mcp_tool_client_in_production_mode_plays_and_is_graded(server):
    from openenv.core.env_server.mcp_types import CallToolAction
    from openenv.core.mcp_client import MCPToolClient

    with MCPToolClient(base_url=server.url).sync() as env:
        reset = env.reset(split="train", index=0)  # over /ws, attached to the HTTP MCP session
        eid = reset.observation.metadata["episode_id"]
        assert [t.name for t in reset.observation.tools] == list(select())  # tool objects, parsed (was str)
        assert "How many data rows" in reset.observation.metadata["instruction"]
        assert [t.name for t in env.list_tools()] == list(select())
        assert env.call_tool("bash", command=COUNT) == {"ok": True, "output": "3"}  # HTTP, no episode_id
        step = env.step(CallToolAction(tool_name="submit_solution", arguments={"answer": "3"}))
        assert step.observation.error is None and step.observation.result["data"]["ok"] is True
        assert episode(server, eid)["reward"] == reward(True, 1)
    assert episode(server, eid)["done"] is True  # the session's end finished it


def test_openenv_generic_client_over_the_websocket(server):
    from openenv.core.generic_client import GenericEnvClient

    with GenericEnvClient(base_url=server.url).sync() as env:
        reset = env.reset(split="train", index=0)
        eid = reset.observation["episode_id"]
        assert {t["name"] for t in reset.observation["tools"]} == set(select())
        step = env.step({"type": "call_tool", "tool_name": "submit_solution", "arguments": {"answer": 3}})
        assert step.observation["result"]["data"]["ok"] is True and step.observation["error"] is None
    assert episode(server, eid)["correct"] is True


@pytest.mark.slow
def test_trl_environment_factory_as_trls_documentation_writes_it(server, tmp_path):
    """The class shape of TRL's OpenEnv guide (`__init__` makes the OpenEnv client, `reset(**kwargs)`
    returns the observation, tools are methods with `Args:` docstrings, the reward is state a reward
    function reads), given to a real GRPOTrainer step with the tiny Qwen3 steered to submit 3."""
    torch = pytest.importorskip("torch")
    from datasets import Dataset
    from openenv.core.mcp_client import MCPToolClient
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from dagent.engine.models import tiny_qwen3
    from tests.envs.test_trl_grpo import steer

    ENV_URL = server.url  # noqa: N806 - the guide's module-level name

    class DataAgentEnv:
        def __init__(self):
            self.client = MCPToolClient(base_url=ENV_URL).sync()
            self.client.connect()
            self.reward = 0.0
            self.episode_id = None

        def reset(self, **kwargs) -> str | None:
            self.reward = 0.0
            result = self.client.reset(split=kwargs["split"], index=kwargs["index"])
            self.episode_id = result.observation.metadata["episode_id"]
            return result.observation.metadata["instruction"]

        def bash(self, command: str) -> str:
            """
            Run a bash command in the task's sandbox.

            Args:
                command: The command line to run.

            Returns:
                The command's output.
            """
            return self.client.call_tool("bash", command=command)["output"]

        def submit_solution(self, answer: str) -> str:
            """
            Submit the final answer.

            Args:
                answer: The answer itself.

            Returns:
                The confirmation.
            """
            out = self.client.call_tool("submit_solution", answer=answer)["output"]
            self.reward = httpx.get(f"{ENV_URL}/data_agent/episodes/{self.episode_id}").json()["reward"]
            return out

    def reward_func(environments, **kwargs):
        return [env.reward for env in environments]

    model_dir = tiny_qwen3()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    rows = [{"prompt": [{"role": "user", "content": ""}], "split": "train", "index": 0}] * 2
    args = GRPOConfig(
        output_dir=str(tmp_path),
        max_steps=1,
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=64,
        learning_rate=1e-6,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        bf16=False,
        seed=0,
        max_tool_calling_iterations=2,
        generation_kwargs={"sequence_bias": steer(tokenizer)},
    )
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=reward_func,
        args=args,
        train_dataset=Dataset.from_list(rows),
        environment_factory=DataAgentEnv,
    )
    assert {t.__name__ for t in trainer._env_tools[None]} == {"bash", "submit_solution"}
    trainer.train()
    logged = trainer.state.log_history[0]
    assert logged["rewards/reward_func/mean"] == pytest.approx(reward(True, 0))  # graded by the server
    assert logged["tools/call_frequency"] > 0


# ------------------------------------------------------------------ opencode as the MCP client


def opencode_script(prompt: str) -> str:
    """What the replaying policy says to opencode: the MCP tools as opencode names them (read from the
    tools in the prompt), bash to count the rows, submit_solution with what bash printed, then stop."""
    if "You are a title generator" in prompt:
        return "Counting rows"
    names = re.findall(r'"name":\s*"([\w-]+)"', prompt)
    bash = next(n for n in names if n.endswith("bash") and n != "bash")
    submit = next(n for n in names if n.endswith("submit_solution"))
    results = re.findall(r"<tool_response>\s*(.*?)\s*</tool_response>", prompt, re.S)
    if not results:
        return "<tool_call>\n" + json.dumps({"name": bash, "arguments": {"command": COUNT}}) + "\n</tool_call>"
    if len(results) == 1:
        answer = re.search(r"\d+", results[0]).group(0)
        return "<tool_call>\n" + json.dumps({"name": submit, "arguments": {"answer": answer}}) + "\n</tool_call>"
    return "I counted the rows and submitted the count."


@pytest.mark.harness
@pytest.mark.slow
def test_opencode_with_the_server_as_its_remote_mcp_server_plays_a_graded_task(server, tmp_path):
    from benchmarks.rollouts import EngineThread
    from dagent.engine.generation import LocalEngine
    from dagent.engine.server import create_app as engine_app
    from dagent.engine.tokenizer import VARIANTS, qwen3_tokenizer
    from dagent.errors import HarnessError
    from dagent.harness.opencode import OpencodeConfig, find_opencode, opencode_env, render_config
    from dagent.train.blackbox.harness_demos import ReplayPolicy

    try:
        binary = find_opencode()
    except HarnessError as e:
        pytest.skip(f"opencode is not installed ({e})")
    tokenizer = qwen3_tokenizer("qwen3")
    stop = tokenizer.convert_tokens_to_ids("<|im_end|>")
    engine = EngineThread(
        engine_app(
            LocalEngine(
                ReplayPolicy(tokenizer, VARIANTS["qwen3"].model_vocab_size, stop, opencode_script),
                tokenizer,
                eos_token_ids=(stop,),
                max_model_len=32_768,
                name="scripted",
            ),
            served_model_name="scripted",
        )
    )
    try:
        reset = httpx.post(f"{server.url}/reset", json={"split": "train", "index": 0}).json()["observation"]
        config = render_config(OpencodeConfig(model="scripted", steps=6), f"{engine.url}/v1", "none")
        # the environment as a remote MCP server; opencode's own tools off, so the task is played with ours
        config["mcp"] = {
            "data_agent": {
                "type": "remote",
                "url": f"{server.url}/mcp",
                "enabled": True,
                "headers": {EPISODE_HEADER: reset["episode_id"]},
            }
        }
        config["tools"].update(
            {
                t: False
                for t in (
                    "bash",
                    "read",
                    "write",
                    "edit",
                    "grep",
                    "glob",
                    "list",
                    "patch",
                    "todowrite",
                    "todoread",
                    "skill",
                )
            }
        )
        home = tmp_path / "home"
        (home / ".config" / "opencode").mkdir(parents=True)
        (home / ".config" / "opencode" / "opencode.json").write_text(json.dumps(config))
        env = {**opencode_env(str(home)), "PATH": os.environ.get("PATH", "")}
        run = subprocess.run(
            [str(binary), "run", "--format", "json", reset["instruction"]],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
    finally:
        engine.stop()
    graded = episode(server, reset["episode_id"])
    assert run.returncode == 0, run.stderr[-2000:]
    assert graded["submitted"] and graded["answer"] == "3" and graded["tool_calls"] == 1, (graded, run.stdout[-2000:])
    assert graded["correct"] is True and graded["reward"] == reward(True, 1)
