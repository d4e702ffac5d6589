# /// script
# requires-python = ">=3.11"
# dependencies = ["dagent[env,report]"]
# ///
"""Soak: the white-box server and the capture proxy together under mixed load for N minutes, with
faults planted at a fixed rate; nothing may be lost or mis-scored, memory must stay flat.

    python benchmarks/soak.py                                  # 3 minutes, 128 episodes + 128 sessions
    python benchmarks/soak.py --minutes 1 --episodes 16 --sessions 16 --plot /tmp/soak.png

Three processes besides this one, each as it runs in production: the REAL white-box server
(`python -m server.app` in spaces/data-agent, as its Dockerfile starts it), the capture proxy
(`CaptureServer` with a durable journal, `dagent.capture.journal`) and a vLLM-shaped stub engine
(benchmarks/capture_overhead.py's, 128 completion ids with logprobs a call, `--delay` ms). For the
whole window it keeps `--episodes` white-box episodes and `--sessions` capture sessions in flight:

- an episode: reset, `--calls` bash calls (`tail -n +2 input/t.csv | wc -l`), submit 200, DELETE;
  its reward must be exactly `dagent.core.reward.reward(True, calls)`. Every `--fault-every`-th
  episode is PLANTED: its last command outlives the server's command timeout and it never
  submits, so it must come back UNGRADED, cause `sandbox_timeout`, reward None (never 0.0);
- a session: `--turns` appending calls (each adds the answer and a tool result); its recorded
  turns, roots and trainable tokens are read back from the proxy's admin API and must be exactly
  what was sent. Every `--fault-every`-th session is PLANTED with a budget two calls short: the
  proxy must answer those two itself and count them as budget stops.

The exit code is 1 when anything was lost or mis-scored or memory grew (`verdict`); the latency
overhead fails it only under `--max-p99-overhead-ms`. Reported: episodes and sessions completed,
lost (an error, a timeout) and mis-scored (anything
but the expected reward, cause or counts); the RSS of the server and of the proxy sampled every
2 s (plotted with `--plot`; "flat" = the last quarter's median within 10% + 20 MiB of the first
quarter's, after a warm-up minute when the run is long enough); and the `bash` call latency over
HTTP against the same command run through `sandbox.exec` in this process at the same time (4
threads): the overhead is HTTP minus direct at p50 and p99. On the 2-core machine every process
here shares the CPUs with the sandboxes, so the overhead includes queueing for a core.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import env_load  # noqa: E402  (write_suite, start_server, pct: the white-box load test's own)

from dagent.core.reward import reward  # noqa: E402
from dagent.serving import free_port  # noqa: E402

COMMAND = env_load.COMMAND
PLANTED_COMMAND = "sleep 30"
PROXY = """
import sys, time
from dagent.capture.server import CaptureServer
CaptureServer(sys.argv[1], port=int(sys.argv[2]), admin_token="soak", journal=sys.argv[3]).start()
print("ready", flush=True)
time.sleep(10**6)
"""
SYSTEM = {"role": "system", "content": "You are a data agent. " * 40}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]


class Tally:
    def __init__(self) -> None:
        self.done = self.lost = self.misscored = self.planted = 0
        self.problems: list[str] = []
        self.lat: list[float] = []

    def bad(self, kind: str, what: str) -> None:
        setattr(self, kind, getattr(self, kind) + 1)
        if len(self.problems) < 8:
            self.problems.append(what[:300])


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def keep_in_flight(n: int, one, stop_at: float, **client) -> None:
    """`n` workers on one client, each starting `one(client, k)` again until `stop_at` (k counts
    every start, so every fault_every-th is planted whichever worker runs it)."""
    counter = 0

    async def worker(c: httpx.AsyncClient) -> None:
        nonlocal counter
        while time.monotonic() < stop_at:
            counter += 1
            await one(c, counter)

    limits = httpx.Limits(max_connections=n + 4, max_keepalive_connections=n + 4)
    async with httpx.AsyncClient(timeout=600, limits=limits, **client) as c:
        await asyncio.gather(*(worker(c) for _ in range(n)))


async def episodes(base: str, n: int, args, stop_at: float, tally: Tally) -> None:
    from dagent.envs.whitebox_client import unwrap_tool_result

    async def one(c: httpx.AsyncClient, k: int) -> None:
        planted = k % args.fault_every == args.fault_every - 1
        try:
            r = await c.post("/reset", json={"split": "train", "index": k % 8})
            r.raise_for_status()
            eid = r.json()["observation"]["episode_id"]
            for j in range(args.calls):
                command = PLANTED_COMMAND if planted and j == args.calls - 1 else COMMAND
                body = {
                    "jsonrpc": "2.0",
                    "id": j,
                    "method": "tools/call",
                    "params": {"name": "bash", "arguments": {"command": command, "episode_id": eid}},
                }
                t = time.perf_counter()
                r = await c.post("/mcp", json=body)
                if command == COMMAND:
                    tally.lat.append(time.perf_counter() - t)
                r.raise_for_status()
                res = unwrap_tool_result(r.json())
                if command == COMMAND and (not res.ok or res.output.strip() != "200"):
                    return tally.bad("misscored", f"episode {k}: bash gave {res}")
            if not planted:
                body = {
                    "jsonrpc": "2.0",
                    "id": 99,
                    "method": "tools/call",
                    "params": {"name": "submit_solution", "arguments": {"answer": 200, "episode_id": eid}},
                }
                (await c.post("/mcp", json=body)).raise_for_status()
            r = await c.delete(f"/data_agent/episodes/{eid}")
            r.raise_for_status()
            s = r.json()
            want = (None, None, "sandbox_timeout") if planted else (reward(True, args.calls), True, None)
            got = (s["reward"], s["correct"], (s.get("cause") or "").split(":")[0] or None)
            if got != want:
                return tally.bad("misscored", f"episode {k} ({'planted' if planted else 'plain'}): {got} != {want}")
            tally.done += 1
            tally.planted += planted
        except Exception as e:  # noqa: BLE001 - counted and the first few shown
            tally.bad("lost", f"episode {k}: {type(e).__name__}: {e}")

    await keep_in_flight(n, one, stop_at, base_url=base)


async def sessions(proxy: str, n: int, args, stop_at: float, tally: Tally) -> None:
    admin = {"authorization": "Bearer soak"}

    async def one(c: httpx.AsyncClient, k: int) -> None:
        planted = k % args.fault_every == args.fault_every - 1
        budget = args.turns - 2 if planted else args.turns
        try:
            r = await c.post(f"{proxy}/sessions", headers=admin, json={"max_model_calls": budget})
            r.raise_for_status()
            sid, key = r.json()["session_id"], r.json()["api_key"]
            messages = [SYSTEM, {"role": "user", "content": f"task {k}: how many rows?"}]
            for t in range(args.turns):
                r = await c.post(
                    f"{proxy}/v1/chat/completions",
                    headers={"authorization": f"Bearer {key}"},
                    json={"model": "stub", "messages": messages, "tools": TOOLS, "max_tokens": 128},
                )
                r.raise_for_status()
                message = r.json()["choices"][0]["message"]
                messages = [*messages, message, {"role": "tool", "tool_call_id": f"c{t}", "content": f"{t} rows"}]
            status = (await c.get(f"{proxy}/sessions/{sid}", headers=admin)).json()
            doc = (await c.get(f"{proxy}/sessions/{sid}/rollout", headers=admin)).json()
            (await c.delete(f"{proxy}/sessions/{sid}", headers=admin)).raise_for_status()
            want = (budget, args.turns - budget, 1, budget * 128)
            got = (status["n_turns"], doc["budget_stop_count"], status["n_roots"], doc["stats"]["n_trainable_tokens"])
            if got != want:
                return tally.bad(
                    "misscored",
                    f"session {k} ({'planted' if planted else 'plain'}): "
                    f"(turns, budget stops, roots, trainable) {got} != {want}",
                )
            tally.done += 1
            tally.planted += planted
        except Exception as e:  # noqa: BLE001
            tally.bad("lost", f"session {k}: {type(e).__name__}: {e}")

    await keep_in_flight(n, one, stop_at)


def direct(suite: Path, stop_at: float, out: list[float], threads: int = 4) -> list[threading.Thread]:
    from dagent.sandbox.base import Resources
    from dagent.sandbox.local import LocalBackend

    backend = LocalBackend()

    def run() -> None:
        with backend.create(Resources(cpus=1, memory_mb=512)) as sb:
            sb.stage({"t.csv": suite / "tables" / "bench" / "t.csv"})
            while time.monotonic() < stop_at:
                t = time.perf_counter()
                sb.exec(COMMAND, cwd="/workdir")
                out.append(time.perf_counter() - t)
                time.sleep(0.05)

    started = [threading.Thread(target=run, daemon=True) for _ in range(threads)]
    for t in started:
        t.start()
    return started


def main(args) -> int:
    with tempfile.TemporaryDirectory(prefix="dagent-soak-") as tmp:
        tmp = Path(tmp)
        suite = env_load.write_suite(tmp / "suite")
        server_port, stub_port, proxy_port = free_port(), free_port(), free_port()
        os.environ["DAGENT_COMMAND_TIMEOUT_S"] = str(args.command_timeout)
        load = argparse.Namespace(mcp="lean", calls=args.calls + 1, tool_workers=0)
        procs = [env_load.start_server(suite, server_port, args.episodes + 8, load)]
        procs.append(
            subprocess.Popen(
                [sys.executable, str(HERE / "capture_overhead.py"), "--serve", "stub", "--port", str(stub_port)],
                stdout=subprocess.DEVNULL,
            )
        )
        for _ in range(100):
            try:
                httpx.post(f"http://127.0.0.1:{stub_port}/stub/delay", content=f"{args.delay},0.5", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.2)
        proxy = subprocess.Popen(
            [sys.executable, "-c", PROXY, f"http://127.0.0.1:{stub_port}", str(proxy_port), str(tmp / "capture.db")],
            stdout=subprocess.PIPE,
            text=True,
        )
        procs.append(proxy)
        try:
            assert proxy.stdout.readline().strip() == "ready"
            print(
                f"load average at start {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; "
                f"{args.episodes} episodes + {args.sessions} capture sessions in flight for {args.minutes} min; "
                f"every {args.fault_every}th planted; stub delay {args.delay:g} ms",
                flush=True,
            )
            start = time.monotonic()
            stop_at = start + args.minutes * 60
            rss: list[tuple[float, float, float]] = []

            def sample() -> None:
                while not finished.is_set():
                    rss.append((time.monotonic() - start, rss_mib(procs[0].pid), rss_mib(proxy.pid)))
                    time.sleep(2)

            finished = threading.Event()
            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            direct_lat: list[float] = []
            direct_threads = direct(suite, stop_at, direct_lat)
            env_t, cap_t = Tally(), Tally()

            async def both() -> None:
                await asyncio.gather(
                    episodes(f"http://127.0.0.1:{server_port}", args.episodes, args, stop_at, env_t),
                    sessions(f"http://127.0.0.1:{proxy_port}", args.sessions, args, stop_at, cap_t),
                )

            asyncio.run(both())
            for t in direct_threads:
                t.join()
            wall = time.monotonic() - start
            finished.set()
            sampler.join()
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
    pct = env_load.pct
    print(f"wall {wall:.0f} s (the window, then the episodes in flight finish)")
    for name, t in (("episodes", env_t), ("capture sessions", cap_t)):
        print(
            f"{name:>16}: completed {t.done} ({t.planted} planted faults handled), lost {t.lost}, "
            f"mis-scored {t.misscored}"
        )
        for p in t.problems:
            print(f"{'':>18}{p}")
    print(
        f"bash over HTTP: p50 {pct(env_t.lat, 0.5):.1f} ms p99 {pct(env_t.lat, 0.99):.1f} ms ({len(env_t.lat)} calls); "
        f"direct sandbox.exec meanwhile: p50 {pct(direct_lat, 0.5):.1f} ms p99 {pct(direct_lat, 0.99):.1f} ms; "
        f"overhead p50 {pct(env_t.lat, 0.5) - pct(direct_lat, 0.5):+.1f} ms p99 "
        f"{pct(env_t.lat, 0.99) - pct(direct_lat, 0.99):+.1f} ms"
    )
    overhead_p99 = pct(env_t.lat, 0.99) - pct(direct_lat, 0.99)
    target = (
        "none set (--max-p99-overhead-ms): reported, not judged"
        if args.max_p99_overhead_ms is None
        else f"< {args.max_p99_overhead_ms:.0f} ms: {'met' if overhead_p99 < args.max_p99_overhead_ms else 'NOT met'}"
    )
    print(f"tool throughput {len(env_t.lat) / wall:.1f} bash calls/s over HTTP; p99 overhead target {target}")
    warm = 60.0 if args.minutes >= 4 else 0.0
    kept = [r for r in rss if r[0] >= warm] or rss
    q = max(1, len(kept) // 4)
    flat = True
    for i, name in ((1, "server"), (2, "proxy")):
        first, last = statistics.median(r[i] for r in kept[:q]), statistics.median(r[i] for r in kept[-q:])
        ok = last <= first * 1.10 + 20
        flat &= ok
        print(
            f"RSS {name}: first quarter {first:.0f} MiB, last quarter {last:.0f} MiB, max "
            f"{max(r[i] for r in rss):.0f} MiB -> {'flat' if ok else 'GROWING'}"
        )
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 3.5))
        ax.plot([r[0] for r in rss], [r[1] for r in rss], label="white-box server")
        ax.plot([r[0] for r in rss], [r[2] for r in rss], label="capture proxy (journal on)")
        ax.set_xlabel("seconds")
        ax.set_ylabel("RSS (MiB)")
        ax.set_title(f"soak: {args.episodes} episodes + {args.sessions} sessions, {args.minutes} min")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"plot: {args.plot}")
    return verdict(
        lost=env_t.lost + cap_t.lost,
        misscored=env_t.misscored + cap_t.misscored,
        flat=flat,
        overhead_p99_ms=overhead_p99,
        max_p99_overhead_ms=args.max_p99_overhead_ms,
    )


def verdict(
    *, lost: int, misscored: int, flat: bool, overhead_p99_ms: float, max_p99_overhead_ms: float | None = None
) -> int:
    """The exit code: 1 when something was lost or mis-scored, or memory grew; latency only when a
    target was asked for. At saturation (every core busy with sandboxes) the p99 over direct exec is
    queueing for a core, not the server's cost: a fixed default target failed every healthy run here
    (0 lost, 0 mis-scored, RSS flat, rc 1), so the figure is reported and judged only on request."""
    broken = lost > 0 or misscored > 0 or not flat
    slow = max_p99_overhead_ms is not None and not overhead_p99_ms < max_p99_overhead_ms
    return 1 if broken or slow else 0


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=3.0)
    p.add_argument("--episodes", type=int, default=128, help="white-box episodes in flight")
    p.add_argument("--sessions", type=int, default=128, help="capture sessions in flight")
    p.add_argument("--calls", type=int, default=8, help="bash calls per episode")
    p.add_argument("--turns", type=int, default=8, help="model calls per capture session")
    p.add_argument("--fault-every", type=int, default=10, help="plant a fault in every Nth episode and session")
    p.add_argument("--command-timeout", type=float, default=3.0, help="the server's command timeout (s)")
    p.add_argument("--delay", type=float, default=500.0, help="stub generation delay per call (ms)")
    p.add_argument("--plot", default="", help="write the RSS plot here (PNG)")
    p.add_argument(
        "--max-p99-overhead-ms",
        type=float,
        default=None,
        help="fail when the p99 bash latency over HTTP exceeds direct exec by this much (default: report only)",
    )
    return p.parse_args()


if __name__ == "__main__":
    sys.exit(main(parse()))
