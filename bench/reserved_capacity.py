"""Reserved capacity: a 7-day block of 8 instances x 8 GPUs on a contended replay, Spotline
against the peers' behaviour at the block's end, and the goals.

The replay: Philly's contended window 2017-10-30..11-12 on 384 GPUs (load 1.12, one of
`bench.contention`'s samples), with the block `8x8:72:240` (hours 72-240 of the trace: 7 days inside the
window's arrivals). The policies, each with the block and without it:
- `spotline`: the block first (prepaid), admission by the block's end, drains planned from it;
- `kueue`: with Karpenter's behaviour at the end (its nodes drained at the expiration warning,
  the pods stopped without a checkpoint of their own);
- `fifo`: AWS Batch (nothing happens at expiry: the jobs run until the instances go).

The goals (with the block): at least 95% of the block's GPU-hours useful; 0 unsaved GPU-hours
lost at the block's end (the draining peer's figure beside); 0 block GPU-hours idle while a queued
job fit; the multi-node jobs' p99 wait below Spotline's own without the block.

Run: `.venv/bin/python -m bench.reserved_capacity [--json OUT] [--seed S ...]`; `--quick`: a
small synthetic trace (a smoke test, not a result). A Philly run of Spotline takes about 20
minutes of one core; it is not part of `make bench`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.contention import Contended
from bench.policy_bench import setup as pb
from spotline.sim import simulate
from spotline.sim.blocks import Reservation

# The contended Philly window (load 1.12; in `bench.contention`'s tuning set since the evaluation
# set was frozen): 13 days of arrivals, room for a 7-day block inside them.
PHILLY = Contended("philly", 1, 384, "2017-10-30", "2017-11-12")
BLOCK = Reservation(8, 8, 72.0, 72.0 + 7 * 24.0)
QUICK_BLOCK = Reservation(2, 8, 6.0, 30.0)
POLICIES = ("spotline", "kueue", "fifo")
PEER_LABELS = {"kueue": "kueue (Karpenter's drain)", "fifo": "fifo (Batch: nothing at expiry)"}
DAY_S = 86400.0


def sample(quick: bool) -> Contended:
    if quick:
        return Contended("bursty", 1, 64, jobs=600, load=1.2)
    philly = PHILLY
    if pb.philly_path() is None:
        raise SystemExit("the Philly trace is missing (bench/data/philly.csv.gz): run with --quick")
    return philly


def run(s: Contended, seed: int, block: Reservation | None) -> dict[str, dict[str, Any]]:
    report = simulate(
        s.trace(),
        list(POLICIES),
        gpus=s.gpus,
        seed=seed,
        keep_jobs=False,
        reservations=[block] if block is not None else [],
        trace_name=s.label,
    )
    runs: dict[str, dict[str, Any]] = report.to_json()["policies"]
    return runs


def goals(
    with_block: dict[str, dict[str, Any]], without: dict[str, dict[str, Any]]
) -> list[tuple[str, str, str, bool]]:
    """(goal, Spotline's figure, the peers' figures, met) for one seed."""
    ours = with_block["spotline"]["reservation_account"]
    useful = ours["useful_gpu_hours"] / ours["block_gpu_hours"]
    peers = {p: with_block[p]["reservation_account"] for p in POLICIES if p != "spotline"}
    wait = with_block["spotline"]["gang_account"]["multi_node_wait_p99_s"] / DAY_S
    wait_before = without["spotline"]["gang_account"]["multi_node_wait_p99_s"] / DAY_S

    def each(key: str, scale: float = 1.0, fmt: str = "{:.1f}") -> str:
        return ", ".join(f"{p} {fmt.format(a[key] * scale)}" for p, a in peers.items())

    return [
        (
            ">= 95% of the block's GPU-hours useful",
            f"{useful:.1%}",
            ", ".join(f"{p} {a['useful_gpu_hours'] / a['block_gpu_hours']:.1%}" for p, a in peers.items()),
            useful >= 0.95,
        ),
        (
            "0 unsaved GPU-hours lost at the end",
            f"{ours['unsaved_gpu_hours_lost_at_end']:.1f}",
            each("unsaved_gpu_hours_lost_at_end"),
            ours["unsaved_gpu_hours_lost_at_end"] == 0.0,
        ),
        (
            "0 block GPU-hours idle while a queued job fit",
            f"{ours['idle_gpu_hours_while_a_queued_job_fit']:.1f}",
            each("idle_gpu_hours_while_a_queued_job_fit"),
            ours["idle_gpu_hours_while_a_queued_job_fit"] == 0.0,
        ),
        (
            "multi-node p99 wait below the run without the block (days)",
            f"{wait:.2f} (without: {wait_before:.2f})",
            ", ".join(
                f"{p} {with_block[p]['gang_account']['multi_node_wait_p99_s'] / DAY_S:.2f}"
                f" (without: {without[p]['gang_account']['multi_node_wait_p99_s'] / DAY_S:.2f})"
                for p in peers
            ),
            wait < wait_before,
        ),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.reserved_capacity", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="a small synthetic trace (a smoke test)")
    parser.add_argument("--seed", type=int, action="append", help="seeds (default: the sample's own)")
    parser.add_argument("--json", type=Path, default=None, help="write every run's metrics here")
    args = parser.parse_args(argv)
    s = sample(args.quick)
    block = QUICK_BLOCK if args.quick else BLOCK
    seeds = args.seed or [s.seed]
    console = Console(width=160)
    began = time.perf_counter()
    saved: dict[str, Any] = {"sample": s.label, "block": vars(block), "seeds": {}}
    rows_by_seed = []
    for seed in seeds:
        with_block, without = run(s, seed, block), run(s, seed, None)
        saved["seeds"][str(seed)] = {"with_block": with_block, "without_block": without}
        rows_by_seed.append(goals(with_block, without))
    table = Table(
        title=f"Reserved capacity: a {block.instances}x{block.gpus_per_instance} block, "
        f"hours {block.start_h:g}-{block.end_h:g}, on {s.label}"
    )
    for column in ("goal", "seed", "spotline", "peers (with the block)", "met"):
        table.add_column(column)
    for seed, rows in zip(seeds, rows_by_seed, strict=True):
        for goal, ours, peers, met in rows:
            table.add_row(goal, str(seed), ours, peers, "yes" if met else "no")
    console.print(table)
    console.print(f"reserved capacity bench: {time.perf_counter() - began:.0f} s wall, seeds {seeds}")
    if args.json is not None:
        args.json.write_text(json.dumps(saved, indent=2))
        console.print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
