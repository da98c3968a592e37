"""What the peers' policies share (`PeerPolicy`); each peer is a module of this package.

Common to all peers, as to Spotline: the same pools, jobs, checkpoints, restart costs and Spot
reclaims (see `model.py` and `engine.py`), and the same agent in the jobs (`VictimStop`):

- by default (`VictimStop.CHECKPOINT`, a competent operator's setup) a victim gets SIGTERM with a
  grace period at least as long as a checkpoint write (Slurm `GraceTime`, Kubernetes
  `terminationGracePeriodSeconds`, Batch/ECS `stopTimeout`), writes a checkpoint of its state
  and leaves; the preemptor waits for the write, with the GPUs it counts on set aside. Every job
  checkpoints inside a Spot notice when the write fits. Placement follows a per-class flavor
  order: critical jobs run On-Demand (as Spotline's `on_demand_classes` routes them; Spot only
  when no On-Demand pool can host them), the other classes fill the cheapest pool first, Spot
  then On-Demand, as an AWS Batch job queue does with its Spot compute environment listed first
  (SPOT_PRICE_CAPACITY_OPTIMIZED); a job whose trace says `spot_ok=false` uses only On-Demand;
- with `VictimStop.HARD_KILL` (the ablation) victims are stopped at once and resume from their
  latest periodic checkpoint, no job acts on a Spot notice (it runs until the reclaim), and every
  class fills Spot first.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spotline.sim.model import SimJob
from spotline.sim.queues import Buckets, OrderKey

if TYPE_CHECKING:
    from spotline.sim.engine import PoolState, Simulation


CRITICAL_RANK = 3


@dataclass(eq=False)
class _Waiting:
    """A preemptor waiting for its victims' checkpoint writes."""

    job: SimJob
    pool: PoolState
    victims: int
    reserved: int


class PeerPolicy:
    """What the peers share: the pool order, the queue of buckets, the engine hooks, and how a
    preemption stops its victims (`VictimStop`)."""

    name = "peer"
    acts_on_notices = False
    uses_ticks = False
    plans_when_idle = False

    def __init__(self, competent: bool = True) -> None:
        self.competent = competent
        # The agent in every job checkpoints inside a Spot notice (competent setup).
        self.acts_on_notices = competent
        self.queue = Buckets(self.bucket_key, self.order_key)
        self._sim: Simulation | None = None
        self._pool_order: list[PoolState] = []
        self._pools_for: dict[tuple[bool, int, int, str | None, bool], list[PoolState]] = {}
        # Preemptors waiting for their victims' writes (by job index), and whom each victim frees.
        self._waiting: dict[int, _Waiting] = {}
        self._draining: dict[int, _Waiting] = {}

    @property
    def sim(self) -> Simulation:
        assert self._sim is not None, "attach the policy to a simulation first"
        return self._sim

    def attach(self, sim: Simulation) -> None:
        self._sim = sim
        # Reserved blocks first (prepaid; as a Karpenter NodePool of higher weight, or the first
        # compute environment of a Batch job queue, takes them), then Spot, then On-Demand.
        reserved = sorted((p for p in sim.pools if p.pool.is_reserved), key=lambda p: p.name)
        spot = sorted((p for p in sim.pools if p.is_spot), key=lambda p: (p.pool.price, p.name))
        on_demand = sorted(
            (p for p in sim.pools if not p.is_spot and not p.pool.is_reserved),
            key=lambda p: (p.pool.price, p.name),
        )
        self._pool_order = reserved + spot + on_demand

    def bucket_key(self, job: SimJob) -> Hashable:
        return (job.gpus, job.nodes, job.spot_ok, job.gpu_type, job.rank == CRITICAL_RANK)

    def order_key(self, job: SimJob) -> OrderKey:
        return (job.submit,)

    def pools_for(self, job: SimJob) -> list[PoolState]:
        """The pools `job` may use, in its class's flavor order (cheapest first; critical jobs
        On-Demand only in the competent setup, unless no On-Demand pool hosts them)."""
        critical = self.competent and job.rank == CRITICAL_RANK
        key = (job.spot_ok, job.gpus, job.nodes, job.gpu_type, critical)
        pools = self._pools_for.get(key)
        if pools is None:
            pools = [p for p in self._pool_order if p.accepts(job)]
            if critical:
                pools = [p for p in pools if not p.is_spot] or pools
            self._pools_for[key] = pools
        return pools

    def fitting_pool(self, job: SimJob) -> PoolState | None:
        for ps in self.pools_for(job):
            if ps.demand(job) <= ps.free:
                return ps
        return None

    def any_free(self) -> bool:
        return any(ps.free > 0 for ps in self._pool_order)

    def on_pending(self, job: SimJob) -> bool:
        self.queue.add(job)
        return True

    def on_leaving(self, job: SimJob) -> None:
        """A Spot notice: the job checkpoints (the engine's doing); nothing to track."""

    def on_released(self, job: SimJob) -> None:
        """A victim that a preemptor waited for has left: once the last one has, the preemptor
        starts on the GPUs they freed and those set aside for it."""
        waiting = self._draining.pop(job.idx, None)
        if waiting is None:
            return
        waiting.victims -= 1
        if waiting.victims > 0:
            # Its GPUs stay set aside for the preemptor until the last victim has left.
            waiting.reserved += job.held
            waiting.pool.reserved += job.held
            return
        del self._waiting[waiting.job.idx]
        waiting.pool.reserved -= waiting.reserved
        if waiting.pool.demand(waiting.job) > waiting.pool.free:
            # A Spot capacity shortage took the pool's GPUs meanwhile: no launch finds capacity,
            # and the preemptor queues again (it keeps its place: the queue orders by submission).
            self.queue.add(waiting.job)
            return
        self.start(
            waiting.job,
            waiting.pool,
            f"{self.name}: admitted in {waiting.pool.name} once its victims checkpointed"
            if self.sim.logging
            else "",
        )

    def pending_count(self) -> int:
        return len(self.queue)

    def schedule(self, now: float) -> None:
        raise NotImplementedError

    def start(self, job: SimJob, ps: PoolState, reason: str) -> None:
        self.sim.start(job, ps, reason)

    def preempt(self, job: SimJob, victims: list[SimJob], ps: PoolState, why: str, admitted: str) -> None:
        """Stop `victims` in `ps` for `job` (already out of the queue) and admit it.

        Competent setup: each victim gets SIGTERM, writes a checkpoint and leaves; `job` waits
        for the last write, with the free GPUs it counts on set aside. Hard kill: the victims stop
        at once (they keep their latest periodic checkpoint) and `job` starts now."""
        sim = self.sim
        if sim.logging:
            sim.log("preempt", job.id, ps.name, [v.id for v in victims], why)
        if not self.competent:
            for victim in victims:
                sim.stop_now(victim, job)
            self.start(job, ps, admitted if sim.logging else "")
            return
        from_free = ps.demand(job) - sum(v.held for v in victims)
        reserved = max(0, from_free)
        # (Free GPUs are below 0 while the jobs on instances a Spot capacity shortage withdrew
        # leave; a preemptor whose victims cover its demand needs none of them.)
        if reserved > max(ps.free, 0) and ps.capacity < ps.pool.capacity_gpus:
            # The shortage left fewer GPUs than the policy's books: no launch would find
            # capacity, so nobody is preempted and the job queues again.
            self.queue.add(job)
            return
        if reserved > max(ps.free, 0):
            raise RuntimeError(
                f"{self.name}: {job.id} counts on {reserved} free GPUs, {ps.name} has {ps.free}"
            )
        waiting = _Waiting(job, ps, len(victims), reserved)
        ps.reserved += reserved
        self._waiting[job.idx] = waiting
        for victim in victims:
            self._draining[victim.idx] = waiting
        for victim in victims:
            sim.checkpoint_then_stop(victim, job)

    @property
    def stop_label(self) -> str:
        return (
            "SIGTERM, checkpoint in the grace period, then requeue" if self.competent else "stopped at once"
        )
