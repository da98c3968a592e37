"""What each dashboard view shows, read from the Spotline API through the client's `Endpoint`
(the same requests, credentials and refusals as the CLI's commands).

Nothing here knows HTML: each function returns plain dicts and lists for the templates. Fields
an older API lacks (a job's `cost`, a running job's protection) come back as None and the page
says so, rather than failing.
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from spotline.cli.client import FINAL_STATES, pages
from spotline.cli.http import ClientError, Endpoint

PAGE = 100  # the API's largest page of jobs
LOG_TAIL = 60
HOLDING = ("ADMITTED", "RUNNING", "CHECKPOINTING")  # the states that hold GPUs


def _path(job_id: str) -> str:
    if not job_id or "/" in job_id or len(job_id) > 64:
        raise ClientError(f"{job_id!r} is not a job id", status=404)
    return f"/jobs/{job_id}"


def queue(api: Endpoint, page: str | None = None) -> dict[str, Any]:
    """One page of the team's PENDING jobs: the API's page `page` (its first without one) of
    `GET /jobs?state=PENDING`, one request however long the queue is. The API lists newest
    submissions first; the page's jobs are put in the order the scheduler weighs them (effective
    priority, highest first, then the earliest submission and the id: `rank_key`), `rank` their
    place on this page.

    Returns {"jobs", "rows" (`queue_rows`: an array's elements in one row), "page" (the token of
    this page, None for the first), "next_page" (the API's token of the next, None on the last),
    "page_size"}."""
    params: dict[str, Any] = {"state": "PENDING", "limit": PAGE, "next_token": page}
    answer = api.request("GET", "/jobs", params=params)
    jobs = list(answer.get("jobs") or [])
    jobs.sort(key=rank_key)
    ranked = [{**job, "rank": i} for i, job in enumerate(jobs, 1)]
    return {
        "jobs": ranked,
        "rows": queue_rows(ranked),
        "page": page,
        "next_page": answer.get("next_token") or None,
        "page_size": PAGE,
    }


def queue_rows(jobs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The queue's rows: a job alone, or an array's pending elements as one row at its best
    element's place ({"array_id", "name", "elements", "first"}), its reason shown once."""
    rows: list[dict[str, Any]] = []
    arrays: dict[str, dict[str, Any]] = {}
    for job in jobs:
        array_id = job.get("array_id")
        if not array_id:
            rows.append({"job": job})
            continue
        if array_id not in arrays:
            name = job.get("name", "")
            arrays[array_id] = {"array_id": array_id, "name": name, "elements": [], "first": job}
            rows.append(arrays[array_id])
        arrays[array_id]["elements"].append(job)
    return rows


def rank_key(job: Mapping[str, Any]) -> tuple[float, float, str]:
    """The scheduler's order (`spotline.domain.queue.ranked`, `explain`'s position): effective
    priority, highest first, then the earliest submission, then the id, so tied jobs keep the
    order the Position column gives them."""
    return (-(job.get("effective_priority") or 0.0), job.get("submitted_at") or 0.0, str(job.get("id", "")))


def running(api: Endpoint, now: float | None = None) -> list[dict[str, Any]]:
    """The team's jobs holding GPUs (admitted, running, checkpointing), with the age of their last
    checkpoint; pool kind and protection come from `explain` (`placement`)."""
    now = time.time() if now is None else now
    jobs = [j for state in HOLDING for j in pages(api, "/jobs", "jobs", {"state": state, "limit": PAGE})]
    with ThreadPoolExecutor(max_workers=8) as pool:
        explained = list(pool.map(lambda j: _explain_or_none(api, j["id"]), jobs))
    rows = []
    for job, why in zip(jobs, explained, strict=True):
        checkpoint = job.get("last_checkpoint") or {}
        placement = (why or {}).get("placement") or {}
        rows.append(
            {
                **job,
                "purchase": placement.get("purchase"),
                "protection_left_s": placement.get("protection_left_s"),
                "checkpoint_age_s": now - checkpoint["at"] if checkpoint.get("at") else None,
            }
        )
    rows.sort(key=lambda j: j.get("started_at") or 0.0)
    return rows


def history(
    api: Endpoint, state: str | None = None, since: str | None = None, page: str | None = None
) -> dict[str, Any]:
    """One page of the team's finished jobs (`GET /history`), the latest to end first: `state`
    one of FINAL_STATES (else all), `since` a span (7d, 24h) or an ISO date or time."""
    from spotline.cli.since import since_iso

    chosen = (state or "").upper() or None
    if chosen is not None and chosen not in FINAL_STATES:
        raise ClientError(f"state: {state!r} is not one of {', '.join(sorted(FINAL_STATES))}", status=422)
    try:
        after = since_iso(since) if since else None
    except ClientError as error:  # a span or time the client cannot read
        raise ClientError(str(error).replace("--since", "since"), status=422) from None
    params: dict[str, Any] = {"limit": PAGE, "state": chosen, "since": after, "next_token": page}
    answer = api.request("GET", "/history", params=params)
    return {
        "jobs": list(answer.get("jobs") or []),
        "page": page,
        "next_page": answer.get("next_token") or None,
        "state": chosen,
        "since": since or "",
        "since_iso": after,
        "states": sorted(FINAL_STATES),
    }


def pools(api: Endpoint) -> dict[str, Any]:
    """Every pool: capacity, GPUs used and free, nodes by state, Spot state (`GET /pools`)."""
    found: dict[str, Any] = api.request("GET", "/pools")
    return found


def _explain_or_none(api: Endpoint, job_id: str) -> dict[str, Any] | None:
    try:
        return explain(api, job_id)
    except ClientError as error:
        if error.status is None:
            raise
        return None


def explain(api: Endpoint, job_id: str) -> dict[str, Any]:
    found: dict[str, Any] = api.request("GET", _path(job_id) + "/explain")
    return found


def job(api: Endpoint, job_id: str) -> dict[str, Any]:
    """One job, its timeline (every page), its explanation and the tail of its log."""
    path = _path(job_id)
    view = api.request("GET", path)
    timeline = list(pages(api, path + "/events", "events", {"limit": 500}))
    try:
        logs = api.request("GET", path + "/logs", params={"tail": "true", "limit": LOG_TAIL})
        if not logs.get("lines") and logs.get("runs") and not logs.get("run"):
            # Requeued and waiting: its last run's output.
            params = {"tail": "true", "limit": LOG_TAIL, "run": logs["runs"][-1]}
            logs = api.request("GET", path + "/logs", params=params)
    except ClientError as error:
        if error.status is None:
            raise
        logs = {"lines": [], "error": str(error)}
    return {"job": view, "events": timeline, "explain": _explain_or_none(api, job_id), "logs": logs}


def month_bounds(now: float) -> tuple[float, float, str]:
    """The start and end (epoch seconds, UTC) of `now`'s month, and its YYYY-MM."""
    day = datetime.fromtimestamp(now, UTC)
    start = datetime(day.year, day.month, 1, tzinfo=UTC)
    days = calendar.monthrange(day.year, day.month)[1]
    return start.timestamp(), start.timestamp() + days * 86400.0, f"{day.year:04d}-{day.month:02d}"


def team(api: Endpoint, now: float | None = None) -> dict[str, Any]:
    """The team's month: the API's usage, the GPUs it holds now, its GPU-hours over the month (from
    its jobs' runs) and a forecast of the month's spend."""
    now = time.time() if now is None else now
    start, end, month = month_bounds(now)
    usage: dict[str, Any] = api.request("GET", "/usage", params={"month": month})
    jobs = list(pages(api, "/jobs", "jobs", {"limit": PAGE}))
    holding = [j for j in jobs if j["state"] in HOLDING]
    return {
        "usage": usage,
        "month": month,
        "gpus_now": sum(j["gpus"] * j.get("nodes", 1) for j in holding),
        "series": scaled(usage_series(jobs, start, now), float(usage.get("gpu_hours") or 0.0)),
        "forecast": forecast(usage, start, end, now),
        "start": start,
        "end": end,
        "now": now,
    }


def usage_series(jobs: Sequence[Mapping[str, Any]], start: float, now: float) -> list[tuple[float, float]]:
    """Cumulative GPU-hours since `start`, one point per run start or end: each job's runtime spread
    evenly between its first start and its end (or now). An approximation of the ledger (a
    requeued job's gap counts as running); the month's total is `usage.gpu_hours`."""
    steps: list[tuple[float, float]] = []  # (time, GPU rate change)
    for job in jobs:
        began, ended = job.get("started_at"), job.get("finished_at") or now
        runtime_s = float(job.get("runtime_s") or 0.0)
        if began is None:
            continue
        if job["state"] not in FINAL_STATES:
            runtime_s = max(runtime_s, now - began)
        span = max(ended - began, 1e-9)
        share = min(runtime_s / span, 1.0) if runtime_s > 0 else 1.0
        rate = job["gpus"] * job.get("nodes", 1) * share / 3600.0
        lo, hi = max(began, start), min(ended, now)
        if hi > lo:
            steps += [(lo, rate), (hi, -rate)]
    steps.sort()
    points, total, rate, last = [(start, 0.0)], 0.0, 0.0, start
    for t, change in steps:
        total += rate * (t - last)
        points.append((t, total))
        rate, last = rate + change, t
    points.append((now, total + rate * (now - last)))
    return points


def scaled(series: list[tuple[float, float]], total: float) -> list[tuple[float, float]]:
    """The series scaled so that it ends at the ledger's `total` (its shape is the jobs')."""
    last = series[-1][1] if series else 0.0
    if last <= 0 or total <= 0:
        return series
    return [(t, v * total / last) for t, v in series]


def projected(gpu_hours: float, start: float, end: float, now: float) -> float:
    """The month's GPU-hours at their pace so far (at least an hour of the month counted)."""
    return gpu_hours * (end - start) / max(now - start, 3600.0)


def forecast(usage: Mapping[str, Any], start: float, end: float, now: float) -> dict[str, Any]:
    """The month's spend at its pace so far (dollars / elapsed share of the month), unless the API
    gives its own forecast (`forecast_usd`), which wins."""
    given = usage.get("forecast_usd")
    if isinstance(given, int | float):
        return {"usd": float(given), "method": "the API's forecast"}
    spent = float(usage.get("dollars") or 0.0)
    elapsed = max(now - start, 3600.0)
    return {
        "usd": round(spent * (end - start) / elapsed, 2),
        "method": "the month's spend so far at its pace to date (linear)",
    }
