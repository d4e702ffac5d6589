"""Can a sandbox image run the tasks at all? The oracle answers before any rollout does (F51).

A sandbox image without the data stack (HF's default `python:3.12` has no pandas) fails every
reference program at its first import: the answer file is empty and the episode is graded WRONG,
so a whole run reads as a weak model. `check_image` plays one task's oracle through the backend
exactly as an agent's answer goes (a fresh sandbox, the task's files staged, a program writes
/workdir/answer.txt, the grader reads it); anything but correct refuses, naming the image and the
fix. Servers call it at start-up for every backend: a local one runs this machine's interpreter,
which the suite was built with, but a sandbox's own uid (the `mountns` tier) may not reach it, or
a tier may lack what the programs need (`/workdir`), and those fail the same way.
"""

from __future__ import annotations

from dagent.core.outcome import EvalRecord
from dagent.core.suite import TaskSuite
from dagent.errors import SandboxError
from dagent.harness.oracle import OracleAgent
from dagent.harness.play import play
from dagent.sandbox.base import SandboxBackend

__all__ = ["SandboxImageError", "check_image"]

FIX = (
    "use an image with the data stack the reference programs import: for an HF sandbox, publish ours with "
    "`dagent sandbox image hf OWNER/NAME` and set DAGENT_SANDBOX_IMAGE=hf.co/spaces/OWNER/NAME (or "
    "HFBackend(image=...)); for E2B, the template `dagent sandbox template e2b` builds"
)
LOCAL_FIX = (
    "a local sandbox must reach this interpreter and its packages and resolve /workdir: run "
    "`dagent sandbox check` and one task by hand (`dagent eval --agent oracle --limit 1`) to see which "
    "(docs/sandboxes.md names what each tier needs)"
)


class SandboxImageError(SandboxError):
    """The backend's image cannot run a task's reference program; the message names the image and the fix."""


def check_image(
    suite: TaskSuite, backend: SandboxBackend, *, split: str | None = None, index: int = 0, timeout_s: float = 300.0
) -> EvalRecord:
    """The oracle of one task through `backend`; its record when correct, else `SandboxImageError`.
    A local backend runs the interpreter the suite was built with, so there the program must RUN
    (exit 0, an answer written, graded): a wrong answer is the suite's business, not the sandbox's."""
    split = split or next(name for name in suite.splits if suite.tasks(name))
    record = play(suite, split, index, OracleAgent(), backend, timeout_s=timeout_s).record
    ran = record.exit_code == 0 and bool(record.answer) and record.outcome != "ungraded"
    if record.outcome != "correct" and not (backend.name == "local" and ran):
        why = record.note or record.cause or "no note"
        raise SandboxImageError(
            f"the sandbox image cannot run the tasks: the oracle of {record.task_id} was {record.outcome} in "
            f"{backend.describe()} (exit {record.exit_code}, answer {record.answer!r}: {why[:300]}). "
            f"Fix: {LOCAL_FIX if backend.name == 'local' else FIX}"
        )
    return record
