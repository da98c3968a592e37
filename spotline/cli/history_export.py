"""`spotline history export --since 30d -o FILE`: the deployment's own history as the simulator's
canonical trace, and beside it the cluster file (`spotline.sim.history`): what `spotline tune
--history FILE` replays.

Reads `GET /admin/history` page by page (admins only: an `admins` principal, SigV4 on AWS; the
local plane's admin key from local.json locally). The trace's second 0 is the first submission.
A job enters the trace once it has ended (SUCCEEDED, FAILED, or CANCELLED after it ran): its
`duration_s` is the run time that counted (its runs up to their last checkpoints, and the last run
whole); jobs still queued or running are left out, and counted. Beside the canonical columns the
file carries `name` and `command` (SHA-256 digests unless `--include-names`) and what each job went
through (`state`, `preemptions`, `interruptions`, `lost_gpu_s`); the simulator ignores them.
`lost_gpu_s` is what the control plane charged as lost: for each run stopped early, the GPU time
from the capture of its latest durable checkpoint to its stop (a write as it stops is in it), or
the whole run when it saved nothing; the restart of a run that then saved work counts as run time.
The cluster file's `observed` carries it twice: `lost_gpu_hours`, and under the simulator's name
for the same definition, `lost_gpu_hours_since_checkpoint` (the simulator's own `lost_gpu_hours`
also counts every restart).

The Spot availability written per Spot pool is what the control plane observed (`spot_watch`): the
pool whole while Spot was there, none during an outage (a Spot warning until a Spot launch starts
again), over the watch's window (14 days); before the window it counts as there.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from spotline.cli.common import EndpointOpt, ProfileOpt, reported
from spotline.cli.http import EXIT_USAGE, LOCAL, ClientError, Endpoint, resolve, state_dir
from spotline.cli.outfile import OutputError, check_file, write_text
from spotline.trace.canonical import TraceJob, format_trace

# The observed availability's tick (s): at most a minute (the watch's observations are exact),
# finer for a short history (a local plane's minutes), at most about 2,000 ticks below a minute.
AVAILABILITY_TICK_S = 60
AVAILABILITY_TICKS = 2000
# What each job went through, beside the canonical columns (ignored by the simulator).
OUTCOME_COLUMNS = ("name", "command", "state", "preemptions", "interruptions", "lost_gpu_s")
ENDED = ("SUCCEEDED", "FAILED", "CANCELLED")
PAGE = 500


def admin_endpoint(endpoint: str | None, profile: str | None) -> Endpoint:
    """The API as an admin: SigV4 with the caller's credentials on AWS; locally, the local
    plane's admin key (local.json's `admin`)."""
    api = resolve(endpoint, profile=profile)
    if api.kind != LOCAL:
        return api
    local_json = state_dir() / "local.json"
    try:
        headers = json.loads(local_json.read_text())["admin"]["headers"]
    except (OSError, ValueError, KeyError, TypeError):
        raise ClientError(
            f"{local_json} names no admin: restart the local plane with this version (`spotline local up`)"
        ) from None
    return Endpoint(base_url=api.base_url, kind=LOCAL, headers={str(k): str(v) for k, v in headers.items()})


def fetch(api: Endpoint, since: str, include_names: bool) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every page of the history: the jobs, and the cluster (the last page's)."""
    jobs: list[dict[str, Any]] = []
    token: str | None = None
    cluster: dict[str, Any] = {}
    while True:
        params: dict[str, Any] = {
            "since": since,
            "include_names": str(include_names).lower(),
            "limit": PAGE,
            "next_token": token,
        }
        page = api.request("GET", "/admin/history", params=params)
        jobs.extend(page.get("jobs") or [])
        cluster = page.get("cluster") or cluster
        token = page.get("next_token")
        if not token:
            return jobs, cluster


@dataclass
class Export:
    text: str
    cluster: dict[str, Any]
    written: int
    unfinished: int


def availability(signal: Mapping[str, Any], start: float, now: float, instances: int) -> dict[str, Any]:
    """A Spot pool's observed capacity from `start` to `now` (module docstring), SkyPilot's format."""
    gap = int(max(1, min(AVAILABILITY_TICK_S, (now - start) / AVAILABILITY_TICKS)))
    ticks = max(1, int((now - start) // gap) + 1)
    spans = [(float(b), float(e)) for b, e in signal.get("spans_s") or ()]
    current = None if signal.get("available", True) else float(signal.get("outage_s") or 0.0)
    data: list[int] = []
    for tick in range(ticks):
        ago = now - (start + (tick + 0.5) * gap)
        down = any(ended <= ago < began for began, ended in spans) or (current is not None and ago < current)
        data.append(0 if down else instances)
    return {"metadata": {"gap_seconds": gap}, "data": data}


def build(jobs: Sequence[Mapping[str, Any]], cluster: Mapping[str, Any]) -> Export:
    """The trace's text and the cluster file's JSON from the API's pages."""
    from spotline.domain.models import Priority

    ended = [j for j in jobs if j.get("state") in ENDED and float(j.get("run_s") or 0.0) > 0.0]
    ended.sort(key=lambda j: (float(j["submitted_at"]), str(j["job_id"])))
    start = float(ended[0]["submitted_at"]) if ended else float(cluster.get("now") or 0.0)
    now = float(cluster.get("now") or start)
    rows: list[TraceJob] = []
    outcomes: list[list[str]] = []
    for j in ended:
        submit = float(j["submitted_at"]) - start
        deadline = j.get("deadline_at")
        deadline_s = float(deadline) - start if deadline is not None else None
        rows.append(
            TraceJob(
                job_id=str(j["job_id"]),
                submit_s=round(submit, 3),
                duration_s=round(float(j["run_s"]), 3),
                gpus=int(j["gpus"]),
                team=str(j["team"]),
                priority=Priority(str(j["priority"])),
                deadline_s=None if deadline_s is None or deadline_s <= submit else round(deadline_s, 3),
                gpu_type=j.get("gpu_type") or None,
                spot_ok=j.get("spot") != "never",
                checkpoint_interval_s=_positive(j.get("checkpoint_interval_s")),
                checkpoint_write_s=_positive(j.get("checkpoint_write_s")),
                expected_runtime_s=_positive(j.get("expected_runtime_s")),
            )
        )
        command = j.get("command")
        outcomes.append(
            [
                str(j.get("name") or ""),
                command if isinstance(command, str) else json.dumps(command),
                str(j["state"]),
                str(int(j.get("preemptions") or 0)),
                str(int(j.get("interruptions") or 0)),
                f"{float(j.get('lost_gpu_s') or 0.0):g}",
            ]
        )
    text = _with_outcomes(format_trace(rows)[0], outcomes)
    pools = list(cluster.get("pools") or [])
    signals: Mapping[str, Any] = cluster.get("spot") or {}
    spot = {
        p["name"]: availability(
            signals[p["name"]], start, now, int(p["capacity_gpus"]) // int(p["gpus_per_node"])
        )
        for p in pools
        if p.get("purchase") == "spot" and p["name"] in signals
    }
    succeeded = [j for j in ended if j["state"] == "SUCCEEDED"]
    jct = [float(j["finished_at"]) - float(j["submitted_at"]) for j in succeeded if j.get("finished_at")]
    lost_h = sum(float(j.get("lost_gpu_s") or 0.0) for j in ended) / 3600.0
    observed = {
        "jobs": len(ended),
        "completed": len(succeeded),
        "avg_jct_s": sum(jct) / len(jct) if jct else 0.0,
        "lost_gpu_hours": lost_h,
        "lost_gpu_hours_since_checkpoint": lost_h,
        "preemptions": sum(int(j.get("preemptions") or 0) for j in ended),
        "interruptions": sum(int(j.get("interruptions") or 0) for j in ended),
    }
    document = {
        "format": "spotline-history/1",
        "start": datetime.fromtimestamp(start, UTC).isoformat(),
        "pools": [
            {
                k: p[k]
                for k in ("name", "gpu_type", "purchase", "capacity_gpus", "gpus_per_node", "price")
                if k in p
            }
            for p in pools
        ],
        "teams": list(cluster.get("teams") or []),
        "availability": spot,
        "scheduler": dict(cluster.get("scheduler") or {}),
        "deployment": dict(cluster.get("deployment") or {}),
        "observed": observed,
    }
    return Export(text=text, cluster=document, written=len(rows), unfinished=len(jobs) - len(ended))


def _positive(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and value > 0 else None


def _with_outcomes(text: str, outcomes: Sequence[Sequence[str]]) -> str:
    """The canonical trace's text with the outcome columns appended."""
    reader = csv.reader(io.StringIO(text))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for index, row in enumerate(reader):
        writer.writerow([*row, *(OUTCOME_COLUMNS if index == 0 else outcomes[index - 1])])
    return out.getvalue()


def export_command(
    out: Annotated[Path, typer.Option("--out", "-o", help="The trace file to write (CSV).")],
    since: Annotated[
        str, typer.Option(help="From when: a span back from now (30d, 12h, 2w) or an ISO date or time.")
    ] = "30d",
    include_names: Annotated[
        bool,
        typer.Option(
            "--include-names", help="Write job names and commands as given (default: SHA-256 digests)."
        ),
    ] = False,
    endpoint: EndpointOpt = None,
    profile: ProfileOpt = None,
) -> None:
    """Write the deployment's history since --since as a canonical trace (admins only), and
    beside it FILE's stem + .cluster.json: the pools, teams, settings and observed Spot
    availability, for `spotline tune --history FILE`."""
    _export(out, since, include_names, endpoint, profile)


@reported
def _export(out: Path, since: str, include_names: bool, endpoint: str | None, profile: str | None) -> None:
    from spotline.sim.history import cluster_path

    try:
        check_file(out, "--out")
    except OutputError as error:
        raise ClientError(str(error), EXIT_USAGE) from None
    from spotline.cli.since import since_iso

    moment = since_iso(since)
    api = admin_endpoint(endpoint, profile)
    jobs, cluster = fetch(api, moment, include_names)
    result = build(jobs, cluster)
    side = cluster_path(out)
    try:
        write_text(out, result.text, "--out")
        write_text(side, json.dumps(result.cluster, indent=2) + "\n", "--out")
    except OutputError as error:
        raise ClientError(str(error)) from None
    typer.echo(
        f"wrote {out} ({result.written} jobs since {moment};"
        f" {result.unfinished} not ended, left out) and {side}"
    )
