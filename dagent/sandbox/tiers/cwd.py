"""The `cwd` tier (no bubblewrap, not root, no Landlock): resource limits only, with a loud
warning. Commands run with cwd = the host directory (`/workdir` does not resolve) and the server's
view of the filesystem and network. `check_isolation` fails here, so no server serves an agent
from it."""

from __future__ import annotations

from collections.abc import Sequence

from dagent.sandbox.tiers import LocalSandbox, Tier, on_host

__all__ = ["CwdTier"]


class CwdTier(Tier):
    name = "cwd"
    home_inside = False
    copies_inputs = True  # no read-only mount protects the staging cache here

    def argv(
        self, sandbox: LocalSandbox, run: Sequence[str], *, setup: str, cwd: str, status_fd: int, uid: int | None
    ) -> list[str]:
        return [
            "/bin/sh",
            "-c",
            f'{setup}; cd "$1" && shift && exec "$@"',
            "sh",
            on_host(cwd, str(sandbox.host_workdir)),
            *run,
        ]

    def describe(self, memory: str) -> str:
        return (
            f"local: rlimits only, MISSING filesystem isolation, network isolation and pid "
            f"namespace; NO /workdir: commands run in the host directory; {memory}"
        )
