"""Benchmark: the local engine under 1, 4, 8 and 16 concurrent chat requests, arms side by side.

    python benchmarks/engine.py --model smollm2-135m
    python benchmarks/engine.py --model tiny-qwen3 --concurrency 1 4 8 16 --max-tokens 128
    python benchmarks/engine.py --model smollm2-135m --arms batched serial --before-src /tmp/before
    python benchmarks/engine.py --model smollm2-135m --group     # GRPO-style: one prompt, G seeds

Each arm is `python -m dagent.engine` in its own subprocess (all started first, then driven in
turn, so the arms see the same machine load at each concurrency level):
    batched   the engine as it ships (continuous batching, chunked prefill, prefix reuse)
    serial    the same code forced to one sequence at a time, no prefix reuse
              (`--max-num-seqs 1 --prefix-cache-gib 0`)
    vllm-cpu  the real vLLM of .venv-vllm, as `dagent eval --engine vllm-cpu` starts it (bfloat16
              where this CPU computes it natively, else float32; whole-prompt prefill: see
              dagent.engine.process.vllm_argv)
    vllm-cpu-fp32  the same in float32
    before    `--before-src DIR`: another source tree's engine with its own defaults (e.g.
              `git archive HEAD dagent | tar -x -C DIR` of an older commit)

A wave sends C requests at once (a barrier), each streamed over HTTP with its own seed: a
tool-calling conversation of about 1-2k tokens (a data agent's system prompt and five tool
schemas shared by all requests, then a distinct task, two tool calls and their tool results),
temperature 0.8, `max_tokens` completion tokens (`ignore_eos`, so every request is that long).
Conversations differ between waves, so only the shared system prompt and tools can be reused
across waves (as across an agent fleet's requests); `--group` sends one conversation C times;
`--shape short` sends a one-line question without tools instead (decode alone, no long prefill).

Printed per arm and wave: prompt tokens; time to first token p50/p95; end-to-end latency
p50/p95; tokens/s per request (completion tokens / latency, and after the first token); aggregate
completion tokens/s over the wave's wall time; and steady decode tokens/s: the tokens all C
streams produced while all C were past their first token (the batch's decode rate, without
prefill), "-" when the streams never overlapped.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dagent.eval.stack import engine_cores  # noqa: E402

SYSTEM = (
    "You are a careful data analysis agent working inside a sandbox. You answer questions about the "
    "tables of the task by calling tools: list the tables, describe their columns, run SQL queries "
    "and read files before answering. Never guess a number: compute it with a query and check it. "
    "When a query fails, read the error, fix the query and try again. Keep answers short; state the "
    "number and the unit, and say which table and filter produced it. When you are done, write the "
    "final answer with the write_answer tool, exactly once, in the format the task asks for."
)


def tool(name: str, description: str, **params: tuple[str, str]) -> dict[str, Any]:
    props = {k: {"type": t, "description": d} for k, (t, d) in params.items()}
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": props, "required": list(props)},
        },
    }


TOOLS = [
    tool(
        "list_tables",
        "List the tables available for this task, with their row counts.",
        schema=("string", "The schema to list; use 'main' unless the task names another."),
    ),
    tool(
        "describe_table",
        "Describe a table: its columns, their types, null counts and example values.",
        table=("string", "The table name, as list_tables returns it."),
        sample_rows=("integer", "How many example rows to include (at most 20)."),
    ),
    tool(
        "run_sql",
        "Run a read-only SQL query (DuckDB dialect) and return at most 50 result rows as CSV.",
        query=("string", "One SELECT statement; no DDL or writes."),
        timeout_s=("number", "Seconds before the query is cancelled (default 30)."),
    ),
    tool(
        "read_file",
        "Read a text file from the task's working directory.",
        path=("string", "A path relative to /workdir."),
        max_bytes=("integer", "Read at most this many bytes (default 20000)."),
    ),
    tool(
        "write_answer",
        "Write the final answer to /workdir/answer.txt, which the grader reads.",
        answer=("string", "The answer exactly as the task asks for it."),
        explanation=("string", "One sentence on how the answer was computed."),
    ),
]
CARRIERS = ["AA", "B6", "DL", "EV", "MQ", "UA", "US", "WN", "9E", "F9", "HA", "VX"]
AIRPORTS = ["EWR", "JFK", "LGA", "ATL", "ORD", "LAX", "SFO", "BOS", "MIA", "DFW", "DEN", "SEA", "IAH", "CLT"]


def short_chat(index: int) -> list[dict[str, Any]]:
    """`--shape short`: a one-line question, no tools (a few dozen prompt tokens): decode alone."""
    return [{"role": "user", "content": f"Question {index}: name three uses of a CSV file, briefly."}]


def conversation(index: int, rows: int) -> list[dict[str, Any]]:
    """A data agent's conversation after two tool calls (distinct content per index)."""
    rng = random.Random(index)
    carrier, origin = rng.choice(CARRIERS), rng.choice(AIRPORTS[:3])
    month = rng.randint(1, 12)

    def csv(n: int) -> str:
        lines = ["year,month,day,dep_time,dep_delay,carrier,flight,origin,dest,air_time,distance"]
        for _ in range(n):
            lines.append(
                f"2013,{month},{rng.randint(1, 28)},{rng.randint(500, 2359)},{rng.randint(-15, 240)},"
                f"{carrier},{rng.randint(1, 6000)},{origin},{rng.choice(AIRPORTS[3:])},"
                f"{rng.randint(30, 400)},{rng.randint(90, 2600)}"
            )
        return "\n".join(lines)

    def call(name: str, **arguments: Any) -> dict[str, Any]:
        return {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": f"call_{index}_{name}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
            ],
        }

    question = (
        f"Task {index}: what was the average departure delay, in minutes, of {carrier} flights from "
        f"{origin} in month {month} of 2013, counting only flights that departed? Round to one decimal."
    )
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": question},
        call("describe_table", table="flights", sample_rows=rows),
        {
            "role": "tool",
            "tool_call_id": f"call_{index}_describe_table",
            "content": "columns: year int, month int, day int, dep_time int (nulls 8255), dep_delay int "
            "(nulls 8255), carrier text, flight int, origin text, dest text, air_time int, distance int\n" + csv(rows),
        },
        call(
            "run_sql",
            query=f"SELECT * FROM flights WHERE carrier = '{carrier}' AND origin = '{origin}' "
            f"AND month = {month} AND dep_time IS NOT NULL LIMIT {rows}",
            timeout_s=30,
        ),
        {"role": "tool", "tool_call_id": f"call_{index}_run_sql", "content": csv(rows)},
    ]


@dataclass
class Arm:
    name: str
    args: list[str]
    src: Path | None = None
    proc: subprocess.Popen[bytes] | None = None
    url: str = ""
    log: Any = None


@dataclass
class Result:
    prompt_tokens: int = 0
    start: float = 0.0
    stamps: list[float] = field(default_factory=list)  # arrival time of each completion token
    error: str | None = None

    @property
    def tokens(self) -> int:
        return len(self.stamps)

    @property
    def latency(self) -> float:
        return self.stamps[-1] - self.start if self.stamps else float("nan")

    @property
    def ttft(self) -> float:
        return self.stamps[0] - self.start if self.stamps else float("nan")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(arm: Arm, model: str, threads: int, timeout_s: float) -> None:
    port = free_port()
    arm.url = f"http://127.0.0.1:{port}"
    env = dict(os.environ)
    env["PYTHONPATH"] = str(arm.src or ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [
        sys.executable,
        "-m",
        "dagent.engine",
        "--model",
        model,
        "--port",
        str(port),
        "--threads",
        str(threads),
        "--max-model-len",
        "8192",
        *arm.args,
    ]
    if arm.name.startswith("vllm-cpu"):  # the real vLLM of .venv-vllm, started exactly as `--engine vllm-cpu` does
        from dagent.engine.process import VllmProcess

        dtype = "float32" if arm.name == "vllm-cpu-fp32" else None  # None: bfloat16 where native, as shipped
        cmd, env = VllmProcess(model, port=port, max_model_len=8192, dtype=dtype).command()
    arm.log = tempfile.TemporaryFile()
    arm.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=arm.log, env=env, cwd=arm.src or ROOT)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if arm.proc.poll() is not None:
            arm.log.seek(0)
            raise SystemExit(f"arm {arm.name}: the engine exited: {arm.log.read().decode(errors='replace')[-2000:]}")
        try:
            if httpx.get(arm.url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"arm {arm.name}: no /health within {timeout_s:.0f}s")


def stop(arm: Arm) -> None:
    if arm.proc is not None and arm.proc.poll() is None:
        arm.proc.terminate()
        try:
            arm.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            arm.proc.kill()


def request(
    arm: Arm,
    messages: list[dict[str, Any]],
    seed: int,
    args: argparse.Namespace,
    barrier: threading.Barrier,
    out: Result,
) -> None:
    body = {
        "messages": messages,
        "max_tokens": args.max_tokens,
        "temperature": 0.8,
        "seed": seed,
        "ignore_eos": not args.allow_eos,
        "stream": True,
        "return_token_ids": True,
        "stream_options": {"include_usage": True},
    }
    if args.shape == "agent":
        body["tools"] = TOOLS
    with httpx.Client(timeout=args.request_timeout) as client:
        barrier.wait()
        out.start = time.perf_counter()
        try:
            with client.stream("POST", arm.url + "/v1/chat/completions", json=body) as response:
                if response.status_code != 200:
                    out.error = f"HTTP {response.status_code}: {response.read()[:300]!r}"
                    return
                for line in response.iter_lines():
                    if not line.startswith("data: {"):
                        continue
                    chunk = json.loads(line[6:])
                    if chunk.get("error"):  # vLLM reports an engine failure inside a 200 stream
                        out.error = f"in-stream error: {str(chunk['error'].get('message'))[:200]}"
                        return
                    now = time.perf_counter()
                    if chunk.get("usage"):
                        out.prompt_tokens = chunk["usage"]["prompt_tokens"]
                    for choice in chunk.get("choices") or ():
                        ids = choice.get("token_ids")
                        delta = choice.get("delta") or {}
                        if ids is None and (
                            delta.get("content") or delta.get("tool_calls") or delta.get("reasoning_content")
                        ):
                            ids = [0]  # an engine without per-chunk ids: one token per streamed delta
                        out.stamps.extend([now] * len(ids or ()))
        except httpx.HTTPError as e:
            out.error = repr(e)


def wave(
    arm: Arm, prompts: list[list[dict[str, Any]]], seeds: list[int], args: argparse.Namespace
) -> tuple[list[Result], float]:
    results = [Result() for _ in prompts]
    barrier = threading.Barrier(len(prompts))
    threads = [
        threading.Thread(target=request, args=(arm, p, s, args, barrier, r))
        for p, s, r in zip(prompts, seeds, results, strict=True)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    begin = min(r.start for r in results)
    wall = max((r.stamps[-1] if r.stamps else r.start) for r in results) - begin
    return results, wall


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def steady_decode(results: list[Result]) -> float | None:
    """Tokens/s over the window when every stream was past its first token and none had ended."""
    lo, hi = max(r.stamps[0] for r in results), min(r.stamps[-1] for r in results)
    if hi - lo <= 0.05 * max(r.latency for r in results):
        return None
    return sum(sum(lo < t <= hi for t in r.stamps) for r in results) / (hi - lo)


def report(arm: Arm, c: int, results: list[Result], wall: float) -> str:
    bad = [r.error for r in results if r.error or not r.stamps]
    if bad:
        return f"{arm.name:<8} C={c:<3} FAILED {len(bad)}/{len(results)}: {bad[0]}"
    lat, ttft = [r.latency for r in results], [r.ttft for r in results]
    per_req = statistics.mean(r.tokens / r.latency for r in results)
    after_first = statistics.mean((r.tokens - 1) / (r.latency - r.ttft) for r in results if r.latency > r.ttft)
    tokens = sum(r.tokens for r in results)
    steady = steady_decode(results) if c > 1 else after_first
    return (
        f"{arm.name:<8} C={c:<3} prompt {statistics.mean(r.prompt_tokens for r in results):>5.0f} tok  "
        f"ttft p50 {pct(ttft, 0.5):6.2f}s p95 {pct(ttft, 0.95):6.2f}s  latency p50 {pct(lat, 0.5):6.2f}s "
        f"p95 {pct(lat, 0.95):6.2f}s  per-request {per_req:6.2f} tok/s ({after_first:6.2f} after 1st)  "
        f"aggregate {tokens / wall:7.2f} tok/s  steady decode {'-' if steady is None else f'{steady:7.2f}'} tok/s"
    )


def main(args: argparse.Namespace) -> int:
    arms = [
        Arm(
            name,
            {
                "batched": [],
                "serial": ["--max-num-seqs", "1", "--prefix-cache-gib", "0"],
                "vllm-cpu": [],
                "vllm-cpu-fp32": [],
            }[name],
        )
        for name in args.arms
    ]
    if args.before_src:
        arms.insert(0, Arm("before", [], Path(args.before_src).resolve()))
    print(
        f"model {args.model}, threads {args.threads}, max_tokens {args.max_tokens}, concurrency "
        f"{args.concurrency}, {args.shape} prompts, "
        f"{'one shared conversation per wave' if args.group else 'distinct conversations'}; "
        f"load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    try:
        for arm in arms:
            t0 = time.monotonic()
            start(arm, args.model, args.threads, args.start_timeout)
            print(f"started {arm.name} in {time.monotonic() - t0:.0f}s", flush=True)
        for arm in arms:  # warm-up: first-request costs (lazy imports, allocator) are not measured
            wave(arm, [conversation(-1, 2)], [0], argparse.Namespace(**{**vars(args), "max_tokens": 4}))
        index = 0
        for c in args.concurrency:
            ids = [index] * c if args.group else list(range(index, index + c))
            index += 1 if args.group else c
            prompts = [conversation(i, args.rows) if args.shape == "agent" else short_chat(i) for i in ids]
            seeds = list(range(1000 * c, 1000 * c + c))
            for arm in arms:
                if arm.name == "before" and c > args.before_max_concurrency:
                    continue
                results, wall = wave(arm, prompts, seeds, args)
                print(report(arm, c, results, wall) + f"  (load {os.getloadavg()[0]:.2f})", flush=True)
    finally:
        for arm in arms:
            stop(arm)
    return 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m", help="smollm2-135m, tiny-qwen3 or a model directory")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8, 16], help="requests per wave")
    p.add_argument(
        "--arms", nargs="+", default=["batched", "serial"], choices=["batched", "serial", "vllm-cpu", "vllm-cpu-fp32"]
    )
    p.add_argument("--before-src", default=None, help="a source tree whose engine runs as the 'before' arm")
    p.add_argument("--before-max-concurrency", type=int, default=16, help="skip larger waves for 'before'")
    p.add_argument("--max-tokens", type=int, default=96, help="completion tokens per request")
    p.add_argument("--rows", type=int, default=8, help="CSV rows per tool result (sets the prompt length)")
    p.add_argument("--group", action="store_true", help="one conversation per wave, C seeds (a GRPO group)")
    p.add_argument(
        "--shape",
        default="agent",
        choices=["agent", "short"],
        help="agent: the ~1-2k-token tool-calling conversation; short: a one-line question",
    )
    p.add_argument("--allow-eos", action="store_true", help="let requests stop early (default: ignore_eos)")
    p.add_argument(
        "--threads",
        type=int,
        default=engine_cores(1),
        help="torch threads of each engine (default: this machine's cores, as `dagent eval` gives "
        "its one engine; arms are driven one at a time)",
    )
    p.add_argument("--start-timeout", type=float, default=900.0)
    p.add_argument("--request-timeout", type=float, default=3600.0)
    return p.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main(parse()))
