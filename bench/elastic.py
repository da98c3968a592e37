"""`make bench`, elastic part: Spotline with 30% of the multi-GPU jobs elastic against Spotline
without elasticity (the same traces, seeds, jobs and Spot capacity), with Kueue as it is beside
them (it runs elastic jobs at their size: a preempted elastic job goes whole), and the goals:

- preemption churn (GPU-hours lost to preemptions and to shrinks made for another job, per 1,000
  useful GPU-hours) at most 0.5x Spotline's without elasticity;
- at least 80% of the otherwise idle GPU-hours absorbed by growth: absorbed / (absorbed + the
  GPU-hours still idle in the elastic run, in the arrival window);
- the urgent (critical and high) p99 wait no worse than without elasticity (ratio <= 1.0);
- average JCT lower than without elasticity (ratio < 1.0);
- at most one resize per job in any 10 minutes (the most any job had, over the runs).

Each ratio is per (sample, seed), shown as the mean over the seeds with its 95% confidence
interval (Student's t); a goal is met when the mean meets it.

The contended samples are the contention bench's synthetic shapes (bursty arrivals with
log-normal run times of sigma 1.6 at load 1.2, and the 1% long-running shape at load 1.0) on
fewer jobs and GPUs than there, so that several seeds fit `make bench`: 1,500 jobs on 128 GPUs,
seeds 1, 2 and 3 (`--seeds`, `--jobs`, `--gpus`). Philly has no job that can say it is elastic:
the share is a seeded draw over its multi-GPU jobs (`SimSettings.elastic_share`).

Run: `.venv/bin/python -m bench.elastic [--seeds 1,2,3] [--jobs 1500] [--gpus 128] [--share 0.3]
[--scaling 1.0] [--json OUT]`; `SPOTLINE_BENCH_QUICK=1`: 400 jobs on 64 GPUs, two seeds (a smoke
test, not a result).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.goals import interval, urgent_wait
from spotline.sim import SimSettings, simulate
from spotline.trace import Trace
from spotline.trace.synth import synth_trace

QUICK = os.environ.get("SPOTLINE_BENCH_QUICK") == "1"
# (label, load, long-running share) of each contended shape.
SHAPES: tuple[tuple[str, float, float], ...] = (("bursty load 1.2", 1.2, 0.0), ("long-running 1%", 1.0, 0.01))
POLICIES = ("spotline", "kueue")


def sample_trace(load: float, long_share: float, jobs: int, gpus: int, seed: int) -> Trace:
    return Trace(jobs=synth_trace(jobs, load, gpus, seed, sigma=1.6, long_share=long_share), source="synth")


def run_pair(trace: Trace, gpus: int, seed: int, settings: SimSettings) -> dict[str, dict[str, Any]]:
    """Spotline and Kueue with elastic jobs, and Spotline without ("spotline-fixed")."""
    elastic = simulate(trace, list(POLICIES), gpus=gpus, seed=seed, settings=settings, keep_jobs=False)
    fixed = simulate(
        trace,
        ["spotline"],
        gpus=gpus,
        seed=seed,
        settings=replace(settings, elastic_share=0.0),
        keep_jobs=False,
    )
    runs = elastic.to_json()["policies"]
    runs["spotline-fixed"] = fixed.to_json()["policies"]["spotline"]
    return runs


def churn(m: dict[str, Any]) -> float:
    """Preemption churn with the shrinks made for other jobs (the elastic account's), else the
    plain preemption churn."""
    account = m.get("elastic_account")
    return float(
        account["churn_per_1k_useful_gpu_h"] if account else m["preemption_churn_per_1k_useful_gpu_h"]
    )


def absorbed_share(m: dict[str, Any]) -> float:
    account = m["elastic_account"]
    absorbed = float(account["gpu_hours_absorbed_from_idle"])
    whole = absorbed + float(account["idle_gpu_hours"])
    return absorbed / whole if whole > 0 else math.nan


def _ratio(a: float, b: float) -> float:
    if b > 0:
        return a / b
    return 1.0 if a == 0 else math.inf


# (label, value per run pair, target, lower is better)
GOALS: tuple[tuple[str, Any, float, bool], ...] = (
    (
        "churn <= 0.5x without elasticity",
        lambda r: _ratio(churn(r["spotline"]), churn(r["spotline-fixed"])),
        0.5,
        True,
    ),
    ("otherwise idle GPU-hours absorbed >= 80%", lambda r: absorbed_share(r["spotline"]), 0.8, False),
    (
        "urgent p99 wait <= 1.0x without elasticity",
        lambda r: _ratio(urgent_wait(r["spotline"]), urgent_wait(r["spotline-fixed"])),
        1.0,
        True,
    ),
    (
        "average JCT < 1.0x without elasticity",
        lambda r: _ratio(r["spotline"]["avg_jct_s"], r["spotline-fixed"]["avg_jct_s"]),
        1.0,
        True,
    ),
    (
        "resizes per job per 10 min <= 1",
        lambda r: float(r["spotline"]["elastic_account"]["max_resizes_per_job_in_10_min"]),
        1.0,
        True,
    ),
)


def _cell(values: Sequence[float], percent: bool = False) -> str:
    mean, half = interval(values)
    if percent:
        return f"{mean:.0%}" + ("" if math.isnan(half) else f" ± {half:.0%}")
    return f"{mean:.2f}" + ("" if math.isnan(half) else f" ± {half:.2f}")


def print_tables(results: dict[str, list[dict[str, dict[str, Any]]]], console: Console) -> dict[str, bool]:
    """The per-sample figures and the goals table; returns whether each goal is met (every
    sample's mean meets it)."""
    figures = Table(
        title="Elastic jobs: Spotline with 30% elastic, without, and Kueue (mean ± 95% CI over seeds)"
    )
    for column in (
        "sample",
        "run",
        "avg JCT h",
        "urgent p99 wait min",
        "churn /1k GPU-h",
        "preemptions",
        "resizes",
    ):
        figures.add_column(column, justify="right" if column != "sample" else "left")
    for label, pairs in results.items():
        for run in ("spotline", "spotline-fixed", "kueue"):
            metrics = [p[run] for p in pairs]
            resizes = [float(m.get("elastic_account", {}).get("resizes", 0)) for m in metrics]
            figures.add_row(
                label,
                run,
                _cell([m["avg_jct_s"] / 3600.0 for m in metrics]),
                _cell([urgent_wait(m) / 60.0 for m in metrics]),
                _cell([churn(m) for m in metrics]),
                _cell([float(m["preemptions"]) for m in metrics]),
                _cell(resizes),
            )
    console.print(figures)
    goals = Table(title="Goals of elastic jobs (per sample: mean ± 95% CI over seeds)")
    goals.add_column("goal")
    for label in results:
        goals.add_column(label, justify="right")
    goals.add_column("met", justify="center")
    met: dict[str, bool] = {}
    for name, value, target, lower in GOALS:
        cells, ok = [], True
        for pairs in results.values():
            values = [value(p) for p in pairs]
            percent = "%" in name
            cells.append(_cell(values, percent=percent))
            mean, _ = interval(values)
            strict = "JCT" in name
            ok = ok and ((mean < target if strict else mean <= target) if lower else mean >= target)
        met[name] = ok
        goals.add_row(name, *cells, "yes" if ok else "no")
    console.print(goals)
    return met


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.elastic", description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1,2" if QUICK else "1,2,3", help="comma-separated seeds")
    parser.add_argument("--jobs", type=int, default=400 if QUICK else 1500)
    parser.add_argument("--gpus", type=int, default=64 if QUICK else 128)
    parser.add_argument("--share", type=float, default=0.3, help="share of the multi-GPU jobs elastic")
    parser.add_argument("--scaling", type=float, default=1.0, help="progress per second ~ (g/g0) ** this")
    parser.add_argument("--json", type=Path, default=None, help="write every run's metrics here")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    settings = SimSettings(elastic_share=args.share, elastic_scaling=args.scaling)
    console = Console(width=160)
    results: dict[str, list[dict[str, dict[str, Any]]]] = {}
    for label, load, long_share in SHAPES:
        key = f"{label}, {args.jobs} jobs on {args.gpus} GPUs"
        results[key] = [
            run_pair(sample_trace(load, long_share, args.jobs, args.gpus, seed), args.gpus, seed, settings)
            for seed in seeds
        ]
    console.print(
        f"elastic share {args.share:g} of the multi-GPU jobs (half to double their GPUs), scaling exponent"
        f" {args.scaling:g}, seeds {', '.join(map(str, seeds))}"
    )
    print_tables(results, console)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))
        console.print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
