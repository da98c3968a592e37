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
from spotline.domain.running import RunningIndex


@dataclass(frozen=True, slots=True)
class Release:
    """`gpus` GPUs that `job` lacks in `pool` are freed within `within_s` by running jobs."""

    pool: str
    gpus: int
    within_s: float


class PassReleases:
    """One pass's releases: the free GPUs per pool and the running jobs ending within the window
    (as the pass began), less what the pass's decisions took and the waits counted on.

    Read from the pass's running index (`RunningIndex`: its sums are the snapshot's ledger); a
    pool's ending jobs are listed when a job first asks about that pool."""

    def __init__(
        self, snapshot: ClusterSnapshot, index: RunningIndex, now: float, config: SchedulerConfig
    ) -> None:
        self.window_s = config.release_wait_s
        self.now = now
        self.pools = snapshot.pools
        self.index = index
        used = index.pool_used
        self.free = {name: pool.capacity_gpus - used.get(name, 0) for name, pool in snapshot.pools.items()}
        # Free GPUs counted on by jobs that wait for a release, per pool.
        self.counted: dict[str, int] = {}
        # Running jobs ending within the window, per pool: (remaining s, job id, GPUs), soonest
        # first, and their GPUs in all (listed when first asked: `_ending`).
        self.ending: dict[str, list[tuple[float, str, int]]] = {}
        self.ending_gpus: dict[str, int] = {}
        # Victims the pass took in pools whose ending jobs are not listed yet: they free nothing.
        self.taken: dict[str, set[str]] = {}

    def _ending(self, pool: str) -> list[tuple[float, str, int]]:
        """The pool's running jobs ending within the window, soonest first (then by id)."""
        ending = self.ending.get(pool)
        if ending is None:
            now, window_s = self.now, self.window_s
            taken: set[str] | frozenset[str] = self.taken.get(pool, frozenset())
            ending = []
            for members in self.index.groups.get(pool, {}).values():
                for a in members.values():
                    if a.draining_for is not None:
                        continue
                    # `Job.remaining_s(now)`, inlined (a pass reads every running job of the pool).
                    job = a.job
                    started = job.started_at
                    elapsed = job.runtime_s + (0.0 if started is None else max(0.0, now - started))
                    progress = job.progress
                    if progress is not None and progress > 0.0 and elapsed > 0.0:
                        remaining = max(0.0, elapsed * (1.0 - progress) / progress)
                    else:
                        expected = job.spec.expected_runtime_s
                        if expected is None:
                            continue
                        remaining = max(0.0, expected - elapsed)
                    if 0.0 < remaining <= window_s and job.id not in taken:
                        ending.append((remaining, job.id, a.gpus))
            ending.sort()
            self.ending[pool] = ending
            self.ending_gpus[pool] = sum(gpus for _, _, gpus in ending)
        return ending

    def wait_for(self, job: Job, pools: list[Pool]) -> Release | None:
        """The release `job` waits for in the first of `pools` where one covers what it lacks
        (then counted for it alone), or None: it may preempt."""
        for pool in pools:
            demand = pool.demand_gpus(job)
            free = self.free.get(pool.name, 0) - self.counted.get(pool.name, 0)
            if free < 0:
                free = 0
            if free >= demand:
                continue  # short of quota rather than GPUs
            ending = self._ending(pool.name)
            if free + self.ending_gpus[pool.name] < demand:
                continue  # nothing frees enough soon
            need = demand - free
            self.counted[pool.name] = self.counted.get(pool.name, 0) + free
            taken = 0
            while taken < need:
                _, _, gpus = ending.pop(0)
                taken += gpus
            self.ending_gpus[pool.name] -= taken
            return Release(pool.name, need, self.window_s)
        return None

    def decided(self, decision: Decision) -> None:
        """Take what a decision of the pass changed: GPUs admitted to, victims taken (they free
        nothing later), GPUs held for a gang."""
        if isinstance(decision, Admit) and decision.pool in self.pools:
            self.free[decision.pool] -= self.pools[decision.pool].demand_gpus(decision.job)
        elif isinstance(decision, Preempt):
            victims = set(decision.victims)
            ending = self.ending.get(decision.pool)
            if ending is None:
                self.taken.setdefault(decision.pool, set()).update(victims)
            else:
                kept = [e for e in ending if e[1] not in victims]
                self.ending[decision.pool] = kept
                self.ending_gpus[decision.pool] = sum(gpus for _, _, gpus in kept)
            freed = 0
            for victim in victims:
                allocation = self.index.get(victim)
                freed += 0 if allocation is None else allocation.gpus
            if decision.pool in self.pools:
                demand = self.pools[decision.pool].demand_gpus(decision.job)
                self.free[decision.pool] -= max(0, demand - freed)
        elif isinstance(decision, Wait) and decision.holds is not None:
            pool, gpus = decision.holds
            self.free[pool] = self.free.get(pool, 0) - gpus
