"""Trajectories recovered from captured model calls: the call record (`turn`), linking and drift
(`linking`), roots and the agent chain (`analysis`), the trainability gate (`gate`), the
round-trip audit (`audit`) and the exports to TRL and OpenEnv (`export`).

The package exports the analysis vocabulary for one import site (`from dagent.trajectory import
analyse, CapturedTurn`); modules inside the package import from the defining module.
"""

from dagent.trajectory.analysis import (
    AGENT,
    AUX_HINTS,
    AUXILIARY,
    DISCARDED,
    SUBAGENT,
    Root,
    Segment,
    Trajectory,
    TrajectoryStats,
    analyse,
    flatten,
    logprobs_ok,
)
from dagent.trajectory.linking import (
    CLEAN,
    DEFAULT_FORK_THRESHOLD,
    FORK,
    HEAD,
    MAX_TIPS,
    REALIGN,
    Transition,
    common_prefix_len,
    measure_drift,
)
from dagent.trajectory.turn import CapturedTurn, Finding, Level, token_ids, turns_from_openenv

__all__ = [
    "AGENT",
    "AUXILIARY",
    "AUX_HINTS",
    "CLEAN",
    "DEFAULT_FORK_THRESHOLD",
    "DISCARDED",
    "FORK",
    "HEAD",
    "MAX_TIPS",
    "REALIGN",
    "SUBAGENT",
    "CapturedTurn",
    "Finding",
    "Level",
    "Root",
    "Segment",
    "Trajectory",
    "TrajectoryStats",
    "Transition",
    "analyse",
    "common_prefix_len",
    "flatten",
    "logprobs_ok",
    "measure_drift",
    "token_ids",
    "turns_from_openenv",
]
