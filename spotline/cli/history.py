"""`spotline history`: the team's finished jobs (`GET /history`), the latest to end first.

A command group: without a subcommand it lists finished jobs (`--state`, `--since`, `--team`,
`-o json`); subcommands (`history <name>`) join it through `register`'s `history_app`.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Column, Table

from spotline.cli.common import EndpointOpt, OutputOpt, ProfileOpt, Session, reported
from spotline.cli.http import EXIT_USAGE, ClientError
from spotline.cli.render import Output, iso
from spotline.cli.since import since_iso

FINISHED = ("SUCCEEDED", "FAILED", "CANCELLED")

history_app = typer.Typer(
    name="history",
    help="The team's finished jobs, the latest to end first (filters: --state, --since, --team).",
    add_completion=False,
)


def _runtime(seconds: Any) -> str:
    if not isinstance(seconds, int | float):
        return "-"
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 5400:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def history_table(jobs: list[dict[str, Any]]) -> Table:
    """One row per finished job; the reason folds, nothing else wraps."""
    table = Table(
        Column("ID", no_wrap=True),
        Column("NAME", no_wrap=True),
        Column("STATE", no_wrap=True),
        Column("PRIORITY", no_wrap=True),
        Column("GPUS", no_wrap=True, justify="right"),
        Column("POOL", no_wrap=True),
        Column("ENDED (UTC)", no_wrap=True),
        Column("RUNTIME", no_wrap=True, justify="right"),
        Column("DISRUPTIONS", no_wrap=True, justify="right"),
        Column("REASON", overflow="fold"),
        box=None,
        header_style="bold",
        pad_edge=False,
    )
    for job in jobs:
        ended = iso(job.get("finished_at")) or "-"
        table.add_row(
            job["id"],
            job.get("name", ""),
            job["state"],
            str(job.get("priority", "")),
            str(int(job.get("gpus") or 0) * int(job.get("nodes") or 1)),
            job.get("pool") or "-",
            ended.replace("T", " ").removesuffix("Z"),
            _runtime(job.get("runtime_s")),
            str(int(job.get("preemptions") or 0) + int(job.get("interruptions") or 0)),
            job.get("state_reason") or "",
        )
    return table


def list_finished(
    session: Session, *, state: str | None, since: str | None, limit: int, team: str | None
) -> list[dict[str, Any]]:
    """Up to `limit` finished jobs (0: all), following the API's pages."""
    params: dict[str, Any] = {"limit": min(limit, 100) if limit > 0 else 100}
    if state:
        chosen = state.upper()
        if chosen not in FINISHED:
            raise ClientError(f"--state: {state!r} is not one of {', '.join(FINISHED)}", EXIT_USAGE)
        params["state"] = chosen
    if since:
        params["since"] = since_iso(since)
    api = session.api
    if team and api.kind != "local":
        params["team"] = team
    jobs: list[dict[str, Any]] = []
    while True:
        page = api.request("GET", "/history", params=params)
        jobs += page.get("jobs") or []
        token = page.get("next_token")
        if not token or (limit > 0 and len(jobs) >= limit):
            return jobs[:limit] if limit > 0 else jobs
        params["next_token"] = token


@history_app.callback(invoke_without_command=True)
@reported
def history(
    ctx: typer.Context,
    state: Annotated[
        str | None, typer.Option("--state", help="SUCCEEDED, FAILED or CANCELLED.", show_default=False)
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            help="Ended since: a span back from now (30m, 24h, 7d, 2w) or an ISO date or time (UTC).",
            show_default=False,
        ),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", help="At most this many jobs (0: all).", min=0)] = 100,
    endpoint: EndpointOpt = None,
    team: Annotated[
        str | None,
        typer.Option("--team", help="The team whose history (locally: the team to act as; default: yours)."),
    ] = None,
    profile: ProfileOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """The team's finished jobs, the latest to end first (filters: --state, --since, --team)."""
    if ctx.invoked_subcommand is not None:
        return
    session = Session(endpoint=endpoint, team=team, profile=profile, output=output)
    jobs = list_finished(session, state=state, since=since, limit=limit, team=team)
    session.emit(jobs, history_table)


def register(app: typer.Typer) -> None:
    from spotline.cli.history_export import export_command

    history_app.command("export")(export_command)
    app.add_typer(history_app, name="history")
