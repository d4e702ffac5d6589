"""What an agent promises its environment: it never asks for more tool calls than an episode serves.

The environment's step budget is `dagent.tools.episode.MAX_STEPS` (one definition; the white-box
episode, the black-box harnesses and the trainers all read it). An agent's own step cap above it
opens a band where every call is refused (F35): `check_step_cap` refuses that before anything runs.
Training's other pre-start checks (`dagent.train.preflight`) return the same `Check` record.
"""

from __future__ import annotations

from dataclasses import dataclass

from dagent.errors import ConfigError, DagentError
from dagent.tools.episode import MAX_STEPS


class PreflightError(DagentError):
    """A training setting that would fail silently; the message names the check and the fix."""


class StepCapError(PreflightError, ConfigError):
    """The agent's step cap is above the environment's step budget (F35)."""


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


def check_step_cap(cap: int | None, env_max_steps: int = MAX_STEPS) -> Check:
    """F35: the agent may not be allowed more tool calls than the environment serves (default: the
    episode's MAX_STEPS). The reference run's hard cap of 17 passes; the reward's B = 15 is no cap."""
    if cap is None:
        return Check("step_cap", True, f"no agent-side cap; the environment refuses calls past {env_max_steps}")
    if type(cap) is not int or cap < 1:
        raise StepCapError(f"step_cap: the agent's step cap must be a positive int, got {cap!r}")
    if cap > env_max_steps:
        raise StepCapError(
            f"step_cap_above_budget: the agent's step cap ({cap}) is above the environment's step budget "
            f"({env_max_steps} tool calls per episode): between the two every call is refused; set the "
            f"cap <= {env_max_steps} or raise the environment's max_steps (F35)"
        )
    return Check("step_cap", True, f"agent cap {cap} <= environment budget {env_max_steps}")
