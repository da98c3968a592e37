"""Many jobs with deadlines on one cluster with real Spot capacity: Spotline's deadline admission
against the peers, on equal terms.

`python -m bench.deadline_cluster` replays seeded synthetic traces (`spotline.trace.synth`) on a
cluster of `GPUS` GPUs: three Spot zones whose capacity follows the shipped 16-node traces (the
simulator's default Spot model) and an On-Demand pool of the rest. What makes it fair:

- **Load against usable capacity.** The trace's load is stated against the GPUs the cluster
  actually has on average: the On-Demand GPUs plus the Spot GPUs times the zones' mean
  availability over the traces (`usable_gpus`), not its nominal size.
- **The all-On-Demand baseline is sized to the cluster**: every one of the `GPUS` GPUs On-Demand
  (`on-demand (all GPUs)`), not a quota of a quarter of them.
- **The same run-time information for everyone**: every policy that reads a run time gets the
  true one (`SimSettings.slurm_estimates = "oracle"`: Spotline's declared run times and Slurm's
  time limits; Uniform Progress and EDF read it from the job), so no peer knows more than Spotline.
- **Peers**: Slurm (multifactor priority, backfill), Kueue (classic preemption), AWS Batch Spot
  first, Uniform Progress, and earliest deadline first (`edf`: Uniform Progress's rules per job,
  the queue served by deadline). Each runs its competent setup (docs/simulator.md).
- **Misses over all submitted deadline jobs**, whatever Spotline answered. For Spotline also: the
  misses among the jobs it admitted as feasible (`meets` or `on-demand-only`), and of the
  deadlines no run could meet (deadline - submission < run time), how many it flagged
  (`cannot`/`unknown`) at submission.
- **Cost against deadline attainment**: each policy as a point (cost per useful GPU-hour in
  On-Demand GPU-hours, attainment = deadlines met / deadlines submitted), the Pareto front marked.

Seeds: `TUNING_SEEDS` and `HELD_OUT_SEEDS` (figures: mean over seeds with a 95% t interval).
`--variant NAME` also runs Spotline with a simulator variant on both halves (the order within a
class was judged this way). `SPOTLINE_BENCH_QUICK=1` or `--quick`: one seed per half, fewer jobs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from spotline.sim import SimSettings, simulate
from spotline.sim.runner import PolicyRun
from spotline.sim.spot_zones import default_zone_traces, trace_size
from spotline.trace.canonical import Trace, TraceJob
from spotline.trace.synth import synth_trace

GPUS = 128
SPOT_FRACTION = 0.75
GPUS_PER_NODE = 8
JOBS = 400
LOAD = 1.0  # offered GPU-hours over usable GPU-hours
DEADLINE_SHARE = 0.3
TUNING_SEEDS = (1, 2, 3)
HELD_OUT_SEEDS = (11, 12, 13)
PEERS = ("slurm", "kueue", "batch-spot-first", "uniform-progress", "edf")
ALL_ON_DEMAND = "on-demand (all GPUs)"
COST_GOAL = 0.85
QUICK = os.environ.get("SPOTLINE_BENCH_QUICK") == "1"
# Slack from 0.9: some deadlines are out of any run's reach, which admission should flag.
DEADLINE_SLACK = (0.9, 3.0)
SETTINGS = SimSettings(slurm_estimates="oracle")
# Student's t at 97.5% for n - 1 degrees of freedom (n up to 10 seeds).
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def usable_gpus(gpus: int = GPUS, spot_fraction: float = SPOT_FRACTION) -> float:
    """On-Demand GPUs plus Spot GPUs times each zone's mean availability (the zone mapping of
    `spot_zones`: floor(n x instances / trace size) instances while the trace shows n)."""
    traces = default_zone_traces()
    instances = round(gpus * spot_fraction) // GPUS_PER_NODE
    per_zone = [
        instances // len(traces) + (1 if i < instances % len(traces) else 0) for i in range(len(traces))
    ]
    spot = 0.0
    for trace, zone_instances in zip(traces, per_zone, strict=True):
        size = trace_size(trace)
        counts = [math.floor(n * zone_instances / size) for n in trace.counts]
        spot += GPUS_PER_NODE * sum(counts) / len(counts)
    return gpus - instances * GPUS_PER_NODE + spot


def with_deadlines(jobs: Sequence[TraceJob], seed: int) -> list[TraceJob]:
    """The trace with a seeded `DEADLINE_SHARE` of the jobs without a deadline given one:
    submission + run time x U(`DEADLINE_SLACK`)."""
    draws = random.Random(f"deadline-cluster:{seed}")
    out = []
    for job in jobs:
        given, slack = draws.random() < DEADLINE_SHARE, draws.uniform(*DEADLINE_SLACK)
        if job.deadline_s is None and given:
            job = replace(job, deadline_s=job.submit_s + job.duration_s * slack)
        out.append(job)
    return out


def _summary(run: PolicyRun) -> dict[str, Any]:
    jobs = run.jobs
    deadline_jobs = [j for j in jobs if j.deadline is not None]
    missed = [j for j in deadline_jobs if j.finish is None or j.finish > (j.deadline or 0.0)]
    admitted = [j for j in deadline_jobs if j.deadline_answer in ("meets", "on-demand-only")]
    impossible = [j for j in deadline_jobs if (j.deadline or 0.0) - j.submit < j.work]
    held = run.metrics["spot_gpu_hours"] + run.metrics["on_demand_gpu_hours"]
    return {
        "cost": run.metrics["cost_per_useful_gpu_hour"],
        "on_demand_share": run.metrics["on_demand_gpu_hours"] / held if held else 0.0,
        "deadlines": len(deadline_jobs),
        "missed": len(missed),
        "attainment": 1.0 - len(missed) / len(deadline_jobs) if deadline_jobs else 1.0,
        "admitted": len(admitted),
        "admitted_missed": sum(1 for j in admitted if j in missed),
        "impossible": len(impossible),
        "impossible_flagged": sum(1 for j in impossible if j.deadline_answer in ("cannot", "unknown")),
        "answered": sum(1 for j in deadline_jobs if j.deadline_answer is not None),
        "completed": sum(1 for j in jobs if j.finish is not None),
        "jobs": len(jobs),
    }


def run_seed(seed: int, jobs: int, variants: Sequence[str], workers: int) -> dict[str, dict[str, Any]]:
    usable = usable_gpus()
    trace = Trace(
        jobs=with_deadlines(synth_trace(jobs, LOAD, max(1, round(usable)), seed), seed),
        source=f"synth {jobs} jobs, load {LOAD:g} of {usable:.0f} usable GPUs, s{seed}",
    )
    common = {"gpus": GPUS, "seed": seed, "settings": SETTINGS, "workers": workers}
    report = simulate(trace, [*PEERS, "spotline"], spot_fraction=SPOT_FRACTION, **common)
    out = {name: _summary(run) for name, run in report.runs.items()}
    baseline = simulate(trace, ["on-demand"], spot_fraction=0.0, **common)
    out[ALL_ON_DEMAND] = _summary(baseline.runs["on-demand"])
    for variant in variants:
        varied = simulate(trace, ["spotline"], spot_fraction=SPOT_FRACTION, variants=[variant], **common)
        out[f"spotline + {variant}"] = _summary(varied.runs["spotline"])
    return out


def mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% t interval (0 for one value)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, 0.0
    return mean, T_975.get(len(values) - 1, 1.96) * statistics.stdev(values) / math.sqrt(len(values))


def pooled(per_seed: Sequence[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name in per_seed[0]:
        rows = [seed[name] for seed in per_seed]
        cost, cost_ci = mean_ci([r["cost"] for r in rows])
        attain, attain_ci = mean_ci([r["attainment"] for r in rows])
        means = ("cost", "attainment", "on_demand_share")
        totals = {k: sum(r[k] for r in rows) for k in rows[0] if k not in means}
        totals["on_demand_share"] = statistics.fmean(r["on_demand_share"] for r in rows)
        out[name] = {
            "cost": cost,
            "cost_ci": cost_ci,
            "attainment": attain,
            "attainment_ci": attain_ci,
            **totals,
        }
    return out


def pareto(table: dict[str, dict[str, Any]]) -> set[str]:
    """The policies no other is both cheaper than and at least as good at deadlines as."""
    front = set()
    for name, row in table.items():
        dominated = any(
            other["cost"] <= row["cost"]
            and other["attainment"] >= row["attainment"]
            and (other["cost"] < row["cost"] or other["attainment"] > row["attainment"])
            for other_name, other in table.items()
            if other_name != name
        )
        if not dominated:
            front.add(name)
    return front


def goals(table: dict[str, dict[str, Any]]) -> list[tuple[str, str, str, bool | None]]:
    ours = table["spotline"]
    rows: list[tuple[str, str, str, bool | None]] = [
        (
            "0 misses among jobs admitted as feasible",
            f"{ours['admitted_missed']} of {ours['admitted']}",
            "0",
            ours["admitted_missed"] == 0,
        ),
        (
            "every infeasible deadline refused or flagged at submission",
            f"{ours['impossible_flagged']} of {ours['impossible']} flagged",
            "all",
            ours["impossible_flagged"] == ours["impossible"],
        ),
    ]
    peers = {n: r for n, r in table.items() if n in (*PEERS, ALL_ON_DEMAND)}
    eligible = {n: r for n, r in peers.items() if r["missed"] <= ours["missed"]}
    label = f"cost <= {COST_GOAL}x the cheapest peer that misses no more"
    if eligible:
        cheapest = min(eligible, key=lambda n: eligible[n]["cost"])
        ratio = ours["cost"] / eligible[cheapest]["cost"]
        rows.append(
            (
                label,
                f"{ours['cost']:.3f} ({ratio:.2f}x)",
                f"{cheapest} {eligible[cheapest]['cost']:.3f}",
                ratio <= COST_GOAL,
            )
        )
    else:
        rows.append((label, f"{ours['cost']:.3f}", "no peer misses as few", None))
    return rows


def print_half(label: str, seeds: Sequence[int], table: dict[str, dict[str, Any]]) -> None:
    front = pareto(table)
    print(f"\n### {label} (seeds {', '.join(map(str, seeds))})\n")
    print(
        "| policy | cost / useful GPU-h (95% CI) | deadline attainment (95% CI) | misses of all deadlines"
        " | On-Demand share of GPU-hours | Pareto front | completed |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, r in sorted(table.items(), key=lambda item: item[1]["cost"]):
        print(
            f"| {name} | {r['cost']:.3f} ± {r['cost_ci']:.3f}"
            f" | {r['attainment']:.3f} ± {r['attainment_ci']:.3f}"
            f" | {r['missed']} of {r['deadlines']} | {r['on_demand_share']:.2f}"
            f" | {'yes' if name in front else ''}"
            f" | {r['completed']}/{r['jobs']} |"
        )
    ours = table["spotline"]
    print(
        f"\nSpotline's answers: {ours['answered']} of {ours['deadlines']} deadlines answered;"
        f" {ours['admitted']} admitted as feasible, {ours['admitted_missed']} of them missed;"
        f" {ours['impossible']} out of any run's reach, {ours['impossible_flagged']} flagged at submission."
    )
    print("\n| goal (many jobs) | Spotline | reference | result |")
    print("|---|---|---|---|")
    for goal, value, reference, met in goals(table):
        print(f"| {goal} | {value} | {reference} | {'n/a' if met is None else 'met' if met else 'missed'} |")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.deadline_cluster", description=__doc__)
    parser.add_argument("--quick", action="store_true", default=QUICK)
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--variant", action="append", default=[])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    jobs = args.jobs or (150 if args.quick else JOBS)
    if jobs < 10:
        parser.error("--jobs must be at least 10")
    halves = {
        "tuning": TUNING_SEEDS[:1] if args.quick else TUNING_SEEDS,
        "held-out": HELD_OUT_SEEDS[:1] if args.quick else HELD_OUT_SEEDS,
    }
    began = time.perf_counter()
    usable = usable_gpus()
    print(
        f"{GPUS} GPUs: {round(GPUS * SPOT_FRACTION)} Spot in 3 zones on the 16-node traces, the rest"
        f" On-Demand; usable on average {usable:.1f} GPUs. {jobs} jobs a seed at load {LOAD:g} of the"
        f" usable GPUs; {DEADLINE_SHARE:.0%} of jobs with a deadline of submission + run time x"
        f" U{DEADLINE_SLACK} (and a quarter of high and normal ones with 1.5-4x); every policy knows the"
        " true run times."
    )
    results: dict[str, Any] = {"usable_gpus": usable, "jobs": jobs, "halves": {}}
    for label, seeds in halves.items():
        per_seed = [run_seed(seed, jobs, args.variant, args.workers) for seed in seeds]
        table = pooled(per_seed)
        print_half(label, seeds, table)
        results["halves"][label] = {"seeds": list(seeds), "pooled": table, "per_seed": per_seed}
    print(f"\n{time.perf_counter() - began:.0f} s, {args.workers} worker(s)")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
