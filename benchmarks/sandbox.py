# /// script
# requires-python = ">=3.11"
# dependencies = ["dagent"]
# ///
"""Local sandbox latency: exec round trip and cached staging, bubblewrap vs rlimits-only.

Targets: exec round trip p50 < 20 ms; cached staging of a 30 MB file < 50 ms. Also prints what
one round trip is made of (a bare process spawn, bwrap alone), so a miss can be explained.

    python benchmarks/sandbox.py --runs 50
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dagent.sandbox.base import Resources
from dagent.sandbox.local import LocalBackend


@dataclass
class Args:
    runs: int = 50  # samples per figure
    staged_mb: int = 30  # size of the staged file
    parent_gb: float = 0.0  # grow this process to N GB first (fork cost of a big trainer process)


def _time(fn: Callable[[], object], runs: int) -> tuple[float, float]:
    samples = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1e3)
    samples.sort()
    return statistics.median(samples), samples[min(len(samples) - 1, int(0.95 * len(samples)))]


def _row(label: str, p50_p95: tuple[float, float]) -> None:
    print(f"  {label:<36} p50 {p50_p95[0]:7.2f} ms   p95 {p50_p95[1]:7.2f} ms")


def bench(isolation: str, args: Args, base: Path, src: Path) -> None:
    backend = LocalBackend(base_dir=base / isolation, isolation=isolation)  # type: ignore[arg-type]
    print(f"\n[{isolation}] {backend.describe()}")
    with backend.create(Resources()) as sb:
        sb.exec("true")  # warm
        _row("exec `true`", _time(lambda: sb.exec("true"), args.runs))
        _row("exec `echo hi`", _time(lambda: sb.exec("echo hi"), args.runs))
        python_runs = max(5, args.runs // 5)
        _row("exec `python -c pass`", _time(lambda: sb.exec("python -c pass"), python_runs))
        t = time.perf_counter()
        sb.stage({"big.csv": src})
        cold = 1e3 * (time.perf_counter() - t)
        print(f"  {'stage cold (first copy to cache)':<36} {cold:7.2f} ms")

    def stage_fresh() -> None:
        with backend.create(Resources()) as s:
            t0 = time.perf_counter()
            s.stage({"big.csv": src})
            times.append((time.perf_counter() - t0) * 1e3)

    times: list[float] = []
    create_close = _time(stage_fresh, args.runs)
    times.sort()
    p95 = times[int(0.95 * len(times))]
    _row(f"stage cached ({args.staged_mb} MB)", (statistics.median(times), p95))
    _row("create + stage + close", create_close)


def breakdown(args: Args) -> None:
    """What a round trip costs before dagent adds anything."""
    print("\n[breakdown] raw spawns from this process")
    env = {"PATH": "/usr/bin:/bin"}

    def spawn(*argv: str) -> Callable[[], object]:
        return lambda: subprocess.run(argv, env=env)

    _row("spawn /bin/true", _time(spawn("/bin/true"), args.runs))
    _row("spawn bash -c true", _time(spawn("bash", "-c", "true"), args.runs))
    system = [
        "--ro-bind",
        "/usr",
        "/usr",
        "--symlink",
        "usr/bin",
        "/bin",
        "--symlink",
        "usr/lib",
        "/lib",
        "--symlink",
        "usr/lib64",
        "/lib64",
        "true",
    ]
    if not shutil.which("bwrap"):
        print("  bwrap not installed")
        return
    _row("bwrap --unshare-all true", _time(spawn("bwrap", "--unshare-all", *system), args.runs))
    keep_net = ["--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    _row("bwrap, keeping host network ns", _time(spawn("bwrap", *keep_net, *system), args.runs))


def main(args: Args) -> None:
    if args.parent_gb:
        ballast = bytearray(int(args.parent_gb * 2**30))
        ballast[::4096] = b"\1" * len(range(0, len(ballast), 4096))
        globals()["_ballast"] = ballast
    with tempfile.TemporaryDirectory() as d:
        base = Path(d)
        src = base / "big.csv"
        src.write_bytes(os.urandom(args.staged_mb * 2**20))
        breakdown(args)
        for isolation in ("auto", "rlimits"):
            bench(isolation, args, base, src)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=Args.runs, help="samples per figure")
    p.add_argument("--staged-mb", type=int, default=Args.staged_mb, help="staged file size (MB)")
    p.add_argument(
        "--parent-gb", type=float, default=Args.parent_gb, help="grow this process to N GB first, as a trainer would be"
    )
    main(Args(**vars(p.parse_args())))
