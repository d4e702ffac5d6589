"""Benchmark: `dagent.trajectory.analyse` against OpenEnv's capture graph, on the same traces.

    python benchmarks/trajectory.py                       # 100, 200, 500, 1000 turns
    python benchmarks/trajectory.py --sizes 100 200 --repeats 5 --shapes appending

Traces are synthetic captures shaped like real ones. Token ids are fresh int objects per call, as a
JSON decode of each engine response gives them (`--shared-ints` reuses objects: less memory, and
identity shortcuts make every compare cheaper for both sides).

    appending   one agent chain; each call adds --growth tokens (completion + tool result), so the
                prompt grows to growth x turns (356 x 1000 = ~356k tokens, OFFLINE_STACK's trace)
    aux         the same plus opencode-style auxiliary calls: a tool-less title call first and
                last, and a tool-less summariser every 100 calls
    rerender    a re-rendering harness: every call diverges from the previous one right after the
                system prompt (per_turn_capture_only); smaller sizes, OpenEnv is super-linear here

Measured per shape and size (min over --repeats, 1 run at >= 1000 calls, GC paused while timing):
    ours            analyse(turns) + trajectory.sequences(), turns holding array('I') ids as the
                    capture store hands them over
    ours+conv       the same plus building every CapturedTurn from int tuples (array('I') packing)
    openenv graph   RolloutGraph.add_turn per call + stats() + sequences()  (its ingest API)
    openenv ingest  what CaptureServer does per call: check_turn + graph.stats() + TurnNode(list
                    copies) + add_turn; the path OFFLINE_STACK's 0.23 s / 24.5 s figures measured.

Measured on the 2-core machine, quiet (s; x = OpenEnv's time over ours):

    shape      calls  tokens   ours   ns/tok  graph   x      ours+conv  x     ingest  x
    appending   100     1.8M   0.008   4.4    0.058   7.4x   0.026     2.3x   0.164   21x
    appending  1000   178M     0.194   1.1    5.657  29.1x   5.410     1.0x  23.44   121x
    aux        1012   180M     0.194   1.1    7.746  39.9x   4.462     1.7x  23.47   121x
    rerender    200     7.2M   0.049   6.9    1.173  23.8x   0.099    11.8x   6.263  127x

Ours grows linearly in total tokens (1.1 ns/token from 500 calls on; fixed per-call costs dominate
below). Counting the packing of Python int tuples into array('I') (`ours+conv`) it is 1.0-2.5x on
appending traces: the packing alone costs about what OpenEnv's whole graph does, which is why the
capture store keeps ids as arrays from the moment it parses them and hands them over as they are.
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
from array import array
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dagent.trajectory import CapturedTurn, analyse  # noqa: E402

SYSTEM = ({"role": "system", "content": "You are a data agent."},)


def make_trace(shape: str, n: int, growth: int, completion: int, shared: bool, seed: int = 0):
    """`(prompt, completion, n_tools)` per call, in arrival order."""
    rng = random.Random(seed)
    pool = array("l", (rng.randrange(300, 151_000) for _ in range(300 + growth * (n + 1) + 1_000)))
    fresh = (lambda lo, hi: pool[lo:hi]) if not shared else None
    shared_pool = list(pool) if shared else None

    def ids(lo: int, hi: int):
        return tuple(shared_pool[lo:hi]) if shared else tuple(fresh(lo, hi))  # new ints per call

    calls = []
    if shape == "aux":
        calls.append((tuple(range(10, 80)), (5, 6, 7, 8), 0))  # title call
    length = 300
    for k in range(n):
        if shape == "rerender":  # system prompt kept, history re-rendered from token 40 on
            prompt = ids(0, 40) + tuple(rng.randrange(300, 151_000) for _ in range(2)) + ids(42, length)
        else:
            prompt = ids(0, length)
        calls.append((prompt, ids(length, length + completion), 3))
        if shape == "aux" and k % 100 == 99:  # summariser: the whole context + an instruction
            calls.append((ids(0, length + completion) + (11, 12, 13), ids(0, 64), 0))
        length += growth
    if shape == "aux":
        calls.append((tuple(range(10, 80)), (5, 6, 7, 8), 0))
    return calls


def ours(calls):
    """Turns built from `array('I')` ids, the capture store's own form (outside the timing, as
    OpenEnv's TurnNodes are built outside its arm)."""
    turns = [
        CapturedTurn(
            f"n{i}", "s", i, array("I", p), array("I", c), (-0.1,) * len(c), messages=SYSTEM, tools_offered=tools
        )
        for i, (p, c, tools) in enumerate(calls)
    ]

    def run():
        trajectory = analyse(turns)
        trajectory.sequences()
        return trajectory

    return run


def ours_converting(calls):
    """The same, timing the conversion too: ids arriving as Python int tuples (a JSON decode, an
    OpenEnv trace), each turn packed into `array('I')` on construction."""

    def run():
        turns = [
            CapturedTurn(f"n{i}", "s", i, p, c, (-0.1,) * len(c), messages=SYSTEM, tools_offered=tools)
            for i, (p, c, tools) in enumerate(calls)
        ]
        trajectory = analyse(turns)
        trajectory.sequences()
        return trajectory

    return run


def openenv_graph(calls):
    from openenv.core.harness.capture.graph import RolloutGraph, TurnNode

    nodes = [
        TurnNode(
            node_id=f"n{i}", prompt_ids=list(p), sampled_ids=list(c), sampled_logprobs=[-0.1] * len(c), n_tools=tools
        )
        for i, (p, c, tools) in enumerate(calls)
    ]

    def run():
        graph = RolloutGraph()
        for node in nodes:
            graph.add_turn(node)
        graph.stats()
        graph.sequences()
        return graph

    return run


def openenv_ingest(calls):
    from openenv.core.harness.capture.graph import RolloutGraph, TurnNode
    from openenv.core.harness.capture.validate import check_turn

    payloads = [(list(p), list(c), [-0.1] * len(c), tools) for p, c, tools in calls]

    def run():
        graph = RolloutGraph()
        for i, (prompt, sampled, logprobs, tools) in enumerate(payloads):
            index = graph.stats()["n_turns"]
            check_turn(prompt, sampled, logprobs, finish_reason="stop", index=index)
            graph.add_turn(
                TurnNode(
                    node_id=f"n{i}",
                    prompt_ids=list(prompt),
                    sampled_ids=list(sampled),
                    sampled_logprobs=list(logprobs),
                    n_tools=tools,
                )
            )
        return graph

    return run


def timed(run, repeats: int) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeats):
        gc.collect()
        gc.disable()
        try:
            start = time.perf_counter()
            result = run()
            best = min(best, time.perf_counter() - start)
        finally:
            gc.enable()
    return best, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 200, 500, 1000])
    parser.add_argument("--rerender-sizes", type=int, nargs="+", default=[50, 100, 200])
    parser.add_argument("--shapes", nargs="+", default=["appending", "aux", "rerender"])
    parser.add_argument("--growth", type=int, default=356, help="tokens each call adds")
    parser.add_argument("--completion", type=int, default=100, help="sampled tokens per call")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per arm; min is kept")
    parser.add_argument("--shared-ints", action="store_true", help="reuse int objects across calls")
    parser.add_argument("--no-ingest", action="store_true", help="skip the CaptureServer ingest arm")
    parser.add_argument(
        "--budget", type=float, default=120.0, help="skip an OpenEnv arm predicted (cubic) to run longer than this (s)"
    )
    args = parser.parse_args(argv)

    print(
        f"{'shape':<10}{'calls':>6}{'context':>9}{'tokens':>12}{'ours s':>9}{'ns/tok':>8}"
        f"{'+conv s':>9}{'graph s':>9}{'x':>7}{'x conv':>7}{'ingest s':>10}{'x':>7}  check"
    )
    for shape in args.shapes:
        sizes = args.rerender_sizes if shape == "rerender" else args.sizes
        last: dict[str, tuple[int, float]] = {}
        for n in sizes:
            calls = make_trace(shape, n, args.growth, args.completion, args.shared_ints)
            tokens = sum(len(p) + len(c) for p, c, _ in calls)
            repeats = 1 if n >= 1000 else args.repeats  # same for every arm
            t_ours, trajectory = timed(ours(calls), repeats)
            t_conv, _ = timed(ours_converting(calls), repeats)
            cells, graph = {}, None
            for arm, build in (("graph", openenv_graph), ("ingest", openenv_ingest)):
                if arm == "ingest" and args.no_ingest:
                    cells[arm] = None
                    continue
                prev = last.get(arm)
                if prev and prev[1] * (n / prev[0]) ** 3 > args.budget:
                    cells[arm] = None
                    continue
                seconds, graph = timed(build(calls), repeats)
                cells[arm] = seconds
                last[arm] = (n, seconds)
            stats = trajectory.stats
            check = (
                f"samples={stats.samples_per_rollout} roots={stats.roots} "
                f"aux={stats.auxiliary_roots} openenv_roots="
                f"{len(graph.roots()) if graph is not None else '-'}"
            )

            def fmt(value):
                return f"{value:>10.3f}{value / t_ours:>6.1f}x" if value is not None else f"{'skipped':>10}{'':>7}"

            graph_s = cells["graph"]
            conv_x = f"{graph_s / t_conv:>6.1f}x" if graph_s is not None else f"{'':>7}"
            print(
                f"{shape:<10}{len(calls):>6}{len(calls[-2 if shape == 'aux' else -1][0]):>9}"
                f"{tokens:>12}{t_ours:>9.3f}{t_ours / tokens * 1e9:>8.1f}{t_conv:>9.3f}"
                f"{fmt(graph_s)}{conv_x}{fmt(cells['ingest'])}  {check}",
                flush=True,
            )
            del calls, trajectory
            gc.collect()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
