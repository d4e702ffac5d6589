"""`/mcp` of both servers: MCP's Streamable HTTP transport, beside the two sessionless dialects.

One path, three kinds of caller, told apart by the request alone:

- **An MCP client** (the `mcp` SDK's `ClientSession`, an IDE, opencode's remote MCP server, an agent
  framework's adapter): `initialize` without a session, then `Mcp-Session-Id` on every request, `GET`
  for the server's stream, `DELETE` to end. Served by FastMCP's streamable-HTTP app (the `mcp` SDK's
  session manager: version negotiation, 202 for notifications, JSON or SSE answers), whose lifespan
  runs inside the server's. `on_session_end` hears each DELETE that ended a session.
- **OpenEnv's production mode** (`MCPToolClient`): `openenv/session/*`, and `tools/*` whose params carry
  `session_id`: openenv's own `POST /mcp` handler, which keeps the session's environment.
- **A stateless trainer** (dagent's client, `WhiteBoxHTTP`): `tools/list`, `tools/call` with `episode_id`
  in the arguments: `fast`, when given, answers without any MCP session per request (what
  benchmarks/env_load.py measures); else openenv's handler.

Anything else gets a JSON-RPC error naming what to send instead (never a 500): a body that is not one
JSON-RPC object (-32700 / -32600), a method other than those without a session (-32601), all with
HTTP 200 as the sessionless dialect always answered (`openenv validate` posts `{}` and requires a
200 JSON-RPC answer); an unknown or ended session gets -32600 with HTTP 404, as MCP asks.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

SESSION_HEADER = "mcp-session-id"
PATH = "/mcp"
SESSIONLESS = ("tools/list", "tools/call")
FastHandler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


def rpc_error(request_id: Any, code: int, message: str, status: int = 200) -> JSONResponse:
    return JSONResponse(
        {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}, status_code=status
    )


class McpRoute:
    """ASGI middleware owning HTTP `/mcp` (the WebSocket `/mcp` stays openenv's)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        mcp_app: ASGIApp,
        fast: FastHandler | None = None,
        on_session_end: Callable[[str], Any] | None = None,
    ) -> None:
        self.app, self.mcp_app, self.fast, self.on_session_end = app, mcp_app, fast, on_session_end

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].rstrip("/") != PATH:
            return await self.app(scope, receive, send)
        session = Headers(scope=scope).get(SESSION_HEADER)
        if scope["method"] == "DELETE":
            return await self._delete(scope, receive, send, session)
        if session is not None:
            return await self.mcp_app(scope, receive, _named_404(send, session))
        if scope["method"] != "POST":  # GET without a session: the SDK answers (400 / 405)
            return await self.mcp_app(scope, receive, send)
        body = await _read(receive)
        replay = _replay(body, receive)
        try:
            msg = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            return await rpc_error(
                None,
                -32700,
                "parse error: the body is not JSON; send one JSON-RPC 2.0 "
                'object, e.g. {"jsonrpc": "2.0", "id": 1, "method": "initialize", '
                "...}",
            )(scope, receive, send)
        if not isinstance(msg, dict) or not isinstance(msg.get("method"), str):
            return await rpc_error(
                msg.get("id") if isinstance(msg, dict) else None,
                -32600,
                "invalid request: send one JSON-RPC 2.0 object with a `method` (batches "
                "are not part of MCP since 2025-06-18)",
            )(scope, receive, send)
        method, params = msg["method"], msg.get("params")
        if method == "initialize":
            return await self.mcp_app(scope, replay, send)
        if method.startswith("openenv/") or (
            method in SESSIONLESS and isinstance(params, dict) and "session_id" in params
        ):
            return await self.app(scope, replay, send)  # openenv's handler: its sessions
        if method in SESSIONLESS:
            if self.fast is None:
                return await self.app(scope, replay, send)
            return await JSONResponse(await self.fast(msg))(scope, receive, send)
        return await rpc_error(
            msg.get("id"),
            -32601,
            (
                f"{method!r} needs an MCP session: send `initialize` first and then the `Mcp-Session-Id` it "
                "returns with every request; without a session this endpoint answers only tools/list, "
                "tools/call (with episode_id) and openenv/session/create"
            ),
        )(scope, receive, send)

    async def _delete(self, scope: Scope, receive: Receive, send: Send, session: str | None) -> None:
        status: list[int] = []

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
            await send(message)

        await self.mcp_app(scope, receive, _named_404(watch, session or ""))
        if session and status and status[0] < 300 and self.on_session_end is not None:
            self.on_session_end(session)


def _named_404(send: Send, session: str) -> Send:
    """The SDK answers an unknown session 404 "Session not found"; say what to do about it."""
    state: dict[str, Any] = {}

    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start" and message["status"] == 404:
            state["replace"] = True
            body = json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": None,
                    "error": {
                        "code": -32600,
                        "message": (
                            f"unknown or ended MCP session {session[:64]!r}: send `initialize` again without "
                            "Mcp-Session-Id to open a new session"
                        ),
                    },
                }
            ).encode()
            state["body"] = body
            headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"content-length"]
            await send({**message, "headers": [*headers, (b"content-length", str(len(body)).encode())]})
            return
        if state.get("replace") and message["type"] == "http.response.body":
            if not message.get("more_body"):
                await send({"type": "http.response.body", "body": state["body"]})
            return
        await send(message)

    return wrapped


async def _read(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # then the client's disconnect, as the app would have seen it

    return replay


class _EndedStreamNoise(logging.Filter):
    """The `mcp` SDK logs a traceback ("Error in standalone SSE writer", anyio.ClosedResourceError) for
    every session whose client ends it while its GET stream is open, which is how its own client
    closes: a normal end, not an error. Other errors of that logger pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not (
            record.getMessage() == "Error in standalone SSE writer"
            and exc is not None
            and type(exc).__name__ in ("ClosedResourceError", "BrokenResourceError")
        )


def install(
    app: Any, server: Any, *, fast: FastHandler | None = None, on_session_end: Callable[[str], Any] | None = None
) -> None:
    """Serve `server` (a FastMCP) as MCP Streamable HTTP on `app`'s `/mcp`, its lifespan in the app's."""
    mcp_app = server.http_app(path=PATH)
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(a: Any) -> Any:
        async with mcp_app.lifespan(mcp_app), inner(a) as state:
            yield state

    app.router.lifespan_context = lifespan
    noise = logging.getLogger("mcp.server.streamable_http")
    if not any(isinstance(f, _EndedStreamNoise) for f in noise.filters):
        noise.addFilter(_EndedStreamNoise())
    app.add_middleware(McpRoute, mcp_app=mcp_app, fast=fast, on_session_end=on_session_end)
