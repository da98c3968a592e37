"""The goals both policy benches judge by (`bench.goals`): which peer a goal compares with, and
how a ratio is judged."""

from __future__ import annotations

from typing import Any

import pytest

from bench import contention as c
from bench import goals
from bench.policy_bench import setup as pb


def _metrics(
    churn: float, crit: float, high: float, jct: float, jain: float, ftf: float, spot: float = 1.0
) -> dict[str, Any]:
    return {
        "preemption_churn_per_1k_useful_gpu_h": churn,
        "spot_waste_per_1k_spot_gpu_h": spot,
        "spot_gpu_hours": 100.0 if spot else 0.0,
        "wait_p99_s_by_priority": {"critical": crit, "high": high, "normal": 0.0, "low": 0.0},
        "avg_jct_s": jct,
        "avg_jct_s_by_priority": {"low": jct},
        "cost_per_useful_gpu_hour": 0.5,
        "jain_fairness": jain,
        "ftf_max": ftf,
    }


RUNS = {
    # FIFO never preempts: it has no churn, but the churn goal compares preempting peers only;
    # it holds no Spot here, so the Spot waste goal leaves it out too.
    "fifo": _metrics(0.0, 9000, 9000, 10.0, 0.90, 2.0, spot=0.0),
    "slurm": _metrics(10.0, 60, 120, 8.0, 0.99, 1.5, spot=3.0),
    "priority-random": _metrics(20.0, 60, 60, 12.0, 0.95, 1.2, spot=4.0),
    "spotline": _metrics(6.0, 30, 900, 8.0, 0.97, 1.25, spot=3.3),
}
GOAL = {g.label.split(" <=")[0].split(" >=")[0]: g for g in goals.GOALS}


@pytest.mark.parametrize(
    ("goal", "ratio", "met", "how"),
    [
        ("preemption churn", 0.6, True, "x0.600 vs slurm"),
        # The worse of critical and high: 900 s against priority-random's 60 s, above 5 minutes.
        ("urgent (critical, high) p99 wait", 900 / 60, False, "x15.000 vs priority-random"),
        ("Spot waste", 1.1, False, "x1.100 vs slurm"),
        ("average JCT", 1.0, True, "x1.000 vs slurm"),
        ("low-class average JCT", 1.0, True, "x1.000 vs slurm"),
        ("Jain's fairness across teams", 0.97 / 0.99, True, f"x{0.97 / 0.99:.3f} vs slurm"),
        # Worst team's rho, lower is better: best peer 1.2 against ours 1.25 reads 0.96 (< 0.97).
        ("finish-time fairness (worst team)", 1.2 / 1.25, False, "x0.960 vs priority-random"),
    ],
)
def test_goals_compare_with_the_best_peer_of_their_group(
    goal: str, ratio: float, met: bool, how: str
) -> None:
    got_ratio, got_met, got_how = c.judge(GOAL[goal], RUNS)
    assert (got_ratio, got_met, got_how) == (pytest.approx(ratio), met, how)


def test_an_urgent_wait_within_five_minutes_is_met_whatever_the_ratio() -> None:
    runs = {**RUNS, "spotline": _metrics(6.0, 240, 240, 8.0, 0.97, 1.25)}
    _, met, how = c.judge(GOAL["urgent (critical, high) p99 wait"], runs)
    assert met and how == "4.0 min"


def test_the_policy_bench_judges_by_the_same_goals() -> None:
    assert pb.GOALS is goals.GOALS
    rows = pb.goal_rows_for([RUNS])
    assert [r["goal"] for r in rows] == [g.label for g in goals.GOALS]


def test_the_interval_is_a_t_interval() -> None:
    mean, half = goals.interval([1.0, 2.0, 3.0])
    # stdev 1, n 3, t(2) = 4.303.
    assert (mean, half) == (2.0, pytest.approx(4.303 / 3**0.5))
