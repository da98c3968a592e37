"""bench.contention's goal rows: which peer a goal compares with, and how a ratio is judged."""

from __future__ import annotations

from typing import Any

import pytest

from bench import contention as c


def _metrics(lost: float, crit: float, high: float, jct: float, jain: float, ftf: float) -> dict[str, Any]:
    return {
        "lost_gpu_hours": lost,
        "wait_p99_s_by_priority": {"critical": crit, "high": high, "normal": 0.0, "low": 0.0},
        "avg_jct_s": jct,
        "avg_jct_s_by_priority": {"low": jct},
        "cost_per_useful_gpu_hour": 0.5,
        "jain_fairness": jain,
        "ftf_max": ftf,
    }


RUNS = {
    # FIFO never preempts: it loses least, but the lost-work goal compares preempting peers only.
    "fifo": _metrics(1.0, 9000, 9000, 10.0, 0.90, 2.0),
    "slurm": _metrics(100.0, 60, 120, 8.0, 0.99, 1.5),
    "priority-random": _metrics(200.0, 60, 60, 12.0, 0.95, 1.2),
    "spotline": _metrics(60.0, 30, 900, 8.0, 0.97, 1.25),
}
GOAL = {g.label.split(" <=")[0].split(" >=")[0]: g for g in c.GOALS}


@pytest.mark.parametrize(
    ("goal", "ratio", "met", "how"),
    [
        ("lost GPU-hours", 0.6, True, "x0.600 vs slurm"),
        # The worse of critical and high: 900 s against priority-random's 60 s, above 5 minutes.
        ("critical and high p99 wait", 900 / 60, False, "x15.000 vs priority-random"),
        ("average JCT", 1.0, True, "x1.000 vs slurm"),
        ("Jain's fairness", 0.97 / 0.99, True, f"x{0.97 / 0.99:.3f} vs slurm"),
        # Worst team's rho, lower is better: best peer 1.2 against ours 1.25 reads 0.96 (< 0.97).
        ("finish-time fairness (worst team)", 1.2 / 1.25, False, "x0.960 vs priority-random"),
    ],
)
def test_goals_compare_with_the_best_peer_per_metric(goal: str, ratio: float, met: bool, how: str) -> None:
    got_ratio, got_met, got_how = c.judge(GOAL[goal], RUNS)
    assert (got_ratio, got_met, got_how) == (pytest.approx(ratio), met, how)


def test_an_urgent_wait_within_five_minutes_is_met_whatever_the_ratio() -> None:
    runs = {**RUNS, "spotline": _metrics(60.0, 240, 240, 8.0, 0.97, 1.25)}
    _, met, how = c.judge(GOAL["critical and high p99 wait"], runs)
    assert met and how == "4.0 min"


def test_the_best_preempting_peer_is_the_one_that_lost_least() -> None:
    assert c.best_preempting(RUNS) == "slurm"
