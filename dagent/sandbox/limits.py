"""The limits every local sandbox tier sets before a command runs, as shell steps.

A per-sandbox cgroup v1 (memory, pids, cpu) when this process may create one, else RLIMIT_AS for
memory; RLIMIT_CPU (from the timeout), RLIMIT_FSIZE, RLIMIT_NOFILE. RLIMIT_NPROC is not used: the
kernel never enforces it for uid 0 (bwrap maps root to root), and for other users it counts every
process they own on the machine. The steps run in a `/bin/sh` wrapper, not `preexec_fn`, which
forces fork() (a full copy of a large parent per exec). A failing step exits 125 with
`SETUP_FAILED` on stderr, which the sandbox reports as a setup failure, never as the command's.
"""

from __future__ import annotations

import math
import resource
import shlex
from collections.abc import Sequence
from pathlib import Path

from dagent.sandbox.base import Resources

__all__ = ["NOFILE", "SETUP_FAILED", "setup_script"]

NOFILE = 4096
SETUP_FAILED = "dagent-sandbox: setup failed"


def setup_script(res: Resources, cgroup_dirs: Sequence[Path], timeout_s: float) -> str:
    """Join the cgroups `cgroup_dirs` (none: RLIMIT_AS bounds memory instead), then set the rlimits,
    each capped at this process's own hard limit (an unprivileged caller cannot raise those)."""
    steps = [f"echo $$ > {shlex.quote(str(d / 'cgroup.procs'))}" for d in cgroup_dirs]
    rlimits = [
        ("n", NOFILE, resource.RLIMIT_NOFILE, 1),
        ("t", math.ceil(timeout_s * max(res.cpus, 1)) + 1, resource.RLIMIT_CPU, 1),
        ("f", res.max_file_mb * 2048, resource.RLIMIT_FSIZE, 512),
    ]
    if not cgroup_dirs:
        rlimits.append(("v", (res.memory_mb + res.runtime_address_space_mb) * 1024, resource.RLIMIT_AS, 1024))
    for flag, value, rlim, unit in rlimits:
        hard = resource.getrlimit(rlim)[1]
        steps.append(f"ulimit -{flag} {value if hard < 0 else min(value, hard // unit)}")
    return f"{{ {' && '.join(steps)}; }} || {{ echo '{SETUP_FAILED}' >&2; exit 125; }}"
