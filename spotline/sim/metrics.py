"""What a finished simulation measured, in the keys of the JSON contract (architecture.md).

- Waits count every time a job is queued: first start minus submit, plus each requeue until its
  restart (jobs that started; `SimJob.queued_s`). JCT is finish minus submit (jobs that
  completed). p99 is numpy's linear-interpolated 99th percentile; a class with no job reports 0,
  and `jobs_by_priority` / `completed_by_priority` give each class's n.
- `slowdown_p50` / `slowdown_p99`: JCT over the job's run time (1.0: it never waited nor lost
  work), over completed jobs. `avg_run_s`: their mean run time, the average JCT of a scheduler
  that started every job at its submission and never stopped it (no policy can go below it).
- `gpu_utilization`: GPU-seconds held by jobs while the trace's jobs arrive (from the first
  submission to the last) over the cluster's nominal GPU-seconds in that window (a Spot pool
  counted at its full size, also while its capacity is lower).
- `goodput`: GPU-seconds of work that counted toward completion over GPU-seconds held (what
  restarts, lost work, checkpoint-then-stop writes and whole-node padding of gang jobs waste).
- `lost_gpu_hours`: GPU-hours held without progress that counted, because of preemptions and
  Spot interruptions: work since the last checkpoint, checkpoint writes before leaving, restarts.
- `lost_gpu_hours_since_checkpoint`: the part of those the control plane charges as lost (a
  job's `lost_gpu_s`): each run stopped early, from its latest durable checkpoint (a write before
  leaving included) to its stop, or the whole run when it saved nothing; the restarts of runs
  that saved work are not in it (the control plane counts them as run time).
- `cost_per_useful_gpu_hour`: held GPU-hours at each pool's price (On-Demand 1.0, Spot
  1 - savings) over useful GPU-hours.
- `cost_by_team`: each team's held GPU-hours at those prices, in On-Demand GPU-hours (times the
  On-Demand price per GPU-hour, e.g. about $4.10 for p4d.24xlarge in us-east-1, gives dollars).
- `jain_fairness`: Jain's index over the teams of each team's GPU-weighted speed ratio,
  sum(gpus * run time) / sum(gpus * JCT) over its completed jobs (1.0: every team sees the same
  slowdown).
- `ftf_*`: finish-time fairness (Themis, NSDI'20), entitlement-aware: a job's rho is its JCT over
  its JCT on its team's entitlement alone, the team's jobs run first-come first-served on the
  team's nominal GPUs (at least the job's own GPUs) with nothing else there (`isolated_jct`).
  A team's rho is the GPU-time-weighted mean of its completed jobs' rho; `ftf_max` is the worst
  team's (lower is better; <= 1: every team does at least as well as on its entitlement
  alone), `ftf_jain` Jain's index over the teams' 1/rho (1.0: every team sees the same ratio).
- `preemptions`: stops made for another job (a voluntary move between Spot and On-Demand is
  not one: `moves`).
- `preemption_churn_per_1k_useful_gpu_h`: GPU-hours lost to preemptions (the work since the last
  checkpoint or the write, and the restart after each) per 1,000 useful GPU-hours.
- `move_loss_gpu_hours`: GPU-hours lost to moves between Spot and On-Demand (the write and the
  restart after each); `moves` counts them.
- `spot_waste_per_1k_spot_gpu_h`: GPU-hours lost to Spot interruptions (with their restarts) per
  1,000 GPU-hours held on Spot (0 with none held); `spot_gpu_hours` / `on_demand_gpu_hours`:
  the GPU-hours held in each kind of pool.
- `priced_loss_on_demand_gpu_h`: each lost GPU-hour at the price of the pool it was held in,
  over On-Demand's (On-Demand GPU-hours: an hour lost on Spot at 30% of the price counts 0.3).
- `deadline_miss_rate`: jobs with a deadline that finished after it (or never), over jobs with a
  deadline; 0 when none has one.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from spotline.domain.models import PRIORITIES_HIGH_FIRST
from spotline.sim import accounts as acc
from spotline.sim.elastic import elastic_account
from spotline.sim.engine import Simulation
from spotline.sim.model import Phase, SimJob


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


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else 0.0


def isolated_jct(jobs: Sequence[SimJob], nominal: Mapping[str, int]) -> list[float]:
    """Each job's JCT (by `idx` order of `jobs`) if its team ran alone on its nominal GPUs: the
    team's jobs start first-come first-served (no job overtakes an earlier one), each when enough
    of the team's GPUs are free; a job larger than the entitlement gets its own GPUs."""
    out = [0.0] * len(jobs)
    by_team: dict[str, list[int]] = {}
    for i, job in enumerate(jobs):
        by_team.setdefault(job.team, []).append(i)
    for team, members in by_team.items():
        members.sort(key=lambda i: (jobs[i].submit, i))
        capacity = max(1, nominal.get(team, 0))
        free = capacity
        ends: list[tuple[float, int]] = []  # (end, gpus) of the running jobs
        clock = 0.0
        for i in members:
            job = jobs[i]
            need = min(job.gpus, capacity)
            clock = max(clock, job.submit)
            while ends and ends[0][0] <= clock:
                free += heapq.heappop(ends)[1]
            while free < need:
                end, gpus = heapq.heappop(ends)
                clock = max(clock, end)
                free += gpus
            free -= need
            heapq.heappush(ends, (clock + job.work, need))
            out[i] = clock + job.work - job.submit
    return out


def finish_time_fairness(jobs: Sequence[SimJob], isolated: Sequence[float] | None) -> tuple[float, float]:
    """(worst team's rho, Jain over the teams' 1/rho); (0, 0) without an isolated baseline."""
    if isolated is None:
        return 0.0, 0.0
    weight: dict[str, float] = {}
    weighted: dict[str, float] = {}
    for job, alone in zip(jobs, isolated, strict=True):
        if job.finish is None or alone <= 0:
            continue
        w = (job.declared_gpus or job.gpus) * job.work
        weight[job.team] = weight.get(job.team, 0.0) + w
        weighted[job.team] = weighted.get(job.team, 0.0) + w * (job.finish - job.submit) / alone
    rho = [weighted[t] / weight[t] for t in sorted(weight) if weight[t] > 0]
    if not rho:
        return 0.0, 0.0
    return max(rho), jain_index([1.0 / r for r in rho if r > 0])


def policy_metrics(sim: Simulation, isolated: Sequence[float] | None = None) -> dict[str, Any]:
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
        gpus = job.declared_gpus or job.gpus  # (an elastic job's work is at the trace's size)
        team_work[job.team] = team_work.get(job.team, 0.0) + gpus * job.work
        team_time[job.team] = team_time.get(job.team, 0.0) + gpus * span
        useful += gpus * job.work
    n_by: dict[str, int] = {p.value: 0 for p in PRIORITIES_HIGH_FIRST}
    for job in jobs:
        n_by[job.priority.value] += 1
        if job.first_start is not None:
            wait_by[job.priority.value].append(job.queued_s)
    slowdown = [(j.finish - j.submit) / j.work for j in done if j.finish is not None and j.work > 0]
    ftf_max, ftf_jain = finish_time_fairness(jobs, isolated)
    held = sum(ps.held_gpu_s for ps in sim.pools)
    cost = sum(ps.held_gpu_s * ps.pool.price for ps in sim.pools)
    capacity = sum(ps.pool.capacity_gpus for ps in sim.pools)
    window = sim.window_end - sim.window_start
    if window > 0:
        utilization = sum(ps.window_gpu_s for ps in sim.pools) / (capacity * window)
    else:
        makespan = max((j.finish or 0.0) for j in jobs) if jobs else 0.0
        utilization = held / (capacity * makespan) if makespan > 0 else 0.0
    with_deadline = [j for j in jobs if j.deadline is not None]
    missed = [j for j in with_deadline if j.finish is None or j.deadline is None or j.finish > j.deadline]
    ratios = [team_work[t] / team_time[t] for t in sorted(team_work) if team_time[t] > 0]
    spot_held = sum(ps.held_gpu_s for ps in sim.pools if ps.is_spot) / 3600.0
    accounts = sim.accounts.to_json()
    by_cause = accounts["loss_account"]["lost_gpu_hours_by_cause"]
    preempted = cause_loss(by_cause, acc.PREEMPTION_CAUSES)
    useful_h = useful / 3600.0
    metrics: dict[str, Any] = {
        "jobs": len(jobs),
        "completed": len(done),
        "avg_jct_s": _mean(jct),
        "p99_jct_s": _p99(jct),
        "avg_run_s": _mean([j.work for j in done]),
        "avg_jct_s_by_priority": {k: _mean(v) for k, v in jct_by.items()},
        "wait_p99_s_by_priority": {k: _p99(v) for k, v in wait_by.items()},
        "jobs_by_priority": n_by,
        "completed_by_priority": {k: len(v) for k, v in jct_by.items()},
        "slowdown_p50": _percentile(slowdown, 50),
        "slowdown_p99": _percentile(slowdown, 99),
        "gpu_utilization": utilization,
        "goodput": useful / held if held > 0 else 0.0,
        "lost_gpu_hours": sum(j.lost_gpu_s for j in jobs) / 3600.0,
        "lost_gpu_hours_since_checkpoint": sim.lost_since_checkpoint_gpu_s / 3600.0,
        "preemptions": sim.preemptions,
        "interruptions": sim.interruptions,
        "cost_per_useful_gpu_hour": cost / useful if useful > 0 else 0.0,
        "cost_by_team": {t: c / 3600.0 for t, c in sorted(sim.team_cost_gpu_s.items())},
        "jain_fairness": jain_index(ratios),
        "ftf_max": ftf_max,
        "ftf_jain": ftf_jain,
        "deadline_miss_rate": len(missed) / len(with_deadline) if with_deadline else 0.0,
        "moves": sim.moves,
        "preemption_churn_per_1k_useful_gpu_h": 1000.0 * preempted / useful_h if useful_h > 0 else 0.0,
        "move_loss_gpu_hours": cause_loss(by_cause, (acc.MOVE,)),
        "spot_waste_per_1k_spot_gpu_h": (
            1000.0 * cause_loss(by_cause, (acc.SPOT,)) / spot_held if spot_held > 0 else 0.0
        ),
        "spot_gpu_hours": spot_held,
        "on_demand_gpu_hours": held / 3600.0 - spot_held,
        "priced_loss_on_demand_gpu_h": sim.priced_lost_gpu_s / 3600.0,
        # The loss and wait accounts (`accounts.py`).
        **accounts,
        # With elastic jobs: their resizes, the idle GPU-hours they took, and the churn.
        **({"elastic_account": elastic_account(sim, useful)} if sim.settings.elastic_share > 0 else {}),
    }
    if sim.blocks is not None:
        metrics["reservation_account"] = sim.blocks.to_json()
    return metrics


def cause_loss(by_cause: Mapping[str, float], causes: Sequence[int]) -> float:
    """GPU-hours a loss account charges to `causes`, with the restart after each."""
    return sum(
        float(by_cause.get(acc.LOSS_CAUSES[c], 0.0)) + float(by_cause.get(acc.RESTART_LABELS[c], 0.0))
        for c in causes
    )
