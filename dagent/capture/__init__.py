"""Token-exact capture of a black-box agent's model calls.

`server` (the proxy process: sessions, admin routes, lifecycle), `proxy` (the data plane: one
model call forwarded and recorded), `upstream` (its HTTP/1.1 pool to the engine), `store` (what a
session holds, ids as `array('I')`), `wire` (request/response formats, sampling pinning) and
`reach` (how a sandbox reaches the proxy: direct, a public URL, a tunnel, a bound socket).
"""

from dagent.capture.server import CaptureServer, Session

__all__ = ["CaptureServer", "Session"]
