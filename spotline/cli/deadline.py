"""`spotline simulate deadline`: the single-job Spot-under-deadline benchmark ("Can't Be Late")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

POLICY_NAMES = ("spotline", "greedy", "uniform-progress", "omniscient", "on-demand")


def _fail(message: str) -> typer.Exit:
    typer.secho(f"error: {message}", err=True, fg="red")
    return typer.Exit(2)


def deadline_command(
    availability: Annotated[
        Path,
        typer.Option(
            "--availability",
            help="Spot availability trace (SkyPilot's format: {'metadata': {'gap_seconds': G}, 'data':"
            " [instances per tick]}); the repository's are under spotline/sim/data/availability/.",
        ),
    ],
    job_hours: Annotated[float, typer.Option("--job-hours", help="C: hours of work the job needs.")],
    deadline_hours: Annotated[
        float, typer.Option("--deadline-hours", help="R: hours from the start to the deadline.")
    ],
    changeover_hours: Annotated[
        float,
        typer.Option(
            "--changeover-hours", help="D: hours without progress each switch to a running state costs."
        ),
    ],
    price_ratio: Annotated[
        float, typer.Option("--price-ratio", help="K: On-Demand price per hour (Spot costs 1).")
    ],
    start_hour: Annotated[
        list[float],
        typer.Option(
            "--start-hour",
            help="Hour of the trace at which the job starts; repeat for several. A start off the"
            " trace's grid is snapped to the nearest tick (within half a tick), and the output says so.",
        ),
    ],
    policy: Annotated[str, typer.Option("--policy", help=f"One of {', '.join(POLICY_NAMES)}.")],
    json_out: Annotated[Path, typer.Option("--json", help="Write the results here (JSON).")],
) -> None:
    """Replay one job with a deadline over a Spot availability trace, once per start hour.

    Each trace step the job is idle, on Spot (only while the trace has an instance) or On-Demand;
    every switch to a running state costs D hours without progress at the new state's price; Spot
    costs 1 per hour and On-Demand K; the cost is reported as a fraction of K * C. A trace's
    `prices` (SkyPilot's preemption traces) are accepted and not used: the cost is in Spot hours.
    """
    from spotline.cli.outfile import OutputError, check_file, write_text
    from spotline.sim.availability import AvailabilityError, load_availability
    from spotline.sim.deadline import JobSetup, grid_tick, simulate_deadline, snap_note

    if policy not in POLICY_NAMES:
        raise _fail(f"--policy: unknown policy {policy!r} (one of {', '.join(POLICY_NAMES)})")
    if not start_hour:
        raise _fail("--start-hour: give at least one start hour")
    setup = JobSetup(job_hours, deadline_hours, changeover_hours, price_ratio)
    try:
        check_file(json_out, "--json")  # before the work, not after it
        setup.check()
        trace = load_availability(availability)
        outcomes = simulate_deadline(trace, setup, start_hour, policy)
        notes = [note for note in (snap_note(trace, s) for s in dict.fromkeys(start_hour)) if note]
        grid = [grid_tick(trace, o.start_hour) * trace.gap_hours for o in outcomes]
    except (AvailabilityError, OutputError, ValueError) as error:
        raise _fail(str(error)) from None
    if trace.prices is not None:
        notes.append(
            f"the trace's 'prices' (Spot per hour, {min(trace.prices):g} to {max(trace.prices):g}) are not"
            f" used: cost counts Spot hours at 1 and On-Demand hours at --price-ratio {price_ratio:g}"
        )
    results = [{**o.to_json(), "grid_start_hour": round(g, 9)} for o, g in zip(outcomes, grid, strict=True)]
    document: dict[str, object] = {"results": results, "notes": notes}
    try:
        write_text(json_out, json.dumps(document, indent=2) + "\n", "--json")
    except OutputError as error:
        raise _fail(str(error)) from None
    for note in notes:
        typer.echo(f"note: {note}")
    met = sum(o.met_deadline for o in outcomes)
    mean = sum(o.cost_fraction_of_on_demand for o in outcomes) / len(outcomes)
    typer.echo(
        f"{policy}: {len(outcomes)} start(s), {met} met the deadline, mean cost {mean:.3f} of On-Demand;"
        f" wrote {json_out}"
    )
