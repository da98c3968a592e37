"""`spotline pools`: each pool's capacity, free GPUs, nodes (running, idle, draining, reclaimed,
joining) and Spot state, from `GET /pools`."""

from __future__ import annotations

from typing import Any

import typer
from rich.console import Group
from rich.table import Column, Table

from spotline.cli.common import Session, client_command


def nodes_text(counts: dict[str, int] | None) -> str:
    """ "2 running, 1 joining" (states with none left out); "-" where the nodes are not reported."""
    if counts is None:
        return "-"
    return ", ".join(f"{n} {state}" for state, n in counts.items() if n) or "none"


def spot_text(spot: dict[str, Any] | None, reservation: dict[str, Any] | None = None) -> str:
    if reservation is not None:
        state = reservation.get("state")
        if state == "before":
            return f"reserved from {reservation.get('start')}"
        return f"reserved until {reservation.get('end')}" + (" (ended)" if state == "ended" else "")
    if spot is None:
        return "on-demand"
    state = str(spot.get("state"))
    if state == "missing":
        return f"missing for {float(spot.get('missing_for_s') or 0):.0f}s"
    availability = spot.get("availability")
    return state + ("" if availability is None else f" ({100 * float(availability):.0f}% of the time seen)")


def pools_view(data: dict[str, Any]) -> Group:
    """The pools, one row each; then their nodes, one row each (where the fleet reports them)."""
    table = Table(
        Column("POOL", no_wrap=True),
        Column("GPU", no_wrap=True),
        Column("CAPACITY", no_wrap=True, justify="right"),
        Column("USED", no_wrap=True, justify="right"),
        Column("FREE", no_wrap=True, justify="right"),
        Column("NODES", no_wrap=True),
        Column("SPOT / RESERVATION", no_wrap=True),
        Column("YOUR JOBS", no_wrap=True),
        box=None,
        header_style="bold",
        pad_edge=False,
        title=f"pools at {data.get('at')}",
    )
    rows: list[tuple[str, dict[str, Any]]] = []
    for pool in data.get("pools") or []:
        table.add_row(
            pool["name"],
            f"{pool.get('gpu_type')} x{pool.get('gpus_per_node')}",
            str(pool.get("capacity_gpus")),
            str(pool.get("used_gpus")),
            str(pool.get("free_gpus")),
            nodes_text(pool.get("node_counts")),
            spot_text(pool.get("spot"), pool.get("reservation")),
            ", ".join(pool.get("team_jobs") or []) or "-",
        )
        rows += [(pool["name"], node) for node in pool.get("nodes") or []]
    parts: list[Any] = [table]
    if not data.get("nodes_reported"):
        parts.append("nodes: this deployment does not report its instances")
    elif rows:
        nodes = Table(
            Column("POOL", no_wrap=True),
            Column("INSTANCE", no_wrap=True),
            Column("STATE", no_wrap=True),
            Column("GPUS USED", no_wrap=True, justify="right"),
            Column("SINCE", no_wrap=True),
            Column("UNTIL", no_wrap=True),
            box=None,
            header_style="bold",
            pad_edge=False,
        )
        for pool_name, node in rows:
            nodes.add_row(
                pool_name,
                node.get("instance_id") or "(replacement)",
                node["state"],
                f"{node.get('used_gpus', 0)}/{node.get('gpus')}",
                node.get("since") or "-",
                node.get("until") or "-",
            )
        parts.append(nodes)
    return Group(*parts)


def pools(session: Session) -> None:
    """Each pool: capacity, GPUs used and free, nodes (running, idle, draining, reclaimed,
    joining) and Spot state. Also your team's jobs in each."""
    session.emit(session.api.request("GET", "/pools"), pools_view)


def register(app: typer.Typer) -> None:
    app.command("pools")(client_command(pools))
