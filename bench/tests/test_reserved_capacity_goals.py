"""The reserved-capacity goals table (`bench.reserved_capacity.goals`) on hand-made runs."""

from __future__ import annotations

from typing import Any

from bench.reserved_capacity import POLICIES, goals

DAY = 86400.0


def run(useful: float, unsaved: float, idle: float, wait_days: float) -> dict[str, Any]:
    return {
        "reservation_account": {
            "block_gpu_hours": 100.0,
            "useful_gpu_hours": useful,
            "unsaved_gpu_hours_lost_at_end": unsaved,
            "idle_gpu_hours_while_a_queued_job_fit": idle,
        },
        "gang_account": {"multi_node_wait_p99_s": wait_days * DAY},
    }


def test_each_goal_is_judged_on_spotlines_figures_with_the_peers_beside() -> None:
    with_block = {p: run(90.0, 5.0, 1.0, 3.0) for p in POLICIES}
    with_block["spotline"] = run(96.0, 0.0, 2.0, 1.0)
    without = {p: {"gang_account": {"multi_node_wait_p99_s": 2.0 * DAY}} for p in POLICIES}
    rows = {goal: (ours, peers, met) for goal, ours, peers, met in goals(with_block, without)}
    assert [met for _, _, met in rows.values()] == [True, True, False, True]
    useful = rows[">= 95% of the block's GPU-hours useful"]
    assert useful[0] == "96.0%" and "kueue 90.0%" in useful[1]
    assert "kueue 5.0" in rows["0 unsaved GPU-hours lost at the end"][1]
