"""Recorded episodes: evaluation records with the capture log of each (pure file formats).

A recording directory holds `records.jsonl` (one `EvalRecord` a line, what `dagent eval --out`
writes and `dagent eval compare` reads) and, for episodes whose model calls were captured,
`traces/<task_id>.s<sample>.jsonl`: every captured call as an OpenEnv `TraceEntry`
(`dagent.trajectory.export.to_capture_log`), one a line. `read_trace` gives the calls back as
`CapturedTurn`s, so a replay is analysed by the same `analyse` and `gate` as the live rollout.
The demo's Replay tab, `dagent rollout --out DIR` and the demo's own "save recording" use it.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dagent.core.outcome import EvalRecord
from dagent.eval.report import load_records
from dagent.harness.play import TRANSCRIPTS
from dagent.trajectory import CapturedTurn, Trajectory, turns_from_openenv
from dagent.trajectory.export import to_capture_log

RECORDS = "records.jsonl"
TRACES = "traces"


@dataclass(frozen=True)
class Recorded:
    """One recorded episode: its record (as written) and its capture log, when one was kept."""

    record: dict[str, Any]
    trace: Path | None

    @property
    def label(self) -> str:
        r = self.record
        return f"{r.get('task_id')} · s{r.get('sample', 0)} · {r.get('outcome')} · {r.get('agent')}" + (
            " · trace" if self.trace else ""
        )


def trace_name(task_id: str, sample: int) -> str:
    return f"{task_id}.s{sample}.jsonl"


def append_recording(out_dir: Path, record: EvalRecord, trajectory: Trajectory | None = None) -> Path:
    """Append `record` to out_dir/records.jsonl and write its capture log (when given) beside it.
    Returns the records file."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if trajectory is not None:
        traces = out_dir / TRACES
        traces.mkdir(exist_ok=True)
        with open(traces / trace_name(record.task_id, record.sample), "w") as f:
            for entry in to_capture_log(trajectory):
                f.write(json.dumps(entry) + "\n")
    with open(out_dir / RECORDS, "a") as f:
        f.write(record.model_dump_json() + "\n")
    return out_dir / RECORDS


def load_recording(path: Path) -> list[Recorded]:
    """The episodes of a recording directory (or of its records.jsonl), with their traces."""
    path = Path(path).expanduser()
    traces = (path.parent if path.is_file() else path) / TRACES
    out = []
    for record in load_records(path, include_void=True):  # a replay shows a void run too
        trace = traces / trace_name(record.task_id, record.sample)
        out.append(Recorded(record.model_dump(mode="json"), trace if trace.is_file() else None))
    return out


def load_transcripts(path: Path | str) -> dict[tuple[str, int], list[dict[str, Any]]]:
    """Each episode's transcript by (task_id, sample): an evaluation folder's `transcripts.jsonl.gz`
    (`dagent.harness.play.write_records`), or a published `NAME.transcripts.jsonl.gz` given itself or
    through its `NAME.jsonl`. Empty where none was kept."""
    path = Path(path).expanduser()
    if path.is_dir():
        path = path / TRANSCRIPTS
    elif path.name.endswith(".jsonl") and not path.name.endswith(".transcripts.jsonl"):
        path = path.with_name(path.name[: -len(".jsonl")] + ".transcripts.jsonl.gz")
    if not path.is_file():
        return {}
    with gzip.open(path, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return {(r["task_id"], int(r["sample"])): r["transcript"] for r in rows}


def read_trace(path: Path) -> list[CapturedTurn]:
    """A capture log's calls, in arrival order."""
    entries = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    session = str(((entries[0].get("metadata") or {}).get("session_id")) or "") if entries else ""
    return turns_from_openenv(entries, session_id=session)
