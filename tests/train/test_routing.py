"""Harness routing per GRPO group (F40): constant within a group, every task meets every harness."""

from __future__ import annotations

import math

import pytest

from dagent.errors import ConfigError
from dagent.train.routing import coverage, pad_coprime, route

HARNESSES = ["opencode", "pi"]


def test_a_group_keeps_one_harness_and_groups_cycle_through_them():
    assert [route(g, HARNESSES) for g in range(5)] == ["opencode", "pi", "opencode", "pi", "opencode"]
    with pytest.raises(ConfigError, match="no harness"):
        route(0, [])


@pytest.mark.failure_mode("F40")
def test_without_padding_routing_partitions_the_tasks_and_padding_makes_it_whole():
    """Planted: 40 tasks and 2 harnesses, groups in task order for 4 epochs: every task only ever
    meets ONE harness (seed routing collapses into a disjoint partition). Padded to 41 rows (coprime
    with 2), every task meets both."""
    unpadded = coverage(40, HARNESSES, epochs=4)
    assert all(len(seen) == 1 for seen in unpadded.values())
    rows = pad_coprime(list(range(40)), len(HARNESSES))
    assert len(rows) == 41 and math.gcd(len(rows), 2) == 1 and rows[:40] == list(range(40)) and rows[40] == 0
    padded = coverage(len(rows), HARNESSES, epochs=4)
    assert all(seen == set(HARNESSES) for seen in padded.values())


def test_padding_leaves_coprime_lists_alone_and_refuses_an_empty_one():
    assert pad_coprime([1, 2, 3], 2) == [1, 2, 3] and pad_coprime([1, 2], 1) == [1, 2]
    assert len(pad_coprime(list(range(9)), 3)) == 10
    with pytest.raises(ConfigError, match="empty"):
        pad_coprime([], 2)
