"""The client against an endpoint that requires SigV4, as API Gateway's AWS_IAM authorization does.

A local HTTP server in front of the real API handler (on moto) checks each request's signature
with botocore (recomputed from the signed headers and the secret of the access key), then hands
the request on with the IAM identity of that key, the way API Gateway does. So the client's
requests must be signed correctly for service execute-api to get through.
"""

from __future__ import annotations

import hmac
import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from typer.testing import CliRunner

import functions.api
from spotline.cli import app
from spotline.local.http_api import LocalIdentity, proxy_event

from .helpers import VISION_ROLE, Deployment, context

KEY, SECRET = "AKIDVISIONTEAM000001", "vision-secret"  # the gateway's one known key and its secret
SECRETS = {KEY: SECRET}
IDENTITIES = {KEY: LocalIdentity("vision", KEY, VISION_ROLE)}
AUTH = re.compile(
    r"AWS4-HMAC-SHA256 Credential=(?P<key>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/(?P<service>[^/]+)"
    r"/aws4_request,\s*SignedHeaders=(?P<signed>[^,]+),\s*Signature=(?P<signature>[0-9a-f]{64})"
)


def verified_key(method: str, path: str, headers: dict[str, str], body: bytes) -> str | None:
    """The access key that signed this request, or None when the signature does not verify."""
    match = AUTH.fullmatch(headers.get("authorization", ""))
    if match is None or match["service"] != "execute-api" or match["key"] not in SECRETS:
        return None
    signed = match["signed"].split(";")
    if any(name not in headers for name in signed if name != "host"):
        return None
    request = AWSRequest(
        method=method,
        url=f"http://{headers['host']}{path}",
        data=body,
        headers={name: headers[name] for name in signed if name in headers},
    )
    request.context["timestamp"] = headers.get("x-amz-date", "")
    credentials = Credentials(match["key"], SECRETS[match["key"]], headers.get("x-amz-security-token"))
    signer = SigV4Auth(credentials, "execute-api", match["region"])
    expected = signer.signature(signer.string_to_sign(request, signer.canonical_request(request)), request)
    return match["key"] if hmac.compare_digest(expected, match["signature"]) else None


class SigV4Gateway(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: list[str] = []

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        key = verified_key(self.command, self.path, headers, body)
        if key is None:
            self._reply(
                403,
                {"message": "The request signature we calculated does not match the signature you provided."},
            )
            return
        SigV4Gateway.seen.append(key)
        event = proxy_event(self.command, self.path, headers, body.decode() or None, IDENTITIES[key])
        response = functions.api.handler(event, context("api"))
        self._reply(int(response["statusCode"]), json.loads(response.get("body") or "null"))

    def _reply(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PATCH = do_DELETE = _serve


@pytest.fixture
def gateway(deployment: Deployment, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), SigV4Gateway)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    # The caller's credentials, from the standard chain (the environment here).
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("SPOTLINE_STATE_DIR", str(tmp_path / "no-local"))
    monkeypatch.delenv("SPOTLINE_ENDPOINT", raising=False)
    SigV4Gateway.seen = []
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def test_signed_requests_reach_the_api_as_the_callers_team(gateway: str, tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("name: signed\ngpus: 8\nimage: spotline/train:latest\ncommand: [python, train.py]\n")

    submitted = cli("submit", str(spec), "--endpoint", gateway, "--output", "json")
    assert submitted.exit_code == 0, submitted.output
    job = json.loads(submitted.stdout)
    assert job["team"] == "vision" and job["state"] == "PENDING"

    listed = cli("list", "--endpoint", gateway, "--output", "json")
    assert listed.exit_code == 0 and [j["id"] for j in json.loads(listed.stdout)] == [job["id"]]
    cancelled = cli("cancel", job["id"], "--endpoint", gateway, "--output", "json")
    assert cancelled.exit_code == 0 and json.loads(cancelled.stdout)[0]["state"] == "CANCELLED"
    assert SigV4Gateway.seen and set(SigV4Gateway.seen) == {KEY}


def test_configure_then_the_configured_url_is_used(gateway: str) -> None:
    configured = cli("configure", "--api-url", gateway)
    assert configured.exit_code == 0, configured.output
    listed = cli("list", "--output", "json")
    assert listed.exit_code == 0, listed.output
    assert json.loads(listed.stdout) == []


def test_a_wrong_secret_is_refused_in_one_line(gateway: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    result = cli("list", "--endpoint", gateway)
    assert result.exit_code == 1
    assert (
        result.stderr.strip().startswith("error: refused (403)")
        and len(result.stderr.strip().splitlines()) == 1
    )
    assert "Traceback" not in result.output


def test_missing_credentials_and_an_unreachable_endpoint_are_one_line(
    gateway: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    result = cli("list", "--endpoint", gateway)
    assert result.exit_code == 1 and "no AWS credentials found" in result.stderr
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    result = cli("status", "job-x", "--endpoint", "http://127.0.0.1:9")
    assert result.exit_code == 1 and result.stderr.startswith("error: cannot reach the Spotline API")
    result = cli("list", "--endpoint", "ftp://nowhere")
    assert result.exit_code == 2 and "--endpoint" in result.stderr
