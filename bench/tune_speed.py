"""How long `spotline tune` takes on a month of a 512-GPU cluster's history: `python -m bench.tune_speed`.

The history: 30 days of the Philly trace (2017-10-02..31, 46,921 jobs: a busy month for 512 GPUs)
in the canonical format, on the cluster `spotline simulate` sizes for 512 GPUs; 20 candidates. The
target: under 10 minutes of wall time on 2 cores. Prints the wall time, the replays, and the CPU
seconds of one replay of each stretch (what the wall time is made of).

`--tuning-days D` tunes on the D days before the holdout only; `--seeds N` (default 1 here: the
speed of the search; `spotline tune` defaults to 3 for its CIs); `--finalists K`,
`--screen-days D` and `--semifinalists M` as `spotline tune`'s (its race). A speed figure, never a test.

`--replay STRETCH` (tuning, screen or holdout) times one replay instead: the settings in effect,
seed 1, on that stretch as `spotline tune` cuts it (`--replay-days D`: its first D days only);
prints its jobs and CPU seconds (the unit a tune's time is made of).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence

from bench.policy_bench.setup import philly_path
from spotline.domain.config import SchedulerConfig
from spotline.domain.models import Pool
from spotline.sim.availability import AvailabilityTrace
from spotline.sim.history import History, holdout_cut, split
from spotline.sim.tune import (
    DEFAULT_FINALISTS,
    DEFAULT_SCREEN_SHARE,
    DEFAULT_SEMIFINALISTS,
    Cluster,
    _replay,
    cluster_for,
    tune,
)
from spotline.trace import parse_when, read_philly

START, END = "2017-10-02", "2017-10-31"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=20)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--tuning-days", type=float, default=None)
    parser.add_argument("--holdout-days", type=float, default=7.0)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--finalists", type=int, default=DEFAULT_FINALISTS)
    parser.add_argument("--screen-days", type=float, default=None)
    parser.add_argument("--semifinalists", type=int, default=DEFAULT_SEMIFINALISTS)
    parser.add_argument("--end", default=END, help=f"last day of the history (default {END})")
    parser.add_argument("--replay", choices=("tuning", "screen", "holdout"), default=None)
    parser.add_argument("--replay-days", type=float, default=None)
    args = parser.parse_args(argv)
    path = philly_path()
    if path is None:
        print("no Philly trace (bench/data/philly.csv.gz)", file=sys.stderr)
        return 1
    trace = read_philly(path, parse_when(START), parse_when(args.end, end=True), 1)
    history = History(trace=trace)
    pools, zones = cluster_for(history, 512)
    if args.replay is not None:
        return one_replay(history, pools, zones, args)
    began = time.perf_counter()
    result = tune(
        history,
        pools,
        zone_traces=zones,
        holdout_days=args.holdout_days,
        tuning_days=args.tuning_days,
        seeds=tuple(range(1, args.seeds + 1)),
        candidates=args.candidates,
        workers=args.workers,
        progress=lambda line: print(f"{time.perf_counter() - began:7.0f} s  {line}", flush=True),
        finalists=args.finalists,
        screen_days=args.screen_days,
        semifinalists=args.semifinalists,
    )
    wall = time.perf_counter() - began
    tuning_cpu = [c.cpu_s / args.seeds for c in result.finalists]
    holdout_cpu = [c.holdout_cpu_s / args.seeds for c in result.candidates if c.holdout]
    screen_cpu = [c.screen_cpu_s for c in result.candidates if c.screen]
    semifinal_cpu = [c.semifinal_cpu_s for c in result.candidates if c.semifinal]
    cpu = sum(tuning_cpu) * args.seeds + sum(holdout_cpu) * args.seeds + sum(screen_cpu) + sum(semifinal_cpu)
    days = history.span_s / 86400.0
    print(
        f"history: Philly {START}..{args.end}, {len(trace.jobs):,} jobs over {days:.1f} days, 512 GPUs;"
        f" tuning {result.tuning_jobs:,} jobs, holdout {result.holdout_jobs:,} jobs"
    )
    if result.screen_days is not None:
        print(
            f"screen: {len(result.candidates)} candidates on the first {result.screen_days:.3g} days"
            f" ({result.screen_jobs:,} jobs), {sum(screen_cpu) / len(screen_cpu):.0f} CPU s per replay;"
            f" finalists {', '.join(f'#{c.index}' for c in result.finalists)}"
        )
    if result.semifinal_days is not None:
        print(
            f"semi-final: {len(semifinal_cpu)} candidates on the first {result.semifinal_days:.3g} days"
            f" ({result.semifinal_jobs:,} jobs),"
            f" {sum(semifinal_cpu) / len(semifinal_cpu):.0f} CPU s per replay"
        )
    print(
        f"{len(result.candidates)} candidates ({len(result.finalists)} finalists) x {args.seeds} seed(s),"
        f" tuning days"
        f" {'all' if args.tuning_days is None else f'{args.tuning_days:g}'}: {result.runs} replays,"
        f" {wall:.0f} s wall on {args.workers} worker(s) ({cpu:.0f} CPU s in the replays);"
        f" target 600 s: {'met' if wall < 600 else 'missed'}"
    )
    print(
        f"CPU s per replay: tuning stretch {sum(tuning_cpu) / len(tuning_cpu):.0f},"
        f" holdout {sum(holdout_cpu) / max(1, len(holdout_cpu)):.0f}"
    )
    print(result.reason)
    return 0


def one_replay(
    history: History, pools: list[Pool], zones: dict[str, AvailabilityTrace], args: argparse.Namespace
) -> int:
    """One replay of the settings in effect (seed 1) on a stretch `spotline tune` cuts (`--replay`)."""
    cut = holdout_cut(history, args.holdout_days)
    head, holdout = split(history, cut)
    if args.tuning_days is not None:
        head = split(head, max(0.0, cut - args.tuning_days * 86400.0))[1]
    screen_s = (
        (args.screen_days * 86400.0) if args.screen_days is not None else DEFAULT_SCREEN_SHARE * head.span_s
    )
    part = {"tuning": head, "screen": split(head, screen_s)[0], "holdout": holdout}[args.replay]
    if args.replay_days is not None:
        part = split(part, args.replay_days * 86400.0)[0]
    load = os.getloadavg()
    began = time.process_time()
    metrics, _ = _replay(Cluster(part, pools, history.sim_settings(), zones), SchedulerConfig(), 1)
    cpu = time.process_time() - began
    print(
        f"{args.replay} stretch{'' if args.replay_days is None else f' (first {args.replay_days:g} days)'}:"
        f" {len(part.trace.jobs):,} jobs over {part.span_s / 86400.0:.2f} days, one replay {cpu:.1f} CPU s;"
        f" avg JCT {metrics['avg_jct_s'] / 3600.0:.2f} h; load average {load[0]:.1f} before,"
        f" {os.getloadavg()[0]:.1f} after"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
