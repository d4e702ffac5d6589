"""The in-sandbox runner: import pandas once, then run each reference program in its own process.

This file is copied into the sandbox and run there as a script (`python runner.py MANIFEST OUT`),
so it imports nothing from dagent. The manifest is JSON: {"timeout_s": N, "programs": [{"id", "source"},
...]}. For each program the runner forks a child that executes the source as `__main__` in
/workdir with its stdout and stderr sent to files, under an alarm of `timeout_s`; the parent waits
and records the exit status. Each program therefore runs in a separate process on the staged files,
exactly as `python program.py` would, but pays for the pandas import once. The results are written
as JSON to OUT: [{"id", "exit_code", "signal", "stdout", "stderr", "duration_s", "cpu_s",
"peak_rss_mb"}, ...] in manifest order. The peak resident set is the child's own (`wait4`), which
includes the pandas the parent imported before forking: what a fresh `python program.py` holds.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import sys
import tempfile
import time
import traceback

TAIL = 2000  # characters of stderr kept per program
OUTPUT_LOST = 120  # the child's exit code when its output could not be written (a full disk): never a program's


def _child(source: str, name: str, out_fd: int, err_fd: int, timeout_s: int) -> None:
    """Runs in the forked child; never returns."""
    code = 1
    try:
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        os.chdir("/workdir")
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.alarm(timeout_s)
        exec(compile(source, name, "exec"), {"__name__": "__main__", "__file__": name})
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # the program's own failure: report it like python would
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:  # the output is lost (ENOSPC): say so, never "exited 0 having printed nothing"
            code = OUTPUT_LOST
        finally:
            os._exit(code)


def run_one(source: str, name: str, timeout_s: int, scratch: str) -> dict:
    out_path = os.path.join(scratch, "out")
    err_path = os.path.join(scratch, "err")
    out_fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    err_fd = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    sys.stdout.flush()
    sys.stderr.flush()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        _child(source, name, out_fd, err_fd, timeout_s)
    os.close(out_fd)
    os.close(err_fd)
    _, status, usage = os.wait4(pid, 0)
    duration = time.monotonic() - started
    with open(out_path, encoding="utf-8", errors="replace") as f:
        stdout = f.read()
    with open(err_path, encoding="utf-8", errors="replace") as f:
        stderr = f.read()[-TAIL:]
    sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
    return {
        "exit_code": code,
        "signal": sig,
        "stdout": stdout,
        "stderr": stderr,
        "duration_s": duration,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_mb": usage.ru_maxrss / 1024,
    }


def _inputs() -> list[str]:
    try:
        return os.listdir("/workdir/input")
    except OSError:
        return []


def warm_up(parquet: bool) -> None:
    """Import pandas and touch what the programs use, so each child does not pay for lazy imports.

    Nothing here can change a program's output: it only loads modules into the parent. A missing
    module is left for the programs themselves to fail on.
    """
    try:
        import io

        import pandas as pd

        df = pd.DataFrame(
            {
                "k": ["a", "b", "a"],
                "x": [1.0, None, 3.0],
                "year": [2013] * 3,
                "month": [1, 2, 3],
                "day": [1, 2, 3],
                "d": ["2013-01-01", "2013-02-01", "2013-03-01"],
            }
        )
        df = pd.read_csv(io.StringIO(df.to_csv(index=False)))
        g = df.groupby("k")["x"]
        g.agg(["mean", "median", "std", "min", "max", "sum", "count"]), g.transform("mean")
        df["k"].value_counts().sort_index(kind="stable").idxmax(), df["x"].corr(df["month"])
        df.merge(df, on="k").sort_values(["k", "x"], ascending=[True, False]).dropna(subset=["x"])
        when = pd.to_datetime(df["d"])
        when.dt.month, when.dt.day_name(), when.dt.day_of_week, when.dt.hour
        pd.to_datetime(df[["year", "month", "day"]]), df.groupby(["k", "month"])["x"].mean().unstack()
        if parquet:
            buf = io.BytesIO()
            df.to_parquet(buf)
            pd.read_parquet(io.BytesIO(buf.getvalue()), columns=["k", "x"])
    except Exception:  # noqa: BLE001 - warming is an optimisation only
        pass


def main(argv: list[str]) -> int:
    manifest_path, results_path = argv[1], argv[2]
    with open(manifest_path, encoding="utf-8") as f:
        manifest = json.load(f)
    warm_up(any(name.endswith(".parquet") for name in _inputs()))
    gc.collect()
    gc.freeze()  # the children never touch the parent's objects' GC headers: fewer copied pages per fork
    timeout_s = int(manifest.get("timeout_s", 60))
    results = []
    with tempfile.TemporaryDirectory(prefix="ref-") as scratch:
        for prog in manifest["programs"]:
            r = run_one(prog["source"], f"<reference {prog['id']}>", timeout_s, scratch)
            results.append({"id": prog["id"], **r})
    with open(results_path, "w", encoding="utf-8") as f:
        json.dump(results, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
