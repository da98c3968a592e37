"""The API handler served over HTTP on localhost, as API Gateway would serve it.

Each request becomes an API Gateway REST proxy event. API Gateway's AWS_IAM authorization puts
the caller's IAM identity in `requestContext.identity`; locally a team's access key (a header
listed in `.spotline/local.json`) is turned into the same identity, so the API handler maps
identity -> team by one code path in both places. A request without a known key is refused
with 403, as API Gateway refuses an unsigned request.

Whatever a client sends gets a JSON answer: a body that is not UTF-8 or a bad Content-Length
gets 400, a body over API Gateway's 10 MB payload limit 413, a method the API has no route for
(HEAD, OPTIONS, TRACE, ...) 405, a malformed request line http.server's own status, in JSON.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

ACCESS_KEY_HEADER = "x-spotline-access-key"
MAX_BODY_BYTES = 10 * 1024 * 1024  # API Gateway's payload limit
ALLOWED_METHODS = "GET, POST, PATCH, DELETE"
LISTEN_BACKLOG = 128
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
    # Blank values kept, as API Gateway keeps them: `?state=` is an empty state, refused (422).
    parsed = parse_qs(split.query, keep_blank_values=True)
    query = {k: v[-1] for k, v in parsed.items()}
    multi = {k: list(v) for k, v in parsed.items()}
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


def _error_body(status: int, message: str) -> str:
    """The API's documented error shape (functions.api.ErrorBody), for the answers the server
    gives itself."""
    return json.dumps({"statusCode": status, "message": message})


# Whoever sends a method the API has no route for: the handler refuses it before any team lookup.
ANONYMOUS = LocalIdentity(team="", access_key="", user_arn="arn:aws:iam::000000000000:user/anonymous")


class _Server(ThreadingHTTPServer):
    # http.server's default backlog (5) resets connections from a burst of clients.
    request_queue_size = LISTEN_BACKLOG
    daemon_threads = True


class LocalApiServer:
    """A threaded HTTP server on 127.0.0.1 in front of the API handler."""

    def __init__(
        self, handler: Handler, identities: Mapping[str, LocalIdentity], context: Any, port: int = 0
    ) -> None:
        self._handler = handler
        self._identities = dict(identities)  # access key -> identity
        self._context = context
        self._server = _Server(("127.0.0.1", port), self._request_handler())
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

            # A client that stops sending mid-request does not hold its thread for good.
            timeout = 60

            def log_message(self, format: str, *args: Any) -> None:  # quiet: the runtime logs
                return

            def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
                """http.server's own errors (a malformed request line, an unknown method, headers
                too long) in JSON, as every other answer, instead of its HTML page."""
                if code == HTTPStatus.NOT_IMPLEMENTED:
                    # A method http.server has no do_<METHOD> for (QUERY, PROPFIND...): like any
                    # other method the API has no route for.
                    self._not_allowed()
                    return
                try:
                    phrase = HTTPStatus(code).phrase
                except ValueError:
                    phrase = ""
                self.close_connection = True
                # A line http.server takes for HTTP/0.9 (garbage, or TLS) gets a status line too.
                self.request_version = self.protocol_version
                self._reply(
                    code,
                    {"content-type": "application/json", "connection": "close"},
                    _error_body(code, message or phrase),
                )

            def _refuse(self, status: int, message: str, **headers: str) -> None:
                self.close_connection = True  # what is left of the body is not read
                self._reply(
                    status,
                    {"content-type": "application/json", "connection": "close", **headers},
                    _error_body(status, message),
                )

            def _body(self) -> str | None:
                """The request body, or None after answering 4xx for one that cannot be read."""
                if self.headers.get("Transfer-Encoding"):
                    self._refuse(411, "Transfer-Encoding is not supported: send a Content-Length")
                    return None
                raw = self.headers.get_all("Content-Length") or []
                if len(set(raw)) > 1:
                    self._refuse(400, "Content-Length: conflicting values")
                    return None
                text = raw[0].strip() if raw else "0"
                if not text.isdigit() or not text.isascii():
                    self._refuse(400, f"Content-Length: not a non-negative integer: {text[:40]!r}")
                    return None
                length = int(text)
                if length > MAX_BODY_BYTES:
                    self._refuse(413, f"body: over {MAX_BODY_BYTES} bytes")
                    return None
                data = self.rfile.read(length) if length else b""
                if len(data) < length:
                    self._refuse(400, f"body: {len(data)} bytes received, Content-Length says {length}")
                    return None
                try:
                    return data.decode("utf-8")
                except UnicodeDecodeError as error:
                    self._refuse(400, f"body: not UTF-8 (byte {error.start})")
                    return None

            def _serve(self) -> None:
                body = self._body()
                if body is None:
                    return  # answered
                body = body or None
                headers = {k: v for k, v in self.headers.items()}
                key = self.headers.get(ACCESS_KEY_HEADER, "")
                identity = server._identities.get(key)
                if identity is None:
                    self._reply(
                        403,
                        {"content-type": "application/json"},
                        _error_body(403, "Missing or unknown access key"),
                    )
                    return
                self._respond(proxy_event(self.command, self.path, headers, body, identity))

            def _respond(self, event: dict[str, Any]) -> None:
                try:
                    response = server._handler(event, server._context)
                except Exception as error:  # the handler maps its own errors; this is a crash
                    self._reply(
                        502,
                        {"content-type": "application/json"},
                        _error_body(502, f"handler failed: {error}"),
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
                if self.command != "HEAD":
                    self.wfile.write(data)

            def _not_allowed(self) -> None:
                """A method the server has no route for (HEAD, OPTIONS, TRACE, QUERY...): the
                handler answers it, 405 with the path's own `Allow` (404 for an unknown path),
                before it asks who the caller is."""
                body = self._body()  # read (and so skip) any body, to answer on a clean connection
                if body is None:
                    return
                identity = server._identities.get(self.headers.get(ACCESS_KEY_HEADER, ""), ANONYMOUS)
                headers = {k: v for k, v in self.headers.items()}
                self._respond(proxy_event(self.command, self.path, headers, None, identity))

            do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _serve
            do_HEAD = do_OPTIONS = do_TRACE = do_CONNECT = _not_allowed

        return RequestHandler
