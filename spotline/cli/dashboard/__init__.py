"""`spotline dashboard`: a web page on localhost with the team's queue, running jobs, job pages
and month, through the same API client as the CLI (SigV4 on AWS, the team's key locally).

Each team shown has its own endpoint: `--team` (repeatable) or `--all-teams` locally, where
`.spotline/local.json` holds every team's key; on AWS, `--profile` (repeatable), each profile
the identity of one team (the API shows a caller its own team only). docs/dashboard.md.
"""

from __future__ import annotations

import ipaddress
import json
from typing import Annotated

import typer

from spotline.cli.common import EndpointOpt, reported
from spotline.cli.http import EXIT_USAGE, LOCAL, ClientError, Endpoint, resolve, state_dir
from spotline.cli.render import errors
from spotline.cli.stopping import StopSignals

LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}


def endpoints(
    endpoint: str | None, teams: list[str], all_teams: bool, profiles: list[str]
) -> dict[str, Endpoint]:
    """The teams to show, each with the endpoint that acts as it."""
    first = resolve(endpoint, team=teams[0] if teams else None, profile=profiles[0] if profiles else None)
    if first.kind == LOCAL:
        if profiles:
            raise ClientError("--profile: the local endpoint uses team keys (give --team)", EXIT_USAGE)
        if all_teams:
            teams = list(json.loads((state_dir() / "local.json").read_text())["teams"])
        names = teams or [str(first.team)]
        return {name: resolve(endpoint, team=name) for name in names}
    if teams or all_teams:
        raise ClientError("--team/--all-teams: on AWS each --profile is one team's identity", EXIT_USAGE)
    found: dict[str, Endpoint] = {}
    for profile in profiles or [None]:  # type: ignore[list-item]
        api = resolve(endpoint, profile=profile)
        name = str(api.request("GET", "/usage").get("team") or profile or "team")
        api.team = name
        found[name] = api
    return found


def dashboard(
    endpoint: EndpointOpt = None,
    team: Annotated[
        list[str] | None,
        typer.Option("--team", help="A local team to show (repeatable; default: the first)."),
    ] = None,
    all_teams: Annotated[
        bool, typer.Option("--all-teams", help="Locally: every team in local.json (the operator's view).")
    ] = False,
    profile: Annotated[
        list[str] | None,
        typer.Option(
            "--profile", help="AWS profile to sign with (repeatable: one team each; or AWS_PROFILE)."
        ),
    ] = None,
    host: Annotated[str, typer.Option("--host", help="The address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="The port (0: any free one).")] = 8765,
    allow_remote: Annotated[
        bool,
        typer.Option(
            "--allow-remote",
            help="Allow a --host other than localhost (shows your teams' jobs to the network).",
        ),
    ] = False,
    refresh_s: Annotated[float, typer.Option("--refresh", help="Seconds between page refreshes.")] = 5.0,
    api_timeout_s: Annotated[
        float, typer.Option("--api-timeout", help="Seconds to wait for each API answer.")
    ] = 60.0,
) -> None:
    """A web dashboard on localhost: the queue and why, running jobs, job timelines, the team's
    month. Cancel and change priority or deadline, with confirmation."""
    from spotline.cli.dashboard.server import Dashboard

    if host not in LOCAL_HOSTS and not _is_loopback(host):
        if not allow_remote:
            raise ClientError(
                f"--host {host}: not localhost; pass --allow-remote as well to serve it beyond this machine",
                EXIT_USAGE,
            )
        errors.print(
            f"warning: serving on {host}: anyone who can reach it and has the URL's token sees and acts"
            " on these teams' jobs; the traffic is plain HTTP (put TLS in front)",
            markup=False,
        )
    if refresh_s <= 0:
        raise ClientError("--refresh: must be above 0", EXIT_USAGE)
    if api_timeout_s <= 0:
        raise ClientError("--api-timeout: must be above 0", EXIT_USAGE)
    found = endpoints(endpoint, team or [], all_teams, profile or [])
    for api in found.values():
        api.timeout_s = api_timeout_s
    board = Dashboard(found, refresh_s=refresh_s)
    try:
        server = board.serve(host, port)
    except OSError as error:
        raise ClientError(f"--host/--port: cannot bind {host}:{port}: {error}", EXIT_USAGE) from error
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{server.server_address[1]}/?token={board.token}"
    typer.echo(f"Spotline dashboard for {', '.join(sorted(board.endpoints))}: {url}", err=False)
    typer.echo("Ctrl-C to stop.")
    stop = StopSignals()
    server.start()
    try:
        stop.wait()
    finally:
        server.shutdown()


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def register(app: typer.Typer) -> None:
    app.command("dashboard")(reported(dashboard))
