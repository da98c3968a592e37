"""The HTTP API (architecture.md, "HTTP API"): API Gateway REST with IAM authorization.

The caller's team comes from `requestContext.identity` (the principal ARN, or locally the access
key) mapped through the deployment's identities, never from the body. Request bodies and
queries are validated by the resolver against pydantic models (422 naming the field), and the
project's errors map to status codes in `_error_response`, the one place that does it.
"""

from __future__ import annotations

import base64
import json
import re
from types import UnionType
from typing import Annotated, Any, Literal

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
from aws_lambda_powertools.event_handler.openapi.params import Body, Header, Path, Query
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel, ConfigDict

from functions.runtime import control_plane, loaded, logger, tracer
from spotline.control import arrays
from spotline.control import jobs as service
from spotline.control import logs as logs_service
from spotline.control import usage as usage_service
from spotline.control.errors import (
    CapacityExhausted,
    ConditionFailed,
    Conflict,
    InvalidRequest,
    ItemTooLarge,
    JobNotFound,
    SpotlineError,
    StorageUnavailable,
    Unauthorized,
)
from spotline.control.jobs import JobChanges, JobView
from spotline.control.lifecycle import iso
from spotline.control.settings import SettingsError
from spotline.domain import JobSpec, JobState

API_TITLE = "Spotline"
API_VERSION = "1.0.0"

app = APIGatewayRestResolver(enable_validation=True)


class View(BaseModel):
    """A response body: its validator is built on first use, so a cold start builds only those
    of the routes it serves."""

    model_config = ConfigDict(defer_build=True)


class ErrorDetail(View):
    loc: list[str | int]
    msg: str
    type: str


class ErrorBody(View):
    """Every error response: the status, a message naming what is wrong, and for bad input the
    fields (pydantic's shape: loc, msg, type)."""

    statusCode: int  # the resolver's own error bodies (e.g. an unknown route) use this name
    message: str
    detail: list[ErrorDetail] | None = None


_ERROR_DESCRIPTIONS = {
    400: "The body is not JSON",
    405: "The path has no such method: `Allow` lists those it has",
    415: "The body is not `application/json`",
    402: "The team's hard budget for the month is spent",
    403: "The caller's identity belongs to no team (or its team has no quota here)",
    404: "No such job in the caller's team",
    409: "The job's state does not allow this (e.g. it already finished)",
    413: "The job would not fit in one stored item (400 KB)",
    422: "A field is invalid: `detail` names it",
    500: "Internal error",
    503: "Storage throttled or unavailable: retry later",
}


def _responses(
    ok: int, model: type[BaseModel] | UnionType | None, *errors: int, **more_ok: str
) -> dict[int, Any]:
    """The OpenAPI responses of a route: its success(es) and every error status it can return
    (`model` None: a JSON object)."""
    json_model: dict[str, Any] = {
        content_types.APPLICATION_JSON: {"model": model} if model else {"schema": {"type": "object"}}
    }
    found: dict[int, Any] = {ok: {"description": "Created" if ok == 201 else "OK", "content": json_model}}
    for code, description in more_ok.items():
        found[int(code.lstrip("_"))] = {"description": description, "content": json_model}
    for code in (*errors, 403, 405, 415, 422, 500, 503):
        found[code] = {
            "description": _ERROR_DESCRIPTIONS[code],
            "content": {content_types.APPLICATION_JSON: {"model": ErrorBody}},
        }
    return found


class JobList(View):
    jobs: list[JobView]
    next_token: str | None = None


class Timeline(View):
    """A job's timeline, oldest first. Each event: `seq`, `t` (epoch seconds) and `at` (ISO-8601),
    `from`, `to`, `reason`, and `kind`: submitted, admitted, started, preemption, move,
    spot-warning, host-loss, requeue, checkpoint, change or finished."""

    job_id: str
    events: list[dict[str, Any]]
    next_token: str | None = None


def _team() -> str:
    identity = app.current_event.raw_event.get("requestContext", {}).get("identity") or {}
    return service.team_for_identity(control_plane(), identity)


def _view(record: Any) -> JobView:
    plane = control_plane()
    return service.job_view(plane, record, plane.clock())


class ArrayView(View):
    """An array (a spec with `array` or `sweep`): its counts by state and its elements."""

    id: str
    name: str
    team: str
    size: int
    state: str
    written: int
    max_running: int | None
    holding_gpus: int
    finished: int
    counts: dict[str, int]
    submitted_at: float
    jobs: list[JobView]


def _array_view(array: Any, records: list[Any]) -> ArrayView:
    plane = control_plane()
    now = plane.clock()
    usage = plane.ledger.fairshare_usage()
    return ArrayView(
        **arrays.array_summary(array, records), jobs=[service.job_view(plane, r, now, usage) for r in records]
    )


@app.post(
    "/jobs",
    summary="Submit a job, or an array of jobs (a spec with `array` or `sweep`)",
    responses=_responses(
        201,
        JobView | ArrayView,
        400,
        402,
        413,
        _200="The job (or array) an earlier request with this key made",
    ),
)
def submit(
    spec: Annotated[JobSpec, Body(description="The job spec")],
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key", max_length=128)] = None,
    require_feasible: Annotated[
        bool,
        Query(
            description="Refuse (422 naming `deadline`, nothing stored) a job whose deadline cannot be"
            " promised: its `deadline_answer` would be `cannot` or `unknown`"
        ),
    ] = False,
) -> Response[JobView | ArrayView]:
    # The resolver checked the body's shape; the service checks it against the clock and the
    # deployment (deadline, GPU type, priority allowed, a pool that can host it).
    body = spec.model_dump(mode="json", exclude_unset=True)
    if spec.is_array:
        array, records, created = service.submit_array_request(
            control_plane(), _team(), body, idempotency_key=idempotency_key
        )
        return Response(
            status_code=201 if created else 200,
            content_type=content_types.APPLICATION_JSON,
            body=_array_view(array, records),
        )
    record, created = service.submit_job(
        control_plane(), _team(), body, idempotency_key=idempotency_key, require_feasible=require_feasible
    )
    return Response(
        status_code=201 if created else 200, content_type=content_types.APPLICATION_JSON, body=_view(record)
    )


@app.get(
    "/arrays/<array_id>",
    summary="An array: counts by state, and its elements",
    responses=_responses(200, ArrayView, 404),
)
def get_array(array_id: Annotated[str, Path(max_length=64)]) -> ArrayView:
    return _array_view(*arrays.get_array(control_plane(), _team(), array_id))


@app.delete(
    "/arrays/<array_id>",
    summary="Cancel an array's unfinished elements (all, or those `elements` names)",
    responses=_responses(200, ArrayView, 404),
)
def cancel_array(
    array_id: Annotated[str, Path(max_length=64)],
    elements: Annotated[
        str | None, Query(max_length=256, description="Array indexes, e.g. 3,5-7 (default: all)")
    ] = None,
) -> ArrayView:
    return _array_view(*service.cancel_array(control_plane(), _team(), array_id, elements))


@app.get(
    "/arrays/<array_id>/explain",
    summary="Why an array's elements wait: counts by state, and its first waiting element explained",
    responses=_responses(200, None, 404),
)
def explain_array(array_id: Annotated[str, Path(max_length=64)]) -> dict[str, Any]:
    from spotline.control import insight

    return insight.explain_array(control_plane(), _team(), array_id)


@app.get("/jobs", summary="List the team's jobs", responses=_responses(200, JobList))
def list_jobs(
    state: Annotated[JobState | None, Query(description="Only jobs in this state")] = None,
    next_token: Annotated[str | None, Query(max_length=2048)] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
) -> JobList:
    plane = control_plane()
    records, token = service.list_jobs(plane, _team(), state=state, limit=limit, next_token=next_token)
    now = plane.clock()
    usage = plane.ledger.fairshare_usage()  # once for the page
    return JobList(jobs=[service.job_view(plane, r, now, usage) for r in records], next_token=token)


@app.get("/jobs/<job_id>", summary="One job", responses=_responses(200, JobView, 404))
def get_job(job_id: Annotated[str, Path(max_length=64)]) -> JobView:
    plane = control_plane()
    return service.job_view(plane, service.get_job(plane, _team(), job_id), plane.clock())


@app.delete("/jobs/<job_id>", summary="Cancel a job", responses=_responses(200, JobView, 404, 409))
def cancel_job(job_id: Annotated[str, Path(max_length=64)]) -> JobView:
    plane = control_plane()
    return service.job_view(plane, service.cancel_job(plane, _team(), job_id), plane.clock())


@app.patch(
    "/jobs/<job_id>",
    summary="Change a job's priority class or deadline",
    responses=_responses(200, JobView, 400, 404, 409),
)
def update_job(
    job_id: Annotated[str, Path(max_length=64)], changes: Annotated[JobChanges, Body()]
) -> JobView:
    plane = control_plane()
    return service.job_view(plane, service.update_job(plane, _team(), job_id, changes), plane.clock())


@app.get(
    "/jobs/<job_id>/events",
    summary="The job's timeline: every transition with its reason",
    responses=_responses(200, Timeline, 404),
)
def job_events(
    job_id: Annotated[str, Path(max_length=64)],
    next_token: Annotated[str | None, Query(max_length=2048)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> Timeline:
    entries, token = service.job_events(control_plane(), _team(), job_id, limit=limit, next_token=next_token)
    events = [{**e.to_json(), "at": iso(e.at)} for e in entries]  # "t": epoch seconds, "at": ISO-8601
    return Timeline(job_id=job_id, events=events, next_token=token)


class LogLineView(View):
    message: str
    timestamp: float | None = None


class JobLogsView(View):
    job_id: str
    # The run read (its Batch job id; None: the job has not run yet) and every run of the job.
    run: str | None
    runs: list[str]
    lines: list[LogLineView]
    # Each run's number (1: the first admission) by its Batch job id, where the reader can tell.
    run_numbers: dict[str, int] = {}
    # Pass it back to continue forward (also after `tail`, to follow the log).
    next_token: str | None = None


@app.get(
    "/jobs/<job_id>/logs",
    summary="The job's training log: a run's lines, a page at a time",
    responses=_responses(200, JobLogsView, 404),
)
def job_logs(
    job_id: Annotated[str, Path(max_length=64)],
    run: Annotated[
        str | None, Query(max_length=128, description="A run (Batch job id); default: the current or last")
    ] = None,
    next_token: Annotated[str | None, Query(max_length=4096)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    tail: Annotated[bool, Query(description="The last `limit` lines instead of the first")] = False,
) -> JobLogsView:
    found = logs_service.job_logs(
        control_plane(), _team(), job_id, run=run, next_token=next_token, limit=limit, tail=tail
    )
    return JobLogsView(
        job_id=found.job_id,
        run=found.run,
        runs=found.runs,
        run_numbers=found.numbers,
        lines=[LogLineView(message=line.message, timestamp=line.timestamp) for line in found.page.lines],
        next_token=found.page.next_token,
    )


# --- explanations and usage ------------------------------------------------------------


@app.get(
    "/jobs/<job_id>/explain",
    summary="Why the job waits, where it runs, or who preempted it",
    responses=_responses(200, None, 404),
)
def explain_job(job_id: Annotated[str, Path(max_length=64)]) -> dict[str, Any]:
    from spotline.control import insight  # on first use: the other routes' cold start skips it

    return insight.explain_job(control_plane(), _team(), job_id)


@app.get(
    "/admin/history",
    summary="The deployment's history since a time, every team's, and its cluster (admins only)",
    responses=_responses(200, None),
)
def admin_history(
    since: Annotated[str, Query(max_length=64, description="Jobs submitted at or after this ISO-8601 time")],
    include_names: Annotated[
        bool, Query(description="Job names and commands as given, not as digests")
    ] = False,
    next_token: Annotated[str | None, Query(max_length=2048)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 200,
) -> dict[str, Any]:
    from spotline.control import history_export  # on first use, as explain

    identity = app.current_event.raw_event.get("requestContext", {}).get("identity") or {}
    return history_export.export_page(
        control_plane(),
        identity,
        since=history_export.parse_since(since),
        include_names=include_names,
        limit=limit,
        next_token=next_token,
    )


@app.get(
    "/usage",
    summary="The team's GPU-hours, dollars, Spot share, lost work and budget for a month",
    responses=_responses(200, None),
)
def usage(
    month: Annotated[str | None, Query(description="YYYY-MM (default: this month)", max_length=7)] = None,
    team: Annotated[str | None, Query(description="The caller's team (the only one it may read)")] = None,
    by: Annotated[
        Literal["job"] | None, Query(description="job: each job's cost since submission, newest first")
    ] = None,
    next_token: Annotated[str | None, Query(max_length=2048)] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
) -> dict[str, Any]:
    if by == "job":
        return service.jobs_usage(control_plane(), _team(), team=team, limit=limit, next_token=next_token)
    return usage_service.team_usage(control_plane(), _team(), team=team, month=month)


@app.get(
    "/history",
    summary="The team's finished jobs, the latest to end first, by state and end time",
    responses=_responses(200, JobList),
)
def history(
    state: Annotated[JobState | None, Query(description="SUCCEEDED, FAILED or CANCELLED")] = None,
    since: Annotated[
        str | None, Query(max_length=64, description="Ended at or after this ISO-8601 time (with a zone)")
    ] = None,
    team: Annotated[str | None, Query(description="The caller's team (the only one it may read)")] = None,
    next_token: Annotated[str | None, Query(max_length=2048)] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
) -> JobList:
    from spotline.control import history as history_service

    plane = control_plane()
    records, token = history_service.finished_jobs(
        plane, _team(), team=team, state=state, since=since, limit=limit, next_token=next_token
    )
    now = plane.clock()
    usage = plane.ledger.fairshare_usage()
    return JobList(jobs=[service.job_view(plane, r, now, usage) for r in records], next_token=token)


@app.get(
    "/pools",
    summary="Each pool: capacity, GPUs used and free, its nodes by state, its Spot state",
    responses=_responses(200, None),
)
def pools() -> dict[str, Any]:
    from spotline.control import pools as pools_service  # on first use, as explain

    return pools_service.pools_view(control_plane(), _team())


@app.get("/openapi.json", summary="This API's OpenAPI document", include_in_schema=False)
def openapi() -> Response[str]:
    return Response(
        status_code=200,
        content_type=content_types.APPLICATION_JSON,
        body=app.get_openapi_json_schema(title=API_TITLE, version=API_VERSION),
    )


# --- errors: the one mapping from the project's errors to HTTP -----------------------------

_STATUS: tuple[tuple[type[Exception], int], ...] = (
    (InvalidRequest, 422),
    (usage_service.BudgetExceeded, 402),
    (ItemTooLarge, 413),
    (Unauthorized, 403),
    (JobNotFound, 404),
    (Conflict, 409),
    (CapacityExhausted, 409),
    (ConditionFailed, 409),
    (StorageUnavailable, 503),
    (SettingsError, 500),
    (SpotlineError, 500),
)


def _error_response(status: int, message: str, detail: list[dict[str, Any]] | None = None) -> Response[Any]:
    body: dict[str, Any] = {"statusCode": status, "message": message}
    if detail is not None:
        body["detail"] = detail
    return Response(status_code=status, content_type=content_types.APPLICATION_JSON, body=body)


@app.exception_handler([SpotlineError, SettingsError])  # type: ignore[untyped-decorator]
def _project_error(error: Exception) -> Response[Any]:
    status = next(code for kind, code in _STATUS if isinstance(error, kind))
    if status >= 500:
        logger.exception("request failed")
    detail = error.errors if isinstance(error, InvalidRequest) else None
    message = str(error) if status < 500 else "internal error"
    return _error_response(status, message, detail)


@app.exception_handler(RequestValidationError)  # type: ignore[untyped-decorator]
def _invalid_request(error: RequestValidationError) -> Response[Any]:
    errors = [
        {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
        for e in error.errors()
    ]
    message = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in errors)
    # A body that is not JSON at all is a malformed request (400); JSON with a bad field is 422.
    status = 400 if any(e["type"] == "json_invalid" for e in errors) else 422
    return _error_response(status, message or "invalid request", errors)


def _refusal(status: int, message: str, loc: str, kind: str, **headers: str) -> dict[str, Any]:
    """An API Gateway proxy response in the documented error shape (ErrorBody)."""
    detail = [{"loc": [loc], "msg": message, "type": kind}]
    return {
        "statusCode": status,
        "headers": {"Content-Type": content_types.APPLICATION_JSON, **headers},
        "body": json.dumps({"statusCode": status, "message": message, "detail": detail}),
        "isBase64Encoded": False,
    }


# The OpenAPI document's path templates as patterns, and each one's methods (built on first use).
_ROUTE_METHODS: list[tuple[re.Pattern[str], frozenset[str]]] = []
_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


def _route_methods() -> list[tuple[re.Pattern[str], frozenset[str]]]:
    if not _ROUTE_METHODS:
        document = app.get_openapi_schema(title=API_TITLE, version=API_VERSION)
        for template, item in (document.paths or {}).items():
            pattern = re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template))
            methods = frozenset(m.upper() for m in _METHODS if getattr(item, m, None) is not None)
            _ROUTE_METHODS.append((re.compile(f"^{pattern}/?$"), methods))
    return _ROUTE_METHODS


def _refused_request(event: dict[str, Any]) -> dict[str, Any] | None:
    """What the resolver would get wrong, refused before it runs, each in the documented error
    shape:

    - 405 (with `Allow`) for a method a known path does not have (PUT /jobs, QUERY, TRACE...),
      where the resolver would answer 404;
    - 415 for a body that is not `application/json` (a form, multipart), which the resolver
      would try to read as JSON or crash on;
    - 422 for a JSON body that is not an object (an array, a number, a string): the resolver
      would validate the array's first element and drop the rest, silently;
    - 400 for a body its JSON parsing would crash on rather than refuse: bytes that are not
      UTF-8, an integer of more than 4300 digits, nesting deeper than the parser's stack.
      (A body that is merely not JSON the resolver refuses itself, see `_invalid_request`.)"""
    method = str(event.get("httpMethod") or "").upper()
    path = str(event.get("path") or "")
    allowed = next((methods for pattern, methods in _route_methods() if pattern.match(path)), None)
    if allowed is not None and method not in allowed:
        listed = ", ".join(sorted(allowed))
        return _refusal(
            405,
            f"method {method} not allowed on {path}; allowed: {listed}",
            "method",
            "method_not_allowed",
            Allow=listed,
        )
    body = event.get("body")
    if not body or not isinstance(body, str):
        return None
    headers = {str(k).lower(): str(v) for k, v in (event.get("headers") or {}).items()}
    media_type = headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media_type and media_type != content_types.APPLICATION_JSON and not media_type.endswith("+json"):
        return _refusal(
            415,
            f"Content-Type {media_type!r}: the body must be application/json",
            "header",
            "unsupported_media_type",
        )
    try:
        text = base64.b64decode(body, validate=True).decode() if event.get("isBase64Encoded") else body
        value = json.loads(text)
    except json.JSONDecodeError:
        return None  # the resolver answers 400 naming the position
    except (ValueError, RecursionError) as error:  # UnicodeDecodeError and binascii.Error included
        return _refusal(
            400,
            f"body: not a JSON document this API can read ({type(error).__name__})",
            "body",
            "json_invalid",
        )
    if not isinstance(value, dict):
        kind = "array" if isinstance(value, list) else type(value).__name__
        return _refusal(
            422, f"body: expected a JSON object, got a JSON {kind}", "body", "model_attributes_type"
        )
    return None


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST, clear_state=True)
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return _refused_request(event) or app.resolve(event, context)


loaded()
