"""One registry, three faces: the TRL class, the MCP server's tools and the client agree (F25)."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest
from fastapi.testclient import TestClient
from openenv.core.env_server.mcp_environment import get_server_tools
from transformers.utils import get_json_schema

from dagent.envs.contract import ROUTING_ARG
from dagent.envs.whitebox_client import white_box_client
from dagent.envs.whitebox_runtime import mcp_server, tool_specs, white_box_env
from dagent.envs.whitebox_server import create_app
from dagent.envs.whitebox_session import SESSION_TOOLS, session_server
from dagent.errors import ConfigError
from dagent.tools import select
from tests.factories import LiveServer

SELECTIONS = [None, "all", "bash", "seta", "bash,seta", ("seta", "bash")]


def trl_tools(cls) -> dict:
    """Exactly what TRL's GRPOTrainer discovers: public functions of the class, less reset/get_reward."""
    instance = cls.__new__(cls)
    return {
        name: get_json_schema(getattr(instance, name))["function"]
        for name, _ in inspect.getmembers(cls, predicate=inspect.isfunction)
        if name not in ("reset", "get_reward") and not name.startswith("_")
    }


def params(schema: dict) -> tuple[set, set]:
    props = dict(schema.get("properties", {}))
    props.pop(ROUTING_ARG, None)
    required = set(schema.get("required", [])) - {ROUTING_ARG}
    return set(props), required


@pytest.mark.failure_mode("F25")
@pytest.mark.parametrize("selection", SELECTIONS, ids=str)
def test_registry_trl_class_server_and_client_agree(selection, suite, backend):
    registry = set(select(selection))
    in_process = trl_tools(white_box_env(suite, selection, backend=backend))
    client = trl_tools(white_box_client("http://127.0.0.1:1", selection))
    app = create_app(suite, tools=selection, max_episodes=4, backend=backend)
    with TestClient(app) as http:
        listed = http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}).json()
    served = {t["name"]: t["inputSchema"] for t in listed["result"]["tools"]}
    registered = set(get_server_tools(mcp_server(select(selection))))
    in_session = {name: t.parameters for name, t in get_server_tools(session_server(select(selection))).items()}
    openenv = {t["name"]: t["input_schema"] for t in tool_specs(select(selection))}  # the reset observation's
    # both directions: every offered tool is served and every served tool is offered
    assert set(in_process) == registry == set(client) == set(served) == registered == set(openenv)
    assert set(in_session) == registry | set(SESSION_TOOLS)  # an MCP session also starts and finishes
    for name in registry:
        assert (
            params(in_process[name]["parameters"])
            == params(client[name]["parameters"])
            == params(served[name])
            == params(in_session[name])
            == params(openenv[name])
        ), name
        assert in_process[name]["description"] == client[name]["description"]
        assert ROUTING_ARG not in served[name].get("required", [])  # an openenv session fills it in


@pytest.mark.failure_mode("F25")
def test_a_client_whose_tools_differ_from_the_server_fails_naming_both(suite, backend):
    server = LiveServer(create_app(suite, tools="bash,seta", max_episodes=4, backend=backend))
    try:
        narrow = white_box_client(server.url, "bash")()
        with pytest.raises(ConfigError, match=r"serves \['bash', 'edit'.*offers \['bash', 'submit_solution'\]"):
            narrow.reset(split="train", index=0)
        matching = white_box_client(server.url)()
        assert matching.reset(split="train", index=0)
        assert matching.get_reward() == 0.0
    finally:
        server.stop()


def test_only_tools_reset_and_get_reward_are_public():
    for cls in (white_box_client("http://x", "bash"),):
        public = {n for n, _ in inspect.getmembers(cls, predicate=inspect.isfunction) if not n.startswith("_")}
        assert public == {"bash", "submit_solution", "reset", "get_reward"}


def test_the_client_never_imports_the_server():
    code = (
        "import sys, dagent.envs.whitebox_client; "
        "bad = [m for m in sys.modules if m.startswith(('dagent.envs.whitebox_runtime', 'dagent.envs.whitebox_server', "
        "'openenv', 'fastmcp', 'dagent.tools.episode'))]; print(bad); sys.exit(1 if bad else 0)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
