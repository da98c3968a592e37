"""`spotline local up` (the control plane locally, until stopped), `spotline local spot-warning`
(EC2's Spot warning on the local bus) and `spotline local preempt` (a job stopped as a preemption
stops it)."""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from spotline.cli.common import reported
from spotline.cli.http import EXIT_FAILED, EXIT_USAGE, ClientError, Endpoint, state_dir
from spotline.cli.stopping import StopSignals
from spotline.local.runtime import LocalConfig, LocalControlPlane, reserved_pool
from spotline.local.state import StateError
from spotline.sim.availability import AvailabilityError, load_availability

local_app = typer.Typer(
    help="The local control plane (moto, the real handlers, a local fleet).", no_args_is_help=True
)

DEFAULT_SPOT_TICK_S = 2.0  # wall seconds a tick of a Spot availability trace lasts locally
MAX_SPOT_TICK_S = 86_400.0  # a day a tick: beyond it a local replay never moves (and timers overflow)


def register(app: typer.Typer) -> None:
    app.add_typer(local_app, name="local")


@local_app.command("up")
def up(
    state_dir_: Annotated[
        Path | None,
        typer.Option(
            "--state-dir",
            help="Keep jobs, usage, checkpoints, team keys and ports here across restarts (also"
            " local.json and the job logs). Without it the state is ephemeral, and local.json and"
            " the logs go to .spotline/.",
            show_default=False,
        ),
    ] = None,
    spot_availability: Annotated[
        Path | None,
        typer.Option(
            "--spot-availability",
            help="The local Spot pool's capacity follows this availability trace (SkyPilot's format:"
            ' {"metadata": {"gap_seconds": G}, "data": [instances, ...]}), one tick per'
            " --spot-tick-seconds: nodes beyond capacity get the Spot interruption warning, a Spot"
            " launch waits while capacity is 0.",
            show_default=False,
        ),
    ] = None,
    spot_tick_seconds: Annotated[
        float,
        typer.Option(
            "--spot-tick-seconds",
            help="Wall seconds one tick of the --spot-availability trace lasts, above 0 and at most"
            " 86400 (its gap_seconds is ignored locally, so a trace of hours plays in seconds).",
        ),
    ] = DEFAULT_SPOT_TICK_S,
    reservation: Annotated[
        str | None,
        typer.Option(
            "--reservation",
            help="Add a reserved pool (a local Capacity Block, `a100-block`): NODESxGPUS:END_S, NODES"
            " nodes of GPUS GPUs, prepaid, from now until END_S seconds from now. Jobs that fit its"
            " window go there first, and are checkpointed and requeued before its end (planned from"
            " the end: 30 minutes of termination plus the checkpoint's grace before it).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Start the control plane and keep it running until Ctrl-C (SIGINT) or SIGTERM.
    Writes STATE_DIR/local.json once ready."""
    logging.basicConfig(level=logging.ERROR)
    console = Console()
    trace_options = spot_options(spot_availability, spot_tick_seconds)
    stop = StopSignals()
    persistent = state_dir_ is not None
    directory = state_dir_ if state_dir_ is not None else Path(".spotline")
    block_options = reservation_options(reservation, time.time())
    plane = LocalControlPlane(
        LocalConfig(state_dir=directory, persistent=persistent, **trace_options, **block_options)
    )
    try:
        info = plane.start()
    except StateError as error:
        console.print(f"error: {error}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_FAILED) from None
    console.print(f"Spotline is up: API {info['api_url']}, AWS endpoint {info['aws_endpoint_url']}")
    if persistent:
        console.print(
            f"state is kept in {directory / 'state'} (saved every {plane.config.snapshot_s:.0f} s and on"
            f" Ctrl-C); restored {plane.restored_items} item(s),"
            f" {len(plane.lost_runs)} run(s) lost with the last stop requeued from their checkpoints",
            highlight=False,
        )
    else:
        console.print(
            "state is ephemeral: jobs, usage, checkpoints and team keys end when this stops"
            " (keep them with --state-dir DIR)",
            highlight=False,
        )
    if directory != Path(".spotline"):
        console.print(f"clients: export SPOTLINE_STATE_DIR={directory}", highlight=False)
    console.print(f"handlers' logs: {directory / 'control-plane.log'}", highlight=False)
    console.print(f"wrote {directory / 'local.json'}:")
    console.print_json(json.dumps(info))
    try:
        stop.wait()
    finally:
        console.print("stopping ...")
        plane.stop()
    console.print("stopped")
    # Everything is stopped and its files closed: skip the interpreter's teardown of moto's state
    # and of every loaded module, which takes seconds on a loaded machine after Ctrl-C.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def reservation_options(text: str | None, now: float) -> dict[str, Any]:
    """`--reservation NODESxGPUS:END_S` as the local cluster's pools (the default ones and the
    block), or a usage error naming the flag."""
    if text is None:
        return {}
    match = re.fullmatch(r"\s*(\d+)\s*x\s*(\d+)\s*:\s*([0-9.]+)\s*", text)
    if match is None:
        raise typer.BadParameter(
            f"{text!r}: expected NODESxGPUS:END_S, e.g. 1x4:1900", param_hint="--reservation"
        )
    nodes, gpus, end_s = int(match[1]), int(match[2]), float(match[3])
    if nodes <= 0 or gpus <= 0 or end_s <= 0:
        raise typer.BadParameter(
            f"{text!r}: nodes, GPUs and END_S must be positive", param_hint="--reservation"
        )
    return {"pools": (*LocalConfig().pools, reserved_pool(nodes, gpus, now, now + end_s))}


def spot_options(path: Path | None, tick_s: float) -> dict[str, Any]:
    """The local configuration a Spot availability trace brings (none without one): the trace,
    its tick, a reconciler that looks every tick (a Spot launch RUNNABLE is seen within one), and
    On-Demand jobs moved back to Spot room when the deadline guard allows it. A bad file or tick
    ends the command with a clear error (exit 2)."""
    if not 0 < tick_s <= MAX_SPOT_TICK_S:  # (refuses nan too)
        raise typer.BadParameter(
            f"must be a number of seconds above 0 and at most {MAX_SPOT_TICK_S:.0f}, got {tick_s:g}",
            param_hint="--spot-tick-seconds",
        )
    if path is None:
        return {}
    try:
        trace = load_availability(path)
    except AvailabilityError as error:
        raise typer.BadParameter(str(error), param_hint="--spot-availability") from None
    return {
        "spot_availability": trace,
        "spot_tick_s": tick_s,
        "reconcile_s": min(tick_s, 2.0),
        "move_to_spot_min_remaining_s": 5.0,
    }


@local_app.command("reservation-warning")
@reported
def reservation_warning(
    pool: Annotated[
        str | None,
        typer.Option(
            "--pool", help="The reserved pool whose block expires (default: the first).", show_default=False
        ),
    ] = None,
) -> None:
    """Put EC2's Capacity Block Expiration Warning (AWS's shape) on the local default bus for the
    block behind --pool (a pool `spotline local up --reservation` made): the control plane
    checkpoints and requeues the jobs still in it, as on AWS 40 minutes before a block ends."""
    info = _local_info()
    blocks: dict[str, Any] = info.get("reservations") or {}
    if not blocks:
        raise ClientError("the local plane has no reserved pool (start it with --reservation)", EXIT_USAGE)
    name = pool if pool is not None else next(iter(blocks))
    if name not in blocks:
        raise ClientError(f"--pool: {name!r} is not a reserved pool (one of {', '.join(blocks)})", EXIT_USAGE)
    reservation_id = blocks[name]["reservation_id"]
    import boto3

    events = boto3.client(
        "events",
        endpoint_url=info["aws_endpoint_url"],
        region_name=info["region"],
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )
    end = datetime.fromtimestamp(float(blocks[name]["end"]), tz=UTC).isoformat()
    answer = events.put_events(
        Entries=[
            {
                "Source": "aws.ec2",
                "DetailType": "Capacity Block Expiration Warning",
                "Detail": json.dumps({"capacity-reservation-id": reservation_id, "end-date": end}),
                "Resources": [
                    f"arn:aws:ec2:{info['region']}:000000000000:capacity-reservation/{reservation_id}"
                ],
            }
        ]
    )
    if answer.get("FailedEntryCount"):
        raise ClientError(f"the local bus refused the warning: {answer.get('Entries')}")
    typer.echo(
        f"sent Capacity Block Expiration Warning for {reservation_id} ({name}); its jobs checkpoint and are"
        " requeued"
    )


@local_app.command("spot-warning")
@reported
def spot_warning(
    instance: Annotated[
        str | None, typer.Option("--instance", help="The instance to warn (i-...).", show_default=False)
    ] = None,
    job: Annotated[
        str | None,
        typer.Option("--job", help="Warn the Spot instance this job runs on.", show_default=False),
    ] = None,
) -> None:
    """Put EC2's Spot Instance Interruption Warning (AWS's shape) on the local default bus, for
    --instance, or the instance --job runs on, or (neither given) the first running job's Spot
    instance. The local fleet reclaims the instance when the notice ends (`spot_notice_s` in
    local.json; 12 s locally, 2 minutes on AWS), and a replacement node joins the pool a few
    seconds later; the control plane checkpoints and requeues its jobs."""
    if instance is not None and job is not None:
        raise ClientError("give --instance or --job, not both", EXIT_USAGE)
    info = _local_info()
    if instance is None:
        instance, job_id = _instance_of(info, job)
    else:
        job_id = None
    import boto3

    events = boto3.client(
        "events",
        endpoint_url=info["aws_endpoint_url"],
        region_name=info["region"],
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )
    answer = events.put_events(
        Entries=[
            {
                "Source": "aws.ec2",
                "DetailType": "EC2 Spot Instance Interruption Warning",
                "Detail": json.dumps({"instance-id": instance, "instance-action": "terminate"}),
                "Resources": [f"arn:aws:ec2:{info['region']}a:instance/{instance}"],
            }
        ]
    )
    if answer.get("FailedEntryCount"):
        raise ClientError(f"the local bus refused the warning: {answer.get('Entries')}")
    notice = info.get("spot_notice_s")
    on = f" (job {job_id})" if job_id else ""
    typer.echo(
        f"sent EC2 Spot Instance Interruption Warning for {instance}{on}; the local fleet reclaims it"
        f" in {notice if notice is not None else '?'} s (the local notice) and its jobs resume elsewhere"
        " from their checkpoints"
    )


@local_app.command("preempt")
@reported
def preempt(
    job: Annotated[str, typer.Option("--job", help="The running job to preempt.", show_default=False)],
) -> None:
    """Stop a running job as a preemption would: the control plane's preempt workflow asks its
    agent for a checkpoint, waits for it (the job's grace period: the deployment's, or longer
    for a job whose measured checkpoint write needs it), stops the run, and requeues the job
    (PREEMPTED, then PENDING); the next scheduling pass runs it again from that checkpoint. No
    preemptor is needed, so any job can be tried against a preemption, beside `local
    spot-warning` for a Spot interruption."""
    info = _local_info()
    view = _job_view(info, job)
    if view.get("state") != "RUNNING":
        raise ClientError(f"job {job} is {view.get('state')}: only a RUNNING job can be preempted")
    import boto3

    stepfunctions = boto3.client(
        "stepfunctions",
        endpoint_url=info["aws_endpoint_url"],
        region_name=info["region"],
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )
    machines = stepfunctions.list_state_machines().get("stateMachines", [])
    arn = next((m["stateMachineArn"] for m in machines if m["name"].endswith("-preempt")), None)
    if arn is None:
        raise ClientError("the local control plane has no preempt workflow: is `spotline local up` running?")
    from botocore.exceptions import ClientError as AwsError

    from spotline.control.ports import execution_name

    version = int(view["version"])
    try:
        stepfunctions.start_execution(
            stateMachineArn=arn,
            name=execution_name("local-preempt", job, version),
            input=json.dumps({"job_id": job, "version": version, "disruption": "preempt", "timeout_s": None}),
        )
    except AwsError as error:
        if error.response.get("Error", {}).get("Code") == "ExecutionAlreadyExists":
            raise ClientError(f"job {job} is already being preempted") from None
        raise ClientError(f"the local preempt workflow did not start: {error}") from None
    typer.echo(
        f"preempting {job}: it checkpoints now and stops, then it is requeued and resumes from that"
        " checkpoint (`spotline events` shows each step)"
    )


def _job_view(info: dict[str, Any], job_id: str) -> dict[str, Any]:
    """The job as its team sees it (any local team's)."""
    for team, spec in (info.get("teams") or {}).items():
        api = Endpoint(info["api_url"], "local", team=team, headers=dict(spec.get("headers") or {}))
        try:
            view: dict[str, Any] = api.request("GET", f"/jobs/{job_id}")
        except ClientError as error:
            if error.status == 404:
                continue
            raise
        return view
    raise ClientError(f"job {job_id}: no local team has it", EXIT_FAILED, 404)


def _local_info() -> dict[str, Any]:
    path = state_dir() / "local.json"
    try:
        info: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        raise ClientError(
            f"{path} not found: start `spotline local up` first (or set SPOTLINE_STATE_DIR)"
        ) from None
    except ValueError as error:
        raise ClientError(f"{path}: not valid JSON ({error})") from None
    return info


def _instance_of(info: dict[str, Any], job_id: str | None) -> tuple[str, str]:
    """The Spot instance a job runs on (any local team's job), or the first running job's."""
    for team, spec in (info.get("teams") or {}).items():
        api = Endpoint(info["api_url"], "local", team=team, headers=dict(spec.get("headers") or {}))
        if job_id is not None:
            try:
                views = [api.request("GET", f"/jobs/{job_id}")]
            except ClientError as error:
                if error.status == 404:
                    continue
                raise
        else:
            views = api.request("GET", "/jobs", params={"state": "RUNNING"}).get("jobs") or []
        for view in views:
            if view.get("state") not in ("RUNNING", "CHECKPOINTING") or not view.get("instance_ids"):
                if job_id is not None:
                    raise ClientError(f"job {job_id} is {view.get('state')}: it runs on no instance now")
                continue
            if not str(view.get("pool") or "").endswith("-spot"):  # the local pools' names
                if job_id is not None:
                    raise ClientError(
                        f"job {job_id} runs On-Demand in {view.get('pool')}: EC2 sends no Spot warning there"
                    )
                continue
            return str(view["instance_ids"][0]), str(view["id"])
    if job_id is not None:
        raise ClientError(f"job {job_id}: no local team has it", EXIT_FAILED, 404)
    raise ClientError("no job runs on a Spot instance now: give --instance or --job")
