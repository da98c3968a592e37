"""The local API's HTTP edges, in front of a stub handler: whatever a client sends gets a JSON
answer, and a burst of clients is served, not reset."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from spotline.local.http_api import ACCESS_KEY_HEADER, LocalApiServer, LocalIdentity

KEY = "SLK-test"
IDENTITY = LocalIdentity(team="vision", access_key=KEY, user_arn="arn:aws:iam::123456789012:user/vision")


def echo(event: dict[str, Any], context: Any) -> dict[str, Any]:
    body = {"method": event["httpMethod"], "path": event["path"], "body": event["body"]}
    return {"statusCode": 200, "headers": {"content-type": "application/json"}, "body": json.dumps(body)}


@pytest.fixture
def server() -> Iterator[LocalApiServer]:
    api = LocalApiServer(echo, {KEY: IDENTITY}, context=None)
    api.start()
    try:
        yield api
    finally:
        api.stop()


def raw(server: LocalApiServer, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send `request` as is; the status, headers and body of the answer."""
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        sock.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data, "the connection closed with no response"
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    return int(lines[0].split()[1]), headers, body


def request(method: str, body: bytes = b"", extra: str = "") -> bytes:
    return (
        f"{method} /jobs HTTP/1.1\r\nHost: x\r\n{ACCESS_KEY_HEADER}: {KEY}\r\n{extra}"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def test_a_request_reaches_the_handler(server: LocalApiServer) -> None:
    status, _, body = raw(server, request("POST", b'{"a": 1}'))
    assert status == 200
    assert json.loads(body) == {"method": "POST", "path": "/jobs", "body": '{"a": 1}'}


@pytest.mark.parametrize(
    ("head", "field"),
    [
        ("Content-Length: abc\r\n", "Content-Length"),
        ("Content-Length: -5\r\n", "Content-Length"),
        ("Content-Length: 3\r\nContent-Length: 4\r\n", "Content-Length"),
        ("Content-Length: 50\r\n", "body"),  # fewer bytes than announced
    ],
)
def test_a_bad_content_length_gets_400_json(server: LocalApiServer, head: str, field: str) -> None:
    data = f"POST /jobs HTTP/1.1\r\nHost: x\r\n{ACCESS_KEY_HEADER}: {KEY}\r\n{head}\r\n{{}}".encode()
    status, headers, body = raw(server, data)
    assert status == 400
    assert headers["content-type"] == "application/json"
    assert field in json.loads(body)["message"]


def test_a_body_that_is_not_utf8_gets_400_json(server: LocalApiServer) -> None:
    status, headers, body = raw(server, request("POST", b"\xff\xfe garbage \x80"))
    assert status == 400 and headers["content-type"] == "application/json"
    assert "UTF-8" in json.loads(body)["message"]


def test_a_chunked_body_gets_411_json(server: LocalApiServer) -> None:
    data = (
        f"POST /jobs HTTP/1.1\r\nHost: x\r\n{ACCESS_KEY_HEADER}: {KEY}\r\n"
        "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
    ).encode()
    status, _, body = raw(server, data)
    assert status == 411 and "Content-Length" in json.loads(body)["message"]


def refusing(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """A handler that refuses every method, as the API's does for a method its path lacks."""
    body = {"statusCode": 405, "message": f"method {event['httpMethod']} not allowed"}
    return {
        "statusCode": 405,
        "headers": {"content-type": "application/json", "Allow": "GET, POST"},
        "body": json.dumps(body),
    }


@pytest.mark.parametrize("method", ["OPTIONS", "TRACE", "CONNECT", "QUERY", "PROPFIND"])
def test_methods_without_a_route_reach_the_handler_which_answers_405(method: str) -> None:
    # A method http.server has no handler for (QUERY) is not its own 501;
    # like OPTIONS or TRACE, it reaches the API handler, which answers 405 with the path's Allow
    # (tests/integration/test_api_refusals.py runs the real handler).
    api = LocalApiServer(refusing, {KEY: IDENTITY}, context=None)
    api.start()
    try:
        status, headers, body = raw(api, request(method))
    finally:
        api.stop()
    assert status == 405
    assert headers["content-type"] == "application/json"
    assert headers["allow"] == "GET, POST"
    assert method in json.loads(body)["message"] and json.loads(body)["statusCode"] == 405


def test_head_gets_405_without_a_body() -> None:
    server = LocalApiServer(refusing, {KEY: IDENTITY}, context=None)
    server.start()
    try:
        response = httpx.head(f"{server.url}/jobs", headers={ACCESS_KEY_HEADER: KEY})
    finally:
        server.stop()
    assert response.status_code == 405
    assert response.headers["content-type"] == "application/json"
    assert response.content == b""


@pytest.mark.parametrize(
    ("data", "status"),
    [
        # (an unknown method reaches the handler: test_methods_without_a_route_reach_the_handler...)
        (b"\x16\x03\x01\x00\xa5garbage\r\n\r\n", 400),  # not HTTP (a TLS hello)
        (b"GET /jobs HTTP/9.9\r\n\r\n", 505),
    ],
)
def test_malformed_requests_get_json_not_html(server: LocalApiServer, data: bytes, status: int) -> None:
    got, headers, body = raw(server, data)
    assert got == status
    assert headers["content-type"] == "application/json"
    assert json.loads(body)["message"]


def test_a_burst_of_clients_is_queued_not_reset(server: LocalApiServer) -> None:
    # Given the server busy (its accept loop held), 100 clients connect at once
    host, port = server.url.removeprefix("http://").split(":")
    accepting = threading.Lock()
    original = server._server.get_request

    def held_get_request() -> Any:
        with accepting:
            return original()

    server._server.get_request = held_get_request  # type: ignore[method-assign]
    statuses: list[int] = []
    with accepting:
        sockets = []
        for _ in range(100):
            sock = socket.socket()
            sock.settimeout(0.5)
            try:
                sock.connect((host, int(port)))
            except OSError:
                sock.close()
                continue
            sock.sendall(request("GET"))
            sockets.append(sock)
    # When the server accepts again, then every one of them is answered
    for sock in sockets:
        sock.settimeout(10)
        with sock:
            statuses.append(int(sock.recv(64).split()[1]))
    assert statuses == [200] * 100


def test_fifty_concurrent_clients_are_all_answered(server: LocalApiServer) -> None:
    barrier = threading.Barrier(64)
    statuses: list[int] = []

    def client() -> None:
        barrier.wait()
        with httpx.Client(timeout=30) as http:
            statuses.append(http.get(f"{server.url}/jobs", headers={ACCESS_KEY_HEADER: KEY}).status_code)

    threads = [threading.Thread(target=client) for _ in range(64)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert statuses == [200] * 64
