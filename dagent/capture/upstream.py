"""The capture proxy's connection to the engine: a lean HTTP/1.1 keep-alive pool on asyncio.

Not httpx: an `httpx.AsyncClient` POST costs more CPU than the proxy's whole per-call budget
(benchmarks/capture_overhead.py compares them).
It reads what OpenAI-compatible engines (vLLM, SGLang, the local engine) answer: a status line,
headers, then a Content-Length, chunked or read-to-close body, over http or https.

INVARIANTS: a connection is reused only after a complete answer that did not say `Connection:
close`; a request on a pooled connection that fails before any answer byte is sent once more on a
fresh one (the engine closed an idle connection); every failure is an `EngineError` naming the
engine; a stream yields every body byte, batching what has already arrived (fewer, larger pieces
when the proxy is busy).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

from dagent.errors import EngineError

IDLE_S = 4.0  # keep-alive reuse window (uvicorn closes idle connections after 5 s by default)


class _Conn(asyncio.Protocol):
    """One connection; the response parser runs over `buf` as bytes arrive. While a request is
    out, one timer (re-armed only when it fires) fails the wait after `timeout` silent seconds:
    a timer per every wait is a measurable share of the proxy's CPU on streams."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.closed = self.timed_out = False
        self.waiter: asyncio.Future | None = None
        self.transport: Any = None
        self.idle_since = self.last_byte = 0.0
        self.timeout = 0.0
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        self.last_byte = time.monotonic()
        self._wake()

    def eof_received(self) -> bool:
        self.closed = True
        self._wake()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._wake()

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def arm(self, timeout: float) -> None:
        self.timeout, self.timed_out, self.last_byte = timeout, False, time.monotonic()
        self.timer = asyncio.get_running_loop().call_later(timeout, self._check)

    def disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def drop(self) -> None:
        self.disarm()
        self.transport.close()

    def _check(self) -> None:
        silent = time.monotonic() - self.last_byte
        if silent < self.timeout:
            self.timer = asyncio.get_running_loop().call_later(self.timeout - silent, self._check)
            return
        self.timer, self.timed_out = None, True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(TimeoutError())

    async def more(self) -> None:
        """Wait for more bytes: ConnectionResetError once the engine has closed the connection,
        TimeoutError once it has been silent for the armed timeout."""
        if self.closed:
            raise ConnectionResetError("the engine closed the connection")
        if self.timed_out:
            raise TimeoutError()
        self.waiter = asyncio.get_running_loop().create_future()
        try:
            await self.waiter
        finally:
            self.waiter = None

    def take(self, n: int) -> bytes:
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out


class Response:
    """Status, lower-cased headers, and the body: `read()` whole or `stream()` piece by piece.
    Read it to the end or `aclose()` it: either gives the connection back."""

    def __init__(self, pool: EngineClient, conn: _Conn, status: int, headers: dict[bytes, bytes]) -> None:
        self.pool, self.conn, self.status, self.headers = pool, conn, status, headers
        self.done = self.complete = False

    async def stream(self) -> AsyncIterator[bytes]:
        conn, headers, timeout = self.conn, self.headers, self.pool.timeout
        try:
            if b"chunked" in headers.get(b"transfer-encoding", b"").lower():
                while True:
                    piece, final = self._chunks()
                    if piece:
                        yield piece
                    if final:
                        break
                    if not piece:
                        await conn.more()
            elif b"content-length" in headers:
                left = int(headers[b"content-length"])
                while left:
                    if not conn.buf:
                        await conn.more()
                    piece = conn.take(left)
                    left -= len(piece)
                    yield piece
            else:  # no framing: the body runs to the end of the connection
                headers[b"connection"] = b"close"
                while True:
                    if conn.buf:
                        yield conn.take(len(conn.buf))
                    if conn.closed:
                        break
                    await conn.more()
            self.complete = True
        except ConnectionError as e:
            raise EngineError(f"the engine at {self.pool.url} closed the connection mid-answer") from e
        except ValueError as e:  # a chunk size or content-length that is not a number
            raise EngineError(f"the engine at {self.pool.url} sent a malformed HTTP body: {e}") from e
        except TimeoutError as e:
            raise EngineError(f"the engine at {self.pool.url} sent nothing for {timeout:.0f} s") from e
        finally:
            await self.aclose()

    def _chunks(self) -> tuple[bytes, bool]:
        """Every complete chunk now in the buffer, joined, and whether the last chunk was seen."""
        buf = self.conn.buf
        parts: list[bytes] = []
        while (line_end := buf.find(b"\r\n")) >= 0:
            size = int(bytes(buf[:line_end]).split(b";")[0], 16)
            if size == 0:  # the last chunk, then trailers up to an empty line
                end = buf.find(b"\r\n\r\n", line_end)
                if end < 0:
                    break
                del buf[: end + 4]
                return b"".join(parts), True
            start = line_end + 2
            if len(buf) < start + size + 2:
                break
            parts.append(bytes(buf[start : start + size]))
            del buf[: start + size + 2]
        return b"".join(parts), False

    async def read(self) -> bytes:
        return b"".join([piece async for piece in self.stream()])

    async def aclose(self) -> None:
        """Give the connection back (body complete) or drop it (abandoned mid-body)."""
        if not self.done:
            self.done = True
            self.pool.release(
                self.conn,
                reusable=self.complete
                and not self.conn.buf
                and self.headers.get(b"connection", b"").lower() != b"close",
            )


class EngineClient:
    """A keep-alive connection pool to one engine (`base_url` like `http://h:p/v1`). Create it on
    the event loop that uses it."""

    def __init__(
        self, base_url: str, *, max_connections: int = 1024, connect_timeout_s: float = 10.0, timeout_s: float = 900.0
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise EngineError(f"the engine URL must be http(s)://host[:port][/path], got {base_url!r}")
        self.url, self.host = base_url.rstrip("/"), parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.ssl = ssl.create_default_context() if parts.scheme == "https" else None
        self.prefix = parts.path.rstrip("/").encode()
        self.host_header = (parts.netloc or self.host).encode()
        self.connect_timeout, self.timeout = connect_timeout_s, timeout_s
        self._idle: list[_Conn] = []
        self._slots = asyncio.Semaphore(max_connections)

    async def _connect(self) -> _Conn:
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(_Conn, self.host, self.port, ssl=self.ssl), self.connect_timeout
            )
        except (OSError, TimeoutError) as e:
            raise EngineError(f"could not connect to the engine at {self.url}: {type(e).__name__}: {e}") from e
        return conn

    def _pooled(self) -> _Conn | None:
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed and not conn.buf and now - conn.idle_since < IDLE_S:
                return conn
            conn.drop()
        return None

    def release(self, conn: _Conn, reusable: bool) -> None:
        self._slots.release()
        if reusable and not conn.closed:
            conn.disarm()
            conn.idle_since = time.monotonic()
            self._idle.append(conn)
        else:
            conn.drop()

    async def request(self, method: str, path: str, body: bytes = b"") -> Response:
        """Send one request; return once the status and headers are in (the body is the caller's
        to read or stream, which gives the connection back). EngineError on any failure."""
        head = (
            f"{method} ".encode()
            + self.prefix
            + path.encode()
            + b" HTTP/1.1\r\nhost: "
            + self.host_header
            + b"\r\ncontent-type: application/json\r\naccept: */*\r\n"
            + b"content-length: %d\r\n\r\n" % len(body)
        )
        await self._slots.acquire()
        conn = self._pooled()
        fresh = conn is None
        try:
            while True:
                if conn is None:
                    conn, fresh = await self._connect(), True
                try:
                    return await self._exchange(conn, head + body)
                except ConnectionError as e:
                    conn.drop()
                    if fresh:
                        raise EngineError(
                            f"the engine at {self.url} closed the connection before answering: {e}"
                        ) from e
                    conn = None  # a stale pooled connection: once more on a fresh one
        except BaseException as e:
            if conn is not None:
                conn.drop()
            self._slots.release()
            if isinstance(e, TimeoutError):
                raise EngineError(f"the engine at {self.url} did not answer within {self.timeout:.0f} s") from e
            raise

    async def _exchange(self, conn: _Conn, data: bytes) -> Response:
        conn.disarm()
        conn.arm(self.timeout)
        conn.transport.write(data)
        while (end := conn.buf.find(b"\r\n\r\n")) < 0:
            await conn.more()
        head = conn.take(end + 4).split(b"\r\n")
        try:
            status = int(head[0].split(b" ", 2)[1])
        except (IndexError, ValueError):
            raise EngineError(
                f"the engine at {self.url} answered something that is not HTTP: {head[0][:80]!r}"
            ) from None
        headers = {}
        for line in head[1:]:
            name, _, value = line.partition(b":")
            if name:
                headers[name.strip().lower()] = value.strip()
        return Response(self, conn, status, headers)

    def close(self) -> None:
        for conn in self._idle:
            conn.drop()
        self._idle.clear()
