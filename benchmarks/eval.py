# /// script
# requires-python = ">=3.11"
# dependencies = ["dagent[all]"]
# ///
"""Benchmark: rollouts per minute per agent, and the evaluation's own overhead per rollout.

Each agent runs N episodes of the bundled suite's `test:easy` through the real episode skeleton
(`dagent.harness.play.play`), with the time spent in GENERATION (engine HTTP calls: the tool loop's
requests; for opencode its whole process, whose own loop is generation plus its commands) and in
SANDBOX COMMANDS (`exec`, reads and writes) measured by wrapping the agent's engine client and the
sandbox (`dagent.clock.PhaseClock`, `dagent.sandbox.timed`). Overhead = wall - generation - sandbox
commands - set-up (sandbox creation, staging and closing, reported apart). Printed side by side in one run; the
target is overhead under 5% of rollout wall time.

    python benchmarks/eval.py --agents oracle,tools --n 6 --model tiny-qwen3
"""

from __future__ import annotations

import argparse
import statistics
import time
from contextlib import ExitStack


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--agents", default="oracle,tools,opencode")
    p.add_argument("--n", type=int, default=6)
    p.add_argument("--model", default="tiny-qwen3")
    p.add_argument("--split", default="test:easy")
    args = p.parse_args()

    from dagent.cli.app import load_suite
    from dagent.clock import PhaseClock
    from dagent.eval.stack import agent_stack
    from dagent.harness.play import play
    from dagent.recipes import Recipes
    from dagent.sandbox.timed import TimedBackend

    suite = load_suite(None)
    print(
        f"{'agent':<9} {'n':>3} {'rollouts/min':>12} {'wall p50 s':>10} {'gen %':>6} {'cmds %':>6} "
        f"{'setup %':>7} {'overhead %':>10} {'overhead ms':>11}"
    )
    for name in args.agents.split(","):
        clock, walls = PhaseClock(), []
        with ExitStack() as stack:
            s = stack.enter_context(
                agent_stack(name, suite, model=args.model, max_output_tokens=256, recipes=Recipes.of("gpu"))
            )
            agent, backend = s.agent, TimedBackend(s.backend, clock)
            if name == "tools":
                agent._generate = clock.timed("generation", agent._generate)
            started = time.perf_counter()
            for i in range(args.n):
                t0 = time.perf_counter()
                play(suite, args.split, i, agent, backend, timeout_s=600)
                walls.append(time.perf_counter() - t0)
            total = time.perf_counter() - started
        t = clock.take()
        gen, cmds, setup = t.get("generation", 0.0), t.get("sandbox_tools", 0.0), t.get("sandbox_setup", 0.0)
        if name == "opencode":  # its process is one exec: generation and its commands inside
            gen, cmds = cmds, 0.0
        wall = sum(walls)
        over = wall - gen - cmds - setup
        print(
            f"{name:<9} {args.n:>3} {60 * args.n / total:>12.1f} {statistics.median(walls):>10.2f} "
            f"{100 * gen / wall:>6.1f} {100 * cmds / wall:>6.1f} {100 * setup / wall:>7.1f} "
            f"{100 * over / wall:>10.2f} {1000 * over / args.n:>11.1f}"
        )


if __name__ == "__main__":
    main()
