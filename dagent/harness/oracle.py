"""The oracle agent: runs the task's reference program and files what it prints.

It goes through exactly the path an agent's answer takes (a program in the sandbox writes
/workdir/answer.txt, which is read back and graded), so any disagreement between the suite's
gold and the grader shows up as a non-100% oracle score (F16). The oracle needs the full task
(it reads the solution), so it only ever runs server side.
"""

from __future__ import annotations

from dagent.core.task import ANSWER_PATH, WORKDIR, Task
from dagent.harness.base import AgentRun
from dagent.sandbox.base import Sandbox

SOLUTION_PATH = f"{WORKDIR}/solution.py"


class OracleAgent:
    name = "oracle"
    model = None

    def run(self, task: Task, sandbox: Sandbox, *, timeout_s: float | None = None, seed: int | None = None) -> AgentRun:
        sandbox.write_file(SOLUTION_PATH, task.solution)
        result = sandbox.exec(f"python {SOLUTION_PATH} > {ANSWER_PATH}", timeout_s=timeout_s)
        return AgentRun(exec_result=result, tool_calls=1)
