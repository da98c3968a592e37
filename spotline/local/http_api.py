"""The API handler served over HTTP on localhost, as API Gateway would serve it.

Each request becomes an API Gateway REST proxy event. API Gateway's AWS_IAM authorization puts
the caller's IAM identity in `requestContext.identity`; locally a team's access key (a header
listed in `.spotline/local.json`) is turned into the same identity, so the API handler maps
identity -> team by one code path in both places. A request without a known key is refused
with 403, as API Gateway refuses an unsigned request.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

ACCESS_KEY_HEADER = "x-spotline-access-key"
Handler = Callable[[dict[str, Any], Any], dict[str, Any]]


@dataclass(frozen=True)
class LocalIdentity:
    team: str
    access_key: str
    user_arn: str


def proxy_event(
    method: str, raw_path: str, headers: Mapping[str, str], body: str | None, identity: LocalIdentity
) -> dict[str, Any]:
    """An API Gateway REST (v1) proxy event for one request."""
    split = urlsplit(raw_path)
    query = {k: v[-1] for k, v in parse_qs(split.query).items()}
    multi = {k: v for k, v in parse_qs(split.query).items()}
    return {
        "resource": "/{proxy+}",
        "path": split.path,
        "httpMethod": method,
        "headers": dict(headers),
        "multiValueHeaders": {k: [v] for k, v in headers.items()},
        "queryStringParameters": query or None,
        "multiValueQueryStringParameters": multi or None,
        "pathParameters": {"proxy": split.path.lstrip("/")},
        "stageVariables": None,
        "requestContext": {
            "resourcePath": "/{proxy+}",
            "httpMethod": method,
            "path": f"/local{split.path}",
            "stage": "local",
            "requestId": str(uuid.uuid4()),
            "identity": {
                "accessKey": identity.access_key,
                "caller": identity.user_arn,
                "user": identity.user_arn,
                "userArn": identity.user_arn,
                "accountId": identity.user_arn.split(":")[4],
                "sourceIp": "127.0.0.1",
            },
        },
        "body": body,
        "isBase64Encoded": False,
    }


class LocalApiServer:
    """A threaded HTTP server on 127.0.0.1 in front of the API handler."""

    def __init__(
        self, handler: Handler, identities: Mapping[str, LocalIdentity], context: Any, port: int = 0
    ) -> None:
        self._handler = handler
        self._identities = dict(identities)  # access key -> identity
        self._context = context
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._request_handler())
        self._thread = threading.Thread(target=self._server.serve_forever, name="local-api", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _request_handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class RequestHandler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet: the runtime logs
                return

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length).decode() if length else None
                headers = {k: v for k, v in self.headers.items()}
                key = self.headers.get(ACCESS_KEY_HEADER, "")
                identity = server._identities.get(key)
                if identity is None:
                    self._reply(
                        403,
                        {"content-type": "application/json"},
                        json.dumps({"message": "Missing or unknown access key"}),
                    )
                    return
                event = proxy_event(self.command, self.path, headers, body, identity)
                try:
                    response = server._handler(event, server._context)
                except Exception as error:  # the handler maps its own errors; this is a crash
                    self._reply(
                        502,
                        {"content-type": "application/json"},
                        json.dumps({"message": f"handler failed: {error}"}),
                    )
                    return
                out_headers = dict(response.get("headers") or {})
                for name, values in (response.get("multiValueHeaders") or {}).items():
                    out_headers[name] = ",".join(values)
                self._reply(int(response.get("statusCode", 200)), out_headers, response.get("body") or "")

            def _reply(self, status: int, headers: Mapping[str, str], body: str) -> None:
                data = body.encode()
                self.send_response(status)
                for name, value in headers.items():
                    if name.lower() != "content-length":
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _serve

        return RequestHandler
