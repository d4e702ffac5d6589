# /// script
# requires-python = ">=3.11"
# dependencies = ["dagent[all]"]
# ///
"""Benchmark: rollouts per minute per agent, and the evaluation's own overhead per rollout.

Each agent runs N episodes of the bundled suite's `test:easy` through the real episode skeleton
(`dagent.runner.play`), with the time spent in GENERATION (engine HTTP calls: the tool loop's
requests; for opencode its whole process, whose own loop is generation plus its commands) and in
SANDBOX COMMANDS (`exec`, reads and writes) measured by wrapping the agent's engine client and the
sandbox. Overhead = wall - generation - sandbox commands (sandbox creation and staging reported
apart). Printed side by side in one run; the target is overhead under 5% of rollout wall time.

    python benchmarks/eval.py --agents oracle,tools --n 6 --model tiny-qwen3
"""

from __future__ import annotations

import argparse
import statistics
import time
from contextlib import ExitStack
from dataclasses import dataclass, field


@dataclass
class Timed:
    generation: float = 0.0
    commands: float = 0.0
    setup: float = 0.0  # sandbox creation and staging
    walls: list[float] = field(default_factory=list)


class TimedSandbox:
    def __init__(self, inner, t: Timed) -> None:
        self._inner, self._t = inner, t

    def __getattr__(self, name):
        attr = getattr(self._inner, name)
        if name not in ("exec", "read_file", "write_file", "stage"):
            return attr

        def timed(*a, **k):
            start = time.perf_counter()
            try:
                return attr(*a, **k)
            finally:
                spent = time.perf_counter() - start
                if name == "stage":
                    self._t.setup += spent
                else:
                    self._t.commands += spent

        return timed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self._inner.__exit__(*exc)


class TimedBackend:
    def __init__(self, inner, t: Timed) -> None:
        self._inner, self._t = inner, t
        self.remote = getattr(inner, "remote", False)

    def create(self, resources):
        start = time.perf_counter()
        box = self._inner.create(resources)
        self._t.setup += time.perf_counter() - start
        return TimedSandbox(box, self._t)

    def describe(self):
        return self._inner.describe()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--agents", default="oracle,tools,opencode")
    p.add_argument("--n", type=int, default=6)
    p.add_argument("--model", default="tiny-qwen3")
    p.add_argument("--split", default="test:easy")
    args = p.parse_args()

    from dagent.cli import load_suite
    from dagent.harness.stack import agent_stack
    from dagent.runner import play

    suite = load_suite(None)
    print(f"{'agent':<9} {'n':>3} {'rollouts/min':>12} {'wall p50 s':>10} {'gen %':>6} {'cmds %':>6} "
          f"{'setup %':>7} {'overhead %':>10} {'overhead ms':>11}")
    for name in args.agents.split(","):
        t = Timed()
        with ExitStack() as stack:
            s = stack.enter_context(agent_stack(name, suite, model=args.model, max_output_tokens=256))
            agent, backend = s.agent, TimedBackend(s.backend, t)
            if name == "tools":
                inner = agent._generate

                def generate(*a, _inner=inner, **k):
                    start = time.perf_counter()
                    try:
                        return _inner(*a, **k)
                    finally:
                        t.generation += time.perf_counter() - start

                agent._generate = generate
            started = time.perf_counter()
            for i in range(args.n):
                t0 = time.perf_counter()
                play(suite, args.split, i, agent, backend, timeout_s=600)
                t.walls.append(time.perf_counter() - t0)
            total = time.perf_counter() - started
        if name == "opencode":  # its process is one exec: generation and its commands inside
            t.generation, t.commands = t.commands, 0.0
        wall = sum(t.walls)
        over = wall - t.generation - t.commands - t.setup
        print(f"{name:<9} {args.n:>3} {60 * args.n / total:>12.1f} {statistics.median(t.walls):>10.2f} "
              f"{100 * t.generation / wall:>6.1f} {100 * t.commands / wall:>6.1f} {100 * t.setup / wall:>7.1f} "
              f"{100 * over / wall:>10.2f} {1000 * over / args.n:>11.1f}")


if __name__ == "__main__":
    main()
