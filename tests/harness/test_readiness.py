"""A sandbox image that cannot run the tasks is refused before any rollout (F51).

The planted image is the real local sandbox with the interpreter's site-packages hidden (`python
-S`): the reference program dies at `import pandas`, the answer file is empty, and without the
check that episode is simply graded wrong.
"""

from __future__ import annotations

import pytest

from dagent.envs.whitebox_server import create_app
from dagent.harness.oracle import OracleAgent
from dagent.harness.play import play
from dagent.harness.readiness import SandboxImageError, check_image
from dagent.sandbox.base import SandboxBackend


class NoDataStack(SandboxBackend):
    """A 'remote' backend whose image has Python but none of the data stack."""

    name, remote = "no-data-stack", True

    def __init__(self, inner: SandboxBackend) -> None:
        self.inner = inner

    def describe(self) -> str:
        return "no-data-stack: image 'python-without-pandas'"

    def create(self, resources=None):
        sandbox = self.inner.create(resources)
        run = sandbox.exec

        def exec_without_site(command, **kwargs):
            return run(command.replace("python ", "python -S "), **kwargs)

        sandbox.exec = exec_without_site
        return sandbox


def test_an_image_with_the_data_stack_passes_the_oracle_check(solvable_suite, backend):
    record = check_image(solvable_suite, backend)
    assert record.outcome == "correct" and record.agent == "oracle"


@pytest.mark.failure_mode("F51")
def test_an_image_without_the_data_stack_is_refused_before_rollouts(solvable_suite, backend):
    bare = NoDataStack(backend)
    unchecked = play(solvable_suite, "test", 0, OracleAgent(), bare).record
    assert unchecked.outcome == "wrong" and not unchecked.answer  # what a run without the check would score
    with pytest.raises(SandboxImageError) as err:
        check_image(solvable_suite, bare)
    message = str(err.value)
    assert "python-without-pandas" in message and "DAGENT_SANDBOX_IMAGE" in message and "was wrong" in message
    with pytest.raises(SandboxImageError):  # the white-box server refuses to start on it
        create_app(solvable_suite, backend=bare)


@pytest.mark.failure_mode("F51")
def test_a_local_tier_that_cannot_run_the_tasks_is_refused_at_start_up(solvable_suite, tmp_path, monkeypatch):
    """Local tiers too: a sandbox whose uid cannot reach the interpreter's packages (a checkout under a
    0700 directory on `mountns`), planted as site-packages hidden, fails the oracle and the servers
    refuse to start, naming the local fix rather than a remote image's."""
    from dagent.sandbox.local import LocalBackend, LocalSandbox

    run = LocalSandbox.exec
    monkeypatch.setattr(
        LocalSandbox, "exec", lambda self, command, **kw: run(self, command.replace("python ", "python -S "), **kw)
    )
    with pytest.raises(SandboxImageError) as err:
        create_app(solvable_suite, backend=LocalBackend(tmp_path / "sb"))
    message = str(err.value)
    assert "dagent sandbox check" in message and "DAGENT_SANDBOX_IMAGE" not in message and "was wrong" in message
