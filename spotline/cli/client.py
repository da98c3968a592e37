"""The team's client: submit, status, list, events, explain, priority, deadline, cancel, watch,
logs, usage, and configure.

Every command takes `--output table|json|yaml`, `--endpoint local|URL`, `--team` (local) and
`--profile` (AWS). Exit codes: 0 ok; 1 refused or failed (an API error, an unreachable
endpoint, missing credentials, a watched job that FAILED); 2 usage error (bad options, a spec
file that cannot be read). Errors are one line on stderr, never a traceback.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, ParamSpec, TypeVar

import typer
import yaml
from rich.console import Console, Group
from rich.live import Live
from rich.table import Column, Table

from spotline.cli import specfile
from spotline.cli.http import EXIT_FAILED, EXIT_USAGE, ClientError, Endpoint, resolve, write_config

FINAL_STATES = {"SUCCEEDED", "FAILED", "CANCELLED"}
PRIORITIES = ("critical", "high", "normal", "low")

console = Console()
errors = Console(stderr=True)


class Output(StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


EndpointOpt = Annotated[
    str | None,
    typer.Option(
        "--endpoint",
        help="`local` (default where .spotline/local.json exists) or the API URL (SigV4-signed);"
        " also SPOTLINE_ENDPOINT.",
        show_default=False,
    ),
]
TeamOpt = Annotated[
    str | None, typer.Option("--team", help="The local team to act as (default: the first in local.json).")
]
ProfileOpt = Annotated[str | None, typer.Option("--profile", help="AWS profile for SigV4 (or AWS_PROFILE).")]
OutputOpt = Annotated[Output, typer.Option("--output", "-o", help="table, json or yaml.")]

P = ParamSpec("P")
R = TypeVar("R")


def reported(command: Callable[P, R]) -> Callable[P, R]:
    """Turn a ClientError into one line on stderr and its exit code."""

    @functools.wraps(command)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except ClientError as error:
            errors.print(f"error: {error}", markup=False, highlight=False, soft_wrap=True)
            raise typer.Exit(error.exit_code) from None

    return run


# --- formatting ---------------------------------------------------------------------------


def age(at: float | None, now: float | None = None) -> str:
    """ "12m ago" (or "in 5m" for a time ahead); "-" for none."""
    if at is None:
        return "-"
    delta = (time.time() if now is None else now) - at
    ahead = delta < 0
    seconds = abs(delta)
    if seconds < 60:
        text = f"{seconds:.0f}s"
    elif seconds < 3600:
        text = f"{seconds / 60:.0f}m"
    elif seconds < 86400:
        text = f"{seconds / 3600:.1f}h".replace(".0h", "h")
    else:
        text = f"{seconds / 86400:.1f}d".replace(".0d", "d")
    return f"in {text}" if ahead else f"{text} ago"


def iso(at: float | None) -> str | None:
    if at is None:
        return None
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def emit(data: Any, output: Output, table: Callable[[Any], Any]) -> None:
    if output is Output.json:
        console.out(json.dumps(data, indent=2, default=str), highlight=False)
    elif output is Output.yaml:
        console.out(yaml.safe_dump(data, sort_keys=False, default_flow_style=False).rstrip(), highlight=False)
    else:
        console.print(table(data))


def _job_rows(job: dict[str, Any]) -> list[tuple[str, str]]:
    checkpoint = job.get("last_checkpoint") or {}
    rows = [
        ("id", job["id"]),
        ("name", job.get("name", "")),
        ("team", job.get("team", "")),
        ("state", f"{job['state']} ({job.get('state_reason', '')})"),
        ("priority", f"{job.get('priority')} (effective {_num(job.get('effective_priority'))})"),
        ("gpus", f"{job.get('gpus')} on {job.get('nodes', 1)} node(s), {job.get('gpu_type') or 'any type'}"),
        ("spot", str(job.get("spot", ""))),
        ("pool", job.get("pool") or "-"),
        ("instances", ", ".join(job.get("instance_ids") or []) or "-"),
        ("submitted", f"{iso(job.get('submitted_at'))} ({age(job.get('submitted_at'))})"),
    ]
    if job.get("started_at"):
        rows.append(("started", f"{iso(job['started_at'])} ({age(job['started_at'])})"))
    if job.get("finished_at"):
        rows.append(("finished", f"{iso(job['finished_at'])} ({age(job['finished_at'])})"))
    if job.get("deadline"):
        rows.append(("deadline", str(job["deadline"])))
    if job.get("progress") is not None:
        rows.append(("progress", f"{100 * float(job['progress']):.0f}% (step {job.get('step')})"))
    if checkpoint:
        rows.append(
            (
                "last checkpoint",
                f"step {checkpoint.get('step')} {age(checkpoint.get('at'))}: {checkpoint.get('uri')}",
            )
        )
    rows.append(
        (
            "disruptions",
            f"{job.get('preemptions', 0)} preemption(s), {job.get('interruptions', 0)} interruption(s),"
            f" {float(job.get('lost_work_s') or 0):.0f} s of work lost",
        )
    )
    if job.get("wait_reason"):
        rows.append(("wait reason", str(job["wait_reason"])))
    return rows


def _num(value: Any) -> str:
    return "-" if value is None else f"{float(value):.1f}"


def job_table(job: dict[str, Any]) -> Table:
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    for key, value in _job_rows(job):
        table.add_row(key, value)
    return table


def jobs_table(jobs: list[dict[str, Any]]) -> Table:
    table = Table(
        Column("ID", no_wrap=True),
        "NAME",
        "STATE",
        "PRIORITY",
        "GPUS",
        "POOL",
        "SUBMITTED",
        "WAIT REASON / PROGRESS",
    )
    for job in jobs:
        note = job.get("wait_reason") or ""
        if not note and job.get("progress") is not None:
            note = f"{100 * float(job['progress']):.0f}%"
        table.add_row(
            job["id"],
            job.get("name", ""),
            job["state"],
            f"{job.get('priority')} {_num(job.get('effective_priority'))}",
            str(job.get("gpus")),
            job.get("pool") or "-",
            age(job.get("submitted_at")),
            note,
        )
    return table


def events_table(timeline: dict[str, Any]) -> Table:
    table = Table("WHEN", "AGE", "FROM", "TO", "REASON", title=f"events of {timeline['job_id']}")
    for event in timeline["events"]:
        table.add_row(
            iso(event.get("t")) or "",
            age(event.get("t")),
            event.get("from") or "-",
            event["to"],
            event.get("reason", ""),
        )
    return table


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


def _with_timeline(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**e, "at": iso(e.get("t"))} for e in events]


# --- commands -----------------------------------------------------------------------------


def submit(
    file: Annotated[Path, typer.Argument(help="The job spec, YAML or JSON.", show_default=False)],
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Override a field: key=value (dotted keys nest).")
    ] = None,
    idempotency_key: Annotated[
        str | None, typer.Option("--idempotency-key", help="Retries with the same key return the same job.")
    ] = None,
    endpoint: EndpointOpt = None,
    team: TeamOpt = None,
    profile: ProfileOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Submit a job from FILE; prints the job (its `id` with --output json)."""
    spec = specfile.load(file, set_ or ())
    api = resolve(endpoint, team=team, profile=profile)
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
    try:
        job = api.request("POST", "/jobs", body=spec.body, headers=headers)
    except ClientError as error:
        if error.status == 422 and error.detail:
            parts = []
            for item in error.detail:
                loc = [str(p) for p in item.get("loc") or []]
                name = ".".join(p for p in loc if p != "body") or "spec"
                parts.append(f"{spec.where(loc)}: {name}: {item.get('msg', '')}")
            raise ClientError("spec refused: " + "; ".join(parts), EXIT_FAILED, 422) from None
        raise
    emit(job, output, job_table)


def status(
    job_id: Annotated[str, typer.Argument(metavar="ID", show_default=False)],
    endpoint: EndpointOpt = None,
    team: TeamOpt = None,
    profile: ProfileOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """A job's state, priority, pool, instance, last checkpoint and wait reason."""
    api = resolve(endpoint, team=team, profile=profile)
    emit(api.request("GET", _job_path(job_id)), output, job_table)


def list_(
    state: Annotated[
        str | None, typer.Option("--state", help="Only jobs in this state (e.g. PENDING).")
    ] = None,
    all_: Annotated[bool, typer.Option("--all", help="Include finished jobs.")] = False,
    endpoint: EndpointOpt = None,
    team: TeamOpt = None,
    profile: ProfileOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """The team's jobs: unfinished ones, or all with --all (every page is read)."""
    api = resolve(endpoint, team=team, profile=profile)
    params = {"state": state.upper()} if state else {}
    jobs = list(pages(api, "/jobs", "jobs", params))
    if not all_ and not state:
        jobs = [j for j in jobs if j["state"] not in FINAL_STATES]
    emit(jobs, output, jobs_table)


def events(
    job_id: Annotated[str, typer.Argument(metavar="ID", show_default=False)],
    endpoint: EndpointOpt = None,
    team: TeamOpt = None,
    profile: ProfileOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """The job's timeline: every transition with its reason."""
    api = resolve(endpoint, team=team, profile=profile)
    timeline = {
        "job_id": job_id,
        "events": _with_timeline(list(pages(api, _job_path(job_id) + "/events", "events"))),
    }
    emit(timeline, output, events_table)


def explain(
    job_id: Annotated[str, typer.Argument(metavar="ID", show_default=False)],
    endpoint: EndpointOpt = None,
    team: TeamOpt = None,
    profile: ProfileOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Why the job waits, where and why it runs, or who preempted it; and its estimated start."""
    api = resolve(endpoint, team=team, profile=profile)
    emit(api.request("GET", _job_path(job_id) + "/explain"), output, explain_view)


def explain_view(data: dict[str, Any]) -> Group:
    parts: list[Any] = [f"[bold]{data.get('job_id')}[/bold] {data.get('state')}: {data.get('summary', '')}"]
    terms = data.get("priority") or {}
    if terms:
        table = Table("TERM", "VALUE", title=f"effective priority {_num(terms.get('effective'))}")
        for name, value in (terms.get("terms") or {}).items():
            table.add_row(name, _num(value))
        parts.append(table)
    position = data.get("position")
    if position:
        parts.append(
            f"position: {position.get('in_class')} of {position.get('class_size')} in class"
            f" {position.get('class')}, {position.get('overall')} of {position.get('queued')} overall"
        )
    pools = data.get("pools") or []
    if pools:
        table = Table("POOL", "BLOCKED BY", "WHAT WOULD LET IT START")
        for pool in pools:
            table.add_row(
                pool.get("pool", ""), "; ".join(pool.get("blockers") or []) or "-", pool.get("unblock") or "-"
            )
        parts.append(table)
    for key in ("placement", "preempted_by"):
        if data.get(key):
            text = data[key] if isinstance(data[key], str) else json.dumps(data[key])
            parts.append(f"{key.replace('_', ' ')}: {text}")
    checkpoint = data.get("checkpoint")
    if checkpoint:
        size = checkpoint.get("size_bytes")
        fits = checkpoint.get("fits_spot_notice")
        parts.append(
            f"checkpoint: {'?' if size is None else f'{size / 1e9:.2f} GB'},"
            f" write {_num(checkpoint.get('write_s'))} s, restore {_num(checkpoint.get('restore_s'))} s;"
            f" grace period {_num(checkpoint.get('grace_period_s'))} s;"
            f" {'unknown whether it fits' if fits is None else 'fits' if fits else 'does not fit'}"
            " the 2-minute Spot notice"
        )
    forecast = data.get("estimated_start")
    if forecast:
        if forecast.get("at"):
            parts.append(
                f"estimated start: {forecast['at']} ({age(forecast.get('at_s'))}),"
                f" between {forecast.get('earliest')} and {forecast.get('latest')}"
            )
        else:
            parts.append(f"estimated start: unknown ({forecast.get('reason', '')})")
    return Group(*parts)


def priority(
    job_id: Annotated[str, typer.Argument(metavar="ID", show_default=False)],
    new_class: Annotated[
        str, typer.Argument(metavar="CLASS", help="critical, high, normal or low.", show_default=False)
    ],
    endpoint: EndpointOpt = None,
    team: TeamOpt = None,
    profile: ProfileOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Change a job's priority class."""
    if new_class not in PRIORITIES:
        raise ClientError(f"CLASS: {new_class!r} is not one of {', '.join(PRIORITIES)}", EXIT_USAGE)
    api = resolve(endpoint, team=team, profile=profile)
    emit(api.request("PATCH", _job_path(job_id), body={"priority": new_class}), output, job_table)


def deadline(
    job_id: Annotated[str, typer.Argument(metavar="ID", show_default=False)],
    when: Annotated[str, typer.Argument(metavar="ISO", help="e.g. 2026-12-01T18:00:00Z", show_default=False)],
    endpoint: EndpointOpt = None,
    team: TeamOpt = None,
    profile: ProfileOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Change a job's deadline (ISO-8601 with a zone)."""
    try:
        parsed = datetime.fromisoformat(when.replace("Z", "+00:00"))
    except ValueError:
        raise ClientError(f"ISO: {when!r} is not an ISO-8601 time", EXIT_USAGE) from None
    if parsed.tzinfo is None:
        raise ClientError(f"ISO: {when!r} has no zone (add Z or +HH:MM)", EXIT_USAGE)
    api = resolve(endpoint, team=team, profile=profile)
    emit(api.request("PATCH", _job_path(job_id), body={"deadline": parsed.isoformat()}), output, job_table)


def cancel(
    job_ids: Annotated[list[str], typer.Argument(metavar="ID...", show_default=False)],
    endpoint: EndpointOpt = None,
    team: TeamOpt = None,
    profile: ProfileOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Cancel jobs (each is tried; the exit code is 1 if any could not be cancelled)."""
    api = resolve(endpoint, team=team, profile=profile)
    done: list[dict[str, Any]] = []
    failed: list[str] = []
    for job_id in job_ids:
        try:
            done.append(api.request("DELETE", _job_path(job_id)))
        except ClientError as error:
            if error.status is None:
                raise
            failed.append(f"{job_id}: {error}")
    emit(done, output, jobs_table)
    if failed:
        raise ClientError("; ".join(failed))


def watch(
    job_id: Annotated[str | None, typer.Argument(metavar="[ID]", show_default=False)] = None,
    interval_s: Annotated[float, typer.Option("--interval", help="Seconds between refreshes.")] = 2.0,
    endpoint: EndpointOpt = None,
    team: TeamOpt = None,
    profile: ProfileOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """A live view until the job ends (or, without ID, until the team has no unfinished job).
    Exit 1 when the watched job FAILED. With --output json|yaml, prints each change instead."""
    api = resolve(endpoint, team=team, profile=profile)

    def read() -> tuple[Any, bool]:
        if job_id:
            job = api.request("GET", _job_path(job_id))
            timeline = _with_timeline(list(pages(api, _job_path(job_id) + "/events", "events")))
            return {"job": job, "events": timeline}, job["state"] in FINAL_STATES
        jobs = [j for j in pages(api, "/jobs", "jobs") if j["state"] not in FINAL_STATES]
        return {"jobs": jobs}, not jobs

    def view(data: dict[str, Any]) -> Any:
        if "job" in data:
            return Group(
                job_table(data["job"]), events_table({"job_id": job_id, "events": data["events"][-10:]})
            )
        return jobs_table(data["jobs"])

    data, ended = read()
    if output is not Output.table:
        last = None
        while True:
            if data != last:
                emit(data, output, view)
                last = data
            if ended:
                break
            time.sleep(interval_s)
            data, ended = read()
    else:
        with Live(view(data), console=console, auto_refresh=False, transient=False) as live:
            while not ended:
                time.sleep(interval_s)
                data, ended = read()
                live.update(view(data), refresh=True)
    if job_id and data["job"]["state"] == "FAILED":
        raise ClientError(f"job {job_id} FAILED: {data['job'].get('state_reason', '')}")


def logs(
    job_id: Annotated[str, typer.Argument(metavar="ID", show_default=False)],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing until the job ends.")] = False,
    interval_s: Annotated[
        float, typer.Option("--interval", help="Seconds between reads with --follow.")
    ] = 2.0,
    endpoint: EndpointOpt = None,
    team: TeamOpt = None,
    profile: ProfileOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """The run's output (CloudWatch Logs on AWS, the process log locally)."""
    api = resolve(endpoint, team=team, profile=profile)
    path = _job_path(job_id) + "/logs"
    token: str | None = None
    collected: list[dict[str, Any]] = []
    while True:
        params = {"next_token": token} if token else {}
        page = api.request("GET", path, params=params)
        lines = _log_lines(page)
        collected.extend(lines)
        if output is Output.table:
            for line in lines:
                console.out(line["message"], highlight=False)
        new_token = page.get("next_token") if isinstance(page, dict) else None
        if new_token and new_token != token and lines:
            token = new_token
            continue  # more already there
        token = new_token or token
        if not follow:
            break
        if api.request("GET", _job_path(job_id))["state"] in FINAL_STATES and not lines:
            break
        time.sleep(interval_s)
    if output is not Output.table:
        emit({"job_id": job_id, "lines": collected}, output, lambda d: d)


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
    team_name: Annotated[str | None, typer.Option("--team", help="The team (default: the caller's).")] = None,
    month: Annotated[str | None, typer.Option("--month", help="YYYY-MM (default: this month).")] = None,
    endpoint: EndpointOpt = None,
    profile: ProfileOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """GPU-hours, dollars, Spot share, lost work and budget state of a team for a month."""
    if month is not None:
        try:
            datetime.strptime(month, "%Y-%m")
        except ValueError:
            raise ClientError(f"--month: {month!r} is not YYYY-MM", EXIT_USAGE) from None
    api = resolve(endpoint, team=team_name, profile=profile)
    params = {"month": month}
    if team_name and api.kind != "local":
        params["team"] = team_name
    emit(api.request("GET", "/usage", params=params), output, usage_table)


def usage_table(data: dict[str, Any]) -> Table:
    table = Table(show_header=False, box=None, title=f"usage of {data.get('team')} in {data.get('month')}")
    table.add_column(style="bold")
    table.add_column()
    for key, value in data.items():
        if key in {"team", "month"}:
            continue
        if isinstance(value, dict):
            value = ", ".join(f"{k}: {_fmt(v)}" for k, v in value.items()) or "-"
        table.add_row(key.replace("_", " "), _fmt(value))
    return table


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.2f}"
    return "-" if value is None else str(value)


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


COMMANDS: Sequence[tuple[str, Callable[..., None]]] = (
    ("submit", submit),
    ("status", status),
    ("list", list_),
    ("events", events),
    ("explain", explain),
    ("priority", priority),
    ("deadline", deadline),
    ("cancel", cancel),
    ("watch", watch),
    ("logs", logs),
    ("usage", usage),
    ("configure", configure),
)


def register(app: typer.Typer) -> None:
    for name, command in COMMANDS:
        app.command(name)(reported(command))
