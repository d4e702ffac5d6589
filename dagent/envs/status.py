"""`GET /health` of both environment servers: healthy, and which sandbox backend serves with what
isolation (a Space's `DAGENT_SANDBOX` setting, read back from the running server).

openenv's own `/health` answers `{"status": "healthy"}` through a response model that drops any
other field, so the route is replaced (same path, same `status`, more fields).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def sandbox_health(backend: Any) -> dict[str, Any]:
    """The backend's name, where it runs and its isolation: bubblewrap, private namespaces and an
    unprivileged uid (`mountns`), rlimits only (`cwd`, refused by the self-check), or a remote VM."""
    if backend is None:
        return {"backend": None}
    return {
        "backend": backend.name,
        "remote": bool(backend.remote),
        "isolation": getattr(backend, "tier", "remote" if backend.remote else None),
        "describe": backend.describe(),
    }


def replace_health(app: Any, extra: Callable[[], dict[str, Any]]) -> None:
    """Serve `{"status": "healthy", **extra()}` at GET /health instead of openenv's bare answer."""
    app.router.routes[:] = [
        r
        for r in app.router.routes
        if not (getattr(r, "path", None) == "/health" and "GET" in (getattr(r, "methods", None) or ()))
    ]

    @app.get("/health", tags=["Health"], summary="Health, sandbox backend and isolation")
    async def health() -> dict[str, Any]:
        return {"status": "healthy", **extra()}
