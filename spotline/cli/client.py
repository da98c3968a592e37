"""The team's client commands: submit, status, list, events, explain, priority, deadline, cancel,
watch, logs, usage, and configure. What they print is `spotline.cli.render`'s; their common
options are `spotline.cli.common`'s.

Every command takes `--output table|json|yaml`, `--endpoint local|URL`, `--team` (local) and
`--profile` (AWS). Exit codes: 0 ok; 1 refused or failed (an API error, an unreachable
endpoint, missing credentials, a watched job that FAILED); 2 usage error (bad options, a spec
file that cannot be read). Errors are one line on stderr, never a traceback.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from spotline.cli import render_arrays
from spotline.cli.common import ProfileOpt, Session, client_command, reported
from spotline.cli.http import EXIT_FAILED, EXIT_USAGE, LOCAL, ClientError, Endpoint, write_config
from spotline.cli.render import (
    Output,
    console,
    events_table,
    explain_view,
    iso,
    job_table,
    jobs_table,
    usage_table,
)

FINAL_STATES = {"SUCCEEDED", "FAILED", "CANCELLED"}
PRIORITIES = ("critical", "high", "normal", "low")

# --- API calls ----------------------------------------------------------------------------


def pages(
    api: Endpoint, path: str, key: str, params: dict[str, Any] | None = None
) -> Iterator[dict[str, Any]]:
    """Every item of a paged listing (`next_token` followed)."""
    query = dict(params or {})
    while True:
        page = api.request("GET", path, params=query)
        yield from page.get(key) or []
        token = page.get("next_token")
        if not token:
            return
        query["next_token"] = token


def _job_path(job_id: str) -> str:
    if not job_id or "/" in job_id or len(job_id) > 64:
        raise ClientError(f"ID: {job_id!r} is not a job id", EXIT_USAGE)
    return f"/jobs/{job_id}"


def _is_array(some_id: str) -> bool:
    return some_id.startswith("arr-")


def _array_path(array_id: str) -> str:
    if "/" in array_id or len(array_id) > 64:
        raise ClientError(f"ID: {array_id!r} is not an array id", EXIT_USAGE)
    return f"/arrays/{array_id}"


@contextmanager
def _found_or_hint(session: Session, job_id: str) -> Iterator[None]:
    """A 404 for `job_id` says whose job it is and how to ask as that team, where it can tell
    (locally every team's key is in local.json), or how to ask as another team."""
    try:
        yield
    except ClientError as error:
        if error.status != 404 or _is_array(job_id):
            raise
        raise ClientError(f"{error}; {_whose(session, job_id)}", error.exit_code, 404) from None


def _whose(session: Session, job_id: str) -> str:
    api = session.api
    if api.kind != LOCAL:
        return (
            "a job of another team is seen only as that team: ask with that team's identity"
            " (--profile PROFILE, or its AWS credentials)"
        )
    import json

    from spotline.cli.http import resolve, state_dir

    try:
        teams = list(json.loads((state_dir() / "local.json").read_text()).get("teams") or {})
    except (OSError, ValueError):
        teams = []
    for team in teams:
        if team == api.team:
            continue
        try:
            resolve(LOCAL, team=team).request("GET", _job_path(job_id))
        except ClientError:
            continue
        return f"it is team {team}'s job, not {api.team}'s: ask as that team with --team {team}"
    others = [t for t in teams if t != api.team]
    return f"no local team has it (asked as {api.team}{'; also ' + ', '.join(others) if others else ''})"


def _with_timeline(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**e, "at": iso(e.get("t"))} for e in events]


# A submission that fails on the way (no answer, or a 5xx: a Lambda timeout, a throttled write) is
# sent again with the same Idempotency-Key, so the API returns the job (or finishes writing the
# array) that the first attempt may have created, never a second one.
SUBMIT_ATTEMPTS = 3
RETRYABLE_STATUSES = frozenset({500, 502, 503, 504})


def post_idempotent(
    api: Any, path: str, body: Any, key: str, *, attempts: int = SUBMIT_ATTEMPTS, pause_s: float = 1.0
) -> Any:
    """POST `body` with `key` as its Idempotency-Key, retrying a failure that may not have been
    the server's final answer (no response, or a 5xx) up to `attempts` times in all."""
    headers = {"Idempotency-Key": key}
    for attempt in range(1, attempts):
        try:
            return api.request("POST", path, body=body, headers=headers)
        except ClientError as error:
            if error.status is not None and error.status not in RETRYABLE_STATUSES:
                raise
            time.sleep(pause_s * attempt)
    return api.request("POST", path, body=body, headers=headers)


# --- commands -----------------------------------------------------------------------------


def submit(
    session: Session,
    file: Annotated[Path, typer.Argument(help="The job spec, YAML or JSON.", show_default=False)],
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Override a field: key=value (dotted keys nest).")
    ] = None,
    idempotency_key: Annotated[
        str | None,
        typer.Option(
            "--idempotency-key",
            help="Retries with the same key return the same job (default: a new key per command, "
            "which the command's own retries reuse).",
        ),
    ] = None,
    require_feasible: Annotated[
        bool,
        typer.Option(
            "--require-feasible",
            help="Refuse (exit 1, nothing submitted) a job whose deadline cannot be promised.",
        ),
    ] = False,
) -> None:
    """Submit a job from FILE; prints the job (its `id` with --output json). A job with a
    deadline gets its answer: meets it, meets it only On-Demand (at about $X), or cannot."""
    from spotline.cli import specfile  # YAML: only where a spec is read

    spec = specfile.load(file, set_ or ())
    path = "/jobs?require_feasible=true" if require_feasible else "/jobs"
    try:
        job = post_idempotent(session.api, path, spec.body, idempotency_key or f"cli-{uuid.uuid4()}")
    except ClientError as error:
        if error.status == 422 and error.detail:
            parts = []
            for item in error.detail:
                loc = [str(p) for p in item.get("loc") or []]
                name = ".".join(p for p in loc if p != "body") or "spec"
                parts.append(f"{spec.where(loc)}: {name}: {item.get('msg', '')}")
            raise ClientError("spec refused: " + "; ".join(parts), EXIT_FAILED, 422) from None
        raise
    session.emit(job, render_arrays.array_view if "jobs" in job else job_table)


def status(
    session: Session,
    job_id: Annotated[str, typer.Argument(metavar="ID", show_default=False)],
) -> None:
    """A job's state, priority, pool, instance, last checkpoint and wait reason. Also its cost so
    far; for an array (arr-...), its counts by state and its elements."""
    api = session.api
    if _is_array(job_id):
        session.emit(api.request("GET", _array_path(job_id)), render_arrays.array_view)
        return
    with _found_or_hint(session, job_id):
        job = api.request("GET", _job_path(job_id))
    session.emit(job, job_table)


def list_(
    session: Session,
    state: Annotated[
        str | None, typer.Option("--state", help="Only jobs in this state (e.g. PENDING).")
    ] = None,
    all_: Annotated[bool, typer.Option("--all", help="Include finished jobs.")] = False,
    array: Annotated[
        str | None, typer.Option("--array", metavar="ID", help="Only the elements of this array.")
    ] = None,
    expand: Annotated[
        bool, typer.Option("--expand", help="Each array's elements below its row (the table only).")
    ] = False,
) -> None:
    """The team's jobs: unfinished ones, or all with --all (every page is read). An array (a
    sweep) is one row with its elements counted by state; --expand lists them under it."""
    api = session.api
    params = {"state": state.upper()} if state else {}
    if array is not None:
        jobs = api.request("GET", _array_path(array))["jobs"]
        if state:
            jobs = [j for j in jobs if j["state"] == state.upper()]
    else:
        jobs = list(pages(api, "/jobs", "jobs", params))
    if not all_ and not state:
        jobs = [j for j in jobs if j["state"] not in FINAL_STATES]
    if array is not None:
        session.emit(jobs, jobs_table)
        return
    session.emit(jobs, lambda found: render_arrays.jobs_and_arrays_table(found, expand=expand))


def events(
    session: Session,
    job_id: Annotated[str, typer.Argument(metavar="ID", show_default=False)],
) -> None:
    """The job's timeline: every transition with its reason."""
    api = session.api
    with _found_or_hint(session, job_id):
        found = list(pages(api, _job_path(job_id) + "/events", "events"))
    timeline = {"job_id": job_id, "events": _with_timeline(found)}
    session.emit(timeline, events_table)


def explain(
    session: Session,
    job_id: Annotated[str, typer.Argument(metavar="ID", show_default=False)],
) -> None:
    """Why the job waits, where and why it runs, or who preempted it; and its estimated start.
    For a job held by its dependencies, the job it waits for; for an array, its first waiting
    element."""
    api = session.api
    if _is_array(job_id):
        session.emit(api.request("GET", _array_path(job_id) + "/explain"), render_arrays.array_explain_view)
        return
    with _found_or_hint(session, job_id):
        why = api.request("GET", _job_path(job_id) + "/explain")
    session.emit(why, explain_view)


def priority(
    session: Session,
    job_id: Annotated[str, typer.Argument(metavar="ID", show_default=False)],
    new_class: Annotated[
        str, typer.Argument(metavar="CLASS", help="critical, high, normal or low.", show_default=False)
    ],
) -> None:
    """Change a job's priority class."""
    if new_class not in PRIORITIES:
        raise ClientError(f"CLASS: {new_class!r} is not one of {', '.join(PRIORITIES)}", EXIT_USAGE)
    api = session.api
    session.emit(api.request("PATCH", _job_path(job_id), body={"priority": new_class}), job_table)


def deadline(
    session: Session,
    job_id: Annotated[str, typer.Argument(metavar="ID", show_default=False)],
    when: Annotated[str, typer.Argument(metavar="ISO", help="e.g. 2026-12-01T18:00:00Z", show_default=False)],
) -> None:
    """Change a job's deadline (ISO-8601 with a zone)."""
    try:
        parsed = datetime.fromisoformat(when.replace("Z", "+00:00"))
    except ValueError:
        raise ClientError(f"ISO: {when!r} is not an ISO-8601 time", EXIT_USAGE) from None
    if parsed.tzinfo is None:
        raise ClientError(f"ISO: {when!r} has no zone (add Z or +HH:MM)", EXIT_USAGE)
    api = session.api
    session.emit(api.request("PATCH", _job_path(job_id), body={"deadline": parsed.isoformat()}), job_table)


def cancel(
    session: Session,
    job_ids: Annotated[list[str], typer.Argument(metavar="ID...", show_default=False)],
    elements: Annotated[
        str | None,
        typer.Option("--elements", help="For an array ID: only these indexes, e.g. 3,5-7 (default: all)."),
    ] = None,
) -> None:
    """Cancel jobs (each is tried; the exit code is 1 if any could not be cancelled). An array
    id (arr-...) cancels its unfinished elements, or those --elements names."""
    api = session.api
    if elements is not None and not all(_is_array(j) for j in job_ids):
        raise ClientError("--elements: applies to array ids (arr-...) only", EXIT_USAGE)
    done: list[dict[str, Any]] = []
    failed: list[str] = []
    for job_id in job_ids:
        try:
            if _is_array(job_id):
                params = {"elements": elements} if elements is not None else None
                done += api.request("DELETE", _array_path(job_id), params=params)["jobs"]
                continue
            done.append(api.request("DELETE", _job_path(job_id)))
        except ClientError as error:
            if error.status is None:
                raise
            failed.append(f"{job_id}: {error}")
    session.emit(done, jobs_table)
    if failed:
        raise ClientError("; ".join(failed))


def watch(
    session: Session,
    job_id: Annotated[str | None, typer.Argument(metavar="[ID]", show_default=False)] = None,
    interval_s: Annotated[float, typer.Option("--interval", help="Seconds between refreshes.")] = 2.0,
) -> None:
    """A live view until the job ends (or, without ID, until the team has no unfinished job).
    Exit 1 when the watched job FAILED. With --output json|yaml, prints each change instead."""
    api = session.api

    def read() -> tuple[Any, bool]:
        if job_id:
            job = api.request("GET", _job_path(job_id))
            timeline = _with_timeline(list(pages(api, _job_path(job_id) + "/events", "events")))
            return {"job": job, "events": timeline}, job["state"] in FINAL_STATES
        jobs = [j for j in pages(api, "/jobs", "jobs") if j["state"] not in FINAL_STATES]
        return {"jobs": jobs}, not jobs

    def view(data: dict[str, Any]) -> Any:
        from rich.console import Group

        if "job" in data:
            return Group(
                job_table(data["job"]), events_table({"job_id": job_id, "events": data["events"][-10:]})
            )
        return jobs_table(data["jobs"])

    data, ended = read()
    if session.output is not Output.table:
        last = None
        while True:
            if data != last:
                session.emit(data, view)
                last = data
            if ended:
                break
            time.sleep(interval_s)
            data, ended = read()
    else:
        from rich.live import Live  # only for a live view

        with Live(view(data), console=console, auto_refresh=False, transient=False) as live:
            while not ended:
                time.sleep(interval_s)
                data, ended = read()
                live.update(view(data), refresh=True)
    if job_id and data["job"]["state"] == "FAILED":
        raise ClientError(f"job {job_id} FAILED: {data['job'].get('state_reason', '')}")


def logs(
    session: Session,
    job_id: Annotated[str, typer.Argument(metavar="ID", show_default=False)],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing until the job ends.")] = False,
    interval_s: Annotated[
        float, typer.Option("--interval", help="Seconds between reads with --follow.")
    ] = 2.0,
    run: Annotated[
        int | None,
        typer.Option("--run", metavar="N", min=1, help="The job's Nth run (1: its first; default: latest)."),
    ] = None,
    all_runs: Annotated[bool, typer.Option("--all", help="Every run's output, the first run first.")] = False,
) -> None:
    """The run's output (CloudWatch Logs on AWS, the process log locally). A requeued job has one
    run per start: --run N prints the Nth, --all every one under a header line."""
    if all_runs and (follow or run is not None):
        raise ClientError("--all: give it without --follow or --run", EXIT_USAGE)
    api = session.api
    path = _job_path(job_id) + "/logs"
    if run is None and not all_runs:
        with _found_or_hint(session, job_id):
            lines = _read_run(session, job_id, None, follow=follow, interval_s=interval_s)
        if session.output is not Output.table:
            session.emit({"job_id": job_id, "lines": lines}, lambda d: d)
        return
    with _found_or_hint(session, job_id):
        first = api.request("GET", path, params={"limit": 1})
    ordered = runs_in_order(first)
    if not ordered:
        raise ClientError(f"job {job_id} has not run yet: it has no output")
    if run is not None and run > len(ordered):
        raise ClientError(f"--run: job {job_id} has run {len(ordered)} time(s), not {run}", EXIT_USAGE)
    chosen = [run] if run is not None else list(range(1, len(ordered) + 1))
    found = []
    for number in chosen:
        batch_job_id = ordered[number - 1]
        if all_runs and session.output is Output.table:
            console.out(f"== run {number} of {len(ordered)} ({batch_job_id}) ==", highlight=False)
        lines = _read_run(session, job_id, batch_job_id, follow=follow, interval_s=interval_s)
        found.append({"run": number, "batch_job_id": batch_job_id, "lines": lines})
    if session.output is not Output.table:
        data = found[0] if run is not None else {"runs": found}
        session.emit({"job_id": job_id, **data}, lambda d: d)


def runs_in_order(page: dict[str, Any]) -> list[str]:
    """The job's runs (Batch job ids), the first first, from a page of `GET /jobs/{id}/logs`:
    by the run numbers the API gives (`run_numbers`), else the current run (the page's `run`)
    last."""
    runs = [str(r) for r in page.get("runs") or []]
    numbers = page.get("run_numbers") or {}
    if runs and all(r in numbers for r in runs):
        return sorted(runs, key=lambda r: int(numbers[r]))
    current = page.get("run")
    if current in runs:
        runs.remove(current)
        runs.append(current)
    return runs


def _read_run(
    session: Session, job_id: str, batch_job_id: str | None, *, follow: bool, interval_s: float
) -> list[dict[str, Any]]:
    """Every line of one run (None: the current or last), printed as read in table mode; with
    `follow`, until the job ends."""
    api = session.api
    path = _job_path(job_id) + "/logs"
    token: str | None = None
    collected: list[dict[str, Any]] = []
    while True:
        params: dict[str, Any] = {"next_token": token} if token else {}
        if batch_job_id is not None:
            params["run"] = batch_job_id
        page = api.request("GET", path, params=params)
        lines = _log_lines(page)
        collected.extend(lines)
        if session.output is Output.table:
            for line in lines:
                console.out(line["message"], highlight=False)
        new_token = page.get("next_token") if isinstance(page, dict) else None
        if new_token and new_token != token and lines:
            token = new_token
            continue  # more already there
        token = new_token or token
        if not follow:
            return collected
        if api.request("GET", _job_path(job_id))["state"] in FINAL_STATES and not lines:
            return collected
        time.sleep(interval_s)


def _log_lines(page: Any) -> list[dict[str, Any]]:
    """The lines of one page of GET /jobs/{id}/logs: `lines` (strings) or `events`
    (CloudWatch-style {timestamp, message})."""
    if not isinstance(page, dict):
        return []
    out: list[dict[str, Any]] = []
    for item in page.get("lines") or page.get("events") or []:
        if isinstance(item, str):
            out.append({"message": item})
        elif isinstance(item, dict):
            out.append(
                {"message": str(item.get("message", "")), **{k: v for k, v in item.items() if k != "message"}}
            )
    return out


def usage(
    session: Session,
    team_name: Annotated[str | None, typer.Option("--team", help="The team (default: the caller's).")] = None,
    month: Annotated[str | None, typer.Option("--month", help="YYYY-MM (default: this month).")] = None,
    by: Annotated[
        str | None, typer.Option("--by", help="job: each job's cost since submission (newest first).")
    ] = None,
) -> None:
    """GPU-hours, dollars, Spot share, lost work and budget state of a team for a month. With
    --by job, each job's GPU-hours on Spot and On-Demand, dollars and GPU-hours lost."""
    if by is not None and by != "job":
        raise ClientError(f"--by: {by!r} is not one of: job", EXIT_USAGE)
    if month is not None:
        try:
            datetime.strptime(month, "%Y-%m")
        except ValueError:
            raise ClientError(f"--month: {month!r} is not YYYY-MM", EXIT_USAGE) from None
    session.team = team_name
    api = session.api
    params = {"month": month}
    if team_name and api.kind != "local":
        params["team"] = team_name
    if by == "job":
        query = {"by": "job", **({"team": params["team"]} if "team" in params else {})}
        first = api.request("GET", "/usage", params=query)
        rows = list(first.get("jobs") or [])
        if first.get("next_token"):
            rows += pages(api, "/usage", "jobs", {**query, "next_token": first["next_token"]})
        session.emit({"team": first.get("team"), "by": "job", "jobs": rows}, render_arrays.job_costs_table)
        return
    session.emit(api.request("GET", "/usage", params=params), usage_table)


def configure(
    api_url: Annotated[str | None, typer.Option("--api-url", help="The API's URL.")] = None,
    stack: Annotated[
        str | None,
        typer.Option(
            "--stack",
            help="Take the URL from this deployed stack's published configuration (SSM parameter "
            "/spotline/<stack>/config), else its ApiUrl output.",
        ),
    ] = None,
    region: Annotated[str | None, typer.Option("--region", help="The stack's region.")] = None,
    profile: ProfileOpt = None,
) -> None:
    """Write ~/.config/spotline/config.toml: the API URL (given, or from the stack's outputs)."""
    if not api_url and not stack:
        raise ClientError("give --api-url URL or --stack NAME", EXIT_USAGE)
    if stack:
        api_url = stack_api_url(stack, region=region, profile=profile)
    assert api_url is not None
    if not api_url.startswith(("http://", "https://")):
        raise ClientError(f"--api-url: {api_url!r} is not an http(s) URL", EXIT_USAGE)
    path = write_config({"api_url": api_url, "region": region or "", "profile": profile or ""})
    console.print(f"wrote {path}: api_url = {api_url}")


def stack_api_url(stack: str, *, region: str | None, profile: str | None) -> str:
    """The API's URL from what the stack published (ssm:GetParameter on /spotline/<stack>/config,
    spotline.aws.published), or, for a stack deployed before it published anything, from its
    ApiUrl output (cloudformation:DescribeStacks)."""
    import boto3
    import botocore.exceptions

    from spotline.aws.published import ConfigNotPublished, PublishedConfigError, read_published

    try:
        session = boto3.Session(profile_name=profile, region_name=region)
        try:
            return read_published(session.client("ssm"), stack).api_url
        except ValueError as error:  # not a stack name
            raise ClientError(f"--stack: {error}", EXIT_USAGE) from error
        except PublishedConfigError as error:
            if not isinstance(error, ConfigNotPublished):
                raise ClientError(f"--stack {stack}: {error}") from error
            # None published (a stack of an earlier version): the stack's output.
        except botocore.exceptions.ClientError:
            pass  # e.g. no ssm:GetParameter on it: the stack's output
        answer = session.client("cloudformation").describe_stacks(StackName=stack)
    except botocore.exceptions.NoCredentialsError as error:
        raise ClientError(
            "no AWS credentials found to read the stack (set AWS_PROFILE or --profile)"
        ) from error
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as error:
        raise ClientError(f"--stack {stack}: {error}") from error
    for output in answer["Stacks"][0].get("Outputs", []):
        if output.get("OutputKey", "").startswith("ApiUrl"):
            return str(output["OutputValue"])
    raise ClientError(f"--stack {stack}: it has no ApiUrl output")


# name -> (command, the common options it takes)
COMMANDS: Sequence[tuple[str, Callable[..., None], Sequence[str]]] = (
    ("submit", submit, ("endpoint", "team", "profile", "output")),
    ("status", status, ("endpoint", "team", "profile", "output")),
    ("list", list_, ("endpoint", "team", "profile", "output")),
    ("events", events, ("endpoint", "team", "profile", "output")),
    ("explain", explain, ("endpoint", "team", "profile", "output")),
    ("priority", priority, ("endpoint", "team", "profile", "output")),
    ("deadline", deadline, ("endpoint", "team", "profile", "output")),
    ("cancel", cancel, ("endpoint", "team", "profile", "output")),
    ("watch", watch, ("endpoint", "team", "profile", "output")),
    ("logs", logs, ("endpoint", "team", "profile", "output")),
    # `--team` names the team whose usage is shown (and, locally, the team asking).
    ("usage", usage, ("endpoint", "profile", "output")),
)


def register(app: typer.Typer) -> None:
    for name, command, options in COMMANDS:
        app.command(name)(client_command(command, options=options))
    app.command("configure")(reported(configure))
