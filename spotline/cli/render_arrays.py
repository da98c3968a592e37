"""What the client prints for arrays (sweeps), dependencies and cost per job: tables for people;
`--output json|yaml` prints the data as the API returns it (`spotline.cli.render.emit`)."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table

from spotline.cli.render import explain_view, jobs_table


def counts_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {state}" for state, n in counts.items()) or "none"


def array_view(array: dict[str, Any]) -> Group:
    """An array: its counts by state, then its elements."""
    cap = array.get("max_running")
    head = (
        f"[bold]{array['id']}[/bold] {array.get('name', '')}: {array.get('size')} elements"
        f" ({counts_text(array.get('counts') or {})});"
        f" {array.get('holding_gpus', 0)} holding GPUs"
        + (f", at most {cap} at once (max_running)" if cap else "")
    )
    return Group(head, jobs_table(array.get("jobs") or []))


def array_explain_view(data: dict[str, Any]) -> Group:
    """`explain` of an array: its counts, and its first waiting element explained."""
    counts = counts_text(data.get("counts") or {})
    parts: list[Any] = [
        f"[bold]{data.get('id')}[/bold] {data.get('size')} elements ({counts}): {data.get('summary', '')}"
    ]
    element = data.get("element")
    if element:
        parts.append(explain_view(element))
    return Group(*parts)


def job_costs_table(data: dict[str, Any]) -> Table:
    """`usage --by job`: one row per job."""
    table = Table(
        "ID",
        "NAME",
        "STATE",
        "SPOT GPU-H",
        "ON-DEMAND GPU-H",
        "DOLLARS",
        "LOST GPU-H",
        "DISRUPTIONS",
        title=f"cost per job of {data.get('team')}",
    )
    for row in data.get("jobs") or []:
        table.add_row(
            row["id"],
            row.get("name", ""),
            row.get("state", ""),
            f"{float(row.get('spot_gpu_hours') or 0):.2f}",
            f"{float(row.get('on_demand_gpu_hours') or 0):.2f}",
            f"{float(row.get('dollars') or 0):,.2f}",
            f"{float(row.get('lost_gpu_hours') or 0):.2f}",
            str(int(row.get("preemptions") or 0) + int(row.get("interruptions") or 0)),
        )
    return table
