"""Each Space image's HEALTHCHECK probes the port its server listens on ($PORT), as Docker runs it
(`/bin/sh -c` with the container's environment): against a real HTTP server on a free port named
by PORT the probe passes; with nothing there it fails. The truth is the server, not the Dockerfile's
text: a probe pinned to 8000 (or 7860) fails the first check whatever PORT says."""

from __future__ import annotations

import os
import re
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from dagent.serving import free_port

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = ("spaces/data-agent/Dockerfile", "spaces/data-agent-blackbox/Dockerfile", "spaces/demo/Dockerfile")


def probe(dockerfile: str) -> str:
    """The HEALTHCHECK's CMD, its line continuations joined (shell form: Docker runs it with sh -c)."""
    text = (ROOT / dockerfile).read_text().replace("\\\n", " ")
    found = re.search(r"^HEALTHCHECK .*? CMD (.+)$", text, re.MULTILINE)
    assert found, f"{dockerfile} has no HEALTHCHECK ... CMD"
    return found.group(1).strip()


class Healthy(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        self.send_response(200 if self.path in ("/", "/health") else 404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize("dockerfile", DOCKERFILES)
def test_the_healthcheck_probes_the_port_the_server_listens_on(dockerfile):
    if not Path("/usr/bin/curl").exists() and not Path("/bin/curl").exists():
        pytest.skip("curl (what the images' probe runs) is not installed here")
    port = free_port()
    server = HTTPServer(("127.0.0.1", port), Healthy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    cmd = probe(dockerfile).replace("localhost", "127.0.0.1")
    try:
        served = subprocess.run(
            ["/bin/sh", "-c", cmd], env={**os.environ, "PORT": str(port)}, capture_output=True, timeout=30
        )
        assert served.returncode == 0, served.stderr
    finally:
        server.shutdown()
        server.server_close()
    empty = subprocess.run(
        ["/bin/sh", "-c", cmd], env={**os.environ, "PORT": str(free_port())}, capture_output=True, timeout=30
    )
    assert empty.returncode != 0  # nobody serves that port: unhealthy
