"""Routing GRPO groups to agent harnesses (F40).

A group's advantage compares rollouts of ONE task; if two harnesses shared a group, the advantage
would encode which harness ran (measured across harnesses on the reference suite: pass@4 from
0.020 to 0.320) instead of which action helped. So the harness is a function of the group id
alone: constant within a group, cycling between groups. Routing by `group_id % n` over tasks taken
in a fixed order gives task i only the harnesses congruent to i modulo gcd(n_tasks, n): with 40
tasks and 2 harnesses every task would only ever meet one harness (a silent partition). The task
list is therefore padded (repeating its first rows) until its length and the harness count are
coprime.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypeVar

from dagent.errors import ConfigError

T = TypeVar("T")


def route(group_id: int, harnesses: Sequence[str]) -> str:
    """The harness of a group: the same for every rollout of the group, cycling between groups."""
    if not harnesses:
        raise ConfigError("no harness to route to: name at least one (--harness opencode)")
    return harnesses[int(group_id) % len(harnesses)]


def pad_coprime(rows: Sequence[T], n_harnesses: int) -> list[T]:
    """`rows`, padded with its own first rows until gcd(len, n_harnesses) == 1 (F40)."""
    if not rows:
        raise ConfigError("no rows to train on: the split is empty")
    out = list(rows)
    i = 0
    while math.gcd(len(out), max(1, n_harnesses)) != 1:
        out.append(rows[i % len(rows)])
        i += 1
    return out


def coverage(n_tasks: int, harnesses: Sequence[str], epochs: int) -> dict[int, set[str]]:
    """Which harnesses each task index meets when groups run the tasks in order for `epochs`
    passes and `route` picks by group id: the check F40's padding exists for."""
    seen: dict[int, set[str]] = {i: set() for i in range(n_tasks)}
    for group_id in range(n_tasks * epochs):
        seen[group_id % n_tasks].add(route(group_id, harnesses))
    return seen
