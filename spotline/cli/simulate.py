"""`spotline simulate`: replay a trace through Spotline's scheduling core and the peers' policies."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from spotline.cli.outfile import OutputError, check_dir, check_file, write_text
from spotline.domain import SchedulerConfig
from spotline.sim import DEFAULT_GPUS, DEFAULT_SPOT_FRACTION, POLICIES, PreemptionCycle, SimSettings, simulate
from spotline.sim.availability import AvailabilityError, AvailabilityTrace, load_availability
from spotline.sim.blocks import Reservation, ReservationError, parse_reservation
from spotline.sim.model import VictimStop
from spotline.sim.peers import ESTIMATE_MODELS, KUEUE_DEFAULT
from spotline.sim.pools import DEFAULT_INSTANCE, DEFAULT_REGION, spot_advice
from spotline.sim.runner import KNOWN_POLICIES
from spotline.sim.spot_zones import SpotModel, zone_name
from spotline.sim.variants import VARIANTS, VariantError, extension_of
from spotline.trace import TraceError, read_trace


def register(app: typer.Typer) -> None:
    # `spotline simulate --trace ...` runs the trace replay; `spotline simulate deadline ...` the
    # single-job Spot-under-deadline benchmark (spotline.cli.deadline).
    from spotline.cli.deadline import deadline_command

    group = typer.Typer(invoke_without_command=True, add_completion=False)
    group.callback()(simulate_command)
    group.command("deadline")(deadline_command)
    app.add_typer(group, name="simulate")


def simulate_command(
    ctx: typer.Context,
    trace: Annotated[
        Path | None,
        typer.Option(
            "--trace",
            help="Trace in the canonical CSV format (job_id,submit_s,duration_s,gpus,team,priority"
            "[,deadline_s,gpu_type,spot_ok]); `spotline trace convert` makes one from the Philly table.",
        ),
    ] = None,
    policy: Annotated[
        list[str] | None,
        typer.Option(
            "--policy",
            help=f"Policy to run; repeat for several. Default: all ({', '.join(POLICIES)}). Kueue's"
            f" configurations also run by name ({', '.join(n for n in KNOWN_POLICIES if n not in POLICIES)});"
            f" `kueue` is {KUEUE_DEFAULT}.",
        ),
    ] = None,
    gpus: Annotated[
        int, typer.Option(help="GPUs in the cluster (Spot and On-Demand pools together).")
    ] = DEFAULT_GPUS,
    spot_fraction: Annotated[
        float,
        typer.Option(
            "--spot-fraction",
            help="Share of the GPUs in the Spot pool, rounded to whole 8-GPU instances (0: all On-Demand,"
            f" no interruptions). Default {DEFAULT_SPOT_FRACTION}: with p4d Spot at 0.33 of On-Demand a busy"
            " cluster then costs about 0.5 On-Demand, while the On-Demand quarter still holds the critical"
            " class and the largest gang jobs.",
        ),
    ] = DEFAULT_SPOT_FRACTION,
    seed: Annotated[int, typer.Option(help="Seed of restart costs, Spot reclaims and random choices.")] = 1,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the metrics here (JSON).")] = None,
    decisions: Annotated[
        Path | None,
        typer.Option("--decisions", help="Write every decision of every policy here (JSON lines)."),
    ] = None,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Write PNG figures into this directory.")
    ] = None,
    checkpoint_interval: Annotated[
        float, typer.Option("--checkpoint-interval", help="Seconds of progress between periodic checkpoints.")
    ] = SimSettings.checkpoint_interval_s,
    checkpoint_write: Annotated[
        float,
        typer.Option(
            "--checkpoint-write", help="Seconds a checkpoint takes to write (must fit the 120 s notice)."
        ),
    ] = SimSettings.checkpoint_write_s,
    restart_min: Annotated[float, typer.Option("--restart-min", help="Fewest seconds a restart costs.")] = (
        SimSettings.restart_min_s
    ),
    restart_max: Annotated[float, typer.Option("--restart-max", help="Most seconds a restart costs.")] = (
        SimSettings.restart_max_s
    ),
    instance_type: Annotated[str, typer.Option("--instance-type", help="GPU instance of both pools.")] = (
        DEFAULT_INSTANCE
    ),
    region: Annotated[
        str, typer.Option(help="Region whose Spot advice prices the Spot pool.")
    ] = DEFAULT_REGION,
    workers: Annotated[
        int,
        typer.Option(
            help="Policies simulated at once, one process each (default: the CPUs);"
            " --decisions runs them in one.",
            min=1,
        ),
    ] = os.cpu_count() or 1,
    victim_stop: Annotated[
        VictimStop,
        typer.Option(
            "--victim-stop",
            help="How the peers stop victims: checkpoint (SIGTERM, a checkpoint in the grace period, the"
            " preemptor waits; Spot notices checkpoint; critical work On-Demand) or hard-kill (stopped at"
            " once, notices ignored, Spot first: the ablation).",
        ),
    ] = VictimStop.CHECKPOINT,
    slurm_estimates: Annotated[
        str,
        typer.Option(
            "--slurm-estimates",
            help=f"Slurm's user time-limit model: {', '.join(ESTIMATE_MODELS)} (default uniform: see"
            " spotline.sim.peers.EstimateModel).",
        ),
    ] = "uniform",
    declared_runtimes: Annotated[
        bool,
        typer.Option(
            "--declared-runtimes/--no-declared-runtimes",
            help="Spotline's jobs declare as expected run time the time limit their users would give"
            " Slurm (the --slurm-estimates model, the same draw); --no-declared-runtimes: they"
            " declare none (the ablation).",
        ),
    ] = True,
    spot_data: Annotated[
        Path | None,
        typer.Option(
            "--spot-data",
            help="Spot Instance Advisor data (default: spotline/sim/data/gpu-spot-advisor.json, the"
            " repository's copy of shared/spot/gpu-spot-advisor.json).",
        ),
    ] = None,
    spot_shortages: Annotated[
        float,
        typer.Option(
            "--spot-shortages",
            help="Spot capacity shortages per Spot pool per day (each withdraws half the pool's"
            " instances, their jobs get the notice, for 4 h on average; default 0: none).",
            min=0.0,
        ),
    ] = 0.0,
    spot_model: Annotated[
        SpotModel,
        typer.Option(
            "--spot-model",
            help="trace (default): one Spot pool per zone, its capacity following the zone's"
            " availability trace (--spot-availability; default the three shipped 16-node AWS traces),"
            " drops reclaiming instances with the 2-minute notice; advisor: one Spot pool of fixed"
            " size with Poisson reclaims at the Spot Advisor band's rate (the older scenario).",
        ),
    ] = SpotModel.TRACE,
    spot_availability: Annotated[
        list[Path] | None,
        typer.Option(
            "--spot-availability",
            help="An availability trace (SkyPilot's JSON format) for one Spot zone; repeat for"
            " several zones (default: the shipped 16-node traces of us-east-2b, us-west-2a, us-west-2c).",
        ),
    ] = None,
    deadline_share: Annotated[
        float,
        typer.Option(
            "--deadline-share",
            help="Share of the jobs without a trace deadline that get one (seeded, the same for every"
            " policy): submission + run time x slack, slack uniform in 1.2-3. Default 0: none.",
        ),
    ] = 0.0,
    move_to_spot: Annotated[
        float | None,
        typer.Option(
            "--move-to-spot",
            help="Spotline moves a job running On-Demand to Spot room when it has at least this many"
            " seconds left (SchedulerConfig.move_to_spot_min_remaining_s; default: the policy's,"
            " 21600, as tuned; 0: off).",
            min=0.0,
        ),
    ] = None,
    elastic_share: Annotated[
        float,
        typer.Option(
            "--elastic-share",
            help="Share of the multi-GPU jobs that are elastic (seeded, the same jobs for every policy):"
            " each may run on half to double its GPUs, and Spotline shrinks it instead of preempting"
            " and grows it into idle GPUs (docs/elastic.md). Default 0: none.",
        ),
    ] = 0.0,
    elastic_scaling: Annotated[
        float,
        typer.Option(
            "--elastic-scaling",
            help="With --elastic-share: an elastic job's progress per second on g GPUs is"
            " (g / its trace GPUs) ** this (1: linear; 0.8: a declared scaling efficiency).",
        ),
    ] = 1.0,
    reservation: Annotated[
        list[str] | None,
        typer.Option(
            "--reservation",
            help="Add a reserved block (an EC2 Capacity Block): NxG:START_H:END_H, N instances of G GPUs"
            " from START_H to END_H hours into the trace (repeat for several). Prepaid, it is used first;"
            " its instances are terminated 30 min before END_H. `--json` then has each policy's"
            " reservation_account.",
        ),
    ] = None,
    variant: Annotated[
        list[str] | None,
        typer.Option(
            "--variant",
            help="Run Spotline with this simulator variant: a mechanism that has not graduated into the"
            " settings (repeat for several, applied in order; docs/simulator.md, Variants). Known: "
            + (", ".join(sorted(VARIANTS)) or "none at present"),
        ),
    ] = None,
) -> None:
    """Replay a trace through each policy on the same cluster, jobs and Spot reclaims; print a table.

    `spotline simulate deadline --help`: the single-job Spot-under-deadline benchmark.
    """
    if ctx.invoked_subcommand is not None:
        return
    if trace is None:
        raise typer.BadParameter(
            "missing: give a trace file (or run `spotline simulate deadline ...`)", param_hint="--trace"
        )
    console = Console()
    if not console.is_terminal:
        console = Console(width=120)  # a file or a pipe: room for five policy columns
    names = list(dict.fromkeys(policy or POLICIES))
    unknown = [n for n in names if n not in KNOWN_POLICIES]
    if unknown:
        raise typer.BadParameter(
            f"unknown policy {', '.join(unknown)} (one of {', '.join(KNOWN_POLICIES)})", param_hint="--policy"
        )
    blocks: list[Reservation] = []
    for text in reservation or []:
        try:
            blocks.append(parse_reservation(text))
        except ReservationError as error:
            raise typer.BadParameter(str(error), param_hint="--reservation") from None
    variants = list(variant or [])
    try:
        extension_of(variants)
    except VariantError as error:
        raise typer.BadParameter(str(error), param_hint="--variant") from None
    if variants and "spotline" not in names:
        raise typer.BadParameter(
            "a variant changes Spotline: run it with --policy spotline", param_hint="--variant"
        )
    if slurm_estimates not in ESTIMATE_MODELS:
        raise typer.BadParameter(
            f"unknown estimate model {slurm_estimates!r} (one of {', '.join(ESTIMATE_MODELS)})",
            param_hint="--slurm-estimates",
        )
    if restart_min < 0 or restart_max < restart_min:
        raise typer.BadParameter("need 0 <= --restart-min <= --restart-max", param_hint="--restart-min")
    if checkpoint_interval <= 0 or checkpoint_write <= 0:
        raise typer.BadParameter(
            "checkpoint interval and write time must be positive", param_hint="--checkpoint-write"
        )
    if spot_availability and spot_model is not SpotModel.TRACE:
        raise typer.BadParameter(
            "--spot-availability needs --spot-model trace", param_hint="--spot-availability"
        )
    if not 0.0 < elastic_scaling <= 1.0:  # (refuses nan too)
        hint = "--elastic-scaling"
        raise typer.BadParameter(f"must be in (0, 1], got {elastic_scaling:g}", param_hint=hint)
    shares = (("--spot-fraction", spot_fraction), ("--deadline-share", deadline_share))
    for flag, share in (*shares, ("--elastic-share", elastic_share)):
        if not 0.0 <= share <= 1.0:  # (refuses nan too)
            raise typer.BadParameter(f"must be a share in [0, 1], got {share:g}", param_hint=flag)
    try:
        for path, flag in ((json_out, "--json"), (decisions, "--decisions")):
            if path is not None:
                check_file(path, flag)  # before the simulation, not after it
        if plot is not None:
            check_dir(plot, "--plot")
        loaded = read_trace(trace)
        advice = spot_advice(region, instance_type, spot_data)
        zone_traces = zone_availability(spot_availability) if spot_availability else None
    except (TraceError, ValueError, OSError) as error:
        typer.secho(f"error: {error}", err=True, fg="red")
        raise typer.Exit(2) from None
    for warning in loaded.warnings:
        typer.secho(f"warning: {warning}", err=True, fg="yellow")
    settings = SimSettings(
        checkpoint_interval_s=checkpoint_interval,
        checkpoint_write_s=checkpoint_write,
        restart_min_s=restart_min,
        restart_max_s=restart_max,
        victim_stop=victim_stop,
        slurm_estimates=slurm_estimates,
        spotline_declared_runtimes=declared_runtimes,
        shortage_rate_per_day=spot_shortages,
        deadline_share=deadline_share,
        elastic_share=elastic_share,
        elastic_scaling=elastic_scaling,
    )
    moved = None if move_to_spot is None else SchedulerConfig(move_to_spot_min_remaining_s=move_to_spot)
    sink_file = decisions.open("w") if decisions is not None else None
    try:

        def sink(record: dict[str, Any]) -> None:
            assert sink_file is not None
            sink_file.write(json.dumps(record) + "\n")

        try:
            report = simulate(
                loaded,
                names,
                gpus=gpus,
                spot_fraction=spot_fraction,
                seed=seed,
                settings=settings,
                advice=advice,
                config=moved,
                sink=sink if sink_file is not None else None,
                record_series=plot is not None,
                keep_jobs=plot is not None,  # the plots read each job's wait
                trace_name=str(trace),
                workers=workers,
                spot_model=spot_model,
                availability=zone_traces,
                variants=variants,
                reservations=blocks,
            )
        except (ValueError, PreemptionCycle) as error:
            if sink_file is not None and decisions is not None:
                sink_file.close()
                decisions.unlink(missing_ok=True)  # nothing half-written
            typer.secho(f"error: {error}", err=True, fg="red")
            if isinstance(error, PreemptionCycle):
                typer.secho("(run the other policies without it: --policy NAME, repeated)", err=True)
                raise typer.Exit(1) from None
            raise typer.Exit(2) from None
    finally:
        if sink_file is not None:
            sink_file.close()

    from spotline.sim.report import summary_table

    console.print(summary_table(report))
    rate = report.events / report.wall_s if report.wall_s > 0 else 0.0
    console.print(f"{report.events:,} events in {report.wall_s:.1f} s of simulation ({rate:,.0f} events/s)")
    if json_out is not None:
        try:
            write_text(json_out, json.dumps(report.to_json(), indent=2), "--json")
        except OutputError as error:
            typer.secho(f"error: {error}", err=True, fg="red")
            raise typer.Exit(2) from None
        console.print(f"wrote {json_out}")
    if decisions is not None:
        console.print(f"wrote {decisions}")
    if plot is not None:
        from spotline.sim.plots import write_plots

        for path in write_plots(report, plot):
            console.print(f"wrote {path}")


def zone_availability(paths: list[Path]) -> list[AvailabilityTrace]:
    """The --spot-availability files, one per zone: each read and checked, and refused when a
    file, or the zone its name gives, comes twice (one zone's capacity counted twice)."""
    traces: list[AvailabilityTrace] = []
    seen: dict[Path, Path] = {}
    zones: dict[str, Path] = {}
    for index, path in enumerate(paths):
        same = seen.get(path.resolve())
        if same is not None:
            also = "" if str(same) == str(path) else f" (as {same})"
            raise AvailabilityError(f"--spot-availability: {path} is given twice{also}; one file per zone")
        seen[path.resolve()] = path
        trace = load_availability(path)
        zone = zone_name(trace, index)
        if zone in zones:
            raise AvailabilityError(
                f"--spot-availability: {path} and {zones[zone]} are both zone {zone}; one file per zone"
            )
        zones[zone] = path
        traces.append(trace)
    return traces
