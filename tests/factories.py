"""Small builders used across tests: synthetic tasks, a small suite with a real table on disk, a
live uvicorn server (not fakes of adapters)."""

from __future__ import annotations

from pathlib import Path

from dagent.core.task import TIER_OF_LEVEL, TableSource, Task
from dagent.serving import free_port

SOURCE = TableSource(table_id="demo/t", path="demo/t.csv", package="demo==0", origin="test", licence="CC0")


def make_task(
    i: int = 0, *, level: int = 1, gold: str = "42", answer_type: str = "number", instruction: str | None = None, **kw
) -> Task:
    fields = dict(
        task_id=f"demo.t{i}",
        instruction=instruction or f"Question {i}? Write only the value to /workdir/answer.txt.",
        data_files=("demo/t.csv",),
        answer_type=answer_type,
        difficulty_level=level,
        difficulty_tier=TIER_OF_LEVEL[level],
        cpus=1,
        memory_mb=1024,
        sources=(SOURCE,),
        gold=gold,
        atol=0.0,
        rtol=0.0,
        solution="print(42)",
        template_id="demo",
    )
    fields.update(kw)
    return Task(**fields)


TABLE = "a,b\n1,2\n3,4\n5,6\n"
SHELL_EXAMPLE = (
    'Write only that value to /workdir/answer.txt (e.g. `echo -n "<value>" > /workdir/answer.txt`), then stop.'
)


def demo_tasks(offset: int = 0) -> list:
    return [
        make_task(
            offset + 0,
            level=1,
            gold="3",
            instruction=f"[{offset}] How many data rows does /workdir/input/t.csv have? "
            "Write only the value to /workdir/answer.txt.",
        ),
        make_task(
            offset + 1,
            level=2,
            gold="12",
            instruction=f"[{offset}] What is the sum of column b in /workdir/input/t.csv? {SHELL_EXAMPLE}",
        ),
        make_task(
            offset + 2,
            level=3,
            gold="3",
            instruction=f"[{offset}] What is the mean of column a in /workdir/input/t.csv? Submit just the number.",
        ),
        make_task(
            offset + 3,
            level=1,
            gold="yes",
            answer_type="bool",
            instruction=f"[{offset}] Is the largest b equal to 6? Answer yes or no. "
            "Write only the value to /workdir/answer.txt.",
        ),
    ]


def write_suite(root: Path) -> Path:
    """The Hub layout (`data/<split>-*.parquet`, `tables/`) that `dagent.suites.sources.load_tasks` reads."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (root / "data").mkdir(parents=True)
    (root / "tables" / "demo").mkdir(parents=True)
    (root / "tables" / "demo" / "t.csv").write_text(TABLE)
    for k, split in enumerate(("train", "test", "eval")):
        tasks = demo_tasks(100 * k)[: 4 if split == "train" else 2]
        pq.write_table(
            pa.Table.from_pylist([t.to_row() for t in tasks]), root / "data" / f"{split}-00000-of-00001.parquet"
        )
    return root


SOLUTIONS = {
    "3": "import pandas as pd\nprint(len(pd.read_csv('/workdir/input/t.csv')))",
    "12": "import pandas as pd\nprint(pd.read_csv('/workdir/input/t.csv')['b'].sum())",
}


def write_solvable_suite(root: Path) -> Path:
    """`write_suite`, with real reference programs for the row-count and sum tasks (the others keep
    the stand-in `print(42)`): for checks that run the reference program through the tools."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    write_suite(root)
    for k, split in enumerate(("train", "test", "eval")):
        rows = []
        for task in demo_tasks(100 * k)[: 4 if split == "train" else 2]:
            row = task.to_row()
            row["solution"] = SOLUTIONS.get(task.gold, row["solution"])
            rows.append(row)
        pq.write_table(pa.Table.from_pylist(rows), root / "data" / f"{split}-00000-of-00001.parquet")
    return root


class LiveServer:
    """A real uvicorn server on 127.0.0.1 in a thread (real HTTP, real sockets), started at once."""

    def __init__(self, app, **settings) -> None:
        from dagent.serving import ThreadedServer

        self._server = ThreadedServer(app, port=free_port(), **settings).start(timeout_s=30)
        self.port, self.url = self._server.port, self._server.url

    def stop(self) -> None:
        self._server.stop()


def record_forward_threads(engine) -> list[str]:
    """Wrap a LocalEngine's batched forward pass to record the name of each thread that runs it."""
    import threading

    threads: list[str] = []
    forward = engine.backend.forward

    def recording(rows):
        threads.append(threading.current_thread().name)
        return forward(rows)

    engine.backend.forward = recording
    return threads


def wait_serving(proc, url: str, *, log=None, timeout_s: float = 90.0) -> None:
    """Until `url` answers 200; fails with the tail of `log` (a path) if `proc` exits, or after
    `timeout_s`."""
    import time

    import httpx

    deadline = time.monotonic() + timeout_s
    while True:
        assert proc.poll() is None, Path(log).read_text()[-3000:] if log else f"exited with {proc.returncode}"
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"{url} did not answer 200 within {timeout_s:.0f} s"
        time.sleep(0.3)
