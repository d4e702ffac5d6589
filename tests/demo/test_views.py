"""The demo's pure views: they show what the model and the trainer get, nothing prettier."""

from __future__ import annotations

import json

import pytest

from dagent.core.reward import RewardConfig, reward
from dagent.demo import views
from dagent.grading.value import Grade
from dagent.tools import ALL_TOOLS, TERMINATOR, ToolResult, validate
from dagent.tools.episode import reword_submission
from dagent.trajectory import CapturedTurn, analyse
from tests.factories import make_task


def test_task_view_is_the_public_one():
    task = make_task(gold="98765", solution="print(98765)")
    md = views.format_task(task.public(), "test", 3)
    assert task.instruction in md and "/workdir/input/t.csv" in md and "#3" in md
    assert "98765" not in md


def test_both_loops_instructions_are_shown_as_handed_over():
    text = "How many? Write only the value to /workdir/answer.txt."
    md = views.format_instructions(text, reword_submission(text))
    assert reword_submission(text) in md and text in md and "unchanged" not in md
    assert "unchanged" in views.format_instructions("Submit the number.", "Submit the number.")


def test_table_preview_gives_shape_dtypes_and_first_rows(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("a,b\n" + "".join(f"{i},x|{i}\n" for i in range(12)))
    md = views.format_table_preview("t.csv", path, rows=3)
    assert "12 rows × 2 columns" in md and "`a` int64" in md and "| 2 | x\\|2 |" in md and "| 3 |" not in md
    bad = tmp_path / "b.parquet"
    bad.write_bytes(b"\x00not parquet")
    assert "not a table pandas reads" in views.format_table_preview("b.parquet", bad)


@pytest.mark.parametrize("name", [t for t in ALL_TOOLS if t != TERMINATOR])
def test_every_tools_template_is_a_valid_call_of_it(name):
    args = json.loads(views.tool_template(name))
    checked = validate(name, args)
    assert isinstance(checked, dict), checked  # every parameter there, each of its declared type
    assert name in views.format_tool_doc(name)


def test_argument_box_errors_name_the_fix():
    assert views.parse_tool_arguments('{"command": "ls"}') == {"command": "ls"}
    assert "not valid JSON" in views.parse_tool_arguments("{command: ls}")
    assert "JSON object" in views.parse_tool_arguments("[1]")


def test_a_call_shows_its_step_and_exactly_the_models_text():
    md = views.format_call("bash", {"command": "false"}, ToolResult(False, "[exit code 1]"), step=2, budget=30)
    assert md.splitlines() == ['[2/30] bash {"command": "false"}', "Error: [exit code 1]"]
    assert "infrastructure: sandbox_oom" in views.format_call(
        "bash", {}, ToolResult(False, "x", "sandbox_oom"), step=1, budget=3
    )
    assert "**3** of 30" in views.format_steps(3, 30) and "episode over" in views.format_steps(3, 30, done=True)


def test_grade_view_three_ways_with_the_reward_broken_down():
    md = views.format_grade(Grade(1.0, True, "numeric", ""), tool_calls=5)
    assert md.startswith("**Correct** · rule `numeric`")
    assert f"reward **{reward(True, 5):.4g}**" in md and "0.3·15/(15 + 5 tool calls)" in md
    assert "reward **0**" in views.format_grade(Grade(0.0, False, "reject", "empty answer"), tool_calls=2)
    ungraded = views.format_grade(Grade(None, None, "ungraded", "sandbox_oom"), tool_calls=1)
    assert ungraded.startswith("**Ungraded** · cause `sandbox_oom`") and "never 0.0" in ungraded
    flat = views.format_grade(
        Grade(1.0, True, "exact", ""), "7", tool_calls=9, reward_config=RewardConfig(mode="correctness")
    )
    assert "no efficiency term" in flat and "gold: `7`" in flat


def test_the_conversation_escapes_what_the_model_wrote():
    html = views.format_conversation(
        [
            {"role": "user", "content": "<b>q</b>"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"function": {"name": "bash", "arguments": '{"command": "ls"}'}}],
            },
            {"role": "tool", "name": "bash", "content": "a & b"},
        ]
    )
    assert "&lt;b&gt;q&lt;/b&gt;" in html and "<b>bash</b>" in html and "a &amp; b" in html and "tool · bash" in html


def _turn(i, prompt, completion, logprobs=True, tools=2):
    return CapturedTurn(
        f"t{i}",
        "s",
        i,
        tuple(prompt),
        tuple(completion),
        tuple(-0.5 for _ in completion) if logprobs else None,
        tools_offered=tools,
    )


def test_the_token_chain_marks_exactly_the_trained_tokens_and_each_turn_start():
    t0 = _turn(0, range(10, 20), (30, 31, 32))
    t1 = _turn(1, (*range(10, 20), 30, 31, 32, 40, 41), (50, 51))  # appends a tool result, CLEAN
    aux = _turn(2, range(900, 905), (906,), tools=0)
    trajectory = analyse([t0, t1, aux])
    html = views.format_token_chain(trajectory, decode=lambda i: f"w{i}")
    assert html.count("data-mask='1'") == 5 and html.count("data-mask='0'") == 12
    assert "▶ turn 0 (t0) · first call" in html and "▶ turn 1 (t1) · CLEAN drift 0" in html
    assert "logprob -0.5000" in html and ">w906<" not in html  # the auxiliary call is not trained
    table = views.format_turns(trajectory)
    assert "| 2 | t2 | **auxiliary**" in table and "clean (drift 0) from t0" in table
    assert "… 7 tokens not shown …" in views.format_token_chain(trajectory, max_tokens=10)
    verdict = views.format_verdict(
        __import__("dagent.trajectory.gate", fromlist=["gate"]).gate(trajectory), trajectory.findings
    )
    assert verdict.startswith("**trainability: train**")
    assert "nothing here is trained" in views.format_token_chain(analyse([]))


def test_record_view_names_outcome_and_cause():
    md = views.format_record(
        {
            "task_id": "x",
            "split": "test",
            "index": 2,
            "outcome": "ungraded",
            "cause": "engine_unreachable",
            "reward": None,
            "method": "ungraded",
            "agent": "tools",
            "model": "m",
            "model_calls": 0,
            "tool_calls": 0,
            "duration_s": 1.0,
            "answer": None,
        }
    )
    assert "**UNGRADED** · cause `engine_unreachable`" in md and "reward None" in md
