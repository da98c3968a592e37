"""What the client prints for arrays (sweeps), dependencies and cost per job: tables for people;
`--output json|yaml` prints the data as the API returns it (`spotline.cli.render.emit`)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from rich.console import Group
from rich.table import Column, Table

from spotline.cli.render import age, explain_view, jobs_table, progress_text, wait_text


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


# The order states are counted in (the rest after them, as met).
STATE_ORDER = ("RUNNING", "CHECKPOINTING", "ADMITTED", "PENDING", "PREEMPTED", "INTERRUPTED")


def folded(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`jobs` with each array's elements folded into one entry at the place of its first element:
    {"array_id", "name", "elements": [...], "counts": {state: n}}; a job of no array stays as is."""
    out: list[dict[str, Any]] = []
    arrays: dict[str, dict[str, Any]] = {}
    for job in jobs:
        array_id = job.get("array_id")
        if not array_id:
            out.append(job)
            continue
        entry = arrays.get(array_id)
        if entry is None:
            entry = arrays[array_id] = {"array_id": array_id, "name": job.get("name", ""), "elements": []}
            out.append(entry)
        entry["elements"].append(job)
    for entry in arrays.values():
        tally = Counter(str(j["state"]) for j in entry["elements"])
        ordered = [s for s in STATE_ORDER if s in tally] + [s for s in tally if s not in STATE_ORDER]
        entry["counts"] = {state: tally[state] for state in ordered}
    return out


def jobs_and_arrays_table(jobs: list[dict[str, Any]], *, expand: bool = False) -> Table:
    """`spotline list`: one row a job, and one row an array (a sweep) with its elements counted by
    state and its first waiting element's reason once; with `expand`, its elements below it."""
    table = Table(
        Column("ID", no_wrap=True),
        Column("NAME", overflow="fold"),
        Column("STATE", no_wrap=True),
        Column("PRIORITY", overflow="fold", min_width=8),
        Column("GPUS", no_wrap=True),
        Column("POOL", overflow="fold"),
        Column("SUBMITTED", no_wrap=True),
        Column("WAIT REASON / PROGRESS", overflow="fold", min_width=8),
        box=None,
        header_style="bold",
        pad_edge=False,
    )
    for entry in folded(jobs):
        if "array_id" not in entry or "elements" not in entry:
            table.add_row(*_job_cells(entry))
            continue
        elements = entry["elements"]
        first = elements[0]
        waiting = next((j for j in elements if j.get("wait_reason")), None)
        holding = sum(int(j.get("gpus") or 0) * int(j.get("nodes") or 1) for j in elements if j.get("pool"))
        pools = sorted({str(j["pool"]) for j in elements if j.get("pool")})
        note = ""
        if waiting is not None:
            note = f"{waiting['id']}: {wait_text(waiting['wait_reason'], waiting.get('wait_reason_at'))}"
        table.add_row(
            entry["array_id"],
            f"{entry['name']} ({len(elements)} elements)",
            ", ".join(f"{n} {state}" for state, n in entry["counts"].items()),
            f"{first.get('priority')}",
            f"{holding} held" if holding else "-",
            ", ".join(pools) or "-",
            age(min(float(j.get("submitted_at") or 0) for j in elements)),
            note,
        )
        if expand:
            for job in elements:
                cells = _job_cells(job)
                table.add_row("  " + cells[0], *cells[1:])
    return table


def _job_cells(job: dict[str, Any]) -> list[str]:
    note = wait_text(job["wait_reason"], job.get("wait_reason_at")) if job.get("wait_reason") else ""
    if not note and (job.get("progress") is not None or job.get("step") is not None):
        note = progress_text(job)
    return [
        job["id"],
        job.get("name", ""),
        job["state"],
        f"{job.get('priority')} {_priority(job.get('effective_priority'))}",
        str(job.get("gpus")),
        job.get("pool") or "-",
        age(job.get("submitted_at")),
        note,
    ]


def _priority(value: Any) -> str:
    if value is None:
        return "-"
    text = f"{float(value):.1f}"
    return "0.0" if text == "-0.0" else text
