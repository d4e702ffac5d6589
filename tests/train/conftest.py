"""Fixtures the training tests share."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def rowcount_suite(tmp_path_factory):
    """The synthetic suite with a train split of the two tasks whose answer is 3 (row count, mean of a)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dagent.suites.sources import load_tasks
    from tests.factories import demo_tasks, write_suite

    root = write_suite(tmp_path_factory.mktemp("rowcount-suite"))
    tasks = [t for t in demo_tasks(0) if t.gold == "3"]
    pq.write_table(pa.Table.from_pylist([t.to_row() for t in tasks]), root / "data" / "train-00000-of-00001.parquet")
    return load_tasks(str(root))
