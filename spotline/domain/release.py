"""Releases: a job short of GPUs waits for running jobs that end soon instead of preempting.

A preemption costs every victim GPU a checkpoint write and a restart, and sometimes the work
since the last checkpoint; waiting for GPUs that running jobs free within
`SchedulerConfig.release_wait_s` costs only the preemptor's wait (Slurm's backfill reservation
reasons the same way with time limits). So, in a pass, a job that would preempt in one of its
pools first asks whether the pool's free GPUs and those of running jobs ending within that window
(by `Job.remaining_s`: reported progress, else the declared run time) cover its demand; if so it
waits, and those releases are counted for it alone: a job ranked after it does not wait for the
same GPUs. A job past its declared end, or that declares no run time, frees nothing here (no wait
on an overrun). The classes that stop their victims at once (`stop_at_once_for`) preempt as before.
"""

from __future__ import annotations

from dataclasses import dataclass

from spotline.domain.config import SchedulerConfig
from spotline.domain.decisions import Admit, Decision, Preempt, Wait
from spotline.domain.models import ClusterSnapshot, Job, Pool
from spotline.domain.quota import Ledger


@dataclass(frozen=True, slots=True)
class Release:
    """`gpus` GPUs that `job` lacks in `pool` are freed within `within_s` by running jobs."""

    pool: str
    gpus: int
    within_s: float


class PassReleases:
    """One pass's releases: the free GPUs per pool and the running jobs ending within the window
    (as the pass began), less what the pass's decisions took and the waits counted on."""

    def __init__(self, snapshot: ClusterSnapshot, now: float, config: SchedulerConfig) -> None:
        self.window_s = config.release_wait_s
        self.pools = snapshot.pools
        ledger = Ledger.of(snapshot)
        self.free = {name: ledger.free(name) for name in snapshot.pools}
        # Free GPUs counted on by jobs that wait for a release, per pool.
        self.counted: dict[str, int] = {}
        # Running jobs ending within the window, per pool: (remaining s, job id, GPUs), soonest first.
        self.ending: dict[str, list[tuple[float, str, int]]] = {}
        for a in snapshot.allocations:
            remaining = a.job.remaining_s(now)
            if a.draining_for is None and remaining is not None and 0.0 < remaining <= self.window_s:
                self.ending.setdefault(a.pool, []).append((remaining, a.job.id, a.gpus))
        for ending in self.ending.values():
            ending.sort()
        self.held = {allocation.job.id: allocation.gpus for allocation in snapshot.allocations}

    def wait_for(self, job: Job, pools: list[Pool]) -> Release | None:
        """The release `job` waits for in the first of `pools` where one covers what it lacks
        (then counted for it alone), or None: it may preempt."""
        for pool in pools:
            demand = pool.demand_gpus(job)
            free = max(0, self.free.get(pool.name, 0) - self.counted.get(pool.name, 0))
            ending = self.ending.get(pool.name, [])
            if free >= demand or free + sum(gpus for _, _, gpus in ending) < demand:
                continue  # short of quota rather than GPUs, or nothing frees enough soon
            need = demand - free
            self.counted[pool.name] = self.counted.get(pool.name, 0) + free
            taken = 0
            while taken < need:
                _, _, gpus = ending.pop(0)
                taken += gpus
            return Release(pool.name, need, self.window_s)
        return None

    def decided(self, decision: Decision) -> None:
        """Take what a decision of the pass changed: GPUs admitted to, victims taken (they free
        nothing later), GPUs held for a gang."""
        if isinstance(decision, Admit) and decision.pool in self.pools:
            self.free[decision.pool] -= self.pools[decision.pool].demand_gpus(decision.job)
        elif isinstance(decision, Preempt):
            victims = set(decision.victims)
            ending = self.ending.get(decision.pool, [])
            self.ending[decision.pool] = [e for e in ending if e[1] not in victims]
            freed = sum(self.held.get(victim, 0) for victim in victims)
            if decision.pool in self.pools:
                demand = self.pools[decision.pool].demand_gpus(decision.job)
                self.free[decision.pool] -= max(0, demand - freed)
        elif isinstance(decision, Wait) and decision.holds is not None:
            pool, gpus = decision.holds
            self.free[pool] = self.free.get(pool, 0) - gpus
