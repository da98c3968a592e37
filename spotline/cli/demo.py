"""`spotline demo` (what `make demo` runs): the whole control plane locally, end to end."""

from __future__ import annotations

import json
import logging
import resource
import time
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from spotline.local.demo import DEFAULT_SCENARIO, DemoResult, TimelineEntry, run_demo

_COLOURS = {
    "PENDING": "yellow",
    "ADMITTED": "cyan",
    "RUNNING": "green",
    "CHECKPOINTING": "magenta",
    "PREEMPTED": "red",
    "INTERRUPTED": "red",
    "SUCCEEDED": "bold green",
    "FAILED": "bold red",
    "CANCELLED": "dim",
}


class Scenario_(StrEnum):
    """The stories `spotline demo --scenario` plays."""

    DEFAULT = "default"
    SPOT_DEADLINE = "spot-deadline"


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)


def demo(
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Write the demo result here (JSON).")
    ] = None,
    scenario: Annotated[
        Scenario_,
        typer.Option(
            "--scenario",
            help="default: preemption with checkpoint and resume, and a Spot interruption recovered"
            " (a few minutes). spot-deadline: the Spot pool follows a hand-written availability"
            " trace; a deadline job moves to On-Demand when Spot vanishes and back when it returns,"
            " and meets its deadline (about a minute and a half).",
        ),
    ] = Scenario_.DEFAULT,
) -> None:
    """Run the control plane locally (moto, real handlers and workflows, real training
    processes) through a scripted story: preemption with checkpoint and resume, and a Spot
    interruption recovered. Takes a few minutes. With --scenario spot-deadline: Spot capacity
    vanishes under a deadline job instead (a Spot availability trace). AWS is emulated."""
    logging.basicConfig(level=logging.ERROR)
    console = Console()
    console.print("[bold]Spotline demo[/]: starting the local control plane (moto + real handlers) ...")

    def show(entry: TimelineEntry, name: str) -> None:
        colour = _COLOURS.get(entry.target, "white")
        console.print(
            f"{entry.t:7.1f}s  {name:<16} {entry.source:>13} -> [{colour}]{entry.target:<13}[/] "
            f"{entry.reason}",
            highlight=False,
        )

    if scenario is Scenario_.SPOT_DEADLINE:
        _spot_deadline(console, show, json_out)
        return
    started = time.time()
    result = run_demo(DEFAULT_SCENARIO, on_transition=show)
    _summary(console, result, time.time() - started)
    if json_out is not None:
        json_out.write_text(json.dumps(result.to_json(), indent=2))
        console.print(f"wrote {json_out}")
    if not result.all_succeeded:
        raise typer.Exit(code=1)


def _spot_deadline(
    console: Console, show: Callable[[TimelineEntry, str], None], json_out: Path | None
) -> None:
    from spotline.local.spot_demo import SpotDeadlineScenario, run_spot_deadline

    plan = SpotDeadlineScenario()
    console.print(
        f"Spot pool capacity per {plan.tick_s:g} s tick: {list(plan.counts)} (then the last holds);"
        f" deadline job: {plan.runtime_s:g} s of work due {plan.deadline_s:g} s after submission",
        highlight=False,
    )
    result = run_spot_deadline(plan, on_transition=show)
    finished = (
        "not finished"
        if result.finished_at is None
        else f"finished at {result.finished_at - result.started_at:.1f}s"
    )
    console.print(
        f"deadline job {result.final_state}, {finished}, deadline at"
        f" {result.deadline_at - result.started_at:.1f}s:"
        f" deadline {'met' if result.met_deadline else 'MISSED'}"
        f" (wall time {result.wall_s:.1f}s)",
        highlight=False,
    )
    if json_out is not None:
        json_out.write_text(json.dumps(result.to_json(), indent=2))
        console.print(f"wrote {json_out}")
    if not result.met_deadline:
        raise typer.Exit(code=1)


def _summary(console: Console, result: DemoResult, wall_s: float) -> None:
    if console.width >= 100:
        table = Table(title="Jobs")
        for column in (
            "job",
            "team",
            "priority",
            "final state",
            "preemptions",
            "interruptions",
            "resumed from checkpoint",
            "lost GPU-s",
        ):
            table.add_column(column, overflow="fold")
        for job in result.jobs:
            table.add_row(
                job["name"],
                job["team"],
                job["priority"],
                job["final_state"],
                str(job["preemptions"]),
                str(job["interruptions"]),
                "yes" if job["resumed_from_checkpoint"] else "no",
                f"{job['lost_gpu_seconds']:.1f}",
            )
        console.print(table)
    else:  # a narrow terminal: one line a job, which wraps, rather than a table cut to "…"
        console.print("[bold]Jobs[/]")
        for job in result.jobs:
            console.print(
                f"  {job['name']} ({job['team']}, {job['priority']}): {job['final_state']};"
                f" {job['preemptions']} preemption(s), {job['interruptions']} interruption(s);"
                f" {'resumed from a checkpoint' if job['resumed_from_checkpoint'] else 'never resumed'};"
                f" {job['lost_gpu_seconds']:.1f} GPU-s lost",
                highlight=False,
            )
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    peak_child_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    latency = result.spot_warning_to_checkpoint_request_s
    console.print(
        f"wall time {wall_s:.1f}s, peak memory: control plane {peak_mb:.0f} MiB, largest training process "
        f"{peak_child_mb:.0f} MiB; Spot warning -> "
        f"checkpoint requested: {'n/a' if latency is None else f'{latency * 1000:.0f} ms'}"
    )
