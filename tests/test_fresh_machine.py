"""The README's first command on a bare Debian 13 (trixie: Python 3.13, no Node), from a clean clone:
`scripts/fresh_machine.sh` builds the root file system (mmdebstrap; only python3, python3-venv, git,
curl and CA certificates), runs `bash scripts/setup.sh` in it with nothing of this machine's (no
local wheels, no pip configuration, no Node), then the oracle on a slice of `test`. The suite it
builds there must be this machine's suite byte for byte (its digest), and the oracle must solve
every task of the slice. About 12 minutes: the set-up downloads every dependency (~3.3 GB) and the
suite is built from its tables. Ubuntu 24.04's archive is not reachable from this machine, so only
Debian is checked."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def docker_ready() -> str | None:
    if not shutil.which("docker"):
        return "no docker: bash scripts/setup.sh --tests installs it (as root on Debian)"
    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        return "no Docker daemon answering: bash scripts/setup.sh --tests starts one"
    if not shutil.which("mmdebstrap"):
        return "no mmdebstrap: apt-get install -y mmdebstrap (scripts/setup.sh --tests installs it)"
    if not (ROOT / ".git").is_dir():
        return "not a git checkout: the fresh machine clones this checkout's .git"
    return None


def test_the_first_command_passes_on_a_bare_debian_13_with_the_reference_suite():
    why = docker_ready()
    if why:
        pytest.skip(why)
    from dagent.provenance import suite_revision
    from dagent.suites.sources import load_tasks

    reference = suite_revision(load_tasks(None))["digest"]  # this machine's build (Python 3.11 here)
    run = subprocess.run(["bash", "scripts/fresh_machine.sh"], cwd=ROOT, capture_output=True, text=True,
                         timeout=2700, env={**os.environ, "DIST": "trixie", "LIMIT": "20"})
    assert run.returncode == 0, run.stderr[-4000:]
    found = re.search(r"fresh-machine: python=(\S+) pass1=(\S+) tasks=(\d+) digest=(\S+)", run.stdout)
    assert found, run.stdout[-2000:] + run.stderr[-2000:]
    python, pass1, tasks, digest = found.groups()
    assert python.startswith("3.13.")  # Debian 13's own Python, not one of this machine's
    assert int(tasks) == 20 and float(pass1) == 1.0
    assert digest == reference
    assert "installing nodejs" in run.stderr  # Debian 13's Node 20.19 is new enough for pi: set-up installs it
