# /// script
# requires-python = ">=3.11"
# dependencies = ["dagent[env]"]
# ///
"""Load test of the white-box server: many concurrent episodes of 16 tool calls, over HTTP.

Starts the REAL server (`python -m server.app` in spaces/data-agent, as the Dockerfile does) on
127.0.0.1, then for each concurrency level runs that many episodes at once: reset, 15 `bash`
calls of the same command, `submit_solution`, finish (DELETE, which returns the reward). Prints
failures (target 0), episodes completed, and the p50/p99 latency of the `bash` calls, next to a
DIRECT arm that runs the same command through `sandbox.exec` in-process with the same number of
concurrent sandboxes (and serially, unloaded). Finally the largest level that held with 0
failures. Traffic goes to 127.0.0.1 only; every level has a time bound and so does the run.

    python benchmarks/env_load.py                      # levels 32,64,128,256
    python benchmarks/env_load.py --levels 8,16 --mcp openenv   # openenv's own POST /mcp
    python benchmarks/env_load.py --levels 16,32 --against /tmp/old   # this tree beside another checkout
    python benchmarks/env_load.py --levels 16,32 --protocol mcp       # one MCP session per episode

`--against DIR` starts a second server from another checkout of the project (its
spaces/data-agent, its `dagent` first on PYTHONPATH) and runs each level's HTTP arm on both, in
the order this, other, other, this, then prints each arm's tool calls per second (the two runs
of an arm pooled) and their ratio: a before/after of a server change, measured side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from dagent.serving import free_port

ROOT = Path(__file__).resolve().parents[1]
SPACE = ROOT / "spaces" / "data-agent"
COMMAND = "tail -n +2 input/t.csv | wc -l"
TABLE = "a,b\n" + "".join(f"{i},{i * i}\n" for i in range(200))


@dataclass
class Args:
    levels: str = field(default="32,64,128,256", metadata={"help": "comma-separated concurrency levels"})
    calls: int = field(default=16, metadata={"help": "tool calls per episode, submit_solution included"})
    mcp: str = field(default="lean", metadata={"help": "lean (default) or openenv: which POST /mcp to load"})
    level_timeout_s: float = field(default=420.0, metadata={"help": "bound on one level's HTTP arm"})
    max_seconds: float = field(default=1800.0, metadata={"help": "bound on the whole run"})
    tool_workers: int = field(default=0, metadata={"help": "server tool thread pool (0: its default)"})
    client_procs: int = field(default=8, metadata={"help": "load-generating client processes"})
    against: str = field(default="", metadata={"help": "another checkout to measure side by side (its server)"})
    protocol: str = field(
        default="sessionless",
        metadata={
            "help": "sessionless: POST /reset, then tools/call with episode_id (what trainers send); mcp: one MCP "
            "session per episode (the mcp SDK's ClientSession over Streamable HTTP: start_episode, the "
            "tools, finish_episode)"
        },
    )


def write_suite(root: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dagent.core.task import TableSource, Task

    src = TableSource(table_id="bench/t", path="bench/t.csv", package="none", origin="synthetic", licence="CC0")
    tasks = [
        Task(
            task_id=f"bench.{i}",
            instruction=f"[{i}] How many data rows does /workdir/input/t.csv have? "
            "Write only the value to /workdir/answer.txt.",
            data_files=("bench/t.csv",),
            answer_type="number",
            difficulty_level=1,
            difficulty_tier="easy",
            cpus=1,
            memory_mb=512,
            sources=(src,),
            gold="200",
            atol=0,
            rtol=0,
            solution="print(200)",
            template_id="bench",
        )
        for i in range(8)
    ]
    (root / "data").mkdir(parents=True)
    (root / "tables" / "bench").mkdir(parents=True)
    (root / "tables" / "bench" / "t.csv").write_text(TABLE)
    pq.write_table(pa.Table.from_pylist([t.to_row() for t in tasks]), root / "data" / "train-00000-of-00001.parquet")
    return root


def start_server(suite: Path, port: int, max_episodes: int, args: Args, root: Path = ROOT) -> subprocess.Popen:
    env = {
        **os.environ,
        "DAGENT_SUITE": str(suite),
        "HOST": "127.0.0.1",
        "PORT": str(port),
        "DAGENT_MAX_EPISODES": str(max_episodes),
        "LOG_LEVEL": "warning",
        "DAGENT_MCP_HANDLER": args.mcp,
        "DAGENT_MAX_STEPS": str(args.calls),
    }
    if root != ROOT:  # the other checkout's package, ahead of this one's editable install
        env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    if args.tool_workers:
        env["DAGENT_TOOL_WORKERS"] = str(args.tool_workers)
    proc = subprocess.Popen([sys.executable, "-m", "server.app"], cwd=root / SPACE.relative_to(ROOT), env=env)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode} before it was healthy")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    proc.kill()
    raise SystemExit("server did not become healthy within 120 s")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and its reaped children (the sandboxes it ran)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000


def http_level(base: str, level: int, args: Args) -> dict:
    """`level` episodes at once, driven from several client processes (one event loop each), so a
    single starved client loop does not become what is measured on a busy machine."""
    from concurrent.futures import ProcessPoolExecutor

    procs = max(1, min(args.client_procs, level))
    shares = [list(range(i, level, procs)) for i in range(procs)]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(procs) as pool:
        parts = list(pool.map(_http_share, [base] * procs, shares, [args] * procs))
    return {
        "completed": sum(p["completed"] for p in parts),
        "wall": time.perf_counter() - t0,
        "failures": [f for p in parts for f in p["failures"]],
        "lat": [x for p in parts for x in p["lat"]],
    }


def _http_share(base: str, indices: list[int], args: Args) -> dict:
    if args.protocol == "mcp":
        return asyncio.run(_mcp_episodes(base, indices, args))
    return asyncio.run(_http_episodes(base, indices, args))


async def _mcp_episodes(base: str, indices: list[int], args: Args) -> dict:
    """The same episodes, each in its own MCP session (the SDK's client, as an MCP user would)."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    latencies: list[float] = []
    failures: list[str] = []
    completed = 0

    async def episode(i: int) -> None:
        nonlocal completed
        try:
            async with (
                httpx.AsyncClient(timeout=args.level_timeout_s) as http,
                streamable_http_client(f"{base}/mcp", http_client=http) as (r, w, _),
                ClientSession(r, w) as session,
            ):
                await session.initialize()
                await session.call_tool("start_episode", {"split": "train", "index": i % 8})
                for _ in range(args.calls - 1):
                    t = time.perf_counter()
                    res = (await session.call_tool("bash", {"command": COMMAND})).structuredContent
                    latencies.append(time.perf_counter() - t)
                    if not res or not res["ok"] or res["output"].strip() != "200":
                        raise RuntimeError(f"bash returned {res}")
                await session.call_tool("submit_solution", {"answer": 200})
                done = (await session.call_tool("finish_episode", {})).structuredContent
                if not done or done["reward"] is None or not done["correct"]:
                    raise RuntimeError(f"episode not graded correct: {done}")
            completed += 1
        except Exception as e:  # noqa: BLE001 - every failure is counted and the first few printed
            failures.append(f"{type(e).__name__}: {e}"[:300])

    tasks = [asyncio.create_task(episode(i)) for i in indices]
    done, pending = await asyncio.wait(tasks, timeout=args.level_timeout_s)
    for t in pending:
        t.cancel()
        failures.append("timed out")
    return {"completed": completed, "failures": failures, "lat": latencies}


async def _http_episodes(base: str, indices: list[int], args: Args) -> dict:
    from dagent.envs.whitebox_client import unwrap_tool_result

    latencies: list[float] = []
    failures: list[str] = []
    completed = 0

    async def episode(c: httpx.AsyncClient, i: int) -> None:
        nonlocal completed
        try:
            r = await c.post("/reset", json={"split": "train", "index": i % 8})
            r.raise_for_status()
            eid = r.json()["observation"]["episode_id"]
            for k in range(args.calls - 1):
                body = {
                    "jsonrpc": "2.0",
                    "id": k,
                    "method": "tools/call",
                    "params": {"name": "bash", "arguments": {"command": COMMAND, "episode_id": eid}},
                }
                t = time.perf_counter()
                r = await c.post("/mcp", json=body)
                latencies.append(time.perf_counter() - t)
                r.raise_for_status()
                res = unwrap_tool_result(r.json())
                if not res.ok or res.output.strip() != "200":
                    raise RuntimeError(f"bash returned {res}")
            body = {
                "jsonrpc": "2.0",
                "id": 99,
                "method": "tools/call",
                "params": {"name": "submit_solution", "arguments": {"answer": 200, "episode_id": eid}},
            }
            r = await c.post("/mcp", json=body)
            r.raise_for_status()
            r = await c.delete(f"/data_agent/episodes/{eid}")
            r.raise_for_status()
            if r.json()["reward"] is None or not r.json()["correct"]:
                raise RuntimeError(f"episode not graded correct: {r.json()}")
            completed += 1
        except Exception as e:  # noqa: BLE001 - every failure is counted and the first few printed
            failures.append(f"{type(e).__name__}: {e}"[:300])

    limits = httpx.Limits(max_connections=len(indices) + 8, max_keepalive_connections=len(indices) + 8)
    async with httpx.AsyncClient(base_url=base, timeout=args.level_timeout_s, limits=limits) as c:
        tasks = [asyncio.create_task(episode(c, i)) for i in indices]
        done, pending = await asyncio.wait(tasks, timeout=args.level_timeout_s)
        for t in pending:
            t.cancel()
            failures.append("timed out")
    return {"completed": completed, "failures": failures, "lat": latencies}


def direct_level(level: int, calls: int, suite: Path) -> dict:
    """The same command through sandbox.exec, `level` sandboxes at once, no server in between."""
    from dagent.sandbox.base import Resources
    from dagent.sandbox.local import LocalBackend

    backend = LocalBackend()
    latencies: list[float] = []
    failures: list[str] = []
    lock = threading.Lock()
    files = {"t.csv": suite / "tables" / "bench" / "t.csv"}

    def run() -> None:
        try:
            sb = backend.create(Resources(cpus=1, memory_mb=512))
            try:
                sb.stage(files)
                for _ in range(calls):
                    t = time.perf_counter()
                    r = sb.exec(COMMAND)
                    dt = time.perf_counter() - t
                    if not (r.ok and r.stdout.strip() == "200"):
                        raise RuntimeError(f"exec returned {r}")
                    with lock:
                        latencies.append(dt)
            finally:
                sb.close()
        except Exception as e:  # noqa: BLE001 - counted, like the HTTP arm's failures
            with lock:
                failures.append(f"{type(e).__name__}: {e}"[:300])

    t0 = time.perf_counter()
    threads = [threading.Thread(target=run) for _ in range(level)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"lat": latencies, "wall": time.perf_counter() - t0, "failures": failures}


def side_by_side(args: Args) -> int:
    """Each level's HTTP arm on this tree's server and on `--against`'s, ABBA; calls/s and the ratio."""
    other = Path(args.against).resolve()
    if not (other / SPACE.relative_to(ROOT) / "server" / "app.py").is_file():
        raise SystemExit(f"--against {other}: not a checkout of this project (no spaces/data-agent/server/app.py)")
    levels = [int(x) for x in args.levels.split(",") if x.strip()]
    with tempfile.TemporaryDirectory(prefix="dagent-bench-") as tmp:
        suite = write_suite(Path(tmp) / "suite")
        ports = {"this": free_port(), "other": free_port()}
        procs = {
            "this": start_server(suite, ports["this"], max(levels), args),
            "other": start_server(suite, ports["other"], max(levels), args, root=other),
        }
        print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        print(f"this: {ROOT}   other: {other}   POST /mcp handler: {args.mcp}; command: {COMMAND!r}")
        print(f"{'level':>5} {'arm':>5} {'runs':>4} {'fail':>5} {'p50':>8} {'p99':>8} {'calls/s':>8}")
        worst = 0
        try:
            for level in levels:
                runs: dict[str, list[dict]] = {"this": [], "other": []}
                for arm in ("this", "other", "other", "this"):
                    runs[arm].append(http_level(f"http://127.0.0.1:{ports[arm]}", level, args))
                rate = {}
                for arm, rs in runs.items():
                    lat = [x for r in rs for x in r["lat"]]
                    fails = sum(len(r["failures"]) for r in rs)
                    worst = max(worst, fails)
                    rate[arm] = len(lat) / sum(r["wall"] for r in rs)
                    print(
                        f"{level:>5} {arm:>5} {len(rs):>4} {fails:>5} {pct(lat, 0.5):>7.1f}m {pct(lat, 0.99):>7.1f}m "
                        f"{rate[arm]:>8.1f}",
                        flush=True,
                    )
                print(f"      throughput this / other: {rate['this'] / rate['other']:.3f}")
        finally:
            for proc in procs.values():
                proc.terminate()
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
    return 0 if worst == 0 else 1


def main(args: Args) -> int:
    if args.against:
        return side_by_side(args)
    levels = [int(x) for x in args.levels.split(",") if x.strip()]
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="dagent-bench-") as tmp:
        suite = write_suite(Path(tmp) / "suite")
        port = free_port()
        proc = start_server(suite, port, max(levels), args)
        base = f"http://127.0.0.1:{port}"
        print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        serial = direct_level(1, 30, suite)["lat"]
        print(f"direct exec, serial (unloaded): p50 {pct(serial, 0.5):.1f} ms  p99 {pct(serial, 0.99):.1f} ms")
        print(
            f"server: python -m server.app, POST /mcp handler: {args.mcp}, protocol: {args.protocol}; "
            f"command: {COMMAND!r}"
        )
        print(
            f"{'level':>5} {'done':>5} {'fail':>5} {'http p50':>9} {'http p99':>9} {'direct p50':>10} "
            f"{'direct p99':>10} {'http wall':>9} {'calls/s':>8}"
        )
        held = 0
        try:
            for level in levels:
                if time.monotonic() - start > args.max_seconds:
                    print(f"stopping: the run's bound of {args.max_seconds:.0f} s is spent")
                    break
                cpu0, own0 = cpu_seconds(proc.pid), cpu_seconds(os.getpid())
                h = http_level(base, level, args)
                cpu1, own1 = cpu_seconds(proc.pid), cpu_seconds(os.getpid())
                d = direct_level(level, args.calls - 1, suite)
                own2 = cpu_seconds(os.getpid())
                n_fail = len(h["failures"])
                print(
                    f"{level:>5} {h['completed']:>5} {n_fail:>5} {pct(h['lat'], 0.5):>8.1f}m "
                    f"{pct(h['lat'], 0.99):>8.1f}m {pct(d['lat'], 0.5):>9.1f}m {pct(d['lat'], 0.99):>9.1f}m "
                    f"{h['wall']:>8.1f}s {len(h['lat']) / h['wall']:>8.1f}",
                    flush=True,
                )
                n = max(1, level * args.calls)
                direct_cpu = 1000 * (own2 - own1) / max(1, len(d["lat"]))
                print(
                    f"      CPU per tool call: server {1000 * (cpu1 - cpu0) / n:.1f} ms (incl. sandboxes), "
                    f"load clients {1000 * (own1 - own0) / n:.1f} ms; direct arm {direct_cpu:.1f} ms; "
                    f"direct {len(d['lat']) / d['wall']:.1f} calls/s"
                )
                for f in sorted(set(h["failures"]))[:5]:
                    print(f"      failure: {f}")
                for f in sorted(set(d["failures"]))[:3]:
                    print(f"      direct arm failure ({len(d['failures'])} episodes): {f}")
                if n_fail == 0:
                    held = level
                else:
                    break
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
    print(f"largest concurrency that held with 0 failures: {held}")
    return 0 if held == max(levels) else 1


def parse() -> Args:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name, f in Args.__dataclass_fields__.items():
        p.add_argument(f"--{name.replace('_', '-')}", type=type(f.default), default=f.default, help=f.metadata["help"])
    return Args(**vars(p.parse_args()))


if __name__ == "__main__":
    sys.exit(main(parse()))
