"""`spotline tune`: tune the kept settings on the deployment's own history (`spotline.sim.tune`)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from spotline.cli.outfile import OutputError, check_file, write_text
from spotline.domain.config import SchedulerConfig
from spotline.sim.history import History, HistoryError, read_history
from spotline.sim.tune import (
    DEFAULT_FINALISTS,
    DEFAULT_OBJECTIVE,
    DEFAULT_SCREEN_SHARE,
    DEFAULT_SEMIFINALISTS,
    GOAL_METRICS,
    GOALS_BY_KEY,
    Candidate,
    TuneError,
    TuneResult,
    apply_diff,
    cluster_for,
    default_workers,
    flatten,
    tune,
)
from spotline.trace import TraceError, read_trace


def register(app: typer.Typer) -> None:
    app.command("tune")(tune_command)


def tune_command(
    history: Annotated[
        Path | None,
        typer.Option(
            "--history",
            help="A history from `spotline history export`: the canonical trace, with its cluster"
            " file (FILE's stem + .cluster.json) when it lies beside it.",
        ),
    ] = None,
    trace: Annotated[
        Path | None,
        typer.Option("--trace", help="A canonical trace CSV alone (the cluster from --gpus, as simulate)."),
    ] = None,
    gpus: Annotated[
        int | None,
        typer.Option(
            help="GPUs of the cluster, sized as `spotline simulate` sizes it (default 512), for a trace"
            " without a recorded cluster.",
            min=8,
        ),
    ] = None,
    spot_fraction: Annotated[
        float | None,
        typer.Option(
            "--spot-fraction", help="Share of the GPUs on Spot, as `spotline simulate` (default 0.75)."
        ),
    ] = None,
    holdout_days: Annotated[
        float,
        typer.Option("--holdout-days", help="The final stretch held out to check the recommendation on."),
    ] = 7.0,
    tuning_days: Annotated[
        float | None,
        typer.Option(
            "--tuning-days",
            help="Tune on this much of the history just before the holdout only (default: all of it):"
            " fewer days, faster replays.",
        ),
    ] = None,
    objective: Annotated[
        str,
        typer.Option(
            help=f"The goal metric to improve (one of {', '.join(GOALS_BY_KEY)}).",
        ),
    ] = DEFAULT_OBJECTIVE,
    candidates: Annotated[
        int, typer.Option(help="Configurations tried, the settings in effect included.", min=2)
    ] = 20,
    seeds: Annotated[
        int,
        typer.Option(help="Seeds each configuration runs with (restart costs, Spot, random choices).", min=1),
    ] = 3,
    search_seed: Annotated[int, typer.Option("--search-seed", help="Seed of the candidates' draw.")] = 1,
    finalists: Annotated[
        int,
        typer.Option(
            help="Candidates, besides the settings in effect, that replay the whole tuning stretch on"
            " every seed; with more candidates, a screen picks them.",
            min=1,
        ),
    ] = DEFAULT_FINALISTS,
    screen_days: Annotated[
        float | None,
        typer.Option(
            "--screen-days",
            help="The screen: the first days of the tuning stretch, replayed on the first seed by every"
            f" candidate (default: {DEFAULT_SCREEN_SHARE:.0%} of the stretch).",
        ),
    ] = None,
    semifinalists: Annotated[
        int,
        typer.Option(
            help="With more candidates than this besides the settings in effect, the screen's best this"
            " many replay twice the screen's days on the first seed, and the finalists are the best"
            " there (0: the finalists come from the screen).",
            min=0,
        ),
    ] = DEFAULT_SEMIFINALISTS,
    workers: Annotated[
        int, typer.Option(help="Replays at once, one process each (default: the CPUs).", min=1)
    ] = default_workers(),
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the result here (JSON).")] = None,
    cdk_json: Annotated[
        Path,
        typer.Option(
            "--cdk-json",
            help="The deployment's cdk.json: its `scheduler` context is the settings in effect (the"
            " baseline), and --apply writes the recommendation there.",
        ),
    ] = Path("cdk.json"),
    apply: Annotated[
        bool,
        typer.Option("--apply", help="Write the recommended diff into --cdk-json's `scheduler` context."),
    ] = False,
) -> None:
    """Replay candidate settings through the scheduling core on your history; check the best on a
    held-out final stretch; print the Pareto table and the recommended diff as cdk.json context."""
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)
    if (history is None) == (trace is None):
        raise typer.BadParameter("give one of --history FILE or --trace CSV", param_hint="--history")
    if objective not in GOALS_BY_KEY:
        raise typer.BadParameter(
            f"unknown objective {objective!r} (one of {', '.join(GOALS_BY_KEY)})", param_hint="--objective"
        )
    if not math.isfinite(holdout_days) or holdout_days <= 0:
        raise typer.BadParameter(f"must be positive, got {holdout_days:g}", param_hint="--holdout-days")
    if tuning_days is not None and (not math.isfinite(tuning_days) or tuning_days <= 0):
        raise typer.BadParameter(f"must be positive, got {tuning_days:g}", param_hint="--tuning-days")
    if screen_days is not None and (not math.isfinite(screen_days) or screen_days <= 0):
        raise typer.BadParameter(f"must be positive, got {screen_days:g}", param_hint="--screen-days")
    if spot_fraction is not None and not 0.0 <= spot_fraction <= 1.0:
        raise typer.BadParameter(
            f"must be a share in [0, 1], got {spot_fraction:g}", param_hint="--spot-fraction"
        )
    try:
        if json_out is not None:
            check_file(json_out, "--json")
        if history is not None:
            loaded = read_history(history)
        else:
            assert trace is not None
            loaded = History(trace=read_trace(trace))
        baseline = _baseline(cdk_json, required=apply)
        pools, zone_traces = cluster_for(loaded, gpus, spot_fraction)
    except (TraceError, HistoryError, TuneError, OutputError, OSError, ValueError) as error:
        typer.secho(f"error: {error}", err=True, fg="red")
        raise typer.Exit(2) from None
    for warning in loaded.trace.warnings:
        typer.secho(f"warning: {warning}", err=True, fg="yellow")
    try:
        result = tune(
            loaded,
            pools,
            zone_traces=zone_traces,
            baseline=baseline,
            objective=objective,
            holdout_days=holdout_days,
            tuning_days=tuning_days,
            seeds=tuple(range(1, seeds + 1)),
            candidates=candidates,
            search_seed=search_seed,
            workers=workers,
            progress=lambda line: console.print(f"[dim]{line}[/dim]"),
            finalists=finalists,
            screen_days=screen_days,
            semifinalists=semifinalists,
        )
    except (HistoryError, TuneError, ValueError) as error:
        typer.secho(f"error: {error}", err=True, fg="red")
        raise typer.Exit(2) from None
    print_result(result, console)
    if json_out is not None:
        try:
            write_text(json_out, json.dumps(result.to_json(), indent=2), "--json")
        except OutputError as error:
            typer.secho(f"error: {error}", err=True, fg="red")
            raise typer.Exit(2) from None
        console.print(f"wrote {json_out}")
    if apply:
        if not result.recommended:
            console.print(f"--apply: nothing to apply; {cdk_json} is unchanged")
            return
        try:
            write_scheduler(cdk_json, result.context())
        except (OSError, ValueError) as error:
            typer.secho(f"error: {error}", err=True, fg="red")
            raise typer.Exit(1) from None
        console.print(f"applied to {cdk_json}'s scheduler context (deploy to take effect: `cdk deploy`)")


def _baseline(cdk_json: Path, required: bool) -> dict[str, Any]:
    """The settings in effect: cdk.json's `scheduler` context, as dotted settings ({} when the
    file does not exist and nothing is to be written there)."""
    if not cdk_json.exists():
        if required:
            raise ValueError(
                f"--cdk-json: {cdk_json} does not exist (--apply writes into an existing cdk.json)"
            )
        return {}
    document = _read_cdk(cdk_json)
    scheduler = document.get("context", {}).get("scheduler") or {}
    if not isinstance(scheduler, dict):
        raise ValueError(f"{cdk_json}: context 'scheduler' must be an object")
    settings = flatten(scheduler)
    try:
        apply_diff(SchedulerConfig(), settings)
    except (TuneError, ValueError) as error:
        raise ValueError(f"{cdk_json}: context 'scheduler': {error}") from None
    return settings


def _read_cdk(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not JSON ({error})") from None
    if not isinstance(document, dict) or not isinstance(document.get("context", {}), dict):
        raise ValueError(f"{path}: expected an object with a 'context' object")
    return document


def write_scheduler(path: Path, scheduler: dict[str, Any]) -> None:
    """Write `scheduler` as `path`'s `scheduler` context, checked first (an unknown setting is
    refused by name), the rest of the file as it was."""
    SchedulerConfig.model_validate(scheduler)
    document = _read_cdk(path)
    document.setdefault("context", {})["scheduler"] = scheduler
    write_text(path, json.dumps(document, indent=2) + "\n", "--cdk-json")


def _diff_text(candidate: Candidate) -> str:
    return ", ".join(f"{k}={v}" for k, v in candidate.diff.items()) or "(settings in effect)"


def _cell(summary: Any, scale: float) -> str:
    mean, half = summary.mean / scale, summary.ci95 / scale
    if math.isnan(half):
        return f"{mean:.3g}"
    return f"{mean:.3g} ± {half:.2g}"


def print_result(result: TuneResult, console: Console) -> None:
    objective = GOALS_BY_KEY[result.objective]
    console.print(
        f"{result.trace}: tuning on {result.tuning_jobs:,} jobs, holdout {result.holdout_jobs:,} jobs (last"
        f" {result.holdout_days:g} days); {len(result.finalists)} configurations"
        f" x {len(result.seeds)} seeds,"
        f" {result.runs} replays in {result.wall_s:.0f} s"
    )
    if result.screen_days is not None:
        kept = ", ".join(f"#{c.index}" for c in result.finalists)
        console.print(
            f"Screen: {len(result.candidates)} candidates on the first {result.screen_days:.3g} days of the"
            f" tuning stretch ({result.screen_jobs:,} jobs, seed {result.seeds[0]}); finalists: {kept}"
        )
    if result.semifinal_days is not None:
        semis = ", ".join(f"#{c.index}" for c in result.candidates if c.semifinal)
        console.print(
            f"Semi-final: {semis} on the first {result.semifinal_days:.3g} days ({result.semifinal_jobs:,}"
            f" jobs, seed {result.seeds[0]})"
        )
    table = Table(
        title=f"Pareto front on the tuning stretch (mean ± 95% CI over seeds; objective {objective.key})"
    )
    table.add_column("#", justify="right")
    for goal in GOAL_METRICS:
        table.add_column(f"{goal.label} {'↓' if goal.lower_is_better else '↑'}", justify="right")
    table.add_column(f"holdout {objective.label}", justify="right")
    rows = [result.defaults, *[c for c in result.pareto if c.index != 0]]
    for c in rows:
        holdout = _cell(c.holdout[objective.key], objective.scale) if c.holdout else "-"
        table.add_row(str(c.index), *(_cell(c.tuning[g.key], g.scale) for g in GOAL_METRICS), holdout)
    console.print(table)
    for c in rows:
        mark = " (recommended)" if result.recommended and c.diff == result.recommended else ""
        mark = mark or ("" if c.pareto else " (not on the front)")
        console.print(f"  #{c.index}: {_diff_text(c)}{mark}", soft_wrap=True)
    hold = Table(title="The holdout: the settings in effect against the recommendation")
    for column in ("goal metric", "in effect", "recommended", "change", "better"):
        hold.add_column(column, justify="left" if column == "goal metric" else "right")
    for goal in GOAL_METRICS:
        row = result.holdout_table()[goal.key]
        base, rec = row["defaults"], row["recommended"]
        delta = (rec - base) / base if base else 0.0
        hold.add_row(
            goal.label, f"{base / goal.scale:.4g}", f"{rec / goal.scale:.4g}", f"{delta:+.1%}", row["better"]
        )
    console.print(hold)
    console.print(result.reason)
    if result.recommended:
        console.print("Recommended diff, as cdk.json context:")
        console.print_json(json.dumps({"scheduler": result.context()}))
