"""Every tool's success and error paths, in a real local sandbox, plus the registry's checks."""

from __future__ import annotations

import pytest

from dagent.errors import ConfigError
from dagent.tools import (
    ALL_TOOLS,
    TERMINATOR,
    ToolResult,
    ToolSettings,
    clip,
    coerce_answer,
    confine,
    execute,
    select,
    validate,
)
from tests.factories import TABLE


@pytest.fixture(scope="module")
def sandbox(backend, suite_dir):
    from dagent.sandbox.base import Resources

    sb = backend.create(Resources(cpus=1, memory_mb=512, timeout_s=30))
    sb.stage({"t.csv": suite_dir / "tables" / "demo" / "t.csv"})
    yield sb
    sb.close()


def run(sb, name, settings=None, **args) -> ToolResult:
    checked = validate(name, args)
    assert isinstance(checked, dict), checked
    return execute(sb, name, checked, settings)


def test_bash_success_and_failure(sandbox):
    r = run(sandbox, "bash", command="tail -n +2 input/t.csv | wc -l")
    assert r == ToolResult(True, "3")
    r = run(sandbox, "bash", command="echo oops >&2; exit 3")
    assert not r.ok and "oops" in r.output and "[exit code 3]" in r.output
    assert run(sandbox, "bash", command="true") == ToolResult(True, "(no output)")
    assert not run(sandbox, "bash", command="   ").ok


def test_bash_timeout_is_a_result_with_a_cause(sandbox):
    r = run(sandbox, "bash", ToolSettings(command_timeout_s=0.5), command="sleep 5")
    assert not r.ok and "timed out" in r.output and r.cause == "sandbox_timeout"


def test_read_with_line_numbers_offset_and_limit(sandbox):
    r = run(sandbox, "read", path="input/t.csv")
    assert r.ok and r.output.splitlines()[0] == "     1\ta,b"
    r = run(sandbox, "read", path="/workdir/input/t.csv", offset=2, limit=2)
    assert r.ok and r.output.splitlines()[:2] == ["     2\t1,2", "     3\t3,4"]
    assert "pass offset=4" in r.output
    assert not run(sandbox, "read", path="input/t.csv", offset=99).ok


@pytest.mark.failure_mode("F25")
def test_read_errors_are_usable_text(sandbox):
    r = run(sandbox, "read", path="nope.txt")
    assert not r.ok and "no such file" in r.output
    r = run(sandbox, "read", path="input")
    assert not r.ok and "cannot read" in r.output


def test_write_edit_and_read_back(sandbox):
    assert run(sandbox, "write", path="work/x.py", content="print(1+1)\nprint(1+1)\n").ok
    r = run(sandbox, "edit", path="work/x.py", old="1+1", new="2+2")
    assert not r.ok and "occurs 2 times" in r.output
    r = run(sandbox, "edit", path="work/x.py", old="1+1", new="2+2", replace_all=True)
    assert r.ok and "2 occurrence" in r.output
    assert run(sandbox, "bash", command="python3 work/x.py").output == "4\n4"
    r = run(sandbox, "edit", path="work/x.py", old="zzz", new="y")
    assert not r.ok and "not found" in r.output
    assert not run(sandbox, "edit", path="work/x.py", old="", new="y").ok
    assert not run(sandbox, "edit", path="missing.py", old="a", new="b").ok


def test_inputs_are_read_only_through_the_file_tools(sandbox):
    r = run(sandbox, "write", path="input/t.csv", content="x")
    assert not r.ok and "read-only" in r.output
    assert not run(sandbox, "edit", path="/workdir/input/t.csv", old="a", new="b").ok
    assert run(sandbox, "read", path="input/t.csv").output.endswith("5,6")


def test_grep_glob_ls(sandbox):
    r = run(sandbox, "grep", pattern=r"^3,", path="input")
    assert r == ToolResult(True, "/workdir/input/t.csv:3:3,4")
    assert run(sandbox, "grep", pattern="zzz").output.startswith("no matches")
    assert run(sandbox, "grep", pattern="a", glob="*.txt").ok
    r = run(sandbox, "grep", pattern="(")
    assert not r.ok and "invalid regular expression" in r.output
    assert run(sandbox, "glob", pattern="**/*.csv").output == "/workdir/input/t.csv"
    assert run(sandbox, "glob", pattern="/workdir/input/*.csv").output == "/workdir/input/t.csv"
    r = run(sandbox, "ls", path="input")
    assert r.ok and r.output == f"t.csv\t{len(TABLE)} bytes"
    assert "input/" in run(sandbox, "ls").output
    assert not run(sandbox, "ls", path="nothere").ok
    assert not run(sandbox, "ls", path="input/t.csv").ok


def test_file_tools_are_confined_to_workdir(sandbox):
    for name, args in [
        ("read", {"path": "/etc/passwd"}),
        ("read", {"path": "../../etc/passwd"}),
        ("write", {"path": "/tmp/x", "content": "x"}),
        ("ls", {"path": "/"}),
        ("grep", {"pattern": "root", "path": "/etc"}),
        ("glob", {"pattern": "/etc/*"}),
        ("glob", {"pattern": "../../*"}),
        ("edit", {"path": "/etc/hosts", "old": "a", "new": "b"}),
    ]:
        r = run(sandbox, name, **args)
        assert not r.ok and ("outside /workdir" in r.output or "climbs out" in r.output), (name, r)
        assert "root:" not in r.output
    assert confine("input/../x") == "/workdir/x"
    with pytest.raises(ValueError):
        confine("/workdir/../etc")


def test_a_symlink_out_of_workdir_is_refused(sandbox):
    assert run(sandbox, "bash", command="ln -sf /etc/passwd link").ok
    r = run(sandbox, "read", path="link")
    assert not r.ok and "root:" not in r.output


def test_output_is_clipped_with_a_marker(sandbox):
    r = run(sandbox, "bash", command="seq 1 5000")
    assert r.ok and len(r.output) < 1200 + 200
    assert "characters cut" in r.output and r.output.startswith("1\n2\n") and r.output.endswith("5000")
    small = run(sandbox, "bash", ToolSettings(output_chars=50), command="seq 1 5000")
    assert "characters cut" in small.output and len(small.output) < 50 + 200
    text = "x" * 3000
    assert f"{3000 - 1200:,} characters cut" in clip(text, 1200)
    assert clip("short", 1200) == "short"


@pytest.mark.failure_mode("F25")
def test_unknown_tools_and_bad_arguments_are_results_not_exceptions():
    served = select("bash")
    assert "unknown tool 'read'" in validate("read", {"path": "x"}, served).output
    assert "unknown tool" in validate("python", {}, served).output
    assert "unexpected argument(s) 'cmd'" in validate("bash", {"cmd": "ls"}).output
    assert "missing required argument 'command'" in validate("bash", {}).output
    assert "valid string" in validate("bash", {"command": 3}).output
    assert "JSON object" in validate("bash", "ls").output
    assert validate("read", {"path": "x", "offset": "10"}) == {"path": "x", "offset": 10, "limit": None}
    assert validate("edit", {"path": "x", "old": "a", "new": "b", "replace_all": "true"})["replace_all"] is True
    assert not validate("read", {"path": "x", "offset": "ten"}).ok


@pytest.mark.failure_mode("F27")
@pytest.mark.parametrize("answer,text", [(3, "3"), (3.5, "3.5"), ("3", "3"), (True, "true"), (-0.25, "-0.25")])
def test_submit_accepts_numbers_and_strings(answer, text):
    assert validate(TERMINATOR, {"answer": answer}) == {"answer": text}
    assert coerce_answer(answer) == text


@pytest.mark.failure_mode("F27")
def test_submit_rejects_non_scalars_with_a_usable_message():
    r = validate(TERMINATOR, {"answer": [1, 2]})
    assert not r.ok and "comma-separated" in r.output


def test_selection_composes_the_surface():
    assert select() == ALL_TOOLS
    assert select("bash") == ("bash", TERMINATOR)
    assert select("seta") == ("read", "write", "edit", "grep", "glob", "ls", TERMINATOR)
    assert select("seta,bash") == select(("bash", "seta")) == select("all") == ALL_TOOLS
    with pytest.raises(ConfigError, match="bash"):
        select("jupyter")
