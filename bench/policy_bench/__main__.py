"""`python -m bench.policy_bench`: the evaluation, ablations, Slurm's sensitivity and the churn
sweep, printed as tables (`--save-evaluation FILE`: the evaluation's runs also written there,
for `bench.contention --evaluation-runs FILE` to reuse); `--speed`: the whole-Philly speed run
alone (`make bench-speed`)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from bench.policy_bench.runs import ablations, churn, evaluate, slurm_sensitivity, speed
from bench.policy_bench.setup import (
    ABLATION_SAMPLE,
    ABLATION_SAMPLES,
    CHURN_SAMPLE,
    EVALUATION,
    QUICK,
    REDUCED,
    available,
)
from bench.policy_bench.tables import cpu_s, over_samples, print_churn, print_evaluation, print_rows
from spotline.sim import POLICIES


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.policy_bench", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--save-evaluation",
        type=Path,
        default=None,
        metavar="FILE",
        help="also write the evaluation's runs (sample label -> policy -> metrics) here",
    )
    parser.add_argument("--speed", action="store_true", help="only the whole-Philly speed run")
    args = parser.parse_args(argv)
    console = Console(width=max(Console().width, 200))
    if args.speed:
        print_speed(console)
        return
    began = time.perf_counter()
    samples = available(EVALUATION)
    if len(samples) < len(EVALUATION):
        console.print("(the Philly trace is missing: the evaluation runs on the synthetic traces only)")
    results = evaluate(samples)
    if args.save_evaluation is not None:
        runs = dict(zip(results["samples"], results["per_sample"], strict=True))
        args.save_evaluation.write_text(json.dumps(runs))
    print_evaluation(results, console)
    ablated = ", ".join(f"s{s.seed}" for s in ABLATION_SAMPLES)
    where = f"synth {ABLATION_SAMPLE.jobs} jobs load {ABLATION_SAMPLE.load:g}, {ABLATION_SAMPLE.gpus} GPUs"
    ablated_runs = [ablations(s) for s in ABLATION_SAMPLES]
    print_rows(
        f"Ablations ({where}, seeds {ablated}): mean over the seeds, x its ratio to the defaults'"
        " (mean ± 95% CI of the ratios, seed by seed)",
        over_samples([rows for rows, _ in ablated_runs], lambda _: "spotline (defaults)"),
        console,
    )
    for _, cycles in ablated_runs:
        for cycle in cycles:
            console.print(f"left out of the best peer (its run cannot finish): {cycle}")
    print_rows(
        f"Slurm's time-limit model ({where}, seeds {ablated}): sensitivity; mean, x its ratio to"
        " the same policy's with the uniform model",
        over_samples(
            [slurm_sensitivity(s) for s in ABLATION_SAMPLES],
            lambda label: "spotline, uniform" if label.startswith("spotline") else "uniform",
        ),
        console,
    )
    verdicts = print_churn(churn(CHURN_SAMPLE), console)
    console.print(
        "Spot churn goal (cost and deadline misses no worse than the best peer at every level): "
        + (
            "met"
            if all(verdicts.values())
            else "NOT met at " + ", ".join(k for k, v in verdicts.items() if not v)
        )
    )
    console.print(
        f"policy bench: {time.perf_counter() - began:.0f} s wall, {cpu_s():.0f} CPU-s (this process and"
        f" its finished workers), load average {os.getloadavg()[0]:.1f}"
    )


def print_speed(console: Console) -> None:
    """The whole Philly trace through the five policies (`make bench-speed`; not in `make bench`,
    whose tables it adds nothing to: a speed figure alone, about ten minutes on 2 cores)."""
    if QUICK or REDUCED:
        console.print("speed: skipped (SPOTLINE_BENCH_QUICK or SPOTLINE_BENCH_REDUCED is set)")
        return
    result = speed()
    if result is None:
        console.print("speed: skipped (the Philly trace is missing)")
        return
    idle = max(result["cpu_s"] / 2, *(r["cpu_s"] for r in result["per_policy"].values()))
    console.print(
        f"speed: whole Philly trace, {result['jobs']:,} jobs"
        f" x {len(POLICIES)} policies,"
        f" {result['workers']} workers: {result['wall_s']:.1f} s wall,"
        f" {result['cpu_s']:.1f} CPU-s in all (on 2 idle cores about {idle:.1f} s: half the"
        f" CPU-s or the longest policy's), {result['events']:,} events, load average"
        f" {os.getloadavg()[0]:.1f}"
    )
    for name, r in result["per_policy"].items():
        console.print(
            f"  {name:16s} {r['wall_s']:6.1f} s wall {r['cpu_s']:6.1f} CPU-s"
            f"  {r['events']:>8,} events  {r['passes']:>8,} passes"
        )


if __name__ == "__main__":
    main()
    sys.exit(0)
