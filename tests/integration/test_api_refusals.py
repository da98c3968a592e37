"""Every request the API cannot take is refused with the documented
error shape (statusCode, message, detail naming what is wrong), on the Lambda handler and on the
local HTTP server in front of it; nothing is half-written."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest

import functions.api
from spotline.local.http_api import ACCESS_KEY_HEADER, LocalApiServer, LocalIdentity

from .helpers import Deployment, api_event, context
from .test_api import VISION

JOB = {"name": "one", "gpus": 1, "image": "img", "command": ["python"]}
KEY = "AKIAREFUSALS"


def call(
    method: str, path: str, headers: dict[str, str] | None = None, **kwargs: Any
) -> tuple[int, dict[str, Any], dict[str, str]]:
    event = api_event(method, path, identity=VISION, **kwargs)
    for name, value in (headers or {}).items():  # after api_event's own Content-Type
        event["headers"][name] = value
        event["multiValueHeaders"][name] = [value]
    response = functions.api.handler(event, context("api"))
    headers = {k.lower(): v for k, v in (response.get("headers") or {}).items()}
    return response["statusCode"], json.loads(response["body"]), headers


def _documented(status: int, body: dict[str, Any]) -> None:
    assert body["statusCode"] == status and body["message"]
    for item in body.get("detail") or []:
        assert set(item) == {"loc", "msg", "type"}


def _jobs(deployment: Deployment) -> list[str]:
    return [r.id for r in deployment.plane.jobs.list_team("vision", limit=100)[0]]


def test_a_json_array_body_is_refused_and_nothing_is_written(deployment: Deployment) -> None:
    status, body, _ = call("POST", "/jobs", body=[JOB, {**JOB, "name": "two"}])
    assert status == 422 and "expected a JSON object, got a JSON array" in body["message"]
    _documented(422, body)
    for scalar in ("3", '"job"', "null", "true"):
        status, body, _ = call("POST", "/jobs", body=scalar)
        assert status == 422, scalar
        _documented(422, body)
    assert _jobs(deployment) == []


def test_a_form_or_multipart_body_gets_415(deployment: Deployment) -> None:
    status, body, _ = call(
        "POST", "/jobs", body="name=one&gpus=1", headers={"Content-Type": "application/x-www-form-urlencoded"}
    )
    assert status == 415 and "application/json" in body["message"]
    _documented(415, body)
    status, body, _ = call(
        "PATCH",
        "/jobs/abc",
        body="--x\r\nContent-Disposition: form-data; name=a\r\n\r\n1\r\n--x--",
        headers={"Content-Type": "multipart/form-data; boundary=x"},
    )
    assert status == 415
    _documented(415, body)
    assert _jobs(deployment) == []


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("PUT", "/jobs", "GET, POST"),
        ("POST", "/jobs/abc", "DELETE, GET, PATCH"),
        ("QUERY", "/jobs", "GET, POST"),
        ("TRACE", "/usage", "GET"),
    ],
)
def test_a_method_a_path_lacks_gets_405_with_allow(
    deployment: Deployment, method: str, path: str, allow: str
) -> None:
    status, body, headers = call(method, path, body=JOB if method in ("PUT", "POST") else None)
    assert status == 405 and headers["allow"] == allow
    _documented(405, body)
    assert _jobs(deployment) == []


def test_an_undecodable_body_gets_the_documented_400(deployment: Deployment) -> None:
    status, body, _ = call("POST", "/jobs", body='{"name": ')
    assert status == 400
    _documented(400, body)


def test_an_empty_state_filter_is_refused(deployment: Deployment) -> None:
    status, body, _ = call("GET", "/jobs", query={"state": ""})
    assert status == 422 and "state" in json.dumps(body["detail"])


# --- the same through the local HTTP server ---------------------------------------------------


@pytest.fixture
def local_api(deployment: Deployment) -> Iterator[LocalApiServer]:
    identity = LocalIdentity(team="vision", access_key=KEY, user_arn=VISION["userArn"])
    server = LocalApiServer(functions.api.handler, {KEY: identity}, context=context("api"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _http(
    server: LocalApiServer, method: str, path: str, body: str | None = None, **headers: str
) -> tuple[int, dict[str, Any], dict[str, str]]:
    host, port = server.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request(method, path, body=body, headers={ACCESS_KEY_HEADER: KEY, **headers})
        response = connection.getresponse()
        return (
            response.status,
            json.loads(response.read() or b"{}"),
            {k.lower(): v for k, v in response.getheaders()},
        )
    finally:
        connection.close()


def test_the_local_server_refuses_the_same_way(local_api: LocalApiServer, deployment: Deployment) -> None:
    # An unknown method (http.server would answer 501) and PUT: 405 with the path's Allow
    for method in ("QUERY", "PUT"):
        status, body, headers = _http(
            local_api, method, "/jobs", "{}", **{"Content-Type": "application/json"}
        )
        assert (status, headers["allow"]) == (405, "GET, POST"), method
        _documented(405, body)
    # multipart PATCH: 415, never a 502
    status, body, _ = _http(
        local_api, "PATCH", "/jobs/abc", "--x--", **{"Content-Type": "multipart/form-data; boundary=x"}
    )
    assert status == 415
    _documented(415, body)
    # `?state=` is an empty state, not no filter
    status, body, _ = _http(local_api, "GET", "/jobs?state=")
    assert status == 422
    # a body that is not UTF-8: the server's own 400, in the documented shape
    status, body, _ = _http(
        local_api,
        "POST",
        "/jobs",
        "\udcff".encode("utf-8", "surrogateescape").decode("latin-1"),
        **{"Content-Type": "application/json"},
    )
    assert status == 400
    _documented(400, body)
    assert _jobs(deployment) == []
