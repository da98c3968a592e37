"""What a finished simulation measured, in the keys of the JSON contract (architecture.md).

- Waits are first start minus submit (jobs that started); JCT is finish minus submit (jobs that
  completed). p99 is numpy's linear-interpolated 99th percentile; a class with no job reports 0.
- `gpu_utilization`: GPU-seconds held by jobs while the trace's jobs arrive (from the first
  submission to the last) over the cluster's GPU-seconds in that window.
- `goodput`: GPU-seconds of work that counted toward completion over GPU-seconds held (what
  restarts, lost work, checkpoint-then-stop writes and whole-node padding of gang jobs waste).
- `lost_gpu_hours`: GPU-hours held without progress that counted, because of preemptions and
  Spot interruptions: work since the last checkpoint, checkpoint writes before leaving, restarts.
- `cost_per_useful_gpu_hour`: held GPU-hours at each pool's price (On-Demand 1.0, Spot
  1 - savings) over useful GPU-hours.
- `jain_fairness`: Jain's index over the teams of each team's GPU-weighted speed ratio,
  sum(gpus * run time) / sum(gpus * JCT) over its completed jobs (1.0: every team sees the same
  slowdown).
- `deadline_miss_rate`: jobs with a deadline that finished after it (or never), over jobs with a
  deadline; 0 when none has one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from spotline.domain.models import PRIORITIES_HIGH_FIRST
from spotline.sim.engine import Simulation
from spotline.sim.model import Phase


def _p99(values: list[float]) -> float:
    return float(np.percentile(values, 99)) if values else 0.0


def _mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else 0.0


def jain_index(values: list[float]) -> float:
    """Jain's fairness index (sum x)^2 / (n sum x^2): 1.0 when all are equal."""
    if not values:
        return 0.0
    square_sum = sum(v * v for v in values)
    return (sum(values) ** 2) / (len(values) * square_sum) if square_sum > 0 else 1.0


def policy_metrics(sim: Simulation) -> dict[str, Any]:
    jobs = sim.jobs
    done = [j for j in jobs if j.phase is Phase.DONE and j.finish is not None]
    jct = [j.finish - j.submit for j in done if j.finish is not None]
    jct_by: dict[str, list[float]] = {p.value: [] for p in PRIORITIES_HIGH_FIRST}
    wait_by: dict[str, list[float]] = {p.value: [] for p in PRIORITIES_HIGH_FIRST}
    team_work: dict[str, float] = {}
    team_time: dict[str, float] = {}
    useful = 0.0
    for job in done:
        assert job.finish is not None
        span = job.finish - job.submit
        jct_by[job.priority.value].append(span)
        team_work[job.team] = team_work.get(job.team, 0.0) + job.gpus * job.work
        team_time[job.team] = team_time.get(job.team, 0.0) + job.gpus * span
        useful += job.gpus * job.work
    for job in jobs:
        if job.first_start is not None:
            wait_by[job.priority.value].append(job.first_start - job.submit)
    held = sum(ps.held_gpu_s for ps in sim.pools)
    cost = sum(ps.held_gpu_s * ps.pool.price for ps in sim.pools)
    capacity = sum(ps.capacity for ps in sim.pools)
    window = sim.window_end - sim.window_start
    if window > 0:
        utilization = sum(ps.window_gpu_s for ps in sim.pools) / (capacity * window)
    else:
        makespan = max((j.finish or 0.0) for j in jobs) if jobs else 0.0
        utilization = held / (capacity * makespan) if makespan > 0 else 0.0
    with_deadline = [j for j in jobs if j.deadline is not None]
    missed = [j for j in with_deadline if j.finish is None or j.deadline is None or j.finish > j.deadline]
    ratios = [team_work[t] / team_time[t] for t in sorted(team_work) if team_time[t] > 0]
    return {
        "jobs": len(jobs),
        "completed": len(done),
        "avg_jct_s": _mean(jct),
        "p99_jct_s": _p99(jct),
        "avg_jct_s_by_priority": {k: _mean(v) for k, v in jct_by.items()},
        "wait_p99_s_by_priority": {k: _p99(v) for k, v in wait_by.items()},
        "gpu_utilization": utilization,
        "goodput": useful / held if held > 0 else 0.0,
        "lost_gpu_hours": sum(j.lost_gpu_s for j in jobs) / 3600.0,
        "preemptions": sim.preemptions,
        "interruptions": sim.interruptions,
        "cost_per_useful_gpu_hour": cost / useful if useful > 0 else 0.0,
        "jain_fairness": jain_index(ratios),
        "deadline_miss_rate": len(missed) / len(with_deadline) if with_deadline else 0.0,
    }
