"""`spotline reservations advise`: from the team's queue and its deadlines, the Capacity Block
offerings worth looking at, the blocks worth extending, and the cost either way. Advice only:
it never buys (`spotline.domain.reserved_advice`). With `--offerings` it reads EC2's offerings
(DescribeCapacityBlockOfferings, DescribeCapacityBlockExtensionOfferings) for their real upfront
fees."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.table import Column, Table

from spotline.cli.common import Session, client_command
from spotline.cli.http import ClientError
from spotline.domain import SchedulerConfig
from spotline.domain.models import ClusterSnapshot, Job, JobSpec, JobState, Pool, Purchase, ReservedWindow
from spotline.domain.reserved_advice import Advice, Prices
from spotline.domain.reserved_advice import advise as advise_on

reservations_app = typer.Typer(
    help="Reserved capacity: Capacity Block offerings worth a look, blocks worth extending, and the cost"
    " either way (advice only: it never buys).",
    no_args_is_help=True,
    add_completion=False,
)

# p4d.24xlarge On-Demand in us-east-1 ($32.77 an hour) per GPU; a Capacity Block's price varies
# with supply and is read from the offerings with --offerings.
DEFAULT_ON_DEMAND_USD = 4.10
DEFAULT_BLOCK_USD = 2.50
UNFINISHED = ("PENDING", "ADMITTED", "RUNNING", "CHECKPOINTING")


def register(app: typer.Typer) -> None:
    reservations_app.command("advise")(client_command(advise))
    app.add_typer(reservations_app, name="reservations")


def job_of(view: dict[str, Any]) -> Job:
    """A job as the API shows it, as the domain's record (what the advice reads)."""
    return Job(
        id=view["id"],
        team=view["team"],
        spec=JobSpec.model_validate(view["spec"]),
        state=JobState(view["state"]),
        submitted_at=float(view["submitted_at"]),
        enqueued_at=float(view.get("enqueued_at") or view["submitted_at"]),
        started_at=view.get("started_at"),
        runtime_s=float(view.get("runtime_s") or 0.0),
        progress=view.get("progress"),
        pool=view.get("pool"),
    )


def pool_of(view: dict[str, Any]) -> Pool:
    """A pool as `GET /pools` shows it, as the domain's."""
    reservation = view.get("reservation")
    return Pool(
        name=view["name"],
        gpu_type=view["gpu_type"],
        purchase=Purchase(view["purchase"]),
        capacity_gpus=int(view["capacity_gpus"]),
        gpus_per_node=int(view["gpus_per_node"]),
        price=float(view.get("price", 1.0)),
        reservation=None
        if not reservation
        else ReservedWindow(
            start=float(reservation["start_at"]),
            end=float(reservation["end_at"]),
            reservation_id=reservation.get("reservation_id"),
        ),
    )


def advise(
    session: Session,
    on_demand_price: Annotated[
        float,
        typer.Option("--on-demand-price", min=0.0, help="Dollars per On-Demand GPU-hour (p4d: 4.10)."),
    ] = DEFAULT_ON_DEMAND_USD,
    block_price: Annotated[
        float,
        typer.Option(
            "--block-price",
            min=0.0,
            help="Dollars per Capacity Block GPU-hour, an estimate (--offerings reads the real fees).",
        ),
    ] = DEFAULT_BLOCK_USD,
    offerings: Annotated[
        bool,
        typer.Option("--offerings", help="Read EC2's offerings for the advice (needs AWS credentials)."),
    ] = False,
    region: Annotated[
        str | None, typer.Option("--region", help="Region of the offerings (--offerings).")
    ] = None,
) -> None:
    """From the team's queue and its deadlines: Capacity Block offerings to look at (instance type,
    count, duration) when deadline jobs would otherwise run On-Demand, blocks to extend when they end
    with work that fits, and the cost either way. It never buys."""
    api = session.api
    pools_view = api.request("GET", "/pools")
    pools = [pool_of(p) for p in pools_view.get("pools") or []]
    instance_types = {p["name"]: list(p.get("instance_types") or []) for p in pools_view.get("pools") or []}
    jobs = []
    for state in UNFINISHED:
        jobs += [job_of(v) for v in _jobs(api, state)]
    now = time.time()
    advice = advise_on(
        jobs, ClusterSnapshot.build(pools), now, SchedulerConfig(), Prices(on_demand_price, block_price)
    )
    data = advice_json(advice, pools, instance_types)
    if offerings:
        data = with_offerings(data, region, session.profile)
    session.emit(data, advice_view)


def _jobs(api: Any, state: str) -> list[dict[str, Any]]:
    from spotline.cli.client import pages

    return list(pages(api, "/jobs", "jobs", {"state": state}))


def advice_json(advice: Advice, pools: list[Pool], instance_types: dict[str, list[str]]) -> dict[str, Any]:
    """The advice as JSON (what `--output json` prints)."""

    def instance_type(gpu_type: str) -> str | None:
        for pool in pools:
            if pool.gpu_type == gpu_type and instance_types.get(pool.name):
                return instance_types[pool.name][0]
        return None

    return {
        "offerings_queries": [
            {
                "instance_type": instance_type(q.gpu_type),
                "gpu_type": q.gpu_type,
                "instance_count": q.instance_count,
                "duration_hours": q.duration_hours,
                "start_after": q.start_after,
                "end_before": q.end_before,
                "jobs": list(q.jobs),
                "on_demand_usd": round(q.on_demand_usd, 2),
                "block_usd_estimate": round(q.block_usd, 2),
                "why": q.why,
            }
            for q in advice.offerings
        ],
        "extensions": [
            {
                "pool": e.pool,
                "reservation_id": e.reservation_id,
                "ends_at": e.ends_at,
                "hours": e.hours,
                "jobs": list(e.jobs),
                "on_demand_usd": round(e.on_demand_usd, 2),
                "extension_usd_estimate": round(e.extension_usd, 2),
                "why": e.why,
            }
            for e in advice.extensions
        ],
        "notes": list(advice.notes),
        "purchases": "none: this is advice; buy with `aws ec2 purchase-capacity-block` if it pays",
    }


def with_offerings(data: dict[str, Any], region: str | None, profile: str | None) -> dict[str, Any]:
    """The advice with EC2's offerings (the cheapest three of each query) and their fees."""
    import boto3
    from botocore.exceptions import BotoCoreError
    from botocore.exceptions import ClientError as AwsError

    from spotline.aws.capacity_blocks import block_offerings, extension_offerings

    try:
        ec2 = boto3.Session(profile_name=profile, region_name=region).client("ec2")
        for query in data["offerings_queries"]:
            if query["instance_type"] is None:
                query["offerings"] = []
                continue
            found = block_offerings(
                ec2,
                query["instance_type"],
                query["instance_count"],
                query["duration_hours"],
                query["start_after"],
                query["end_before"],
            )
            query["offerings"] = [vars(o) for o in found[:3]]
        for extension in data["extensions"]:
            if not str(extension.get("reservation_id") or "").startswith("cr-"):
                extension["offerings"] = []
                continue
            found = extension_offerings(ec2, extension["reservation_id"], extension["hours"])
            extension["offerings"] = [vars(o) for o in found[:3]]
    except (BotoCoreError, AwsError) as error:
        raise ClientError(f"--offerings: EC2 refused the offerings query: {error}") from None
    return data


def advice_view(data: dict[str, Any]) -> Group:
    parts: list[Any] = []
    if data["offerings_queries"]:
        table = Table(
            Column("INSTANCE TYPE"),
            Column("COUNT", justify="right"),
            Column("DAYS", justify="right"),
            Column("ON-DEMAND $", justify="right"),
            Column("BLOCK $", justify="right"),
            Column("WHY"),
            box=None,
            header_style="bold",
            title="Capacity Block offerings to look at",
        )
        for q in data["offerings_queries"]:
            fees = [o["upfront_fee"] for o in q.get("offerings") or []]
            block = f"{min(fees):,.0f} (offered)" if fees else f"~{q['block_usd_estimate']:,.0f}"
            table.add_row(
                str(q["instance_type"] or q["gpu_type"]),
                str(q["instance_count"]),
                str(q["duration_hours"] // 24),
                f"{q['on_demand_usd']:,.0f}",
                block,
                q["why"],
            )
        parts.append(table)
    if data["extensions"]:
        table = Table(
            Column("POOL"),
            Column("RESERVATION"),
            Column("EXTEND BY", justify="right"),
            Column("ON-DEMAND $", justify="right"),
            Column("EXTENSION $", justify="right"),
            Column("WHY"),
            box=None,
            header_style="bold",
            title="Blocks to extend",
        )
        for e in data["extensions"]:
            fees = [o["upfront_fee"] for o in e.get("offerings") or []]
            cost = f"{min(fees):,.0f} (offered)" if fees else f"~{e['extension_usd_estimate']:,.0f}"
            table.add_row(
                e["pool"],
                str(e["reservation_id"]),
                f"{e['hours']} h",
                f"{e['on_demand_usd']:,.0f}",
                cost,
                e["why"],
            )
        parts.append(table)
    parts += list(data["notes"])
    parts.append(f"purchases: {data['purchases']}")
    return Group(*parts)
