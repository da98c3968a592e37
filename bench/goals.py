"""The goals every policy bench judges Spotline by: one table, one threshold per goal, the same
comparison peers (`bench.policy_bench` and `bench.contention` both read it).

Each goal compares Spotline, per sample, with the best peer of a group on one metric:

- the preempting peers (priority-random, every Kueue setup, every Slurm setup): the urgent wait
  and the preemption churn (a peer that never preempts has no churn to compare with);
- the peers that held Spot in the sample (Spot waste: a peer without Spot wastes none);
- the class-aware peers (Slurm, Kueue, priority-random): the low class's JCT;
- every peer: cost, average JCT and the two fairness indices.

A goal met in a sample is met at its ratio (`<= target` when lower is better, `>= target`
otherwise), or, for a wait, at an absolute bound (5 minutes) whatever the ratio.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Student's t, two-sided 95%, by degrees of freedom.
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}
Runs = Mapping[str, Mapping[str, Any]]

# Name prefixes of the peers of each group (a setup's name starts with its peer's).
PREEMPTING_PREFIXES = ("priority-random", "kueue", "slurm")
CLASS_AWARE_PREFIXES = ("priority-random", "kueue", "slurm")


def interval(values: Sequence[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% confidence interval (Student's t over the values; NaN
    with fewer than two finite values)."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return math.inf, math.nan
    mean = statistics.fmean(finite)
    if len(finite) < 2:
        return mean, math.nan
    return mean, T95.get(len(finite) - 1, 1.96) * statistics.stdev(finite) / math.sqrt(len(finite))


def urgent_wait(m: Mapping[str, Any]) -> float:
    """The worse of the critical and high p99 waits (with requeues)."""
    waits = m["wait_p99_s_by_priority"]
    return max(float(waits["critical"]), float(waits["high"]))


def _ftf(m: Mapping[str, Any]) -> float:
    """The worst team's finish-time fairness rho, read as 1/rho so that higher is better."""
    return 1.0 / m["ftf_max"] if m["ftf_max"] else 0.0


def is_preempting(name: str) -> bool:
    return name.startswith(PREEMPTING_PREFIXES)


def is_class_aware(name: str) -> bool:
    return name.startswith(CLASS_AWARE_PREFIXES)


def uses_spot(name: str, run: Mapping[str, Any]) -> bool:
    return float(run.get("spot_gpu_hours", 0.0)) > 0.0


@dataclass(frozen=True)
class Goal:
    label: str
    value: Callable[[Mapping[str, Any]], float]
    lower_is_better: bool
    target: float
    # Which peers it compares with: (name, run) -> in the group.
    group: Callable[[str, Mapping[str, Any]], bool] = lambda name, run: True
    group_label: str = "every peer"
    absolute: float | None = None  # also met at or under this (waits: 5 minutes)


GOALS: tuple[Goal, ...] = (
    Goal(
        "urgent (critical, high) p99 wait <= 1.1x the best preempting peer or <= 5 min",
        urgent_wait,
        True,
        1.1,
        lambda name, run: is_preempting(name),
        "the preempting peers",
        absolute=300.0,
    ),
    Goal(
        "preemption churn <= 0.7x the best preempting peer",
        lambda m: float(m["preemption_churn_per_1k_useful_gpu_h"]),
        True,
        0.7,
        lambda name, run: is_preempting(name),
        "the preempting peers",
    ),
    Goal(
        "Spot waste <= 1.0x the best Spot-using peer",
        lambda m: float(m["spot_waste_per_1k_spot_gpu_h"]),
        True,
        1.0,
        uses_spot,
        "the peers that held Spot",
    ),
    Goal(
        "cost per useful GPU-hour <= 1.0x the cheapest",
        lambda m: float(m["cost_per_useful_gpu_hour"]),
        True,
        1.0,
    ),
    Goal("average JCT <= 1.0x", lambda m: float(m["avg_jct_s"]), True, 1.0),
    Goal(
        "low-class average JCT <= 1.2x the best class-aware peer",
        lambda m: float(m["avg_jct_s_by_priority"]["low"]),
        True,
        1.2,
        lambda name, run: is_class_aware(name),
        "the class-aware peers",
    ),
    Goal("Jain's fairness across teams >= 0.97x", lambda m: float(m["jain_fairness"]), False, 0.97),
    Goal("finish-time fairness (worst team) >= 0.97x", _ftf, False, 0.97),
)
GOAL = {g.label: g for g in GOALS}


def best_peer(goal: Goal, runs: Runs, peers: Sequence[str]) -> tuple[str, float] | None:
    """The best peer of the goal's group in this sample (None when no peer is in it)."""
    values = {p: goal.value(runs[p]) for p in peers if p in runs and goal.group(p, runs[p])}
    if not values:
        return None
    name = (min if goal.lower_is_better else max)(values, key=lambda p: values[p])
    return name, values[name]


def judge(goal: Goal, runs: Runs, peers: Sequence[str], ours: str = "spotline") -> tuple[float, bool, str]:
    """(ours / best peer's, met, how) in one sample."""
    mine = goal.value(runs[ours])
    best = best_peer(goal, runs, peers)
    if goal.absolute is not None and mine <= goal.absolute:
        ratio = mine / best[1] if best and best[1] else 1.0
        return ratio, True, f"{mine / 60:.1f} min"
    if best is None:
        return 1.0, True, f"no peer among {goal.group_label}"
    peer, theirs = best
    ratio = (1.0 if mine == 0 else math.inf) if theirs == 0 else mine / theirs
    met = ratio <= goal.target if goal.lower_is_better else ratio >= goal.target
    return ratio, met, f"x{ratio:.3f} vs {peer}"


def goal_row(goal: Goal, per_sample: Sequence[Runs], peers: Sequence[str]) -> dict[str, Any]:
    """A goal over the samples: the mean ratio and its CI, and in how many samples it is met."""
    outcomes = [judge(goal, runs, peers) for runs in per_sample]
    mean, half = interval([r for r, _, _ in outcomes])
    return {
        "goal": goal.label,
        "mean_ratio": mean,
        "ci95": half,
        "met_in_samples": sum(met for _, met, _ in outcomes),
        "samples": len(outcomes),
        "met": all(met for _, met, _ in outcomes),
        "per_sample": [how for _, _, how in outcomes],
    }


def goal_rows(per_sample: Sequence[Runs], peers: Sequence[str]) -> list[dict[str, Any]]:
    return [goal_row(goal, per_sample, peers) for goal in GOALS]
