"""The Spot-and-deadline peers, each at its best reasonable setting.

All four share the competent setup of `base.PeerPolicy` (checkpoint inside a Spot notice, restart
costs, critical jobs On-Demand) and dispatch in submission order (a requeued job keeps its place),
a job that does not fit not holding back later jobs that do. None preempts another job.

- `on-demand` (`AllOnDemandPolicy`): every job On-Demand, within the On-Demand quota (the
  On-Demand pools' size); nothing is ever reclaimed.
- `batch-spot-first` (`BatchSpotFirstPolicy`): AWS Batch's documented pattern, one job queue whose
  Spot compute environment comes first and On-Demand second (AWS Batch User Guide, "Job queues":
  the scheduler tries the compute environments in order); a job goes to Spot when it fits there,
  else to On-Demand; an interrupted job retries (its retry strategy requeues it). With several
  zones, the Spot compute environment spans them (SPOT_PRICE_CAPACITY_OPTIMIZED picks a zone
  with capacity).
- `skypilot` (`SkyPilotPolicy`): SkyPilot managed jobs with `use_spot: true`: a job launches on
  Spot in whichever zone has capacity (failover across zones), is recovered after a preemption
  (relaunched, again in any zone), and falls back to On-Demand once Spot has been missing for
  `FALLBACK_AFTER_S` (managed jobs themselves keep retrying Spot;
  SkyServe's `dynamic_ondemand_fallback` is the documented fallback). N = 10 minutes is our
  choice: its recovery first retries a failed launch after 60 s (`StrategyExecutor.
  RETRY_INIT_GAP_SECONDS`, backing off after), so 10 minutes rides out a few retries, and it is
  short against the hours a zone stays empty in the traces. Once On-Demand a job stays there
  until it finishes.
- `uniform-progress` (`UniformProgressPolicy`): each job with a deadline follows the paper's
  Uniform Progress rules ("Can't Be Late", NSDI '24, section 5.2; `spotline.sim.deadline`) on its
  own line: C its run time, R its deadline minus its submission, d a changeover (its restart plus
  one checkpoint write). Safety net: On-Demand to the end once its remaining work plus 2d no longer
  fits before the deadline (a job on Spot then moves, checkpoint first). Hysteresis: a job on
  On-Demand stays while its progress is below (elapsed + 2d) C / R. Otherwise: Spot when a zone has
  room (taking risks, and staying there until reclaimed), On-Demand when behind its line
  (progress below elapsed C / R), else it waits. Jobs without a deadline go Spot first, as in
  Batch.
- `edf` (`EarliestDeadlinePolicy`): Uniform Progress's rules for each job, the queue served
  earliest deadline first.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from spotline.sim.model import Phase, SimJob
from spotline.sim.peers.base import CRITICAL_RANK, PeerPolicy
from spotline.sim.peers.fifo import FifoPolicy

if TYPE_CHECKING:
    from spotline.sim.engine import PoolState

FALLBACK_AFTER_S = 600.0


class BatchSpotFirstPolicy(FifoPolicy):
    """AWS Batch: one FIFO job queue, the Spot compute environment first, On-Demand second."""

    name = "batch-spot-first"


class _DispatchPolicy(PeerPolicy):
    """In submission order, each pending job to the first pool of `choices(job)` with room."""

    uses_ticks = True

    def __init__(self, competent: bool = True) -> None:
        super().__init__(competent)
        self._pending: dict[int, SimJob] = {}
        # The pending jobs in submission order (None: to sort again, a job was queued).
        self._order: list[SimJob] | None = None

    def on_pending(self, job: SimJob) -> bool:
        self._pending[job.idx] = job
        self._order = None
        return True

    def pending_count(self) -> int:
        return len(self._pending)

    def spot_pools(self, job: SimJob) -> list[PoolState]:
        return [p for p in self.pools_for(job) if p.is_spot]

    def on_demand_pools(self, job: SimJob) -> list[PoolState]:
        return [p for p in self.pools_for(job) if not p.is_spot] or [
            p for p in self._pool_order if not p.is_spot and p.hosts(job)
        ]

    def must_on_demand(self, job: SimJob) -> bool:
        return not job.spot_ok or (self.competent and job.rank == CRITICAL_RANK)

    def choices(self, job: SimJob, now: float) -> list[PoolState]:
        raise NotImplementedError

    def before_dispatch(self, now: float) -> None:
        """Act on running jobs before the queue is served (nothing by default)."""

    def order(self, job: SimJob) -> tuple[float, ...]:
        """The order the queue is served in: submission order (a requeued job keeps its place)."""
        return (job.submit, job.idx)

    def schedule(self, now: float) -> None:
        self.before_dispatch(now)
        if not self._pending:
            return
        if self._order is None:
            self._order = sorted(self._pending.values(), key=self.order)
        pools = self._pool_order
        top = max((ps.free for ps in pools), default=0)
        started = False
        for job in self._order:
            if top <= 0:
                break
            if job.gpus > top:
                continue  # no pool has room for it
            for ps in self.choices(job, now):
                if ps.demand(job) <= ps.free:
                    del self._pending[job.idx]
                    self.start(job, ps, f"{self.name}: in {ps.name}" if self.sim.logging else "")
                    started = True
                    top = max(p.free for p in pools)
                    break
        if started:
            self._order = [j for j in self._order if j.idx in self._pending]


class AllOnDemandPolicy(_DispatchPolicy):
    """Every job On-Demand, in submission order, within the On-Demand quota."""

    name = "on-demand"
    uses_ticks = False

    def choices(self, job: SimJob, now: float) -> list[PoolState]:
        return self.on_demand_pools(job)


class SkyPilotPolicy(_DispatchPolicy):
    """SkyPilot managed jobs on Spot with recovery, zone failover and On-Demand fallback after
    `fallback_after_s` without Spot (`math.inf`: pure recovery, `skypilot-recovery`: a job
    waits for Spot however long it is missing)."""

    name = "skypilot"

    def __init__(self, competent: bool = True, fallback_after_s: float = FALLBACK_AFTER_S) -> None:
        super().__init__(competent)
        self.fallback_after_s = fallback_after_s
        # Without a fallback nothing depends on time: passes follow events alone.
        self.uses_ticks = math.isfinite(fallback_after_s)
        self._fell_back: set[int] = set()

    def choices(self, job: SimJob, now: float) -> list[PoolState]:
        if self.must_on_demand(job) or job.idx in self._fell_back:
            return self.on_demand_pools(job)
        if now - job.enqueued >= self.fallback_after_s:
            # Spot has been missing this long since the job last wanted it: On-Demand from now on.
            self._fell_back.add(job.idx)
            return self.on_demand_pools(job)
        if math.isfinite(self.fallback_after_s):
            self.sim.wake_at(job.enqueued + self.fallback_after_s)
        return self.spot_pools(job)

    def schedule(self, now: float) -> None:
        super().schedule(now)
        if not math.isfinite(self.fallback_after_s):
            return
        for job in self._pending.values():
            if job.idx not in self._fell_back and not self.must_on_demand(job):
                self.sim.wake_at(max(now + 1.0, job.enqueued + self.fallback_after_s))


class UniformProgressPolicy(_DispatchPolicy):
    """Uniform Progress on each deadline job; the other jobs Spot first."""

    name = "uniform-progress"
    plans_when_idle = True

    def __init__(self, competent: bool = True) -> None:
        super().__init__(competent)
        self._net: set[int] = set()

    @staticmethod
    def _changeover(job: SimJob) -> float:
        return job.restart + job.write

    def _done(self, job: SimJob, now: float) -> float:
        return job.progress(now) if job.phase is Phase.RUNNING else job.saved

    def _safety_net(self, job: SimJob, now: float) -> bool:
        assert job.deadline is not None
        if job.idx in self._net:
            return True
        if job.work - self._done(job, now) + 2 * self._changeover(job) >= job.deadline - now:
            self._net.add(job.idx)
            return True
        return False

    def _line(self, job: SimJob, elapsed: float) -> float:
        assert job.deadline is not None
        span = max(job.deadline - job.submit, 1e-9)
        return elapsed * job.work / span

    def choices(self, job: SimJob, now: float) -> list[PoolState]:
        if self.must_on_demand(job):
            return self.on_demand_pools(job)
        if job.deadline is None:
            return self.pools_for(job)
        if self._safety_net(job, now):
            return self.on_demand_pools(job)
        spot = [p for p in self.spot_pools(job) if p.demand(job) <= p.free]
        if spot:
            return spot
        if job.saved < self._line(job, now - job.submit):
            return self.on_demand_pools(job)
        return []

    def before_dispatch(self, now: float) -> None:
        sim = self.sim
        spot_room = sum(max(ps.free, 0) for ps in sim.pools if ps.is_spot)
        od_room = sum(max(ps.free, 0) for ps in sim.pools if not ps.is_spot)
        for ps in sim.pools:
            for job in list(ps.running.values()):
                if job.deadline is None or job.phase is not Phase.RUNNING or self.must_on_demand(job):
                    continue
                if ps.is_spot:
                    # The safety net fired: On-Demand to the end, when the quota has room for it
                    # (else it rides Spot on, the best it can do).
                    if self._safety_net(job, now) and job.gpus <= od_room:
                        od_room -= job.gpus
                        sim.move(job)
                    continue
                if job.gpus > spot_room or self._safety_net(job, now):
                    continue
                elapsed = now - job.submit + 2 * self._changeover(job)
                if job.progress(now) >= self._line(job, elapsed):
                    spot_room -= job.gpus
                    sim.move(job)  # ahead of the hysteresis line: back to Spot


class EarliestDeadlinePolicy(UniformProgressPolicy):
    """Uniform Progress on each deadline job, the queue served earliest deadline first (jobs
    without one after, in submission order): the classic deadline scheduler as a peer."""

    name = "edf"

    def order(self, job: SimJob) -> tuple[float, ...]:
        return (math.inf if job.deadline is None else job.deadline, job.submit, job.idx)
