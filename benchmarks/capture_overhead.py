"""Benchmark: what the capture proxy adds to a model call, against calling the engine directly.

    python benchmarks/capture_overhead.py                  # 1, 64, 256 clients; JSON and SSE
    python benchmarks/capture_overhead.py --levels 1 --sessions-1 4 --no-openenv   # a quick look

Every server runs uvicorn's fast stack (httptools + uvloop, pinned in the `env` extra; uvicorn
falls back to h11 + asyncio without them, and the header line says which ran).

A fast vLLM-shaped STUB engine (its own process) answers every chat call with `prompt_token_ids`
(2-5k ids: a quarter of the messages' characters), 128 completion `token_ids`, per-token logprobs and
a tool call, after a simulated generation delay (`--delays`, one per level, stated in the table;
each call's is within +-`--jitter`, a function of the prompt, so every arm waits alike and clients
drift out of lockstep). Streamed, it sends the role chunk after 10% of the delay, then one event
per token. Each client runs 8-turn APPENDING
sessions (each turn adds the answer and a tool result to the messages) on one keep-alive
connection, with a lean raw-socket HTTP client so the load generator's own CPU stays small. Arms,
each a separate process, interleaved within every (clients, mode) cell:

    direct    the client calls the stub
    dagent    through `dagent.capture.CaptureServer` (sessions minted over its admin API)
    openenv   through OpenEnv 0.10's `CaptureServer` (replays a non-streaming answer as SSE)

Per cell: p50/p99 call latency and the ADDED latency against direct (p50 - p50, p99 - p99), time to
first token (streaming), throughput (calls/s) and its ratio to direct, and CPU per call of the
proxy process (all its threads, from /proc/<pid>/task/*/schedstat) and of the stub. Then the memory
one 200-turn appending session (72k final prompt ids) holds in each store. On a 2-core machine the
client, proxy and stub share the CPUs (and here other jobs did too): once demand nears the CPU the
proxy gets, the throughput ratio measures its CPU share, not its latency. The proxy's own figures
are its CPU per call and the 1-client added latency. Targets: added p50 < 1 ms, ratio >= 0.95.

Measured on the 2-core machine, quiet (load average ~1), httptools + uvloop (the pinned stack),
stub delay 50 / 1000 / 2000 ms at 1 / 64 / 256 clients:

    clients mode  added p50 / p99 ms   ratio   proxy CPU ms/call   OpenEnv added p50, ratio
       1    json    +0.78 / +2.07      0.970        1.58           +4.88 ms, 0.867
       1    sse     +0.47 / +1.25      0.982        8.02           +4.67 ms, 0.885 (TTFT 58 ms)
      64    json    +1.38 / -0.53      0.997        1.51           +18.7 ms, 0.971
      64    sse     +2.91 / +5.37      0.996       10.93           +33.9 ms, 0.955 (TTFT 1043 ms)
     256    json    +3.03 / +0.27      0.991        1.62           not run
     256    sse    +32.2 / +52.0       0.973        7.57           not run

Time to first token through dagent: +0.4 ms at 1 client, +3.4 ms at 64. Repeated 1-client runs
(40 sessions) put the JSON added p50 at +0.7-1.3 ms (run-to-run noise) and the streamed one at
+0.6-0.7 ms (+1.4-1.6 ms before the stream capture folded events in as they pass). A 129-event
stream costs the proxy about 60 us of CPU an event; at 64 and 256 clients the 2 CPUs shared by
client, stub and proxy set the queueing. Under load average 5-8 (other jobs), h11 / httptools
measured json +3.3 / +1.6 ms at 1 client, sse ratio 0.46 / 0.80 at 256. Store: 5.4 MiB for the
200-turn session (OpenEnv 333 MiB).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dagent.capture.wire import dumps, loads  # noqa: E402

COMPLETION = 128
TOKEN_RE = re.compile(rb'"content": ?"[^"]')  # a delta with text (the role chunk's content is "")
TOOL = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]


# -- the stub engine ------------------------------------------------------------------------------
class Stub:
    """A vLLM-shaped chat endpoint (raw ASGI). Prompt length ~ message characters / 4."""

    def __init__(self, delay_ms: float, jitter: float = 0.5) -> None:
        rng = random.Random(0)
        self.pool = [rng.randrange(300, 151_000) for _ in range(20_000)]
        self.delay, self.jitter = delay_ms / 1000, jitter
        self.cache: dict[int, tuple[bytes, list[bytes]]] = {}

    def parts(self, n: int) -> tuple[bytes, list[bytes]]:
        """(JSON body, SSE events) for a prompt of n ids, built once per length."""
        if n not in self.cache:
            prompt, ids = self.pool[:n], self.pool[n : n + COMPLETION]
            entries = [
                {"token": f"token_id:{i}", "logprob": -0.25 - (i % 7) / 10, "bytes": [116], "top_logprobs": []}
                for i in ids
            ]
            call = {"id": "call_0", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
            text = "tok " * COMPLETION
            head = {"id": "chatcmpl-stub", "created": 0, "model": "stub"}
            body = dumps(
                {
                    **head,
                    "object": "chat.completion",
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": text, "tool_calls": [call]},
                            "logprobs": {"content": entries},
                            "finish_reason": "tool_calls",
                            "token_ids": ids,
                        }
                    ],
                    "usage": {"prompt_tokens": n, "completion_tokens": COMPLETION, "total_tokens": n + COMPLETION},
                    "prompt_token_ids": prompt,
                }
            )
            chunk = {**head, "object": "chat.completion.chunk"}
            events = [
                dumps(
                    {
                        **chunk,
                        "choices": [
                            {
                                "index": 0,
                                "delta": {"role": "assistant", "content": ""},
                                "logprobs": None,
                                "finish_reason": None,
                            }
                        ],
                        "prompt_token_ids": prompt,
                    }
                )
            ]
            for k, (i, entry) in enumerate(zip(ids, entries)):
                last = k == COMPLETION - 1
                delta = {"content": "tok "} if not last else {"tool_calls": [{"index": 0, **call}]}
                events.append(
                    dumps(
                        {
                            **chunk,
                            "choices": [
                                {
                                    "index": 0,
                                    "delta": delta,
                                    "logprobs": {"content": [entry]},
                                    "finish_reason": "tool_calls" if last else None,
                                    "token_ids": [i],
                                }
                            ],
                        }
                    )
                )
            self.cache[n] = body, [b"data: " + e + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]
        return self.cache[n]

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        if scope["path"] == "/stub/delay":
            self.delay, self.jitter = (float(x) for x in b"".join(chunks).split(b","))
            self.delay /= 1000
            return await _reply(send, b"{}")
        if scope["path"].endswith("/models"):
            return await _reply(send, b'{"object":"list","data":[{"id":"stub","object":"model"}]}')
        request = loads(b"".join(chunks))
        n = sum(len(str(m.get("content") or "")) for m in request["messages"]) // 4
        body, events = self.parts(min(n, len(self.pool) - COMPLETION))
        # the jitter is a function of the prompt, so every arm's session k, turn t waits as long
        delay = self.delay * (1 - self.jitter + 2 * self.jitter * ((n * 2654435761) % 2**32) / 2**32)
        if not request.get("stream"):
            await asyncio.sleep(delay)
            return await _reply(send, body)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        loop = asyncio.get_running_loop()
        start, step = loop.time() + delay * 0.1, delay * 0.9 / COMPLETION
        for k, event in enumerate(events):  # absolute deadlines: uvloop's timers are whole ms
            wait = start + min(k, COMPLETION) * step - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            await send({"type": "http.response.body", "body": event, "more_body": True})
        await send({"type": "http.response.body", "body": b""})


async def _reply(send, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


# -- servers, each its own process ----------------------------------------------------------------
def serve(args: argparse.Namespace) -> None:
    import uvicorn

    if args.serve == "stub":
        uvicorn.run(Stub(0), host="127.0.0.1", port=args.port, log_level="warning", access_log=False, backlog=4096)
    elif args.serve == "dagent":
        from dagent.capture import CaptureServer

        CaptureServer(args.upstream, admin_token="bench", port=args.port).start()
        while True:
            time.sleep(3600)
    else:
        from openenv.core.harness.capture.runner import CaptureServer as OpenEnvCapture

        OpenEnvCapture(llm_url=args.upstream, model="stub", port=args.port).start()
        while True:
            time.sleep(3600)


def launch(kind: str, port: int, upstream: str = "") -> subprocess.Popen:
    log = open(f"/tmp/capture_bench_{kind}.log", "w")
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", kind, "--port", str(port), "--upstream", upstream],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))},
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            status, _, _ = asyncio.run(_once(port, "GET", "/v1/models" if kind == "stub" else "/health"))
            if status == 200:
                return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"{kind} did not start on :{port}; see /tmp/capture_bench_{kind}.log")


def cpu_s(pid: int) -> float:
    """CPU seconds of every thread of a process, ns resolution."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:
            pass
    return total / 1e9


# -- the lean client --------------------------------------------------------------------------------
class Conn:
    """One keep-alive HTTP/1.1 connection: Content-Length or chunked answers."""

    def __init__(self, port: int) -> None:
        self.port = port

    async def open(self) -> Conn:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port, limit=1 << 24)
        return self

    async def call(self, method: str, path: str, body: bytes = b"", key: str = "") -> tuple[int, bytes, float | None]:
        auth = f"authorization: Bearer {key}\r\n".encode() if key else b""
        t0 = time.perf_counter()
        self.writer.write(
            f"{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n".encode()
            + auth
            + b"\r\n"
            + body
        )
        head = await self.reader.readuntil(b"\r\n\r\n")
        status, lower = int(head[9:12]), head.lower()
        at = lower.find(b"content-length:")
        if at >= 0:
            return status, await self.reader.readexactly(int(lower[at + 15 : lower.index(b"\r\n", at)])), None
        parts, ttft = [], None
        while True:
            size = int((await self.reader.readuntil(b"\r\n")).strip(), 16)
            data = (await self.reader.readexactly(size + 2))[:-2]
            if not size:
                return status, b"".join(parts), ttft
            if ttft is None and TOKEN_RE.search(data):
                ttft = time.perf_counter() - t0
            parts.append(data)

    def close(self) -> None:
        self.writer.close()


async def _once(port: int, method: str, path: str, body: bytes = b"", key: str = ""):
    conn = await Conn(port).open()
    try:
        return await conn.call(method, path, body, key)
    finally:
        conn.close()


@dataclass
class Arm:
    name: str
    port: int
    pid: int
    latencies: list[float] = field(default_factory=list)
    ttfts: list[float] = field(default_factory=list)
    calls: int = 0
    wall: float = 0.0
    cpu: float = 0.0
    stub_cpu: float = 0.0
    errors: int = 0


async def session(arm: Arm, stream: bool, turns: int, system: str) -> None:
    key = ""
    if arm.name != "direct":
        _, body, _ = await _once(arm.port, "POST", "/sessions", b"{}", "bench")
        key = loads(body)["session_id"]
    conn = await Conn(arm.port).open()
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "Count the rows."}]
    try:
        for turn in range(turns):
            request = dumps({"model": "stub", "messages": messages, "tools": TOOL, "stream": stream})
            t0 = time.perf_counter()
            status, body, ttft = await conn.call("POST", "/v1/chat/completions", request, key)
            arm.latencies.append(time.perf_counter() - t0)
            if status != 200 or (stream and b"[DONE]" not in body):
                arm.errors += 1
                return
            if ttft is not None:
                arm.ttfts.append(ttft)
            text = "tok " * COMPLETION if stream else loads(body)["choices"][0]["message"]["content"]
            messages = messages + [
                {
                    "role": "assistant",
                    "content": text,
                    "tool_calls": [
                        {
                            "id": f"c{turn}",
                            "type": "function",
                            "function": {"name": "bash", "arguments": '{"command": "ls"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": f"c{turn}", "content": "x" * 1000},
            ]
            arm.calls += 1
    finally:
        conn.close()
    if key:
        await _once(arm.port, "DELETE", f"/sessions/{key}", b"", "bench")


async def run_arm(arm: Arm, stub_pid: int, clients: int, sessions: int, stream: bool, turns: int) -> None:
    """`sessions` sessions in all, `clients` at a time."""
    # 8-10k characters, ~2-2.5k prompt ids, growing ~400 a turn: 2-5k ids over a session
    systems = ["You are a data agent. " * (360 + (i * 7) % 100) for i in range(sessions)]
    gate, todo = asyncio.Semaphore(clients), iter(range(sessions))

    async def worker() -> None:
        for i in todo:
            async with gate:
                await session(arm, stream, turns, systems[i])

    cpu0, stub0, t0 = cpu_s(arm.pid) if arm.name != "direct" else 0.0, cpu_s(stub_pid), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    arm.wall += time.perf_counter() - t0
    arm.stub_cpu += cpu_s(stub_pid) - stub0
    if arm.name != "direct":
        arm.cpu += cpu_s(arm.pid) - cpu0


def _have(module: str) -> str:
    import importlib.util

    return module if importlib.util.find_spec(module) else ""


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main(args: argparse.Namespace) -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the servers are stopped too
    stub = launch("stub", args.port)
    upstream = f"http://127.0.0.1:{args.port}"
    procs = {"dagent": launch("dagent", args.port + 1, upstream)}
    if not args.no_openenv:
        procs["openenv"] = launch("openenv", args.port + 2, upstream)
    print(f"stub pid {stub.pid}; proxies " + ", ".join(f"{k} pid {p.pid}" for k, p in procs.items()))
    print(
        f"servers: uvicorn http={_have('httptools') or 'h11'} loop={_have('uvloop') or 'asyncio'}; "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start"
    )
    rows = []
    try:
        for clients, delay in zip(args.levels, args.delays):
            asyncio.run(_once(args.port, "POST", "/stub/delay", f"{delay},{args.jitter}".encode()))
            sessions = args.sessions_1 if clients == 1 else clients * args.rounds
            for stream in (False, True):
                names = ["direct", "dagent"] + (
                    ["openenv"] if "openenv" in procs and clients <= args.openenv_max else []
                )
                arms = {
                    n: Arm(
                        n,
                        args.port + {"direct": 0, "dagent": 1, "openenv": 2}[n],
                        stub.pid if n == "direct" else procs[n].pid,
                    )
                    for n in names
                }
                reps = args.reps if clients > 1 else sessions
                per = sessions // reps if clients == 1 else sessions
                for _ in range(reps):  # interleave the arms
                    for arm in arms.values():
                        asyncio.run(run_arm(arm, stub.pid, clients, per, stream, args.turns))
                rows.append((clients, stream, delay, arms))
                print(table([rows[-1]]), flush=True)
        print(f"\nload average {os.getloadavg()[0]:.1f} at the end\n" + table(rows))
        for name, proc in procs.items():
            with open(f"/proc/{proc.pid}/status") as f:
                rss = next(line.split()[1] for line in f if line.startswith("VmHWM"))
            print(f"{name} proxy peak RSS {int(rss) / 1024:.0f} MiB")
        if args.store_turns:
            print(store_memory(args.store_turns))
    finally:
        for proc in [stub, *procs.values()]:
            proc.terminate()
            proc.wait(timeout=10)


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        return int(next(line.split()[1] for line in f if line.startswith("VmRSS"))) / 1024


def store_one(name: str, turns: int) -> None:
    """One appending session into one store (prompt +360 ids a turn, 128-id completions), ids as
    fresh ints the way a JSON parse gives them; prints the RSS it added and the ingest time."""
    from array import array

    rng = random.Random(0)
    pool = array("l", (rng.randrange(300, 151_000) for _ in range(300 + 360 * (turns + 1))))
    if name == "dagent":
        from dagent.capture.store import SessionState
        from dagent.capture.wire import EngineCall, Prepared

        store = SessionState("s", None, {})

        def add(k: int, prompt: list[int], completion: list[int]) -> None:
            call = EngineCall(prompt, completion, [-0.5] * COMPLETION, "stop", {})
            store.compact(store.add(k, call, Prepared(b"", False, "m", [], None, {}, None), {}))
    else:
        from openenv.core.harness.capture.graph import RolloutGraph, TurnNode

        store = RolloutGraph()

        def add(k: int, prompt: list[int], completion: list[int]) -> None:
            store.add_turn(
                TurnNode(
                    node_id=f"t{k}",
                    prompt_ids=prompt,
                    sampled_ids=completion,
                    sampled_logprobs=[-0.5] * COMPLETION,
                    index=k,
                )
            )

    before, t0 = _rss_mib(), time.perf_counter()
    for k in range(turns):
        n = 300 + 360 * k
        add(k, list(pool[:n]), list(pool[n : n + COMPLETION]))
    print(
        f"{name:<8} store: {turns} turns, {300 + 360 * (turns - 1)} final prompt ids: "
        f"{_rss_mib() - before:7.1f} MiB RSS added, ingest {time.perf_counter() - t0:.2f} s"
    )


def store_memory(turns: int) -> str:
    return "".join(
        subprocess.run(
            [sys.executable, __file__, "--store", name, "--store-turns", str(turns)],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            timeout=600,
        ).stdout
        for name in ("dagent", "openenv")
    ).rstrip()


def table(rows) -> str:
    head = (
        "clients mode delay_ms arm      calls err  p50_ms  p99_ms  +p50_ms  +p99_ms  ttft50_ms "
        " calls/s  ratio  proxy_cpu_ms/call stub_cpu_ms/call"
    )
    lines = [head]
    for clients, stream, delay, arms in rows:
        direct = arms["direct"]
        for arm in arms.values():
            lat = [x * 1000 for x in arm.latencies]
            base = [x * 1000 for x in direct.latencies]
            tput = arm.calls / arm.wall if arm.wall else float("nan")
            dtput = direct.calls / direct.wall if direct.wall else float("nan")
            cpu = arm.cpu / arm.calls * 1000 if arm.calls and arm.name != "direct" else float("nan")
            lines.append(
                f"{clients:>7} {'sse ' if stream else 'json'} {delay:>8.0f} {arm.name:<8} {arm.calls:>5} "
                f"{arm.errors:>3} {pct(lat, 0.5):>7.1f} {pct(lat, 0.99):>7.1f} "
                f"{pct(lat, 0.5) - pct(base, 0.5):>+8.2f} {pct(lat, 0.99) - pct(base, 0.99):>+8.2f} "
                f"{pct([t * 1000 for t in arm.ttfts], 0.5):>10.1f} {tput:>8.1f} {tput / dtput:>6.3f} "
                f"{cpu:>18.2f} {arm.stub_cpu / max(arm.calls, 1) * 1000:>16.2f}"
            )
    return "\n".join(lines)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--levels", type=int, nargs="+", default=[1, 64, 256], help="concurrent clients")
    p.add_argument("--turns", type=int, default=8, help="calls per appending session")
    p.add_argument("--sessions-1", type=int, default=12, help="sessions at 1 client (interleaved one by one)")
    p.add_argument("--rounds", type=int, default=1, help="sessions per client at >1 clients")
    p.add_argument("--reps", type=int, default=1, help="interleaved repetitions per arm at >1 clients")
    p.add_argument(
        "--delays",
        type=float,
        nargs="+",
        default=[50.0, 1000.0, 2000.0],
        help="stub generation delay (ms) per level; 128 tokens at a real engine take 1-5 s",
    )
    p.add_argument(
        "--jitter",
        type=float,
        default=0.5,
        help="each call's delay is drawn from delay x U(1-j, 1+j): clients drift out of lockstep",
    )
    p.add_argument("--store-turns", type=int, default=200, help="turns of the store-memory comparison (0: skip)")
    p.add_argument("--openenv-max", type=int, default=64, help="largest client count for the openenv arm")
    p.add_argument("--no-openenv", action="store_true", help="skip the OpenEnv arm")
    p.add_argument("--port", type=int, default=18300, help="stub port; the proxies take the next two")
    p.add_argument("--serve", choices=["stub", "dagent", "openenv"], help=argparse.SUPPRESS)
    p.add_argument("--store", choices=["dagent", "openenv"], help=argparse.SUPPRESS)
    p.add_argument("--upstream", default="", help=argparse.SUPPRESS)
    return p.parse_args(argv)


if __name__ == "__main__":
    arguments = parse()
    if arguments.store:
        store_one(arguments.store, arguments.store_turns)
    else:
        serve(arguments) if arguments.serve else main(arguments)
