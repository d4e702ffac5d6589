"""Durable capture sessions: a SQLite journal (WAL mode) of every session, its counters and every
captured call, so a proxy restarted mid-rollout loses nothing.

`CaptureServer(journal=PATH)` writes here and, when it starts, reopens every session the journal
holds that was not closed: the agent's next call with the same key continues the SAME session
(its seq numbers, its trace, its budget), and the trace is whole. Without a journal the proxy
keeps sessions in memory only, as before (the fast path `benchmarks/capture_overhead.py` measures).

What is written, and when (tests/capture/test_journal.py):
- a session when it is opened (id, budget, metadata) and when it is closed (marked, kept);
- a call when it is recorded, BEFORE the agent can read its answer (the same point the in-memory
  store records it), with the engine's full prompt ids, completion ids and logprobs as packed
  arrays, its messages, tools and metadata as JSON;
- the counters (requests, model calls, budget and context stops, rejected bodies, engine errors,
  replaced sampling) after every chat request, however it was answered.
A process killed between two writes loses at most the counters of the request in flight, and a
reopened session takes the larger of the saved counters and what its recorded calls imply.

WAL mode with `synchronous=NORMAL`: a committed write survives the process dying; only a power
loss can take back the last transactions. One connection, used from the proxy's event loop (and
the thread that opens or closes sessions) behind a lock.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from array import array
from pathlib import Path
from typing import Any

from dagent.capture.store import SessionState, TurnRecord

SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
  session_id TEXT PRIMARY KEY, max_model_calls INTEGER, metadata TEXT NOT NULL,
  created REAL NOT NULL, closed INTEGER NOT NULL DEFAULT 0, counters TEXT);
CREATE TABLE IF NOT EXISTS turns (
  session_id TEXT NOT NULL, seq INTEGER NOT NULL, prompt BLOB, completion BLOB NOT NULL,
  logprobs BLOB, finish_reason TEXT, messages TEXT NOT NULL, tools TEXT, metadata TEXT NOT NULL,
  PRIMARY KEY (session_id, seq));
"""
COUNTERS = ("requests", "model_calls", "budget_stops", "context_stops", "rejected_bodies")


def _pack(values: Any, code: str) -> bytes | None:
    if values is None:
        return None
    if isinstance(values, array) and values.typecode == code:
        return values.tobytes()
    try:
        return array(code, values).tobytes()
    except (TypeError, OverflowError, ValueError):
        return None  # not ids: the live record keeps none either (store._ids), and the analysis says so


def _unpack(blob: bytes | None, code: str) -> array | None:
    if blob is None:
        return None
    out = array(code)
    out.frombytes(blob)
    return out


class Journal:
    """The SQLite file behind durable capture sessions (module docstring)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(SCHEMA)
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def opened(self, state: SessionState) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO sessions (session_id, max_model_calls, metadata, created) VALUES (?, ?, ?, ?)",
                (state.session_id, state.max_model_calls, json.dumps(state.metadata), state.created),
            )

    def closed(self, session_id: str) -> None:
        with self._lock:
            self._db.execute("UPDATE sessions SET closed = 1 WHERE session_id = ?", (session_id,))

    def recorded(self, session_id: str, rec: TurnRecord) -> None:
        """One call, as the engine answered it (its prompt still whole: called before compacting)."""
        prompt = rec.prompt[2] if rec.prompt[0] is None else None
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO turns VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    session_id,
                    rec.seq,
                    _pack(prompt, "I"),
                    _pack(rec.completion or (), "I") or b"",
                    _pack(rec.logprobs, "d"),
                    rec.finish_reason,
                    json.dumps(rec.messages),
                    None if rec.tools is None else json.dumps(rec.tools),
                    json.dumps(rec.metadata),
                ),
            )

    def counted(self, state: SessionState) -> None:
        counters = {name: getattr(state, name) for name in COUNTERS}
        counters.update(engine_errors=state.engine_errors, overridden=state.overridden)
        with self._lock:
            self._db.execute(
                "UPDATE sessions SET counters = ? WHERE session_id = ?", (json.dumps(counters), state.session_id)
            )

    def reopen(self) -> list[SessionState]:
        """Every session not closed, with its counters and its calls (compacted as live ones)."""
        with self._lock:
            sessions = self._db.execute(
                "SELECT session_id, max_model_calls, metadata, created, counters "
                "FROM sessions WHERE closed = 0 ORDER BY created"
            ).fetchall()
            turns = self._db.execute(
                "SELECT t.* FROM turns t JOIN sessions s USING (session_id) "
                "WHERE s.closed = 0 ORDER BY t.session_id, t.seq"
            ).fetchall()
        by_session: dict[str, list[tuple]] = {}
        for row in turns:
            by_session.setdefault(row[0], []).append(row)
        out = []
        for sid, budget, metadata, created, counters in sessions:
            state = SessionState(sid, budget, json.loads(metadata))
            state.created = created
            saved = json.loads(counters) if counters else {}
            for name in COUNTERS:
                setattr(state, name, int(saved.get(name, 0)))
            state.engine_errors = list(saved.get("engine_errors", []))
            state.overridden = dict(saved.get("overridden", {}))
            for _, seq, prompt, completion, logprobs, finish, messages, tools, meta in by_session.get(sid, []):
                rec = TurnRecord(
                    seq,
                    (None, 0, _unpack(prompt, "I")),
                    _unpack(completion, "I"),
                    _unpack(logprobs, "d"),
                    finish,
                    json.loads(messages),
                    None if tools is None else json.loads(tools),
                    json.loads(meta),
                )
                state.records.append(rec)
                state.compact(rec)
            if state.records:  # a call recorded after the last counters were saved still counts
                last = max(r.seq for r in state.records)
                state.requests = max(state.requests, last + 1)
                state.model_calls = max(state.model_calls, len(state.records))
            out.append(state)
        return out
