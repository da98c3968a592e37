"""`spotline trace convert`: public traces -> the canonical trace format `spotline simulate` reads."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from spotline.trace import TraceError, parse_when, read_philly, write_trace
from spotline.trace.synth import SIGMA, synth_trace

FORMATS = ("philly",)


def register(app: typer.Typer) -> None:
    trace_app = typer.Typer(help="Work with traces.", no_args_is_help=True)
    trace_app.command("convert")(convert)
    trace_app.command("synth")(synth)
    app.add_typer(trace_app, name="trace")


def convert(
    source: Annotated[Path, typer.Argument(help="The trace to convert (e.g. shared/traces/philly.csv).")],
    target: Annotated[Path, typer.Argument(help="Where to write the canonical CSV.")],
    source_format: Annotated[
        str, typer.Option("--from", help=f"Format of SOURCE: {', '.join(FORMATS)}.")
    ] = "philly",
    start: Annotated[
        str, typer.Option(help="Keep jobs that arrive from this date (YYYY-MM-DD or ISO-8601, UTC); time 0.")
    ] = "2017-10-02",
    end: Annotated[
        str, typer.Option(help="Keep jobs that arrive before this time; a bare date includes that whole day.")
    ] = "2017-10-29",
    seed: Annotated[int, typer.Option(help="Seed of the priority classes assigned to the jobs.")] = 1,
) -> None:
    """Convert a public trace to the canonical format, with seeded priority classes."""
    console = Console()
    if source_format not in FORMATS:
        raise typer.BadParameter(
            f"unknown format {source_format!r} (one of {', '.join(FORMATS)})", param_hint="--from"
        )
    try:
        window = parse_when(start), parse_when(end, end=True)
        trace = read_philly(source, window[0], window[1], seed)
        count = write_trace(trace.jobs, target)
    except (TraceError, ValueError, OSError) as error:
        typer.secho(f"error: {error}", err=True, fg="red")
        raise typer.Exit(2) from None
    classes: dict[str, int] = {}
    for job in trace.jobs:
        classes[job.priority.value] = classes.get(job.priority.value, 0) + 1
    mix = ", ".join(f"{k} {v}" for k, v in sorted(classes.items()))
    console.print(f"wrote {count} jobs to {target} ({mix})")


def synth(
    target: Annotated[Path, typer.Argument(help="Where to write the canonical CSV.")],
    jobs: Annotated[int, typer.Option("--jobs", help="Jobs in the trace.")] = 5000,
    load: Annotated[
        float,
        typer.Option(
            "--load", help="GPU-seconds of work over the cluster's GPU-seconds in the arrival window."
        ),
    ] = 0.85,
    gpus: Annotated[int, typer.Option("--gpus", help="GPUs of the cluster the load is for.")] = 512,
    seed: Annotated[int, typer.Option(help="Seed of every draw: the same seed writes the same trace.")] = 1,
    sigma: Annotated[
        float, typer.Option("--sigma", help="Sigma of the log-normal run times (heavier tail above).")
    ] = SIGMA,
    long_share: Annotated[
        float, typer.Option("--long-share", help="Share of the jobs that run for weeks (7-21 days).")
    ] = 0.0,
) -> None:
    """Write a seeded synthetic trace: bursty arrivals, heavy-tailed run times, six teams, four classes."""
    console = Console()
    try:
        trace = synth_trace(jobs, load, gpus, seed, sigma=sigma, long_share=long_share)
        count = write_trace(trace, target)
    except (ValueError, OSError) as error:
        typer.secho(f"error: {error}", err=True, fg="red")
        raise typer.Exit(2) from None
    span_h = trace[-1].submit_s / 3600.0 if trace else 0.0
    console.print(
        f"wrote {count} jobs to {target} (arrivals over {span_h:.1f} h, load {load:g} on {gpus} GPUs)"
    )
