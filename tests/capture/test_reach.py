"""The launch scripts' forwarder prelude (dagent.capture.reach.FORWARD_START): a harness in a sandbox
without the host's network reaches capture through `forward.py`, which the prelude starts and waits
for. A forwarder that dies ends the script at once with exit 97 and its log; a slow one is waited for
(a loaded machine can take seconds to start a Python), so the agent never starts before its route."""

from __future__ import annotations

import subprocess
import time

from dagent.capture.reach import FORWARD_START, FORWARD_STOP
from dagent.harness.opencode import EXIT_FORWARDER


def launch(tmp_path, forwarder: str) -> tuple[subprocess.CompletedProcess, float]:
    """The prelude, then `echo agent`, with `forwarder` as forward.py (run by the system's python3)."""
    ctl = tmp_path / "ctl"
    ctl.mkdir()
    (ctl / "forward.py").write_text(forwarder)
    script = f'ctl="{ctl}"\n' + FORWARD_START + "\necho agent\n" + FORWARD_STOP
    started = time.monotonic()
    run = subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            "PATH": "/usr/bin:/bin",
            "DAGENT_FORWARD_SOCKET": str(tmp_path / "capture.sock"),
            "DAGENT_FORWARD_PORT": "1",
        },
    )
    return run, time.monotonic() - started


def test_a_forwarder_that_dies_ends_the_launch_at_once_with_its_log(tmp_path):
    run, took = launch(tmp_path, "import sys\nprint('no route to the bridge', file=sys.stderr)\nsys.exit(1)\n")
    assert run.returncode == EXIT_FORWARDER and "agent" not in run.stdout
    assert "the capture forwarder did not start" in run.stderr and "no route to the bridge" in run.stderr
    assert took < 10


def test_a_slow_forwarder_is_waited_for_and_the_agent_starts_after_it(tmp_path):
    slow = "import sys, time\ntime.sleep(2)\nopen(sys.argv[3], 'w').close()\ntime.sleep(30)\n"
    run, took = launch(tmp_path, slow)
    assert run.returncode == 0 and run.stdout.strip() == "agent", run.stderr
    assert 2 <= took < 30  # waited for the ready file, and the forwarder was stopped after the agent
