"""Schemathesis, an independent fuzzer, against the API's own /openapi.json.

The Lambda handler is served through a small WSGI shim that turns each request into API
Gateway's REST proxy event (IAM identity of the vision team), so schemathesis sends real HTTP
requests (werkzeug's test client) and reads real responses, with no server or port. For every
operation it sends schema-valid (positive) and schema-violating (negative) requests, derandomized
and bounded, and checks each response:

- not_a_server_error: never a 5xx;
- status_code_conformance: the status is one the document lists for the route;
- response_schema_conformance: the body matches the document's schema for that status;
- negative_data_rejection: a request that violates the schema is refused with a 4xx;
- content_type_conformance: the Content-Type is the documented one.

The number of cases is printed (run with -s to see it) and must reach a floor, so the test
cannot pass by sending nothing.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qs, unquote

import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

import functions.api

from .helpers import Deployment, context
from .test_api import VISION

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    response_schema_conformance,
    negative_data_rejection,
    content_type_conformance,
]
# Per operation and mode: 6 operations x 2 modes x this = the cases sent (plus the explicit
# examples schemathesis adds). Enough to reach every field's boundaries; about a minute on CI.
MAX_EXAMPLES = 25
MIN_CASES = 250

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


def _resource(segments: list[str]) -> tuple[str, dict[str, str] | None]:
    """API Gateway's resource template and path parameters for a path's (decoded) segments."""
    if len(segments) >= 2 and segments[0] == "jobs":
        rest = "/".join(segments[2:])
        return "/jobs/{job_id}" + ("/" + rest if rest else ""), {"job_id": segments[1]}
    return "/" + "/".join(segments), None


def lambda_wsgi(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
    """A WSGI app that calls the API's Lambda handler with the REST proxy event API Gateway
    would send for this request."""
    raw_path = environ.get("RAW_URI") or environ.get("REQUEST_URI") or environ.get("PATH_INFO", "/")
    path = raw_path.split("?", 1)[0]
    segments = [unquote(s) for s in path.strip("/").split("/")] if path.strip("/") else []
    resource, path_params = _resource(segments)
    query = parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)
    headers = {
        key[5:].replace("_", "-").title(): str(value)
        for key, value in environ.items()
        if key.startswith("HTTP_")
    }
    if environ.get("CONTENT_TYPE"):
        headers["Content-Type"] = environ["CONTENT_TYPE"]
    length = int(environ.get("CONTENT_LENGTH") or 0)
    data = environ["wsgi.input"].read(length) if length else b""
    try:
        body: str | None = data.decode() if data else None
        encoded = False
    except UnicodeDecodeError:
        body, encoded = base64.b64encode(data).decode(), True
    event = {
        "resource": resource,
        "path": path,
        "httpMethod": environ["REQUEST_METHOD"],
        "headers": headers,
        "multiValueHeaders": {k: [v] for k, v in headers.items()},
        "queryStringParameters": {k: v[-1] for k, v in query.items()} or None,
        "multiValueQueryStringParameters": query or None,
        "pathParameters": path_params,
        "stageVariables": None,
        "requestContext": {
            "resourcePath": resource,
            "httpMethod": environ["REQUEST_METHOD"],
            "path": "/prod" + path,
            "stage": "prod",
            "requestId": "fuzz",
            "identity": dict(VISION),
        },
        "body": body,
        "isBase64Encoded": encoded,
    }
    response = functions.api.handler(event, context("api"))
    out = response.get("body") or ""
    payload = base64.b64decode(out) if response.get("isBase64Encoded") else out.encode()
    response_headers = [(k, str(v)) for k, v in (response.get("headers") or {}).items()]
    for key, values in (response.get("multiValueHeaders") or {}).items():
        response_headers += [(key, str(v)) for v in values]
    status = int(response["statusCode"])
    start_response(f"{status} {'OK' if status < 400 else 'Error'}", response_headers)
    return [payload]


def test_the_api_conforms_to_its_openapi_document_under_fuzzing(deployment: Deployment) -> None:
    deployment.clock.freeze()
    schema = schemathesis.openapi.from_wsgi("/openapi.json", lambda_wsgi)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 6, [op.label for op in operations]
    # Some jobs to find, list, change and cancel, besides the ids the fuzzer makes up.
    for i in range(3):
        status, _ = _post({"name": f"seed-{i}", "gpus": 1, "image": "img", "command": ["python"]})
        assert status == 201
    statuses: dict[int, int] = {}
    cases = 0

    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(
                max_examples=MAX_EXAMPLES,
                derandomize=True,
                database=None,
                deadline=None,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            def fuzz(case: Any) -> None:
                nonlocal cases
                response = case.call_and_validate(checks=CHECKS)
                cases += 1
                statuses[response.status_code] = statuses.get(response.status_code, 0) + 1

            try:
                fuzz()
            except Unsatisfiable:
                # An operation with no parameters or body (e.g. GET /pools) has no schema-violating request.
                if mode is not GenerationMode.NEGATIVE:
                    raise

    print(f"schemathesis: {cases} cases, 0 failures; statuses {dict(sorted(statuses.items()))}")
    assert cases >= MIN_CASES
    assert not any(status >= 500 for status in statuses)


def _post(body: dict[str, Any]) -> tuple[int, Any]:
    from .helpers import api_event

    response = functions.api.handler(api_event("POST", "/jobs", identity=VISION, body=body), context("api"))
    return response["statusCode"], json.loads(response["body"])
