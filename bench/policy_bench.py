"""`make bench`, policy part: Spotline against the peers on the Philly trace.

Philly jobs arriving 2017-10-02 to 2017-10-29 (46,070 jobs), 512 GPUs (75% Spot), 5 seeds (each
seed draws the priority classes, restart costs and Spot reclaims). For each metric, the ratio of
spotline to the best peer, per seed, with its mean and 95% confidence interval (Student's t over
the seeds), and the issue's goals; then `speed()`: the whole 82,247-job trace through all five
policies, in events per second.

Run: `.venv/bin/python -m bench` (all benches) or `.venv/bin/python -m bench.policy_bench`.
"""

from __future__ import annotations

import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from spotline.sim import POLICIES, PREEMPTING_PEERS, simulate
from spotline.trace import parse_when, read_philly

TRACE = Path(__file__).resolve().parents[2] / "shared" / "traces" / "philly.csv"
START, END = "2017-10-02", "2017-10-29"
WHOLE_START, WHOLE_END = "2017-09-04", "2017-12-22"
GPUS = 512
SEEDS = 5
PEERS = tuple(p for p in POLICIES if p != "spotline")
WORKERS = os.cpu_count() or 1
# Student's t, two-sided 95%, by degrees of freedom (seeds - 1).
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}

# (label, how to read it from a policy's metrics, True when lower is better)
METRICS: tuple[tuple[str, Callable[[dict[str, Any]], float], bool], ...] = (
    ("avg JCT", lambda m: m["avg_jct_s"], True),
    ("p99 JCT", lambda m: m["p99_jct_s"], True),
    *(
        (f"avg JCT {c}", (lambda m, c=c: m["avg_jct_s_by_priority"][c]), True)
        for c in ("critical", "high", "normal", "low")
    ),
    *(
        (f"p99 wait {c}", (lambda m, c=c: m["wait_p99_s_by_priority"][c]), True)
        for c in ("critical", "high", "normal", "low")
    ),
    ("GPU utilization", lambda m: m["gpu_utilization"], False),
    ("goodput", lambda m: m["goodput"], False),
    ("lost GPU-hours", lambda m: m["lost_gpu_hours"], True),
    ("cost / useful GPU-h", lambda m: m["cost_per_useful_gpu_hour"], True),
    ("Jain's fairness", lambda m: m["jain_fairness"], False),
)


def ratio(ours: float, theirs: float) -> float:
    """ours / theirs; 1 when both are 0, infinite when only theirs is."""
    if theirs == 0:
        return 1.0 if ours == 0 else math.inf
    return ours / theirs


def interval(values: Sequence[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% confidence interval (t over the samples)."""
    mean = statistics.fmean(values)
    if len(values) < 2 or any(math.isinf(v) for v in values):
        return mean, math.nan if len(values) >= 2 else 0.0
    t = T95.get(len(values) - 1, 1.96)
    return mean, t * statistics.stdev(values) / math.sqrt(len(values))


def _pick(
    value: Callable[[dict[str, Any]], float],
    runs: dict[str, dict[str, Any]],
    names: Sequence[str],
    lower: bool,
) -> float:
    values = [value(runs[n]) for n in names]
    return min(values) if lower else max(values)


def goals(runs: dict[str, dict[str, Any]]) -> dict[str, float]:
    """The issue's goals for one seed, as the ratio (or value) each compares with its target."""
    ours = runs["spotline"]
    out: dict[str, float] = {}
    for c in ("critical", "high"):
        fastest = min(runs[p]["wait_p99_s_by_priority"][c] for p in PREEMPTING_PEERS)
        out[f"{c} p99 wait / fastest preempting peer"] = ratio(ours["wait_p99_s_by_priority"][c], fastest)
    for p in PEERS:
        out[f"lost GPU-h / {p}"] = ratio(ours["lost_gpu_hours"], runs[p]["lost_gpu_hours"])
    out["cost per useful GPU-h (On-Demand = 1)"] = ours["cost_per_useful_gpu_hour"]
    out["avg JCT / best peer"] = ratio(ours["avg_jct_s"], _pick(lambda m: m["avg_jct_s"], runs, PEERS, True))
    out["low avg JCT / best peer"] = ratio(
        ours["avg_jct_s_by_priority"]["low"],
        _pick(lambda m: m["avg_jct_s_by_priority"]["low"], runs, PEERS, True),
    )
    out["Jain / best peer"] = ratio(
        ours["jain_fairness"], _pick(lambda m: m["jain_fairness"], runs, PEERS, False)
    )
    return out


GOAL_TARGETS: dict[str, tuple[str, float]] = {
    "critical p99 wait / fastest preempting peer": ("<=", 1.1),
    "high p99 wait / fastest preempting peer": ("<=", 1.1),
    **{f"lost GPU-h / {p}": ("<=", 0.5) for p in PEERS},
    "cost per useful GPU-h (On-Demand = 1)": ("<=", 0.6),
    "avg JCT / best peer": ("<=", 1.1),
    "low avg JCT / best peer": ("<=", 1.5),
    "Jain / best peer": (">=", 0.95),
}


def run(
    seeds: int = SEEDS, trace_path: Path = TRACE, start: str = START, end: str = END, gpus: int = GPUS
) -> dict[str, Any]:
    """Simulate every policy for each seed; return per-policy metrics, ratios and goals."""
    per_seed: list[dict[str, dict[str, Any]]] = []
    events = 0
    began = time.perf_counter()
    jobs = 0
    for seed in range(1, seeds + 1):
        trace = read_philly(trace_path, parse_when(start), parse_when(end, end=True), seed)
        jobs = len(trace.jobs)
        report = simulate(
            trace,
            POLICIES,
            gpus=gpus,
            seed=seed,
            trace_name=f"philly {start}..{end}",
            workers=WORKERS,
            keep_jobs=False,
        )
        events += report.events
        per_seed.append(report.to_json()["policies"])
    wall = time.perf_counter() - began
    ratios = {
        label: interval([ratio(value(r["spotline"]), _pick(value, r, PEERS, lower)) for r in per_seed])
        for label, value, lower in METRICS
    }
    values = {
        name: {label: interval([value(r[name]) for r in per_seed]) for label, value, _ in METRICS}
        for name in POLICIES
    }
    goal_values = [goals(r) for r in per_seed]
    goal_rows = {}
    for name, (op, target) in GOAL_TARGETS.items():
        mean, half = interval([g[name] for g in goal_values])
        met = mean <= target if op == "<=" else mean >= target
        goal_rows[name] = {"mean": mean, "ci95": half, "target": f"{op} {target}", "met": met}
    return {
        "trace": f"philly {start}..{end}",
        "jobs": jobs,
        "gpus": gpus,
        "seeds": seeds,
        "policies": values,
        "ratios": ratios,
        "goals": goal_rows,
        "per_seed": per_seed,
        "events": events,
        "wall_s": wall,
    }


def speed(trace_path: Path = TRACE, gpus: int = GPUS, workers: int = WORKERS) -> dict[str, Any]:
    """The whole Philly trace (82,247 jobs) through all five policies, seed 1, the policies in
    `workers` processes at once (the machine's CPUs)."""
    trace = read_philly(trace_path, parse_when(WHOLE_START), parse_when(WHOLE_END, end=True), 1)
    began = time.perf_counter()
    report = simulate(
        trace, POLICIES, gpus=gpus, seed=1, trace_name="philly (whole)", workers=workers, keep_jobs=False
    )
    wall = time.perf_counter() - began
    return {
        "jobs": len(trace.jobs),
        "wall_s": wall,
        "events": report.events,
        "events_per_s": report.events / wall if wall > 0 else 0.0,
        "workers": workers,
        "per_policy": {
            n: {"wall_s": r.wall_s, "events": r.events, "passes": r.passes} for n, r in report.runs.items()
        },
    }


def _fmt(mean: float, half: float, scale: float = 1.0, digits: int = 2) -> str:
    if math.isinf(mean):
        return "inf"
    text = f"{mean / scale:.{digits}f}"
    if not math.isnan(half) and half > 0:
        text += f" ± {half / scale:.{digits}f}"
    return text


def print_results(results: dict[str, Any], console: Console) -> None:
    table = Table(
        title=f"Spotline vs peers: {results['trace']} ({results['jobs']} jobs), {results['gpus']} GPUs, "
        f"{results['seeds']} seeds (mean ± 95% CI)"
    )
    table.add_column("metric")
    for name in POLICIES:
        table.add_column(name, justify="right")
    table.add_column("spotline / best peer", justify="right")
    for label, _, _ in METRICS:
        hours = "JCT" in label or "wait" in label
        scale, unit = (3600.0, " (h)") if hours else (1.0, "")
        cells = [_fmt(*results["policies"][n][label], scale=scale) for n in POLICIES]
        table.add_row(label + unit, *cells, _fmt(*results["ratios"][label]))
    console.print(table)
    goal_table = Table(title="Goals (ratios in the same run, mean ± 95% CI over seeds)")
    for column in ("goal", "value", "target", "met"):
        goal_table.add_column(column)
    for name, row in results["goals"].items():
        goal_table.add_row(
            name, _fmt(row["mean"], row["ci95"], digits=3), row["target"], "yes" if row["met"] else "NO"
        )
    console.print(goal_table)
    rate = results["events"] / results["wall_s"] if results["wall_s"] else 0.0
    console.print(f"{results['events']:,} events in {results['wall_s']:.0f} s ({rate:,.0f} events/s)")


def main() -> None:
    console = Console(width=max(Console().width, 150))
    if not TRACE.exists():
        console.print(f"policy bench skipped: {TRACE} not found (the Philly trace lives in ../shared/traces)")
        return
    print_results(run(), console)
    result = speed()
    console.print(
        f"speed: whole Philly trace, {result['jobs']:,} jobs x {len(POLICIES)} policies: "
        f"{result['wall_s']:.1f} s, {result['events']:,} events, {result['events_per_s']:,.0f} events/s"
    )
    for name, r in result["per_policy"].items():
        console.print(
            f"  {name:16s} {r['wall_s']:6.1f} s  {r['events']:>8,} events  {r['passes']:>8,} passes"
        )


if __name__ == "__main__":
    sys.exit(main())
