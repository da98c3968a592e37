"""`spotline demo`: a scripted scheduling scenario run through the real scheduling core.

Until the local control plane exists, the demo drives `spotline.domain.plan` directly through a
short scripted story (low-priority jobs fill the cluster, a critical job arrives and preempts,
a Spot reclaim hits a job) and prints every decision the core makes.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from spotline.scenario import ScenarioResult, run_scripted_scenario


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)


def demo(
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the demo result here (JSON).")] = None,
    seed: Annotated[int, typer.Option(help="Seed for the scheduler's random choices.")] = 1,
) -> None:
    """Run the demo scenario and print its timeline and final table."""
    console = Console()
    result = run_scripted_scenario(random.Random(seed))
    _print(console, result)
    if json_out is not None:
        json_out.write_text(json.dumps(result.to_json(), indent=2))
        console.print(f"wrote {json_out}")


def _print(console: Console, result: ScenarioResult) -> None:
    timeline = Table(title="Scheduling decisions (spotline.domain.plan)")
    for column in ("t (s)", "job", "from", "to", "reason"):
        timeline.add_column(column)
    for entry in result.timeline:
        timeline.add_row(f"{entry.t:7.0f}", entry.job_id, entry.source, entry.target, entry.reason)
    console.print(timeline)
    final = Table(title="Jobs")
    for column in ("job", "team", "priority", "final state", "preemptions", "interruptions", "lost GPU-s"):
        final.add_column(column)
    for job in result.jobs:
        final.add_row(
            job.id,
            job.team,
            job.priority.value,
            job.state.value,
            str(job.preemptions),
            str(job.interruptions),
            f"{job.lost_work_s * job.gpus:.0f}",
        )
    console.print(final)
