"""Spotline moving On-Demand jobs to Spot in the simulator: the production planner's `Move`."""

from __future__ import annotations

from spotline.domain.models import Pool, Purchase
from spotline.sim import simulate

from .helpers import SETTINGS, before, trace

POOLS = [
    Pool(name="spot", gpu_type="a100", purchase=Purchase.SPOT, capacity_gpus=8, price=0.3),
    Pool(name="on-demand", gpu_type="a100", purchase=Purchase.ON_DEMAND, capacity_gpus=8),
]
# `short` fills Spot for an hour; `long` (ten hours) arrives meanwhile and starts On-Demand.
ROWS = [("short", 0.0, 3600.0, 8, "a", "normal"), ("long", 60.0, 36000.0, 8, "a", "normal")]


def _run(move_after_s: float) -> tuple[dict[str, object], list[dict[str, object]]]:
    log: list[dict[str, object]] = []
    config = before(move_to_spot_min_remaining_s=move_after_s)
    report = simulate(
        trace(ROWS), ["spotline"], settings=SETTINGS, config=config, pools=POOLS, sink=log.append
    )
    return report.runs["spotline"].metrics, log


def test_a_long_job_moves_to_spot_once_spot_frees_and_the_run_costs_less() -> None:
    stays, _ = _run(0.0)
    moved, log = _run(3600.0)
    moves = [e for e in log if e["action"] == "preempt" and e["victims"] == [e["job_id"]]]
    # With nothing pending, the pass after `short` finishes (t = 3600) moves `long`: it writes a
    # checkpoint (50 s), leaves, and restarts on Spot.
    assert [(m["job_id"], m["pool"], m["t"]) for m in moves] == [("long", "on-demand", 3600.0)]
    admits = [(e["job_id"], e["pool"]) for e in log if e["action"] == "admit"]
    assert admits == [("short", "spot"), ("long", "on-demand"), ("long", "spot")]
    assert moved["completed"] == stays["completed"] == 2
    assert moved["cost_per_useful_gpu_hour"] < stays["cost_per_useful_gpu_hour"]
    # It paid for the move with its write and restart (lost work), and finished that much later.
    assert moved["lost_gpu_hours"] > stays["lost_gpu_hours"] == 0.0
    assert moved["avg_jct_s"] > stays["avg_jct_s"]
