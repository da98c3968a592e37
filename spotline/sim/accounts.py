"""The loss and wait accounts of one simulation: where GPU-hours were lost, and what
the urgent classes' waiting jobs waited for.

Loss account. Every GPU-second a job held without progress that counted (the `lost_gpu_hours`
of the metrics, `SimJob.lost_gpu_s`) is tagged with the cause of the run's early end:

- `preempted, stopped at once by a critical job` / `preempted, stopped at once by another class`:
  the victim left without writing a checkpoint (Spotline's `stop_at_once_for`, or a peer under
  `--victim-stop hard-kill`); it loses the work since its
  latest durable periodic checkpoint;
- `preempted with checkpoint`: checkpoint-then-stop; it loses the GPU time of the write;
- `Spot interruption`: a reclaim or a capacity shortage (the write inside the notice, or the
  work since the latest periodic checkpoint when none fits or the policy does not act);
- `moved between Spot and On-Demand`: a voluntary move (checkpoint, leave, resume in the other
  kind of pool, no other job asking for the GPUs): the GPU time of the write; not a preemption;
- `restart after ...`: the restart (image pull, loading the checkpoint) of the run that follows
  each of those, on all the job's GPUs.

The simulator models no node (host) failures, so there is no such cause: none is lost to them.
The causes add up to `lost_gpu_hours` (tested).

Also counted: preemptions per job (the distribution over the trace's jobs), preemptions by
(preemptor class, victim class) where the policy names the preemptor, and repeat preemptions:
a victim preempted again within `REPEAT_WINDOW_S` of its previous preemption (Spotline's default
protection period, 600 s, plus one hour).

Wait account (the classes in `WAIT_CLASSES`: critical and high). While a job of those classes
waits (from its submission or requeue to its start), each interval between scheduling passes
is tagged with what stood between it and a start at the start of the interval, judged from the
cluster's state alone, the same way for every policy, in this order:

1. `checkpoint wait`: victims preempted for it are still writing their checkpoints, or GPUs
   that jobs are leaving (checkpointing) would make it fit;
2. `quota`: a pool it may use has enough free GPUs, and its team uses its nominal quota or more;
3. `free GPUs not taken`: a pool has enough free GPUs, and its team is under its quota (the
   policy held them back: a reservation, queue order, or a pass not yet run);
4. `preemption delay`: lower-class jobs outside their protection period hold enough GPUs, and
   it has waited less than the policy's preemption delay (Spotline's `preemption_delay_s`;
   peers have none);
5. `lower-class work not preempted`: the same GPUs are there and the delay is over (the policy
   chose not to preempt: the margin, the per-pass budget, or no victim set in one pool);
6. `protection period`: lower-class jobs would free enough only counting those inside their
   protection period (Spotline's `protection_period_s`; peers have none);
7. `no capacity in any pool`: jobs of its class or above hold the GPUs.

Gang account: the multi-node jobs' waits (p99, max), and how many single-node jobs started
On-Demand (and on how many GPUs) while a multi-node job waited: the On-Demand capacity small jobs
took from a blocked gang.

GPU counts are compared as counts (a gang job needs whole nodes; the account does not place it),
and a critical job counts only On-Demand pools (where every competent setup routes it). The
tail of a class is its jobs whose total wait is at least the class's p99 wait: their share of
each cause is what the p99 is made of.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from spotline.domain.config import SchedulerConfig
from spotline.domain.models import PRIORITIES_HIGH_FIRST, Priority
from spotline.sim.model import Phase

if TYPE_CHECKING:
    from spotline.sim.model import SimJob


class PoolState(Protocol):
    """What the accounts read of a pool as the engine runs it (`engine.PoolState`)."""

    index: int
    used: int
    held_by_rank: list[int]
    running: dict[int, SimJob]

    @property
    def free(self) -> int: ...

    @property
    def is_spot(self) -> bool: ...

    def demand(self, job: SimJob) -> int: ...

    def accepts(self, job: SimJob) -> bool: ...


class Simulation(Protocol):
    """What the accounts read of the simulation (`engine.Simulation`, which keeps them)."""

    @property
    def jobs(self) -> list[SimJob]: ...

    @property
    def now(self) -> float: ...

    @property
    def policy(self) -> object: ...

    @property
    def pools(self) -> Sequence[PoolState]: ...


# Why a run ended early (`SimJob.exit_cause`; NONE: it has not).
NONE = 0
STOP_NOW_CRITICAL = 1
STOP_NOW = 2
CHECKPOINT = 3
SPOT = 4
MOVE = 5
BLOCK_END = 6
LOSS_CAUSES: dict[int, str] = {
    STOP_NOW_CRITICAL: "preempted, stopped at once by a critical job",
    STOP_NOW: "preempted, stopped at once by another class",
    CHECKPOINT: "preempted with checkpoint",
    SPOT: "Spot interruption",
    MOVE: "moved between Spot and On-Demand",
    BLOCK_END: "reserved block ended",
}
# The causes that are preemptions: stops made for another job (the churn a scheduler causes).
PREEMPTION_CAUSES: tuple[int, ...] = (STOP_NOW_CRITICAL, STOP_NOW, CHECKPOINT)
RESTART_LABELS: dict[int, str] = {cause: f"restart after: {label}" for cause, label in LOSS_CAUSES.items()}
# An elastic job's resize (a checkpoint, then a restart at the new size): shrunk for another job
# (its grown GPUs given back, or shrunk toward its minimum), or grown into idle GPUs. Their labels
# appear in the loss account only in runs with elastic jobs.
# (numbered apart from `LOSS_CAUSES`, which other causes extend)
SHRINK = 16
GROW = 17
RESIZE_CAUSES: dict[int, str] = {
    SHRINK: "shrunk for another job (elastic)",
    GROW: "grown into idle GPUs (elastic)",
}
RESIZE_RESTART_LABELS: dict[int, str] = {c: f"restart after: {label}" for c, label in RESIZE_CAUSES.items()}
assert not RESIZE_CAUSES.keys() & LOSS_CAUSES.keys(), "a loss cause numbered twice"

# A victim preempted again within this long of its previous preemption is a repeat.
REPEAT_WINDOW_S = 600.0 + 3600.0
# Preemptions per job, in these bins (upper bound inclusive).
PREEMPTION_BINS: tuple[tuple[str, int], ...] = (("0", 0), ("1", 1), ("2", 2), ("3-5", 5), ("6-10", 10))
PREEMPTION_TOP = ">10"

CRITICAL_RANK = 3
# Classes whose waits are accounted (ranks: high 2, critical 3).
WAIT_CLASSES = frozenset({2, 3})
CHECKPOINT_WAIT = "checkpoint wait"
QUOTA = "quota"
FREE_NOT_TAKEN = "free GPUs not taken"
DELAY = "preemption delay"
NOT_PREEMPTED = "lower-class work not preempted"
PROTECTION = "protection period"
NO_CAPACITY = "no capacity in any pool"
WAIT_CAUSES: tuple[str, ...] = (
    CHECKPOINT_WAIT,
    QUOTA,
    FREE_NOT_TAKEN,
    DELAY,
    NOT_PREEMPTED,
    PROTECTION,
    NO_CAPACITY,
)


class Accounts:
    """Kept by the engine as the run goes (`Simulation.accounts`), read once it ends (`to_json`)."""

    def __init__(self, sim: Simulation, nominal: dict[str, int] | None = None) -> None:
        self.sim = sim
        self.lost_gpu_s: dict[str, float] = {}
        self.by_pair: dict[str, int] = {}
        self.repeats = 0
        # What the policy's own rules are (Spotline's config; the peers have none of them).
        config = getattr(sim.policy, "config", None)
        self.protection_s = 0.0
        self.delay_s = 0.0
        self.no_delay_ranks: frozenset[int] = frozenset()
        if isinstance(config, SchedulerConfig):
            self.protection_s = config.protection_period_s
            self.delay_s = config.preemption_delay_s
            self.no_delay_ranks = frozenset(p.rank for p in Priority if config.waives_preemption_delay(p))
        self.nominal = dict(nominal or {})
        self.team_used: dict[str, int] = {}
        # Waiting jobs of the accounted classes: idx -> [job, cause now, since].
        self.waiting: dict[int, list[Any]] = {}
        # Seconds waited per job (idx) and cause.
        self.waited: dict[int, dict[str, float]] = {}
        # Preemptors (idx) waiting for this many victims' writes.
        self.awaiting: dict[int, int] = {}
        # Multi-node (gang) jobs waiting now (idx), and single-node jobs started On-Demand while
        # one waited: how many, and their GPUs.
        self.gangs_waiting: set[int] = set()
        self.small_on_demand_starts = 0
        self.small_on_demand_gpus = 0

    # --- losses ---------------------------------------------------------------------------

    def lose(self, job: SimJob, gpu_s: float, restart_gpu_s: float) -> None:
        """A run of `job` ended: `restart_gpu_s` of its lost GPU-seconds were the restart that
        began it, `gpu_s` the rest (lost to its own end's cause)."""
        lost = self.lost_gpu_s
        if restart_gpu_s > 0:
            label = RESTART_LABELS.get(job.restart_cause) or RESIZE_RESTART_LABELS.get(
                job.restart_cause, "restart after: unknown"
            )
            lost[label] = lost.get(label, 0.0) + restart_gpu_s
        if gpu_s > 0:
            label = LOSS_CAUSES.get(job.exit_cause) or RESIZE_CAUSES.get(job.exit_cause, "unknown")
            lost[label] = lost.get(label, 0.0) + gpu_s

    def preempted(self, job: SimJob, preemptor: SimJob | None, now: float) -> None:
        if job.last_preempted_at > -math.inf and now - job.last_preempted_at <= REPEAT_WINDOW_S:
            self.repeats += 1
        job.last_preempted_at = now
        if preemptor is not None:
            key = f"{preemptor.priority.value}>{job.priority.value}"
            self.by_pair[key] = self.by_pair.get(key, 0) + 1
            if job.phase is Phase.LEAVING:  # the preemptor waits for the write
                self.awaiting[preemptor.idx] = self.awaiting.get(preemptor.idx, 0) + 1
                job.leaving_for = preemptor.idx

    def left(self, job: SimJob) -> None:
        """`job` gave its GPUs back (finished or stopped)."""
        self.team_used[job.team] = self.team_used.get(job.team, 0) - job.held
        preemptor = job.leaving_for
        if preemptor >= 0:
            job.leaving_for = -1
            left = self.awaiting.get(preemptor, 0) - 1
            if left > 0:
                self.awaiting[preemptor] = left
            else:
                self.awaiting.pop(preemptor, None)

    # --- waits ----------------------------------------------------------------------------

    def enqueued(self, job: SimJob, now: float) -> None:
        if job.nodes > 1:
            self.gangs_waiting.add(job.idx)
        if job.rank in WAIT_CLASSES:
            self.waiting[job.idx] = [job, None, now]

    def started(self, job: SimJob, now: float) -> None:
        self.team_used[job.team] = self.team_used.get(job.team, 0) + job.held
        if job.nodes > 1:
            self.gangs_waiting.discard(job.idx)
        elif self.gangs_waiting and not self.sim.pools[job.pool].is_spot:
            self.small_on_demand_starts += 1
            self.small_on_demand_gpus += job.held
        entry = self.waiting.pop(job.idx, None)
        if entry is not None:
            self._settle(entry, now)
        self.awaiting.pop(job.idx, None)

    def _settle(self, entry: list[Any], now: float) -> None:
        job, cause, since = entry
        if cause is None or now <= since:
            return
        waited = self.waited.get(job.idx)
        if waited is None:
            waited = self.waited[job.idx] = {}
        waited[cause] = waited.get(cause, 0.0) + (now - since)
        entry[2] = now

    def classify(self, now: float) -> None:
        """After a pass: tag what each waiting job of the accounted classes waits for from now."""
        if not self.waiting:
            return
        pools = self.sim.pools
        # Per pool: GPUs leaving, and GPUs of running jobs below each rank (and inside their
        # protection period), read once for all the jobs.
        leaving = [ps.used - sum(ps.held_by_rank) for ps in pools]
        below = [[sum(ps.held_by_rank[:r]) for r in range(4)] for ps in pools]
        protected: list[list[int] | None] = [None] * len(pools)
        # Jobs alike in all that `_cause` reads have the same cause: found once per kind.
        causes: dict[tuple[object, ...], str] = {}
        delay_s, no_delay = self.delay_s, self.no_delay_ranks
        for entry in self.waiting.values():
            job: SimJob = entry[0]
            if self.awaiting.get(job.idx, 0) > 0:
                cause = CHECKPOINT_WAIT
            else:
                delayed = delay_s > 0 and job.rank not in no_delay and now - job.enqueued < delay_s
                kind = (job.team, job.rank, job.gpus, job.nodes, job.gpu_type, job.spot_ok, delayed)
                found = causes.get(kind)
                if found is None:
                    found = causes[kind] = self._cause(job, now, pools, leaving, below, protected)
                cause = found
            if cause != entry[1]:
                if entry[1] is None:
                    entry[1] = cause
                self._settle(entry, now)
                entry[1] = cause

    def _cause(
        self,
        job: SimJob,
        now: float,
        pools: Sequence[PoolState],
        leaving: list[int],
        below: list[list[int]],
        protected: list[list[int] | None],
    ) -> str:
        """What `job` (no victim of its own checkpointing) waits for now."""
        usable = [
            ps for ps in pools if ps.accepts(job) and not (job.rank == CRITICAL_RANK and ps.is_spot)
        ] or [ps for ps in pools if ps.accepts(job)]
        best = NO_CAPACITY
        order = WAIT_CAUSES.index
        for ps in usable:
            need = ps.demand(job)
            free = ps.free
            i = ps.index
            if free >= need:
                quota = self.nominal.get(job.team)
                if quota is not None and self.team_used.get(job.team, 0) >= quota:
                    cause = QUOTA
                else:
                    cause = FREE_NOT_TAKEN
            elif free + leaving[i] >= need:
                cause = CHECKPOINT_WAIT
            elif free + below[i][job.rank] - self._protected(ps, job.rank, now, protected) >= need:
                waited = now - job.enqueued
                if self.delay_s > 0 and job.rank not in self.no_delay_ranks and waited < self.delay_s:
                    cause = DELAY
                else:
                    cause = NOT_PREEMPTED
            elif free + below[i][job.rank] >= need:
                cause = PROTECTION
            else:
                continue
            if order(cause) < order(best):
                best = cause
        return best

    def _protected(self, ps: PoolState, rank: int, now: float, protected: list[list[int] | None]) -> int:
        """GPUs of running jobs below `rank` in `ps` still inside their protection period."""
        if self.protection_s <= 0:
            return 0
        counts = protected[ps.index]
        if counts is None:
            by_rank = [0, 0, 0, 0]
            for other in ps.running.values():
                if other.phase is Phase.RUNNING and now - other.run_start < self.protection_s:
                    by_rank[other.rank] += other.held
            counts = protected[ps.index] = [sum(by_rank[:r]) for r in range(4)]
        return counts[rank]

    # --- the result -----------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        jobs = self.sim.jobs
        for entry in list(self.waiting.values()):
            self._settle(entry, self.sim.now)
        bins = {label: 0 for label, _ in PREEMPTION_BINS}
        bins[PREEMPTION_TOP] = 0
        for job in jobs:
            for label, top in PREEMPTION_BINS:
                if job.preemptions <= top:
                    bins[label] += 1
                    break
            else:
                bins[PREEMPTION_TOP] += 1
        labels = [*LOSS_CAUSES.values(), *RESTART_LABELS.values()]
        lost = {label: self.lost_gpu_s.get(label, 0.0) / 3600.0 for label in labels}
        for label, value in self.lost_gpu_s.items():
            if label not in lost:
                lost[label] = value / 3600.0
        waits: dict[str, Any] = {}
        for priority in PRIORITIES_HIGH_FIRST:
            if priority.rank not in WAIT_CLASSES:
                continue
            started = [j for j in jobs if j.priority is priority and j.first_start is not None]
            queued = [j.queued_s for j in started]
            p99 = float(np.percentile(queued, 99)) if queued else 0.0
            tail = [j for j in started if j.queued_s >= p99 and j.queued_s > 0]
            waits[priority.value] = {
                "p99_wait_s": p99,
                "tail_jobs": len(tail),
                "tail_mean_wait_s": float(np.mean([j.queued_s for j in tail])) if tail else 0.0,
                "tail_wait_share_by_cause": _shares(tail, self.waited),
                "wait_hours_by_cause": {
                    cause: sum(self.waited.get(j.idx, {}).get(cause, 0.0) for j in started) / 3600.0
                    for cause in WAIT_CAUSES
                },
            }
        gangs = [j.queued_s for j in jobs if j.nodes > 1 and j.first_start is not None]
        return {
            "loss_account": {
                "lost_gpu_hours_by_cause": lost,
                "preemptions_per_job": bins,
                "max_preemptions_per_job": max((j.preemptions for j in jobs), default=0),
                "repeat_preemptions": self.repeats,
                "repeat_window_s": REPEAT_WINDOW_S,
                "preemptions_by_class": dict(sorted(self.by_pair.items())),
            },
            "wait_account": waits,
            "gang_account": {
                "multi_node_jobs": len(gangs),
                "multi_node_wait_p99_s": float(np.percentile(gangs, 99)) if gangs else 0.0,
                "multi_node_wait_max_s": max(gangs, default=0.0),
                "single_node_on_demand_starts_while_a_gang_waits": self.small_on_demand_starts,
                "their_gpus": self.small_on_demand_gpus,
            },
        }


def _shares(tail: list[SimJob], waited: dict[int, dict[str, float]]) -> dict[str, float]:
    totals = {cause: 0.0 for cause in WAIT_CAUSES}
    for job in tail:
        for cause, seconds in waited.get(job.idx, {}).items():
            totals[cause] += seconds
    whole = sum(totals.values())
    return {cause: (value / whole if whole > 0 else 0.0) for cause, value in totals.items()}
