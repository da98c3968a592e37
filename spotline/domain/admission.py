"""Deadline admission: at submission, what can be promised of a job's deadline, and the
On-Demand GPUs held so the promise holds across the cluster.

`answer_deadline` replays nothing: it lays out each On-Demand pool that could host the job as a
profile of GPUs in use over time, from what the control plane sees now, and looks for room:

1. the jobs holding GPUs in the pool, each until its estimated end;
2. the On-Demand holds of deadline jobs answered before (`OnDemandHold`), over their windows;
3. the pending jobs of its class or a higher one that can only run On-Demand (a class in
   `on_demand_classes`, `spot: never`, a gang), each placed at its earliest room in turn.

The job's run time is its predicted one (`RuntimeRange.planned_s`, conservative). Its On-Demand
window is that run time plus one changeover (a start and a restore). The answer:

- **cannot** when no pool has room for that window before the deadline; the earliest finish is
  where the first room ends;
- **meets** when the job may use Spot and the pool has room for its window at the last moment
  (`deadline - run time - changeover - step`, where the guard's safety net moves it): those GPUs
  are held for it from then to the deadline, and it runs on Spot until its guard says otherwise;
- **on-demand-only** otherwise (it may not use Spot, or only an earlier window has room): the
  GPUs of the window it fits are held from its start to the deadline.

The planner keeps what is held (`held_on_demand_gpus`): no other job is admitted into GPUs held
for a deadline job over the time it would run. Pure: no clock, no I/O.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from spotline.domain.admission_models import AnswerKind, DeadlineAnswer, OnDemandHold, RuntimeRange
from spotline.domain.config import SchedulerConfig
from spotline.domain.models import Allocation, ClusterSnapshot, Job, Pool, SpotPreference
from spotline.domain.preemption import estimated_remaining_s

__all__ = [
    "AnswerKind",
    "DeadlineAnswer",
    "OnDemandHold",
    "Profile",
    "RuntimeRange",
    "answer_deadline",
    "declared_runtime",
    "held_on_demand_gpus",
    "holds_in",
    "on_demand_only",
]


def declared_runtime(job: Job) -> RuntimeRange | None:
    """The run time the job itself states: `max_runtime_s` (a cap, so an upper bound) when given,
    else `expected_runtime_s`; None when it states neither."""
    spec = job.spec
    if spec.max_runtime_s is not None:
        low = spec.expected_runtime_s or spec.max_runtime_s
        return RuntimeRange(
            planned_s=spec.max_runtime_s,
            low_s=min(low, spec.max_runtime_s),
            high_s=spec.max_runtime_s,
            source="max_runtime_s",
        )
    if spec.expected_runtime_s is not None:
        s = spec.expected_runtime_s
        return RuntimeRange(planned_s=s, low_s=s, high_s=s, source="declared")
    return None


def on_demand_only(job: Job, config: SchedulerConfig) -> bool:
    """Whether the job runs only On-Demand (`placement.spot_refusal` for every Spot pool)."""
    return job.spec.spot is SpotPreference.NEVER or job.priority in config.on_demand_classes or job.nodes > 1


@dataclass
class Profile:
    """GPUs in use in one pool over time: (start, end, gpus) spans, read as a step function."""

    capacity: int
    spans: list[tuple[float, float, int]]

    def _steps(self) -> tuple[list[float], list[int]]:
        """(times, in use from each time to the next), times ascending."""
        deltas: dict[float, int] = {}
        for start, end, gpus in self.spans:
            deltas[start] = deltas.get(start, 0) + gpus
            deltas[end] = deltas.get(end, 0) - gpus
        times = sorted(deltas)
        levels, level = [], 0
        for t in times:
            level += deltas[t]
            levels.append(level)
        return times, levels

    def peak(self, start: float, end: float) -> int:
        """The most GPUs in use at any instant of [start, end)."""
        times, levels = self._steps()
        i = bisect.bisect_right(times, start) - 1
        peak = levels[i] if i >= 0 else 0
        for j in range(i + 1, len(times)):
            if times[j] >= end:
                break
            peak = max(peak, levels[j])
        return peak

    def fits(self, start: float, end: float, gpus: int) -> bool:
        return self.peak(start, end) + gpus <= self.capacity

    def earliest(self, now: float, duration: float, gpus: int) -> float | None:
        """The earliest start >= now with `gpus` free for `duration` (None: never: too large)."""
        if gpus > self.capacity:
            return None
        room = self.capacity - gpus
        times, levels = self._steps()
        starts = [now, *(t for t in times if t > now)]
        for start in starts:
            i = bisect.bisect_right(times, start) - 1
            if (levels[i] if i >= 0 else 0) > room:
                continue
            j = i + 1
            while j < len(times) and times[j] < start + duration and levels[j] <= room:
                j += 1
            if j == len(times) or times[j] >= start + duration:
                return start
        return None  # (unreachable: after the last span ends the pool is empty)

    def add(self, start: float, end: float, gpus: int) -> None:
        self.spans.append((start, end, gpus))


def holds_in(
    pool: str, jobs: Iterable[Job], allocations: Sequence[Allocation], *, exclude: str | None = None
) -> list[tuple[str, OnDemandHold]]:
    """(job id, hold) of the jobs' On-Demand holds in `pool`, each job once, leaving out the job
    `exclude` and jobs already running in that pool (their GPUs are counted as in use)."""
    running_here = {a.job.id for a in allocations if a.pool == pool}
    seen: set[str] = set()
    out: list[tuple[str, OnDemandHold]] = []
    for job in jobs:
        answer = job.deadline_answer
        if job.id in seen or job.id == exclude or answer is None or answer.hold is None:
            continue
        seen.add(job.id)
        if answer.hold.pool == pool and job.id not in running_here:
            out.append((job.id, answer.hold))
    return out


def held_on_demand_gpus(holds: Sequence[OnDemandHold], start: float, end: float) -> int:
    """The most GPUs `holds` keep at any instant of [start, end): what a job admitted now and
    running until `end` may not take."""
    profile = Profile(capacity=0, spans=[(h.start, h.end, h.gpus) for h in holds])
    return profile.peak(start, end)


def _profile(
    pool: Pool,
    job: Job,
    snapshot: ClusterSnapshot,
    pending: Sequence[Job],
    now: float,
    config: SchedulerConfig,
) -> Profile:
    profile = Profile(capacity=pool.capacity_gpus, spans=[])
    for allocation in snapshot.allocations:
        # (its own run, when a running job's deadline is answered again, is the window it asks for)
        if allocation.pool != pool.name or allocation.job.id == job.id:
            continue
        if allocation.draining_for is not None:
            end = now + config.deadline_changeover_s
        else:
            end = now + estimated_remaining_s(allocation.job, now, config)
        profile.add(now, max(end, now + 1.0), allocation.gpus)
    holders = [*pending, *(a.job for a in snapshot.allocations)]
    for _, hold in holds_in(pool.name, holders, snapshot.allocations, exclude=job.id):
        profile.add(hold.start, hold.end, hold.gpus)
    # Pending jobs of its class or a higher one were there first and go first: those that can only
    # run On-Demand (and hold nothing) take their room in the pool before it.
    for other in pending:
        held = other.deadline_answer is not None and other.deadline_answer.hold is not None
        if other.id == job.id or held or other.priority.rank < job.priority.rank:
            continue
        if not on_demand_only(other, config) or not pool.can_host(other):
            continue
        duration = estimated_remaining_s(other, now, config)
        start = profile.earliest(now, duration, pool.demand_gpus(other))
        if start is not None:
            profile.add(start, start + duration, pool.demand_gpus(other))
    return profile


def answer_deadline(
    job: Job,
    runtime: RuntimeRange | None,
    snapshot: ClusterSnapshot,
    pending: Sequence[Job],
    now: float,
    config: SchedulerConfig,
) -> DeadlineAnswer:
    """The answer to `job`'s deadline at `now` (see the module's docstring).

    `runtime`: its predicted run time (None: unknown); `snapshot`: the pools and the jobs holding
    GPUs; `pending`: the queue as the pass reads it (its holds count; its On-Demand-only jobs of the
    job's class or above are placed first).
    Prices are the pools' (`Pool.price` per GPU-hour)."""
    deadline = job.spec.deadline_at
    if deadline is None:
        raise ValueError(f"{job.id} has no deadline")
    if runtime is None:
        return DeadlineAnswer(
            kind=AnswerKind.UNKNOWN,
            summary="no run time known: declare expected_runtime_s or max_runtime_s",
        )
    window_s = runtime.planned_s + config.deadline_changeover_s
    latest_start = deadline - window_s - config.deadline_step_s
    pools = sorted(
        (p for p in snapshot.pools.values() if not p.is_spot and p.can_host(job)),
        key=lambda p: (p.price, p.name),
    )
    if job.spec.spot is SpotPreference.REQUIRED or not pools:
        return DeadlineAnswer(
            kind=AnswerKind.CANNOT,
            runtime=runtime,
            summary="cannot be promised: no On-Demand pool can host it"
            + (" (spot: required)" if job.spec.spot is SpotPreference.REQUIRED else ""),
        )
    spot_ok = not on_demand_only(job, config) and any(
        p.is_spot and p.can_host(job) for p in snapshot.pools.values()
    )
    best: tuple[float, Pool, Profile] | None = None
    for pool in pools:
        profile = _profile(pool, job, snapshot, pending, now, config)
        gpus = pool.demand_gpus(job)
        if spot_ok and latest_start >= now and profile.fits(latest_start, deadline, gpus):
            hold = OnDemandHold(pool=pool.name, gpus=gpus, start=latest_start, end=deadline)
            return _answer(AnswerKind.MEETS, now + window_s, pool, gpus, runtime, hold, deadline)
        start = profile.earliest(now, window_s, gpus)
        if start is not None and (best is None or start + window_s < best[0]):
            best = (start + window_s, pool, profile)
    if best is None:
        return DeadlineAnswer(kind=AnswerKind.CANNOT, runtime=runtime, summary="cannot: no On-Demand room")
    finish, pool, _ = best
    gpus = pool.demand_gpus(job)
    if finish > deadline:
        return _answer(AnswerKind.CANNOT, finish, pool, gpus, runtime, None, deadline)
    hold = OnDemandHold(pool=pool.name, gpus=gpus, start=finish - window_s, end=deadline)
    return _answer(AnswerKind.ON_DEMAND_ONLY, finish, pool, gpus, runtime, hold, deadline)


def _answer(
    kind: AnswerKind,
    finish: float,
    pool: Pool,
    gpus: int,
    runtime: RuntimeRange,
    hold: OnDemandHold | None,
    deadline: float,
) -> DeadlineAnswer:
    cost = round(gpus * runtime.planned_s / 3600.0 * pool.price, 2)
    late_h = (finish - deadline) / 3600.0
    summary = {
        AnswerKind.MEETS: f"meets it: Spot while it can, {gpus} GPUs of {pool.name} held On-Demand"
        f" as its safety net (at most ${cost:,.2f} if it all runs On-Demand)",
        AnswerKind.ON_DEMAND_ONLY: f"meets it only On-Demand, at about ${cost:,.2f}"
        f" ({gpus} GPUs of {pool.name} held for it)",
        AnswerKind.CANNOT: f"cannot: the earliest finish is {_iso(finish)}, {late_h:.2f} h after the"
        f" deadline (On-Demand in {pool.name})",
    }[kind]
    return DeadlineAnswer(
        kind=kind,
        earliest_finish=finish,
        on_demand_cost=cost if math.isfinite(cost) else None,
        runtime=runtime,
        hold=hold,
        summary=summary,
    )


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class PassHolds:
    """The On-Demand holds one pass sees: those of the pending jobs it read and of the jobs
    holding GPUs (a hold whose job already runs in its pool is spent), by pool."""

    by_pool: dict[str, list[tuple[str, OnDemandHold]]]

    @classmethod
    def of(
        cls, window: Sequence[Job], snapshot: ClusterSnapshot, running: Iterable[Allocation] | None = None
    ) -> PassHolds:
        """The holds in each On-Demand pool of the jobs of `window` and the running jobs
        (`running`, else the snapshot's allocations; a caller may pass only those whose job has a
        deadline's answer)."""
        held = snapshot.allocations if running is None else running
        # (Only a job with a hold counts in any pool: the others are left out once, not per pool.)
        jobs = [
            job
            for job in (*window, *(a.job for a in held))
            if job.deadline_answer is not None and job.deadline_answer.hold is not None
        ]
        by_pool: dict[str, list[tuple[str, OnDemandHold]]] = {}
        for name, pool in snapshot.pools.items():
            if jobs and not pool.is_spot:
                found = holds_in(name, jobs, snapshot.allocations)
                if found:
                    by_pool[name] = found
        return cls(by_pool)

    def held_against(self, job: Job, pool: Pool, now: float, remaining_s: float) -> int:
        """GPUs of `pool` held for other jobs at some instant while `job` would run there; none
        for a job whose own hold there is in force (its answer fitted it beside the others)."""
        own = job.deadline_answer.hold if job.deadline_answer is not None else None
        if own is not None and own.pool == pool.name and own.start <= now < own.end:
            return 0
        others = [hold for owner, hold in self.by_pool.get(pool.name, ()) if owner != job.id]
        return held_on_demand_gpus(others, now, now + remaining_s) if others else 0
