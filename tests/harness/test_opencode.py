"""The opencode harness: its config in opencode's real schema, verified as opencode renders it; the
instruction through stdin, verbatim; the step cap against the reward's budget.

Tests marked `harness` run the real `opencode-ai@1.18.33` binary (scripts/setup.sh installs it);
they skip, saying so, when it is absent. The end-to-end one runs opencode inside a local
bubblewrap sandbox, reaching the capture proxy through the socket bridge, against the real local
engine serving `ScriptedPolicy` (benchmarks/rollouts.py: a scripted stand-in for a model, with the
real Qwen3 tokenizer, template, sampling and tool-call parser), so every byte opencode sends is
captured as the engine saw it.
"""

from __future__ import annotations

import json
import shutil
import tempfile

import pytest

from dagent.capture.reach import Reach
from dagent.core.reward import RewardConfig
from dagent.errors import HarnessError
from dagent.harness.contract import StepCapError, check_step_cap
from dagent.harness.opencode import (
    DISABLED_TOOLS,
    OpencodeConfig,
    OpencodeHarness,
    check_rendered,
    find_opencode,
    opencode_role_hints,
    parse_events,
    render_config,
    rendered_agent,
)
from dagent.tools.episode import EpisodeConfig
from dagent.trajectory import CapturedTurn

# backticks, command substitution, both quotes, a literal backslash-n and real newlines (F19)
NASTY = (
    "How many data rows does /workdir/input/t.csv have? Write only that value to /workdir/answer.txt "
    '(e.g. `echo -n "<value>" > /workdir/placeholder.txt`), then stop. $(touch /workdir/pwned)\n\n'
    'It\'s "quoted", and this is not a newline: \\n.\nLast line.\n'
)


def opencode_binary():
    try:
        return find_opencode()
    except HarnessError as e:
        pytest.skip(f"opencode is not installed ({e})")


# -- the config, pure ----------------------------------------------------------------------------
def test_config_uses_opencodes_own_schema():
    config = render_config(OpencodeConfig(model="m", steps=7, request_timeout_ms=1234), "http://h:1/v1", "sid")
    provider = config["provider"]["dagent"]
    assert provider["npm"] == "@ai-sdk/openai-compatible" and provider["name"]
    assert provider["options"] == {"baseURL": "http://h:1/v1", "apiKey": "sid", "timeout": 1234}
    assert config["model"] == "dagent/m" and "m" in provider["models"]
    assert config["tools"] == {"webfetch": False, "task": False, "question": False}
    assert config["agent"] == {"build": {"steps": 7}}
    assert "permission" not in config and "disabled_tools" not in config  # F31


@pytest.mark.failure_mode("F35")
def test_a_step_cap_above_the_environments_step_budget_is_refused():
    budget = EpisodeConfig().max_steps  # the environment's tool calls per episode, not the reward's B
    check_step_cap(int(RewardConfig().budget) + 2)  # the reference run's hard cap of 17: fine (B = 15 caps nothing)
    check_step_cap(budget)  # at the budget: fine
    with pytest.raises(StepCapError, match="step_cap_above_budget.*31.*30"):
        check_step_cap(31)
    with pytest.raises(StepCapError, match="step_cap_above_budget"):
        OpencodeHarness(OpencodeConfig(steps=budget + 1))
    OpencodeHarness(OpencodeConfig(steps=40), max_steps=40)  # an environment serving 40 calls


@pytest.mark.failure_mode("F31")
def test_rendered_check_names_tools_left_enabled():
    ours = {"tools": {"webfetch": False, "task": False, "question": False, "bash": True}, "steps": 15}
    check_rendered(ours, OpencodeConfig())
    with pytest.raises(HarnessError, match="tools_not_disabled: .*webfetch, task, question"):
        check_rendered({"tools": {"bash": True}, "steps": 15}, OpencodeConfig())
    with pytest.raises(HarnessError, match="step_limit_not_applied"):
        check_rendered({**ours, "steps": 50}, OpencodeConfig())


def turn(seq: int, system: str, tools: int = 0) -> CapturedTurn:
    return CapturedTurn(
        f"s:{seq}",
        "s",
        seq,
        (1, 2, seq),
        (3,),
        (-0.1,),
        tools_offered=tools,
        messages=({"role": "system", "content": system}, {"role": "user", "content": "q"}),
    )


@pytest.mark.failure_mode("F03")
def test_opencodes_auxiliary_calls_are_labelled_by_role():
    turns = opencode_role_hints(
        [
            turn(0, "You are a title generator. You output ONLY a thread title."),
            turn(1, "You are opencode, an interactive CLI tool", tools=8),
            turn(2, "Summarize what was done in this conversation. Write like a pull request description."),
            turn(3, "You are a context summarization agent. You are given a conversation"),
        ]
    )
    assert [t.role_hint for t in turns] == ["title", None, "summary", "compaction"]


def test_json_events_are_read():
    lines = [
        {"type": "step_start", "sessionID": "ses_1"},
        {"type": "tool_use", "part": {"tool": "bash"}},
        {"type": "text", "part": {"text": "done"}},
        {"type": "step_finish", "part": {"reason": "stop"}},
        {"type": "error", "error": {"name": "APIError", "data": {"message": "boom"}}},
    ]
    events = parse_events("\n".join(json.dumps(x) for x in lines) + "\nnot json\n")
    assert events["session"] == "ses_1" and events["tool_uses"] == 1 and events["text"] == "done"
    assert events["step_finish"] == ["stop"] and events["errors"] == ["boom"]


def test_the_instruction_goes_in_a_file_never_in_the_command():
    harness = OpencodeHarness()
    reach = Reach("http://127.0.0.1:18080/v1", "bridge", "/run/x.sock", 18080)
    files = harness.files(NASTY, reach, "sid")
    assert files["task.md"] == NASTY and "forward.py" in files
    from dagent.harness.opencode import LAUNCH_SCRIPT

    assert '< "$ctl/task.md"' in LAUNCH_SCRIPT and "$(cat" not in LAUNCH_SCRIPT  # stdin, not argv (F19)


# -- the real binary -----------------------------------------------------------------------------
@pytest.mark.harness
@pytest.mark.failure_mode("F31")
def test_opencode_renders_our_config_with_the_tools_off():
    binary = opencode_binary()
    config = OpencodeConfig(steps=9)
    agent = rendered_agent(binary, render_config(config, "http://127.0.0.1:1/v1", "sid"))
    check_rendered(agent, config)
    assert agent["steps"] == 9 and all(agent["tools"][t] is False for t in DISABLED_TOOLS)
    assert agent["tools"]["bash"] is True
    denied = {(r["permission"], r["action"]) for r in agent["permission"]}
    assert {("webfetch", "deny"), ("task", "deny"), ("question", "deny")} <= denied
    # the two planted faults: a key opencode does not know, and a blanket allow over the map
    wrong = dict(render_config(config, "http://127.0.0.1:1/v1", "sid"), tools={})
    with pytest.raises(HarnessError, match="tools_not_disabled"):
        check_rendered(rendered_agent(binary, {**wrong, "disabled_tools": list(DISABLED_TOOLS)}), config)
    allow = {**render_config(config, "http://127.0.0.1:1/v1", "sid"), "permission": "allow"}
    with pytest.raises(HarnessError, match="tools_not_disabled: .*webfetch, task, question enabled"):
        check_rendered(rendered_agent(binary, allow), config)


@pytest.fixture(scope="module")
def bridged(tmp_path_factory):
    """The scripted engine, a capture proxy, and bubblewrap sandboxes that reach it through the bridge."""
    binary = opencode_binary()
    from benchmarks.rollouts import scripted_engine
    from dagent.capture import CaptureServer
    from dagent.capture.reach import SANDBOX_SOCKET_DIR, Publisher
    from dagent.sandbox.local import LocalBackend

    engine = scripted_engine()
    capture = CaptureServer(engine.url, model="scripted", max_output_tokens=256).start()
    bridge_dir = tempfile.mkdtemp(prefix="dagent-bridge-")
    backend = LocalBackend(
        tmp_path_factory.mktemp("sandboxes"),
        ro_binds=[(str(binary.parent), str(binary.parent)), (bridge_dir, SANDBOX_SOCKET_DIR)],
    )
    publisher = Publisher(backend, capture.host, capture.port, bridge_dir=bridge_dir)
    reach = publisher.start()
    yield binary, capture, backend, reach
    publisher.stop()
    capture.stop()
    engine.stop()
    shutil.rmtree(bridge_dir, ignore_errors=True)


@pytest.mark.harness
@pytest.mark.slow
@pytest.mark.failure_mode("F19")
def test_the_instruction_reaches_opencode_verbatim(bridged):
    binary, capture, backend, reach = bridged
    if backend.tier != "bwrap":
        pytest.skip(f"needs bubblewrap for the bridged sandbox (tier {backend.tier})")
    assert reach.how == "bridge" and reach.base_url.startswith("http://127.0.0.1:")
    session = capture.open_session(10)
    harness = OpencodeHarness(OpencodeConfig(model="scripted", max_output_tokens=256), binary=str(binary))
    with backend.create() as sandbox:
        sandbox.write_file("/workdir/input/t.csv", "a,b\n1,2\n3,4\n5,6\n")
        run = harness.launch(NASTY, sandbox, reach, session.api_key, timeout_s=300)
        assert run.exec_result.exit_code == 0, run.exec_result.stderr[-2000:]
        assert sandbox.read_file("/workdir/pwned") is None  # $(...) never ran
        assert sandbox.read_file("/workdir/placeholder.txt") is None  # the backticked example never ran
        assert sandbox.read_file("/workdir/answer.txt") == b"3\n"  # the agent's own tool call did
        assert not [n for n in sandbox.host_workdir.iterdir() if n.name.startswith(".dagent")]  # control files moved
        home = sandbox.host_home  # opencode's config and state live in THIS sandbox's home (F20)
        assert (home / ".config/opencode/opencode.json").is_file() and (home / ".local/share/opencode").is_dir()
    turns = capture.close_session(session.session_id)
    assert len(turns) >= 2
    for t in turns:  # the title call and every agent call carry the instruction byte for byte
        assert NASTY in [m["content"] for m in t.messages if m.get("role") == "user"]
    agent_calls = [t for t in turns if t.tools_offered]
    assert agent_calls[0].messages[1] == {"role": "user", "content": NASTY}
    offered = {tool["function"]["name"] for tool in agent_calls[0].tools}
    assert "bash" in offered and not offered & set(DISABLED_TOOLS)  # the map took effect (F31)
