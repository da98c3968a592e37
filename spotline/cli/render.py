"""What the client commands print: tables for people (rich), or the data as JSON or YAML
(`--output`). Nothing here talks to the API (`spotline.cli.client` does)."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from rich.console import Console, Group
from rich.table import Column, Table

console = Console()
errors = Console(stderr=True)


class Output(StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


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
        import yaml  # only for --output yaml

        console.out(yaml.safe_dump(data, sort_keys=False, default_flow_style=False).rstrip(), highlight=False)
    elif console.is_terminal:
        console.print(table(data))
    else:
        unwrapped().print(table(data))


# Wider than any table: where stdout is a pipe or a file, a table is as wide as its content.
UNWRAPPED_WIDTH = 100_000


def unwrapped() -> Console:
    """stdout when it is not a terminal: tables at their full width (no cell wraps, no word is
    cut for a width nothing will show), each line without trailing blanks."""
    return Console(width=UNWRAPPED_WIDTH, soft_wrap=False, file=_TrimmedLines(console.file))


class _TrimmedLines(io.StringIO):
    """A text stream that drops the blanks a table pads its lines with."""

    def __init__(self, target: Any) -> None:
        super().__init__()
        self.target = target
        self.pending = ""

    def write(self, text: str) -> int:
        self.pending += text
        *lines, self.pending = self.pending.split("\n")
        for line in lines:
            self.target.write(line.rstrip() + "\n")
        return len(text)

    def flush(self) -> None:
        if self.pending:
            self.target.write(self.pending.rstrip())
            self.pending = ""
        self.target.flush()


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
    if job.get("deadline_answer"):
        rows.append(("deadline answer", deadline_answer_text(job["deadline_answer"])))
    if job.get("progress") is not None or job.get("step") is not None:
        rows.append(("progress", progress_text(job)))
    if checkpoint:
        rows.append(
            (
                "last checkpoint",
                ("" if checkpoint.get("step") is None else f"step {checkpoint['step']} ")
                + f"{age(checkpoint.get('at'))}: {checkpoint.get('uri')}",
            )
        )
    restored = job.get("restored") or {}
    if restored:
        rows.append(
            (
                "resumed from",
                f"step {restored.get('step')} (run {restored.get('run')}): {restored.get('uri')}",
            )
        )
    rows.append(
        (
            "disruptions",
            f"{job.get('preemptions', 0)} preemption(s), {job.get('interruptions', 0)} interruption(s),"
            f" {float(job.get('lost_work_s') or 0):.0f} s of work lost",
        )
    )
    if job.get("cost"):
        rows.append(("cost", cost_text(job["cost"])))
    if job.get("array_id"):
        params = ", ".join(f"{k}={v}" for k, v in (job.get("array_params") or {}).items())
        rows.append(
            (
                "array",
                f"{job['array_id']} element {job.get('array_index')}" + (f" ({params})" if params else ""),
            )
        )
    if (job.get("spec") or {}).get("after"):
        spec = job["spec"]
        rows.append(("after", f"{spec.get('dependency') or 'afterok'}: {', '.join(spec['after'])}"))
    if job.get("wait_reason"):
        rows.append(("wait reason", wait_text(job["wait_reason"], job.get("wait_reason_at"))))
    return rows


def progress_text(job: dict[str, Any]) -> str:
    """A job's progress and step as the API defines them (one source: `spotline.control.progress`)."""
    fraction, step = job.get("progress"), job.get("step")
    parts = [] if fraction is None else [f"{100 * float(fraction):.0f}%"]
    if step is not None:
        parts.append(f"step {step}" if not parts else f"(step {step})")
    return " ".join(parts) or "-"


def wait_text(reason: str, at: float | None) -> str:
    """Why a job waits, dated by the scheduling pass that decided it in these words."""
    return str(reason) if at is None else f"{reason} (pass at {iso(float(at))})"


def cost_text(cost: dict[str, Any]) -> str:
    """A job's cost so far, on one line (status)."""
    return (
        f"${float(cost.get('dollars') or 0):,.2f}: {float(cost.get('spot_gpu_hours') or 0):.2f} GPU-h Spot,"
        f" {float(cost.get('on_demand_gpu_hours') or 0):.2f} GPU-h On-Demand,"
        f" {float(cost.get('lost_gpu_hours') or 0):.2f} GPU-h lost to preemption and interruption"
    )


def _num(value: Any) -> str:
    if value is None:
        return "-"
    text = f"{float(value):.1f}"
    return "0.0" if text == "-0.0" else text  # a tiny negative term reads as 0, not -0


def deadline_answer_text(answer: dict[str, Any]) -> str:
    """The deadline's answer at submission in one line: what it says, and the run time it used
    with the range that run time comes from."""
    text = str(answer.get("summary") or answer.get("kind"))
    runtime = answer.get("runtime")
    if isinstance(runtime, dict):
        text += (
            f"; run time planned {float(runtime['planned_s']) / 3600:.2f} h"
            f" ({runtime.get('source')}, range {float(runtime['low_s']) / 3600:.2f}"
            f"-{float(runtime['high_s']) / 3600:.2f} h)"
        )
    return text


def job_table(job: dict[str, Any]) -> Table:
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    for key, value in _job_rows(job):
        table.add_row(key, value)
    return table


def jobs_table(jobs: list[dict[str, Any]]) -> Table:
    # Short values (ids, states, counts, ages) never wrap or truncate: at 80 columns the prose
    # columns (the name, the pool, the wait reason) fold instead, so nothing is cut off.
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
    for job in jobs:
        note = wait_text(job["wait_reason"], job.get("wait_reason_at")) if job.get("wait_reason") else ""
        if not note and (job.get("progress") is not None or job.get("step") is not None):
            note = progress_text(job)
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
    # The time and the states never wrap; the reason folds, so the job ids it names stay whole.
    table = Table(
        Column("WHEN", no_wrap=True),
        Column("AGE", no_wrap=True),
        Column("FROM", no_wrap=True),
        Column("TO", no_wrap=True),
        Column("REASON", overflow="fold"),
        title=f"events of {timeline['job_id']}",
        box=None,
        header_style="bold",
        pad_edge=False,
    )
    for event in timeline["events"]:
        table.add_row(
            iso(event.get("t")) or "",
            age(event.get("t")),
            event.get("from") or "-",
            event["to"],
            event.get("reason", ""),
        )
    return table


def spot_history_line(history: dict[str, Any]) -> str:
    """The Spot pool history the deadline guard used, in one line."""
    there = "there" if history.get("spot_there") else f"missing for {history.get('missing_for_h', 0):.2f} h"
    availability = history.get("availability")
    seen = (
        f"available {availability:.0%} of {history.get('observed_h', 0):.2f} h observed,"
        f" {history.get('outages', 0)} outages"
        if availability is not None
        else "no history observed yet"
    )
    return f"Spot history ({history['pool']}): Spot {there}; {seen}"


def explain_view(data: dict[str, Any]) -> Group:
    summary = data.get("summary", "")
    if data.get("wait_reason") and summary == data["wait_reason"]:
        summary = wait_text(summary, data.get("wait_reason_at_s"))
    parts: list[Any] = [f"[bold]{data.get('job_id')}[/bold] {data.get('state')}: {summary}"]
    progress = data.get("progress") or {}
    if progress.get("step") is not None or progress.get("fraction") is not None:
        parts.append(
            f"progress: {progress_text({'progress': progress.get('fraction'), 'step': progress.get('step')})}"
        )
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
    answer = data.get("deadline_answer")
    if isinstance(answer, dict):
        parts.append(f"deadline answer: {deadline_answer_text(answer)}")
    guard = data.get("deadline_guard")
    if guard:
        advice, placed = guard.get("advice"), guard.get("now")
        parts.append(f"deadline guard: {advice} (now {placed}): {guard.get('summary')}")
        history = guard.get("spot_history")
        if isinstance(history, dict) and history.get("pool"):
            parts.append(spot_history_line(history))
    placement = data.get("placement")
    if isinstance(placement, dict):
        parts.append(
            f"placement: {placement.get('pool')} ({placement.get('purchase')}):"
            f" {placement.get('why_this_pool') or '-'}"
            + (f"; admitted: {placement['reason']}" if placement.get("reason") else "")
        )
    elif placement:
        parts.append(f"placement: {placement}")
    preempted = data.get("preempted_by")
    if isinstance(preempted, dict):
        parts.append(
            f"preempted by: {preempted.get('by')} at {preempted.get('at')} ({preempted.get('reason')})"
        )
    elif preempted:
        parts.append(f"preempted by: {preempted}")
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
        if forecast.get("reason") == "started" and forecast.get("at"):
            parts.append(f"started: {forecast['at']} ({age(forecast.get('at_s'))})")
        elif forecast.get("at"):
            parts.append(
                f"estimated start: {forecast['at']} ({age(forecast.get('at_s'))}),"
                f" between {forecast.get('earliest')} and {forecast.get('latest')}"
            )
        else:
            parts.append(f"estimated start: unknown ({forecast.get('reason', '')})")
    return Group(*parts)


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
