"""When will a pending job start? A short replay of the queue and the running jobs through the
same planner the scheduler uses.

The replay starts from what the control plane sees now (the running jobs, each expected to end
after its estimated remaining run time, and the pending jobs), and repeats: plan at `t`, apply
the admissions and preemptions, move `t` to the next instant anything can change (a running job
ends, a victim leaves, a protection period or a preemption delay runs out). It knows nothing of
jobs submitted later, of Spot interruptions, or of runs that end early or late, so it is a
forecast, not a promise: `forecast_start` gives a band from replays with every remaining run
time scaled by `band` (e.g. 0.5 and 1.5), and "unknown" when the job does not start within the
horizon or nothing in the replay would ever let it start.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from spotline.domain.config import SchedulerConfig
from spotline.domain.models import Allocation, ClusterSnapshot, Job, JobState
from spotline.domain.planner import Admit, Move, Preempt, SortedQueue, plan
from spotline.domain.preemption import estimated_remaining_s, protected_until


@dataclass(frozen=True)
class StartForecast:
    """`at` (and the band `earliest`..`latest`), epoch seconds; all None with `reason` when
    unknown."""

    at: float | None
    earliest: float | None
    latest: float | None
    reason: str


def replay_start(
    target: str,
    snapshot: ClusterSnapshot,
    pending: Sequence[Job],
    now: float,
    config: SchedulerConfig,
    rng: random.Random,
    *,
    runtime_scale: float = 1.0,
    leave_s: float = 60.0,
    horizon_s: float = 7 * 86400.0,
    max_steps: int = 400,
) -> tuple[float | None, str]:
    """The time `target` (a pending job) starts in one replay, or None and why not.

    `leave_s` is how long a victim takes to checkpoint and leave; `runtime_scale` multiplies
    every remaining run time."""
    ends: dict[str, float] = {}
    allocations: dict[str, Allocation] = {}
    for allocation in snapshot.allocations:
        job = allocation.job
        allocations[job.id] = allocation
        if allocation.draining_for is not None:
            ends[job.id] = now + leave_s
        else:
            ends[job.id] = now + runtime_scale * estimated_remaining_s(job, now, config)
    queue = SortedQueue.of(pending)
    if not any(job.id == target for job in pending):
        return None, f"{target} is not pending"
    t = now
    for _ in range(max_steps):
        # Jobs whose run (or departure) ended by `t` leave; victims go back to the queue.
        for job_id in [j for j, end in ends.items() if end <= t]:
            allocation = allocations.pop(job_id)
            del ends[job_id]
            leaving_for = allocation.draining_for
            if leaving_for is not None and not (
                isinstance(leaving_for, str) and leaving_for.startswith("spot-")
            ):
                job = allocation.job
                queue.add(
                    job.with_changes(
                        state=JobState.PENDING,
                        started_at=None,
                        enqueued_at=t,
                        runtime_s=job.elapsed_s(t),
                        preemptions=job.preemptions + 1,
                        pool=None,
                    )
                )
        current = snapshot.model_copy(update={"allocations": tuple(allocations.values())})
        for decision in plan(current, queue, t, config, rng):
            job = decision.job
            if isinstance(decision, Admit):
                if job.id == target:
                    return t, "replayed"
                queue.remove(job)
                started = job.with_changes(state=JobState.RUNNING, started_at=t, pool=decision.pool)
                pool = snapshot.pools[decision.pool]
                allocations[job.id] = Allocation(job=started, pool=decision.pool, gpus=pool.demand_gpus(job))
                ends[job.id] = t + runtime_scale * estimated_remaining_s(job, t, config)
            elif isinstance(decision, Move):
                if job.id in allocations:  # it leaves after its checkpoint and is requeued
                    moving = {"draining_for": decision.draining_for}
                    allocations[job.id] = allocations[job.id].model_copy(update=moving)
                    ends[job.id] = min(ends[job.id], t + leave_s)
            elif isinstance(decision, Preempt):
                for victim in decision.victims:
                    if victim in allocations:
                        allocations[victim] = allocations[victim].model_copy(update={"draining_for": job.id})
                        ends[victim] = min(ends[victim], t + (leave_s if decision.checkpoint else 1.0))
        upcoming = [end for end in ends.values() if end > t]
        for allocation in allocations.values():
            until = protected_until(allocation.job, config)
            if until is not None and until > t:
                upcoming.append(until)
        for job in _pending(queue):
            if job.enqueued_at + config.preemption_delay_s > t:
                upcoming.append(job.enqueued_at + config.preemption_delay_s)
        if not upcoming:
            return None, "nothing running or queued would let it start"
        t = min(upcoming)
        if t - now > horizon_s:
            return None, f"it does not start within {horizon_s / 3600:.0f} h of the replay"
    return None, f"it does not start within {max_steps} steps of the replay"


def _pending(queue: SortedQueue) -> list[Job]:
    return [job for entries in queue.by_class.values() for _, job in entries]


def forecast_start(
    target: str,
    snapshot: ClusterSnapshot,
    pending: Sequence[Job],
    now: float,
    config: SchedulerConfig,
    rng: random.Random,
    *,
    band: tuple[float, float] = (0.5, 1.5),
    leave_s: float = 60.0,
    horizon_s: float = 7 * 86400.0,
) -> StartForecast:
    """The replayed start of `target`, with the band of replays whose remaining run times are
    scaled by `band`. The replayed passes solve no deadline plan (`deadline_plans_per_pass` 0:
    the guard's rules decide there, and their safety net is the same): a plan costs up to about
    0.3 s, and three replays of many passes would otherwise keep `explain` past API Gateway's
    29 s (`bench/plan_pass_deadlines.py`)."""
    config = config.model_copy(update={"deadline_plans_per_pass": 0})
    state = rng.getstate()
    at, reason = replay_start(
        target, snapshot, pending, now, config, rng, leave_s=leave_s, horizon_s=horizon_s
    )
    if at is None:
        return StartForecast(None, None, None, reason)
    times: list[float | None] = [at]
    for scale in band:
        rng.setstate(state)
        other, _ = replay_start(
            target,
            snapshot,
            pending,
            now,
            config,
            rng,
            runtime_scale=scale,
            leave_s=leave_s,
            horizon_s=horizon_s,
        )
        times.append(other)
    known = [t for t in times if t is not None]
    # A band replay in which it does not start leaves that end of the band open (None).
    latest = max(known) if len(known) == len(times) else None
    return StartForecast(at, min(known), latest, "replayed")
