"""The single-job Spot-under-deadline benchmark: the paper's Table 3 and the C/R sweep, with goals.

`python -m bench.deadline_bench` runs every policy of `spotline simulate deadline` on the same
random start hours (seeded) over the repository's single-node traces (the paper's eight), with
the paper's settings: C = 48 h, D = 0.2 h, K = 3. It prints

1. Table 3: C/R = 0.8, hours on Spot of the 48 (billed Spot hours, changeovers included),
   averaged over the traces, beside the paper's figures;
2. the sweep over C/R: per policy, mean cost as a fraction of On-Demand and missed deadlines;
3. the single-job goal rows, each met or not met.

Options: `--starts N` (per trace; the paper uses 300), `--ratios 0.6,0.7,...`, `--traces GLOB`
(names of shipped traces, fnmatch), `--seed S`, `--json OUT`, `--part {all,tune,eval}`: where the
start hours are drawn: the whole trace (the paper's way), or only windows that lie in its first
half (`tune`, what the guard was tuned on) or in its second half (`eval`, never tuned on).
`spotline (no plan)` is the guard with its plan switched off (`GuardSettings.plan_longest_h`).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from spotline.domain.deadline import GuardSettings
from spotline.sim.availability import AvailabilityTrace, load_shipped, shipped_traces
from spotline.sim.deadline import JobSetup, Outcome, simulate_deadline

PEERS = ("greedy", "uniform-progress", "omniscient", "on-demand", "spotline", "spotline (no plan)")
PARTS = ("all", "tune", "eval")
PAPER_TABLE_3 = {"greedy": 17.2, "uniform-progress": 22.9, "omniscient": 27.4}
JOB_H, CHANGEOVER_H, PRICE_RATIO = 48.0, 0.2, 3.0
DEFAULT_RATIOS = (0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)


def start_hours(
    trace: AvailabilityTrace, deadline_h: float, count: int, seed: int, part: str = "all"
) -> list[float]:
    """`count` start hours on the trace's grid, uniform over where a whole window fits (seeded):
    in the whole trace, or with the window in its first half (`tune`) or second half (`eval`)."""
    rng = random.Random(f"{seed}:{trace.name}")
    gap = trace.gap_hours
    half = trace.hours / 2
    first, last = {
        "all": (0, int((trace.hours - deadline_h) / gap)),
        "tune": (0, int((half - deadline_h) / gap)),
        "eval": (math.ceil(half / gap), int((trace.hours - deadline_h) / gap)),
    }[part]
    if last < first:
        raise ValueError(f"{trace.name}: no {deadline_h:g} h window fits in its {part} part")
    return [rng.randrange(first, last + 1) * gap for _ in range(count)]


def run_ratio(
    traces: Sequence[AvailabilityTrace], ratio: float, starts: int, seed: int, part: str = "all"
) -> dict[str, list[Outcome]]:
    setup = JobSetup(JOB_H, JOB_H / ratio, CHANGEOVER_H, PRICE_RATIO)
    no_plan = GuardSettings(changeover_h=CHANGEOVER_H, price_ratio=PRICE_RATIO, plan_longest_h=None)
    out: dict[str, list[Outcome]] = {p: [] for p in PEERS}
    for trace in traces:
        hours = start_hours(trace, setup.deadline_h, starts, seed, part)
        for policy in PEERS:
            if policy == "spotline (no plan)":
                out[policy].extend(simulate_deadline(trace, setup, hours, "spotline", no_plan))
            else:
                out[policy].extend(simulate_deadline(trace, setup, hours, policy))
    return out


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def summarise(results: dict[str, list[Outcome]]) -> dict[str, dict[str, float]]:
    return {
        policy: {
            "cost": mean([o.cost_fraction_of_on_demand for o in outs]),
            "spot_hours": mean([o.spot_hours for o in outs]),
            "missed": float(sum(not o.met_deadline for o in outs)),
            "runs": float(len(outs)),
        }
        for policy, outs in results.items()
    }


def goals(sweep: dict[float, dict[str, dict[str, float]]]) -> list[tuple[str, str, str, bool]]:
    """The single-job goal rows: (measure, goal, measured, met)."""
    rows = []
    missed = {r: s["spotline"]["missed"] for r, s in sweep.items()}
    worst = max(missed.values())
    rows.append(
        (
            "single job: missed deadlines, every C/R",
            "0",
            ", ".join(f"{r:g}: {int(m)}" for r, m in missed.items()),
            worst == 0,
        )
    )
    vs_up = {r: s["spotline"]["cost"] / s["uniform-progress"]["cost"] for r, s in sweep.items()}
    rows.append(
        (
            "single job: mean cost vs Uniform Progress, every C/R",
            "<= 1.0x (aim <= 0.95x)",
            ", ".join(f"{r:g}: {v:.3f}x" for r, v in vs_up.items()),
            max(vs_up.values()) <= 1.0,
        )
    )
    gaps = {}
    for r, s in sweep.items():
        ours = s["spotline"]["cost"] - s["omniscient"]["cost"]
        theirs = s["uniform-progress"]["cost"] - s["omniscient"]["cost"]
        gaps[r] = ours / theirs if theirs > 0 else float("inf")
    rows.append(
        (
            "single job: gap to omniscient vs Uniform Progress's gap",
            "<= 0.5x",
            ", ".join(f"{r:g}: {g:.2f}x" for r, g in gaps.items()),
            max(gaps.values()) <= 0.5,
        )
    )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.deadline_bench", description=__doc__)
    parser.add_argument("--starts", type=int, default=300, help="start hours per trace (paper: 300)")
    parser.add_argument("--ratios", default=",".join(f"{r:g}" for r in DEFAULT_RATIOS))
    parser.add_argument("--traces", default="1-node__*", help="shipped traces (fnmatch on the names)")
    parser.add_argument("--seed", type=int, default=30)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--part", choices=PARTS, default="all", help="where the start hours lie")
    args = parser.parse_args(argv)
    try:
        ratios = [float(r) for r in args.ratios.split(",") if r.strip()]
    except ValueError:
        parser.error(f"--ratios: not a comma-separated list of numbers: {args.ratios!r}")
    if not ratios or any(not 0 < r < 1 for r in ratios):
        parser.error("--ratios: every C/R must be between 0 and 1")
    if args.starts < 1:
        parser.error("--starts must be >= 1")
    names = [n for n in shipped_traces() if fnmatch.fnmatch(n, args.traces)]
    if not names:
        parser.error(f"--traces {args.traces!r} matches no shipped trace ({', '.join(shipped_traces())})")
    traces = [load_shipped(n) for n in names]
    began = time.monotonic()
    sweep: dict[float, dict[str, dict[str, float]]] = {}
    for ratio in ratios:
        sweep[ratio] = summarise(run_ratio(traces, ratio, args.starts, args.seed, args.part))
        print(f"  C/R {ratio:g} done ({time.monotonic() - began:.0f} s)", file=sys.stderr, flush=True)
    print(
        f"Single job under a deadline: {len(traces)} traces x {args.starts} starts (seed {args.seed},"
        f" part {args.part}),"
        f" C = {JOB_H:g} h, D = {CHANGEOVER_H:g} h, K = {PRICE_RATIO:g}"
    )
    if 0.8 in sweep:
        print("\nTable 3 (C/R = 0.8): hours on Spot of 48, mean over traces and starts")
        print(f"  {'policy':<18}{'ours':>8}{'paper':>8}")
        for policy in PEERS:
            paper = PAPER_TABLE_3.get(policy)
            print(
                f"  {policy:<18}{sweep[0.8][policy]['spot_hours']:>8.1f}"
                f"{(f'{paper:.1f}' if paper is not None else '-'):>8}"
            )
    print("\nMean cost (fraction of On-Demand) / missed deadlines, by C/R")
    print("  " + f"{'C/R':<6}" + "".join(f"{p:>22}" for p in PEERS))
    for ratio, summary in sweep.items():
        cells = "".join(f"{summary[p]['cost']:>16.3f} / {int(summary[p]['missed']):<3}" for p in PEERS)
        print(f"  {ratio:<6g}{cells}")
    print("\nGoals (single job)")
    for measure, goal, measured, met in goals(sweep):
        print(f"  {'met    ' if met else 'NOT MET'}  {measure}: goal {goal}; {measured}")
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    "starts_per_trace": args.starts,
                    "seed": args.seed,
                    "part": args.part,
                    "traces": names,
                    "sweep": {f"{r:g}": s for r, s in sweep.items()},
                },
                indent=2,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
