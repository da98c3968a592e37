"""moto's server, answering one request at a time: the local runtime's emulated AWS.

moto's backends are not safe under concurrent requests (moto 5.2.5, measured): a failed
TransactWriteItems rolls back by restoring a copy of each table it names, wiping the writes other
requests made meanwhile, and iterations raise "dictionary changed size during iteration". The
local runtime has many clients at once (the API's threads, the router, the workflows, the
agents), so every request here is served under one lock: the emulation is linearizable, as
DynamoDB is per item. This wraps moto's WSGI app, the one `moto.server.ThreadedMotoServer`
serves; nothing of moto is changed.

One request would hold the lock for long: an SQS long poll (ReceiveMessage with WaitTimeSeconds)
waits for a message, which no other request could then send. Such a poll is served here as short
polls under the lock, waiting between them outside it until a request that may have added a
message to its queue completes (a SendMessage or ChangeMessageVisibility naming the queue, or any
EventBridge PutEvents), or a second has passed (a message whose visibility timeout or delay ran
out), until its wait is over.

It listens on loopback only, and refuses requests a web page could make (`loopback_only`): moto
accepts any origin and any credentials. Only the JSON protocol that current SDKs use is recognized; a
ReceiveMessage without WaitTimeSeconds is a short poll here (the queue's
ReceiveMessageWaitTimeSeconds is not applied).
"""

from __future__ import annotations

import io
import ipaddress
import json
import threading
import time
from typing import Any

# Held while moto serves a request.
EMULATION_LOCK = threading.Lock()

_RECEIVE = "AmazonSQS.ReceiveMessage"
# What may make a message receivable on the queue the request names.
_ADDS_MESSAGES = frozenset(
    f"AmazonSQS.{action}"
    for action in (
        "SendMessage",
        "SendMessageBatch",
        "ChangeMessageVisibility",
        "ChangeMessageVisibilityBatch",
    )
)
_RECHECK_S = 1.0  # a long poll looks again at least this often (moto's own wait loop: 1 s)


class _Arrivals:
    """Counts, per queue, the requests that may have made a message receivable there; long polls
    wait on it. An EventBridge PutEvents counts for every queue (its rules' targets are moto's)."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._everywhere = 0
        self._per_queue: dict[str, int] = {}

    def seen(self, queue: str) -> tuple[int, int]:
        with self._changed:
            return self._everywhere, self._per_queue.get(queue, 0)

    def record(self, queue: str | None) -> None:
        """A request that may have added a message to `queue` (None: to any queue) completed."""
        with self._changed:
            if queue is None:
                self._everywhere += 1
            else:
                self._per_queue[queue] = self._per_queue.get(queue, 0) + 1
            self._changed.notify_all()

    def wait_past(self, queue: str, seen: tuple[int, int], timeout: float) -> None:
        with self._changed:
            self._changed.wait_for(
                lambda: (self._everywhere, self._per_queue.get(queue, 0)) != seen, timeout=timeout
            )


def serialized(app: Any) -> Any:
    """The WSGI app `app`, run under EMULATION_LOCK, its body produced before the lock is let go.

    The request body is read before the lock is taken (a slow client never holds it up), and the
    response is produced whole under it (werkzeug's server then sends it and closes the
    connection, as it does every connection).
    `bench/aws_costs.py` wraps this function to meter every request: keep its signature (a WSGI
    app in, a WSGI app out)."""
    arrivals = _Arrivals()

    def call(environ: dict[str, Any], body_in: bytes) -> tuple[str, list[tuple[str, str]], Any, bytes]:
        environ["wsgi.input"] = io.BytesIO(body_in)
        environ["CONTENT_LENGTH"] = str(len(body_in))
        captured: list[Any] = []

        def capture(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            captured[:] = [status, headers, exc_info]
            return lambda data: None  # moto never writes through start_response's callable

        with EMULATION_LOCK:
            result = app(environ, capture)
            try:
                body = b"".join(result)
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    close()
        status, headers, exc_info = captured
        return status, headers, exc_info, body

    def long_poll(environ: dict[str, Any], request: dict[str, Any], wait_s: float) -> Any:
        deadline = time.monotonic() + wait_s
        short = json.dumps({**request, "WaitTimeSeconds": 0}).encode()
        queue = _queue_name(request)
        while True:
            seen = arrivals.seen(queue)
            answer = call(dict(environ), short)
            left = deadline - time.monotonic()
            if left <= 0 or not answer[0].startswith("200") or _has_messages(answer[3]):
                return answer
            arrivals.wait_past(queue, seen, min(left, _RECHECK_S))

    def serve(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        body_in = _read_body(environ)
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        if target == _RECEIVE:
            request = _json_object(body_in)
            wait_s = _wait_seconds(request)
            if wait_s:
                assert request is not None
                status, headers, exc_info, body = long_poll(environ, request, wait_s)
            else:
                status, headers, exc_info, body = call(environ, body_in)
        else:
            status, headers, exc_info, body = call(environ, body_in)
            if target in _ADDS_MESSAGES:
                arrivals.record(_queue_name(_json_object(body_in)))
            elif target == "AWSEvents.PutEvents":
                arrivals.record(None)
        headers = [(name, value) for name, value in headers if name.lower() != "content-length"]
        start_response(status, [*headers, ("Content-Length", str(len(body)))], exc_info)
        return [body]

    return serve


def _read_body(environ: dict[str, Any]) -> bytes:
    stream = environ["wsgi.input"]
    length = environ.get("CONTENT_LENGTH")
    if length:
        return bytes(stream.read(int(length)))
    if environ.get("wsgi.input_terminated"):  # chunked: werkzeug ends the stream
        return bytes(stream.read())
    return b""


def _json_object(body: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(body or b"{}")
    except ValueError:
        return None  # not the JSON protocol: moto answers it (or rejects it) as it is
    return value if isinstance(value, dict) else None


def _wait_seconds(request: dict[str, Any] | None) -> float:
    """A long poll's wait; 0 for a short poll, or a request moto should judge as it is."""
    if request is None:
        return 0.0
    wait = request.get("WaitTimeSeconds")
    if isinstance(wait, bool) or not isinstance(wait, int) or not 0 < wait <= 20:
        return 0.0  # absent, 0, or invalid (moto answers the invalid value's error)
    return float(wait)


def _queue_name(request: dict[str, Any] | None) -> str:
    """The queue a request names (the last part of its QueueUrl): its waiters' key."""
    url = (request or {}).get("QueueUrl")
    return url.rstrip("/").rsplit("/", 1)[-1] if isinstance(url, str) else ""


def _has_messages(body: bytes) -> bool:
    answer = _json_object(body)
    return bool(answer and answer.get("Messages"))


def _loopback_name(host: str) -> bool:
    """`host` (a Host header without its port) names this machine's loopback: a loopback address,
    `localhost`, or a `*.localhost` name (RFC 6761: always loopback; S3 virtual-hosted style)."""
    name = host.lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name.strip("[]")).is_loopback
    except ValueError:
        return False


def loopback_only(app: Any) -> Any:
    """The WSGI app `app`, refusing (403) what only a web page would send: a request whose Host is
    not this machine's loopback (a DNS-rebinding page names its own domain), or that carries an
    `Origin` (browsers send one on cross-origin requests; AWS SDKs never do). moto answers any
    origin with CORS headers and takes any credentials, so a page open in a browser could
    otherwise read and write the emulated account."""

    def guarded(environ: dict[str, Any], start_response: Any) -> Any:
        host = environ.get("HTTP_HOST", "")
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        if environ.get("HTTP_ORIGIN") is not None or not _loopback_name(name):
            body = b"forbidden: the local AWS endpoint serves this machine's SDK clients only\n"
            start_response(
                "403 Forbidden", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))]
            )
            return [body]
        return app(environ, start_response)

    return guarded


class SerializedMotoServer:
    """moto's server on `ip_address:port` (0: any free port), as `ThreadedMotoServer` makes it
    (werkzeug's threaded server, moto's app and request handler), one request served at a time
    (`serialized`), and to this machine's SDK clients only (`loopback_only`). `ip_address` must be
    a loopback address: moto takes any credentials."""

    def __init__(self, ip_address: str = "127.0.0.1", port: int = 0) -> None:
        if not ipaddress.ip_address(ip_address).is_loopback:
            raise ValueError(f"the local AWS endpoint binds loopback only, not {ip_address}")
        self._address = (ip_address, port)
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )
        from werkzeug.serving import make_server

        # Looked up here, not bound at import: the cost bench wraps `serialized`.
        app = loopback_only(serialized(DomainDispatcherApplication(create_backend_app)))
        self._server = make_server(
            self._address[0], self._address[1], app, threaded=True, request_handler=MotoRequestHandler
        )
        self._thread = threading.Thread(target=self._server.serve_forever, name="moto", daemon=True)
        self._thread.start()

    def get_host_and_port(self) -> tuple[str, int]:
        if self._server is None:
            raise RuntimeError("the server is not started")
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
