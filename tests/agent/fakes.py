"""Test doubles for the agent: a fake clock and an IMDSv2 emulator."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any

REGION = "us-east-1"


class FakeClock:
    """Epoch seconds that move only when told to."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class ImdsState:
    """What the emulated instance metadata service knows and has seen."""

    def __init__(self) -> None:
        self.token = "token-1"
        self.instance_id = "i-0123456789abcdef0"
        self.region = REGION
        self.instance_action: dict[str, Any] | None = None
        self.token_puts = 0
        self.unauthorized = 0


class _ImdsHandler(BaseHTTPRequestHandler):
    state: ImdsState

    def log_message(self, format: str, *args: Any) -> None:  # keep pytest output clean
        pass

    def _send(self, status: int, body: str = "") -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_PUT(self) -> None:
        # IMDSv2: a session token for a PUT that states its TTL.
        if self.path != "/latest/api/token" or not self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
            self._send(400)
            return
        self.state.token_puts += 1
        self._send(200, self.state.token)

    def do_GET(self) -> None:
        if self.headers.get("X-aws-ec2-metadata-token") != self.state.token:
            self.state.unauthorized += 1
            self._send(401)
            return
        routes = {
            "/latest/meta-data/instance-id": self.state.instance_id,
            "/latest/meta-data/placement/region": self.state.region,
            "/latest/meta-data/spot/instance-action": (
                json.dumps(self.state.instance_action) if self.state.instance_action else None
            ),
        }
        body = routes.get(self.path)
        if body is None:
            self._send(404, "Not Found")
        else:
            self._send(200, body)
