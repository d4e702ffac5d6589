"""The capture proxy: the OpenAI-compatible endpoint a black-box agent calls instead of the engine.

Each rollout gets a session whose id IS the API key the agent is given, so one proxy serves every
rollout of a group and no agent needs to know it is observed (OpenEnv's scheme). Per call it keeps
what the trainer needs, all of it the ENGINE's: `prompt_token_ids`, completion ids, per-token
logprobs; nothing is tokenised here (F01). `turns()` hands them over as `CapturedTurn`s;
`rollout_document` and `trace_entries` export them through `dagent.trajectory.export` in OpenEnv's shapes.

    with CaptureServer("http://127.0.0.1:8000", sampling=DEFAULT_SAMPLING) as capture:
        session = capture.open_session(max_model_calls=25)
        ... run the agent with OPENAI_BASE_URL=session.base_url, OPENAI_API_KEY=session.api_key ...
        trajectory = capture.trajectory(session.session_id)
        capture.close_session(session.session_id)

Routes: `POST /v1/chat/completions` (streaming or not), `GET /v1/models`, `GET /health`, and
OpenEnv's session routes behind the admin token: `POST /sessions`, `GET /sessions`,
`GET /sessions/{id}`, `GET /sessions/{id}/rollout`, `GET /sessions/{id}/trace_entries`,
`DELETE /sessions/{id}` (same paths, same bodies; 401 with OpenEnv's message without the token).

INVARIANTS (tests/capture/test_server.py): an unknown API key is refused with 401 and an OpenAI-style
body; sampling is pinned from the one `Sampling` on every forwarded call and the engine is asked
for `return_token_ids` and `logprobs` (F05); past a session's budget the proxy answers a terminal
completion itself, the engine is never called and the stop is counted (F10); an engine that is
down or answers garbage gives the agent a named error and is recorded, never an empty success
(F07); a recorded call is exactly an answer the agent received; streaming and non-streaming
capture the same ids for the same seed. The data plane is `dagent.capture.proxy` (over
`dagent.capture.upstream`), the formats `dagent.capture.wire`, the store `dagent.capture.store`.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from dagent.capture import wire
from dagent.capture.journal import Journal
from dagent.capture.proxy import Forwarder
from dagent.capture.store import SessionState, session_findings
from dagent.core.sampling import DEFAULT_SAMPLING, Sampling
from dagent.errors import CaptureError, ConfigError, DagentError, MissingDependencyError, RequestRejected
from dagent.serving import ThreadedServer
from dagent.trajectory import DEFAULT_FORK_THRESHOLD, FORK, CapturedTurn, Finding, Trajectory, analyse
from dagent.trajectory.export import to_rollout_document, to_trace_entries

CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")
MODELS_PATHS = ("/v1/models", "/models")
SESSION_FIELDS = {"session_id", "max_model_calls", "metadata"}
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


@dataclass(frozen=True)
class Session:
    """What an agent is handed: where to call, and the key to call with (the session id)."""

    session_id: str
    base_url: str
    api_key: str


@dataclass(frozen=True)
class CaptureStats:
    """A session's counters: what reached the engine, what the proxy answered itself."""

    session_id: str
    requests: int  # chat calls made with this key, answered any way
    model_calls: int  # forwarded to the engine (what the budget counts)
    turns: int  # recorded: engine answers the agent received
    budget_stops: int  # answered by the proxy past the budget; the engine never called (F10)
    context_stops: int  # the engine refused a context overflow; the proxy answered a terminal stop
    max_model_calls: int | None  # None: unlimited
    engine_errors: int  # calls that failed at the engine; the agent got a named error (F07)
    idle_s: float  # since the last call


class CaptureServer:
    """The proxy: an ASGI app (mount it anywhere) that `start()` serves from a background thread;
    also a context manager. The session methods are safe to call from any thread."""

    def __init__(
        self,
        upstream_url: str,
        *,
        sampling: Sampling = DEFAULT_SAMPLING,
        admin_token: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        model: str | None = None,
        max_output_tokens: int | None = 8192,
        max_connections: int = 1024,
        timeout_s: float = 900.0,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        journal: str | Path | None = None,
    ) -> None:
        """upstream_url: the engine's OpenAI root (`http://h:p` gets `/v1`). sampling: pinned on
        every call (the trainer's, F05). admin_token: what the session routes require (None: a random
        one, read it as `.admin_token`). port 0: a free one. model: the served model name sent in
        place of the agent's (None keeps the agent's). max_output_tokens: a larger max_tokens from
        the agent is lowered to it (OpenEnv's 8192; None keeps it). max_connections: the engine
        connection pool (at least the calls in flight). timeout_s: the longest the engine may stay
        silent. max_body_bytes: a chat request over it is answered 413 and never forwarded (default
        16 MiB; an agent's largest real request, a full 128k-token context, is under 1 MB). journal: a
        SQLite file that makes sessions durable (`dagent.capture.journal`): the sessions it holds
        that were not closed are reopened here, so an agent's next call after a restart continues
        its session (None: in memory only)."""
        base = upstream_url.rstrip("/")
        self.upstream = base if urlsplit(base).path else base + "/v1"
        self.sampling, self.model = sampling, model
        self.admin_token = admin_token or secrets.token_urlsafe(24)
        self.host, self.port = host, port
        self.max_body_bytes = max_body_bytes
        self.instance = uuid.uuid4().hex
        self.forwarder = Forwarder(
            self.upstream,
            sampling,
            model=model,
            max_output_tokens=max_output_tokens,
            max_connections=max_connections,
            timeout_s=timeout_s,
        )
        self._sessions: dict[str, SessionState] = {}
        self._lock = threading.Lock()
        self.journal: Journal | None = None
        if journal is not None:
            self.journal = Journal(journal)
            for state in self.journal.reopen():
                state.journal = self.journal
                self._sessions[state.session_id] = state
        self._server: ThreadedServer | None = None

    # -- lifecycle ----------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        """The OpenAI base URL agents are given (`http://host:port/v1`)."""
        if not self.port:
            raise CaptureError("the capture server has no port yet: call start(), or pass port=")
        return f"http://{self.host}:{self.port}/v1"

    def start(self, timeout_s: float = 30.0) -> CaptureServer:
        """Serve on host:port from a background thread; return once it listens."""
        try:
            import uvicorn  # noqa: F401  (a clear error before any socket is bound)
        except ImportError as e:
            raise MissingDependencyError("uvicorn", purpose="serving the capture proxy") from e
        if self._server is not None:
            raise CaptureError("the capture server is already started: stop() it first")
        # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say TCP, and without it
        # Nagle and delayed ACKs add tens of milliseconds to every answer.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError as e:
            sock.close()
            raise CaptureError(
                f"cannot bind the capture proxy to {self.host}:{self.port} ({e}): "
                "pass another port, or port=0 for a free one"
            ) from e
        self.port = sock.getsockname()[1]
        self._server = ThreadedServer(
            self, host=self.host, sock=sock, access_log=False, lifespan="on", timeout_keep_alive=75, backlog=4096
        )
        try:
            self._server.start(timeout_s)
        except DagentError as e:
            self._server = None
            raise CaptureError(f"the capture proxy did not start on {self.host}:{self.port}") from e
        return self

    def stop(self) -> None:
        """Stop serving. Sessions stay readable."""
        if self._server is not None:
            self._server.stop(timeout_s=10)
        self._server = None

    def __enter__(self) -> CaptureServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- sessions -----------------------------------------------------------------------------
    def open_session(
        self,
        max_model_calls: int | None = None,
        *,
        metadata: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        """A new rollout: give the agent `base_url` and `api_key`. max_model_calls: calls forwarded
        to the engine before the proxy answers a terminal stop itself (None: unlimited)."""
        if max_model_calls is not None and (type(max_model_calls) is not int or max_model_calls < 1):
            raise ConfigError(f"max_model_calls must be a positive int, or None for unlimited; got {max_model_calls!r}")
        sid = session_id or f"s{secrets.token_hex(12)}"
        if not isinstance(sid, str) or not SESSION_ID.fullmatch(sid):
            raise ConfigError(f"session_id must match {SESSION_ID.pattern} (OpenEnv's rule); got {sid!r}")
        with self._lock:
            if sid in self._sessions:
                raise CaptureError(f"session {sid} is already open: pass another session_id")
            state = self._sessions[sid] = SessionState(sid, max_model_calls, dict(metadata or {}))
        if self.journal is not None:
            state.journal = self.journal
            self.journal.opened(state)
        return Session(sid, self.base_url if self.port else "", sid)

    def _state(self, session_id: str) -> SessionState:
        state = self._sessions.get(session_id)
        if state is None:
            raise CaptureError(
                f"no open capture session {session_id!r}: open_session() first (a "
                "closed session's turns are what close_session returned)"
            )
        return state

    def session_ids(self) -> list[str]:
        return list(self._sessions)

    def turns(self, session_id: str) -> list[CapturedTurn]:
        """Every engine answer the session's agent received, in arrival order."""
        return self._state(session_id).turns()

    def stats(self, session_id: str) -> CaptureStats:
        s = self._state(session_id)
        return CaptureStats(
            s.session_id,
            s.requests,
            s.model_calls,
            len(s.records),
            s.budget_stops,
            s.context_stops,
            s.max_model_calls,
            len(s.engine_errors),
            round(time.time() - s.last_activity, 3),
        )

    def trajectory(self, session_id: str, fork_threshold_tokens: int = DEFAULT_FORK_THRESHOLD) -> Trajectory:
        """`dagent.trajectory.analyse` of the session; pass the trainer's fork threshold."""
        return analyse(self.turns(session_id), fork_threshold_tokens)

    def findings(self, session_id: str, fork_threshold_tokens: int = DEFAULT_FORK_THRESHOLD) -> list[Finding]:
        """The proxy's own findings (budget stops, engine errors, replaced sampling), then the
        trajectory analysis'."""
        state = self._state(session_id)
        return [*session_findings(state, self.sampling), *analyse(state.turns(), fork_threshold_tokens).findings]

    def rollout_document(
        self, session_id: str, *, include_messages: bool = False, fork_threshold_tokens: int = DEFAULT_FORK_THRESHOLD
    ) -> dict[str, Any]:
        """OpenEnv's rollout document (`GET /sessions/{id}/rollout`), built by `dagent.trajectory.export`, with
        the proxy's counts and findings; a fatal proxy finding makes it untrainable."""
        state = self._state(session_id)
        doc = to_rollout_document(analyse(state.turns(), fork_threshold_tokens), include_messages=include_messages)
        proxy = session_findings(state, self.sampling)
        doc["session_id"] = session_id
        doc["metadata"] = {**state.metadata, **doc["metadata"], "capture": asdict(self.stats(session_id))}
        doc["budget_stop_count"] = state.budget_stops + state.context_stops  # OpenEnv counts both
        doc["validation"] = [str(f) for f in proxy] + doc["validation"]
        if any(f.level == "fatal" for f in proxy):
            doc["trainable"] = False
        return doc

    def trace_entries(
        self, session_id: str, fork_threshold_tokens: int = DEFAULT_FORK_THRESHOLD
    ) -> list[dict[str, Any]]:
        """OpenEnv `TraceEntry` dicts of the agent chain (what TRL's loop-owning worker reads)."""
        return to_trace_entries(self.trajectory(session_id, fork_threshold_tokens))

    def close_session(self, session_id: str) -> list[CapturedTurn]:
        """End a rollout: its key is refused from now on. Returns its final turns."""
        with self._lock:
            state = self._sessions.pop(session_id, None)
        if state is None:
            raise CaptureError(f"no open capture session {session_id!r}")
        if self.journal is not None:
            self.journal.closed(session_id)
        return state.turns()

    # -- ASGI ---------------------------------------------------------------------------------
    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    self.forwarder.close()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if kind != "http":
            return
        path, method = scope["path"], scope["method"]
        root = scope.get("root_path") or ""
        if root and path.startswith(root):  # mounted under a prefix (the black-box Space's /capture)
            path = path[len(root) :] or "/"
            scope = {**scope, "path": path}
        if method == "POST" and path in CHAT_PATHS:
            key = wire.api_key(scope["headers"])
            state = self._sessions.get(key) if key else None
            if state is None:
                await wire.respond(
                    send,
                    401,
                    wire.error_body(
                        "unknown API key: give the agent a live capture session id as its API key "
                        "(CaptureServer.open_session or POST /sessions)",
                        "invalid_request_error",
                        401,
                        "invalid_api_key",
                    ),
                )
                return
            try:
                raw = await wire.read_body(
                    receive, self.max_body_bytes, scope["headers"], "CaptureServer(max_body_bytes=...)"
                )
            except wire.WireError as e:  # 413: nothing forwarded, nothing recorded
                state.rejected_bodies += 1
                if self.journal is not None:
                    self.journal.counted(state)
                await wire.respond(send, e.status, wire.error_body(str(e), e.err_type, e.status))
                return
            try:
                await self.forwarder.chat(state, scope["headers"], raw, send)
            finally:
                if self.journal is not None:
                    self.journal.counted(state)
        elif method == "GET" and path in MODELS_PATHS:
            await self.forwarder.models(send)
        elif path == "/health":
            await wire.respond(send, 200, wire.dumps(self._health()))
        elif path == "/sessions" or path.startswith("/sessions/"):
            await self._admin(scope, receive, send)
        else:
            await wire.respond(
                send,
                404,
                wire.error_body(
                    f"{method} {path} is not served: the capture proxy speaks OpenAI chat completions "
                    f"({CHAT_PATHS[0]}, {MODELS_PATHS[0]}) and the /sessions admin routes",
                    "not_found_error",
                    404,
                ),
            )

    def _health(self) -> dict[str, Any]:
        return {
            "status": "ok",
            "instance": self.instance,
            "upstream": self.upstream,
            "engine": "unknown",
            "model": self.model,
            "sessions": len(self._sessions),
            "require_registered": True,
            "capture_level": "tokens",
            "rollout_type": "train",
            "sampling": self.sampling.as_request(),
        }

    # -- OpenEnv's session routes -------------------------------------------------------------
    async def _admin(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        offered = wire.api_key(scope["headers"]) or ""
        raw = await wire.read_body(receive)
        if not secrets.compare_digest(offered.encode(), self.admin_token.encode()):
            await wire.respond(
                send, 401, wire.error_body("this route requires the capture admin key", "invalid_request_error", 401)
            )
            return
        method, parts = scope["method"], scope["path"].strip("/").split("/")
        query = parse_qs(scope.get("query_string", b"").decode())
        messages = query.get("include_messages", ["false"])[-1].lower() in ("1", "true", "yes")
        sid = parts[1] if len(parts) > 1 else ""
        try:
            if parts == ["sessions"] and method == "POST":
                status, body = 200, self._create(raw)
            elif parts == ["sessions"] and method == "GET":
                status, body = 200, {"sessions": await asyncio.to_thread(self._summaries)}
            elif len(parts) == 2 and method == "GET":
                status, body = 200, await asyncio.to_thread(self._status, sid)
            elif len(parts) == 2 and method == "DELETE":
                with self._lock:
                    status, body = 200, {"deleted": self._sessions.pop(sid, None) is not None}
                if self.journal is not None and body["deleted"]:
                    self.journal.closed(sid)
            elif parts[2:] == ["rollout"] and method == "GET":
                status, body = 200, await asyncio.to_thread(self.rollout_document, sid, include_messages=messages)
            elif parts[2:] == ["trace_entries"] and method == "GET":
                trajectory = await asyncio.to_thread(self.trajectory, sid)
                if trajectory.fatal:  # OpenEnv's contract: refuse, never hand back empty token rows
                    status, body = 409, {"error": "; ".join(map(str, trajectory.fatal)), "session_id": sid}
                else:
                    status, body = 200, {"session_id": sid, "entries": to_trace_entries(trajectory)}
            else:
                status, body = (
                    404,
                    {"error": {"message": f"no admin route {method} {scope['path']}", "type": "not_found_error"}},
                )
        except CaptureError:
            status, body = 404, {"error": "unknown session"}
        except (ConfigError, ValueError) as e:
            status, body = 400, {"error": {"message": str(e), "type": "invalid_request_error"}}
        await wire.respond(send, status, wire.dumps(body))

    def _create(self, raw: bytes) -> dict[str, Any]:
        payload = wire.loads(raw) if raw.strip() else {}
        if not isinstance(payload, dict):
            raise RequestRejected("the body must be a JSON object")
        unknown = set(payload) - SESSION_FIELDS
        if unknown:
            raise RequestRejected(
                f"unsupported session fields {sorted(unknown)}: sampling is pinned by the "
                "server from dagent.core.sampling and the engine is the server's; send only "
                f"{sorted(SESSION_FIELDS)}"
            )
        budget, metadata = payload.get("max_model_calls", 0), payload.get("metadata") or {}
        if type(budget) is not int or budget < 0:
            raise RequestRejected("max_model_calls must be a non-negative integer (0: unlimited)")
        if not isinstance(metadata, dict):
            raise RequestRejected("metadata must be a JSON object")
        try:
            session = self.open_session(budget or None, metadata=metadata, session_id=payload.get("session_id"))
        except CaptureError as e:
            raise RequestRejected(str(e)) from e
        return {
            "session_id": session.session_id,
            "capture_level": "tokens",
            "rollout_type": "train",
            "max_model_calls": budget,
            "llm_url": self.upstream,
            "model": self.model,
            "base_url": session.base_url,
            "api_key": session.api_key,
        }

    def _summaries(self) -> list[dict[str, Any]]:
        out = []
        for sid, state in list(self._sessions.items()):
            try:
                status = self._status(sid)
            except CaptureError:
                continue  # closed meanwhile
            out.append(
                {
                    "session_id": sid,
                    "turns": status["n_turns"],
                    "roots": status["n_roots"],
                    "idle_s": status["idle_s"],
                    "upstream_errors": status["upstream_errors"],
                    **state.metadata,
                }
            )
        return out

    def _status(self, session_id: str) -> dict[str, Any]:
        stats, trajectory = self.stats(session_id), self.trajectory(session_id)
        parents = {link.parent_id for link in trajectory.links if link is not None and link.kind != FORK}
        return {
            "session_id": session_id,
            "idle_s": round(stats.idle_s, 1),
            "upstream_errors": stats.engine_errors,
            "n_turns": len(trajectory.turns),
            "n_roots": len(trajectory.roots),
            "n_leaves": len(trajectory.turns) - len(parents),
            "n_forks": trajectory.stats.fork,
            "n_discarded": trajectory.stats.discarded_turns,
            "model_calls": stats.model_calls,
            "budget_stop_count": stats.budget_stops + stats.context_stops,
            "max_model_calls": stats.max_model_calls or 0,
        }
