"""The demo's pure helpers, and that the app builds around a suite and a sandbox backend."""

from app import Sessions, format_exec, format_grade, format_task
from dagent.grading import Grade
from dagent.sandbox.base import ExecResult
from tests.factories import make_task


def test_task_view_is_the_public_one():
    task = make_task(gold="98765", solution="print(98765)")
    md = format_task(task.public(), "test", 3)
    assert task.instruction in md and "/workdir/input/t.csv" in md and "#3" in md
    assert "98765" not in md


def test_exec_view_names_status_and_clips():
    md = format_exec("ls", ExecResult(exit_code=0, stdout="x" * 5000, stderr="", duration_s=0.01))
    assert "exit 0" in md and "more characters" in md
    assert "timed out" in format_exec("sleep 9", ExecResult(exit_code=None, stdout="", stderr="", timed_out=True))
    assert "out of memory" in format_exec("x", ExecResult(exit_code=137, stdout="", stderr="", oom_killed=True))


def test_grade_view_three_ways():
    assert format_grade(Grade(1.0, True, "numeric", "")).startswith("**Correct**")
    assert format_grade(Grade(0.0, False, "reject", "empty answer")).startswith("**Wrong**")
    ungraded = format_grade(Grade(None, None, "ungraded", "sandbox_oom"))
    assert ungraded.startswith("**Ungraded**") and "sandbox_oom" in ungraded
    assert "gold: `7`" in format_grade(Grade(1.0, True, "exact", ""), gold="7")


class _FakeSandbox:
    closed = False

    def close(self):
        self.closed = True


def test_sessions_close_their_sandbox():
    sessions = Sessions()
    sb = _FakeSandbox()
    sid = sessions.start(sb, "test", 0)
    assert sessions.get(sid) == (sb, "test", 0)
    sessions.close(sid)
    assert sb.closed and sessions.get(sid) is None
