"""Grades per second on each grading path, measured in one run.

    python benchmarks/grading.py [--seconds 1.0] [--rounds 5]

Each path gets a rotating set of (answer, gold, answer_type, atol, rtol) cases that its rule
decides (checked before timing). The math-verify cases are all distinct and outnumber its
parse cache (20 entries), so they measure real parsing, not cache hits. Rounds interleave the
paths; the table gives the median and best wall-clock rate and the rate per CPU-second (which
other processes on a busy machine disturb less).
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass

from dagent.grading.dispatch import grade_answer

Case = tuple[str, str, str, float, float]

PATHS: dict[str, list[Case]] = {
    "exact": [
        ("Paris", "paris", "string", 0, 0),
        ("42", "42", "number", 0, 0),
        ("  United Air Lines Inc. ", "united air lines inc", "string", 0, 0),
        ("AA, UA", "aa, ua", "list", 0, 0),
        ("True", "true", "bool", 0, 0),
    ],
    "numeric": [
        ("1,234", "1234", "number", 0, 0),
        ("$1,234.50", "1234.5", "number", 0, 0),
        ("1.5E-3", "0.0015", "number", 0, 0),
        ("25%", "0.25", "number", 0, 0),
        ("12 minutes", "12.0", "number", 0, 0),
        ("10.4", "10", "number", 0.5, 0),
        ("1/4", "0.25", "number", 0, 0),
        ("\u22125", "-5.0", "number", 0, 0),
    ],
    "list": [
        ("[3, 2, 1]", "1, 2, 3", "list", 0, 0),
        ("['UA', 'AA', 'DL']", "DL, AA, UA", "list", 0, 0),
        ("AA; UA", "UA, AA", "list", 0, 0),
        ("1.0, 2.50, 7", "7, 2.5, 1", "list", 0, 0),
    ],
    "bool": [
        ("yes", "True", "bool", 0, 0),
        ("n", "False", "bool", 0, 0),
        ("1", "yes", "bool", 0, 0),
        ("No.", "false", "bool", 0, 0),
    ],
    "math_verify": [
        (rf"\frac{{{i}}}{{{j}}}", repr(i / j), "number", 1e-9, 0) for i in range(1, 13) for j in range(2, 9)
    ],
}


@dataclass(frozen=True)
class Args:
    seconds: float = 1.0  # wall time spent on each path, split into `rounds` interleaved rounds
    rounds: int = 5


def one_round(cases: list[Case], seconds: float) -> tuple[int, float, float]:
    """(grades, wall seconds, CPU seconds) for about `seconds`, cycling through the cases."""
    count, wall, cpu = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - wall < seconds:
        for case in cases:
            grade_answer(*case)
        count += len(cases)
    return count, time.perf_counter() - wall, time.process_time() - cpu


def main(args: Args) -> None:
    for path, cases in PATHS.items():
        methods = {grade_answer(*case).method for case in cases}
        wrong = [case for case in cases if not grade_answer(*case).correct]
        assert methods == {path} and not wrong, (path, methods, wrong[:3])
    rounds: dict[str, list[tuple[int, float, float]]] = {path: [] for path in PATHS}
    for _ in range(args.rounds):  # interleaved, so load from other processes hits every path
        for path, cases in PATHS.items():
            rounds[path].append(one_round(cases, args.seconds / args.rounds))
    print(f"{'path':<12} {'grades/s (median)':>18} {'best':>10} {'per CPU-s':>10} {'us/grade':>9} {'grades':>8}")
    for path, runs in rounds.items():
        rates = sorted(count / wall for count, wall, _ in runs)
        count = sum(run[0] for run in runs)
        per_cpu = count / max(sum(run[2] for run in runs), 1e-9)
        median = statistics.median(rates)
        print(f"{path:<12} {median:>18,.0f} {rates[-1]:>10,.0f} {per_cpu:>10,.0f} {1e6 / median:>9.1f} {count:>8,}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=Args.seconds, help="wall time spent on each path")
    parser.add_argument("--rounds", type=int, default=Args.rounds, help="interleaved rounds the time is split into")
    main(Args(**vars(parser.parse_args())))
