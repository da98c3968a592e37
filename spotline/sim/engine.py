"""The discrete-event core: one trace replayed through one policy.

The engine owns time, the jobs' runs, the pools' capacity, Spot interruptions and the
accounting; a policy (`Policy`) owns its queue and decides, in `schedule(now)`, whom to start and
whom to stop, through `start`, `stop_now` and `checkpoint_then_stop`.

Events at one timestamp are applied together (finishes and departures first, then Spot notices,
then arrivals), then at most one scheduling pass runs, and only if demand or capacity changed or a
periodic tick is due (ticks run only while jobs wait, for the policies whose priorities move with
time). A submission that queues behind what the policy's pass reads (Spotline reads a bounded
window of each class) is no change for the pass, and runs none.

Spot interruptions: each Spot pool has its instances reclaimed as a Poisson process of rate
lambda x instances (lambda from the advisor band, see `pools.py`), drawn from the seed alone, so
every policy sees the same reclaims at the same times. A reclaim hits one instance: the running
jobs are laid out on the pool's instances in start order (as Batch packs them), and the jobs on
that instance get the 2-minute notice; a reclaim of an instance nobody uses hits nobody (Batch
had scaled it in). The pool keeps its size (Batch replaces the instance).

Spot capacity shortages (`SimSettings.shortage_rate_per_day`, 0 by default): each Spot pool has
shortage periods, a Poisson process drawn from the seed alone (one period at a time). A period
withdraws `shortage_share` of the pool's instances, the last ones in packing order: the jobs on
them get the 2-minute notice, as in a reclaim, and the pool's capacity stays that much smaller
until the period ends, so a launch beyond it finds no capacity. Every policy sees the pool's
current capacity (`PoolState.capacity`).

Trace-driven Spot pools (`spot_zones.py`, the default Spot model): a pool given a `ZoneCapacity`
has its capacity set from its availability trace at t = 0 and at every tick where the trace's
count (mapped onto the pool's instances) changes. A drop withdraws the instances beyond the new
capacity, the last ones in packing order, as a shortage does (their jobs get the 2-minute notice);
a rise gives them back. A launch beyond the capacity finds none (none at all at 0). When nothing
runs, nothing arrives and the last pass started nothing, the run ends only once a full trace
cycle has passed that way (capacity may still come back before).
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from spotline.domain.models import Pool
from spotline.sim import accounts as acc
from spotline.sim.accounts import Accounts
from spotline.sim.blocks import BlockAccount
from spotline.sim.model import Exit, Phase, SimJob, SimSettings
from spotline.sim.spot_zones import ZoneCapacity

DecisionSink = Callable[[dict[str, Any]], None]

# Event kinds, in the order events of one timestamp are applied.
_FINISH = 0
_LEAVE = 1
_NOTICE = 2
_SHORTAGE = 3
_CAPACITY = 4
_TICK = 5
_BLOCK = 6


class PreemptionCycle(RuntimeError):
    """A policy preempts the same job again and again before it makes any progress: the run
    can never finish (for instance Kueue's borrowWithinCohort with victims stopped at once, where
    two queues take the same GPUs back from each other at every pass)."""


class Policy(Protocol):
    """A scheduling policy as the engine drives it."""

    name: str
    # Checkpoints inside a Spot notice (when a write fits) instead of running on until reclaimed.
    acts_on_notices: bool
    # Priorities move with time (aging, fair-share), so a periodic pass may change decisions.
    uses_ticks: bool
    # Passes may act on running jobs alone (Spotline moving jobs to Spot): a pass runs after a
    # change, and ticks run while jobs run, even with nothing pending.
    plans_when_idle: bool

    def attach(self, sim: Simulation) -> None: ...

    def on_pending(self, job: SimJob) -> bool:
        """`job` entered the queue: submitted, or requeued after a stop. False when a pass
        would read nothing new because of it (it queues behind what a pass reads)."""
        ...

    def on_leaving(self, job: SimJob) -> None:
        """`job` started to leave because of a Spot notice (only for policies acting on them)."""
        ...

    def on_released(self, job: SimJob) -> None:
        """`job` gave its GPUs back (finished, or stopped and about to be requeued)."""
        ...

    def pending_count(self) -> int: ...

    def schedule(self, now: float) -> None: ...


@dataclass(eq=False)
class PoolState:
    """A pool as the simulation runs it."""

    index: int
    pool: Pool
    capacity: int
    used: int = 0
    # GPUs set aside for a preemptor waiting for its victims' checkpoints (peers; `free`
    # leaves them out, so no other job takes them meanwhile).
    reserved: int = 0
    # Jobs holding GPUs here, in start order (the packing order of the instances).
    running: dict[int, SimJob] = field(default_factory=dict)
    # GPUs held by RUNNING jobs of each priority rank (low 0 ... critical 3); a job on its way
    # out (checkpointing for a preemptor or a Spot notice) is no longer counted.
    held_by_rank: list[int] = field(default_factory=lambda: [0, 0, 0, 0])
    held_gpu_s: float = 0.0
    window_gpu_s: float = 0.0

    @property
    def name(self) -> str:
        return self.pool.name

    @property
    def free(self) -> int:
        return self.capacity - self.used - self.reserved

    @property
    def is_spot(self) -> bool:
        return self.pool.is_spot

    def demand(self, job: SimJob) -> int:
        """GPUs `job` takes here: a gang job takes whole instances."""
        return job.nodes * self.pool.gpus_per_node if job.nodes > 1 else job.gpus

    def accepts(self, job: SimJob) -> bool:
        """`job` may ever run here: its Spot preference allows the pool, and the pool hosts it."""
        return (job.spot_ok or not self.pool.is_spot) and self.hosts(job)

    def hosts(self, job: SimJob) -> bool:
        """The job's shape and GPU type fit this pool at all (capacity aside); a gang job only
        On-Demand (`Pool.can_host`: AWS Batch runs no multi-node parallel job on Spot)."""
        if job.gpu_type is not None and job.gpu_type != self.pool.gpu_type:
            return False
        if job.nodes > 1 and self.pool.is_spot:
            return False
        if job.nodes == 1 and job.gpus > self.pool.gpus_per_node:
            return False
        return self.demand(job) <= self.pool.capacity_gpus


@dataclass
class Sample:
    t: float
    used_gpus: int
    queued_jobs: int


def _since_checkpoint(lost: float, restart: float, saved: bool) -> float:
    """Of a run's `lost` GPU-seconds, what the control plane charges as lost: the time since the
    run's latest durable checkpoint, a periodic one or one written as it leaves (a run that saved
    counts its restart as run time), or the whole run when it saved none."""
    return lost - restart if saved else lost


class Simulation:
    """One policy replaying one trace. Build it, call `run()`, read the jobs and pools."""

    # Preemptions of one job in a row, each before its run made any progress, after which the
    # run is stopped as a preemption cycle. Spotline's protection period rules these out; a peer
    # in a cycle repeats it at every pass while no job of the cycle progresses. Kueue with
    # borrowWithinCohort and victims stopped at once has cycles that an outside event breaks
    # after about a thousand rounds (seen on the ablation sample, seed 3), and one that ran past
    # 40,000 rounds and half an hour of CPU without an end: the bound lies well above the first.
    MAX_FUTILE_PREEMPTIONS = 10_000

    def __init__(
        self,
        jobs: list[SimJob],
        pools: list[Pool],
        policy: Policy,
        settings: SimSettings,
        seed: int,
        sink: DecisionSink | None = None,
        record_series: bool = False,
        nominal: dict[str, int] | None = None,
        zones: dict[str, ZoneCapacity] | None = None,
    ) -> None:
        self.jobs = jobs
        self.pools = [PoolState(i, p, p.capacity_gpus) for i, p in enumerate(pools)]
        self.policy = policy
        self.settings = settings
        self.seed = seed
        self.sink = sink
        self.logging = sink is not None
        self.record_series = record_series
        self.series: list[Sample] = []
        self.now = 0.0
        # The arrival window, from the first submission to the last (utilization is measured there).
        self.window_start = jobs[0].submit if jobs else 0.0
        self.window_end = jobs[-1].submit if jobs else 0.0
        self.events = 0
        self.passes = 0
        self.preemptions = 0
        self.interruptions = 0
        self.moves = 0
        # Lost GPU-seconds at the price of the pool where they were held (On-Demand = 1).
        self.priced_lost_gpu_s = 0.0
        # Lost GPU-seconds as the control plane counts them (`_since_checkpoint`).
        self.lost_since_checkpoint_gpu_s = 0.0
        # Held GPU-seconds at each pool's price, per team (On-Demand GPU-seconds: On-Demand = 1).
        self.team_cost_gpu_s: dict[str, float] = {}
        self.running_jobs = 0
        self.done_jobs = 0
        self._heap: list[tuple[float, int, int, Any, int]] = []
        self._seq = 0
        self._start_seq = 0
        self._tick_due = math.inf
        self._dirty = False
        self._started_in_pass = 0
        self._shortages = [
            (ps, random.Random(f"spotline-sim:{seed}:shortage:{ps.name}"))
            for ps in self.pools
            if ps.is_spot and settings.shortage_rate_per_day > 0 and ps.capacity >= ps.pool.gpus_per_node
        ]
        # Capacity changes so far (a policy that caches pool sizes compares this count).
        self.capacity_changes = 0
        self._reclaims = [
            (ps, random.Random(f"spotline-sim:{seed}:interrupt:{ps.name}"))
            for ps in self.pools
            if ps.is_spot and ps.pool.interruption_rate_per_hour > 0 and ps.capacity >= ps.pool.gpus_per_node
        ]
        # Trace-driven Spot pools (their capacity follows `ZoneCapacity`), and when the run last
        # became idle with jobs waiting (see `run`).
        self._zones = [(ps, zones[ps.name]) for ps in self.pools if zones and ps.name in zones]
        self._idle_since: float | None = None
        # With elastic jobs: GPU-seconds of the pools' current capacity that nobody held, within
        # the arrival window (`spotline.sim.elastic`).
        self._count_idle = settings.elastic_share > 0
        self.idle_gpu_s = 0.0
        # Resizes under way: job idx -> (GPUs, nodes, what to call once it restarts).
        self._resizes: dict[int, tuple[int, int, Callable[[SimJob], None]]] = {}
        for ps, zone in self._zones:
            ps.capacity = zone.gpus_at_tick(0)
        if any(ps.capacity != ps.pool.capacity_gpus for ps, _ in self._zones):
            self.capacity_changes += 1
        # Reserved blocks (`blocks.py`): their lifecycle and their account; None without any.
        self.blocks = BlockAccount.of(self)
        if self.blocks is not None:
            self.capacity_changes += 1
        policy.attach(self)
        # The loss and wait accounts (`accounts.py`; `nominal`: the teams' quotas, for waits).
        self.accounts = Accounts(self, nominal)

    # --- the loop ---------------------------------------------------------------------------

    def run(self) -> Simulation:
        jobs = self.jobs
        n = len(jobs)
        heap = self._heap
        for ps, rng in self._reclaims:
            self._next_reclaim(ps, rng, 0.0)
        for ps, rng in self._shortages:
            self._next_shortage(ps, rng, 0.0)
        for ps, zone in self._zones:
            self._next_capacity(ps, zone, 0)
        blocks = self.blocks
        if blocks is not None:
            blocks.schedule(lambda at, token, block: self._push(at, _BLOCK, block, token))
        arrival = 0
        policy = self.policy
        while True:
            next_arrival = jobs[arrival].submit if arrival < n else math.inf
            t = heap[0][0] if heap else math.inf
            if next_arrival < t:
                t = next_arrival
            if t == math.inf:
                break
            if self._count_idle:
                self._add_idle(t)
            self.now = t
            while heap and heap[0][0] == t:
                _, kind, _, payload, token = heapq.heappop(heap)
                self.events += 1
                if kind == _FINISH:
                    self._on_finish(payload, token)
                elif kind == _LEAVE:
                    self._on_leave(payload, token)
                elif kind == _NOTICE:
                    self._on_reclaim(payload, token)
                elif kind == _SHORTAGE:
                    self._on_shortage(payload, token)
                elif kind == _CAPACITY:
                    self._on_capacity(payload, token)
                elif kind == _BLOCK:
                    assert blocks is not None
                    blocks.on_event(payload, token)
                elif t == self._tick_due:  # (an earlier wake-up may have replaced this tick)
                    self._tick_due = math.inf
                    self._dirty = True
            while arrival < n and jobs[arrival].submit == t:
                job = jobs[arrival]
                arrival += 1
                self.events += 1
                job.enqueued = t
                self.accounts.enqueued(job, t)
                if blocks is not None:
                    blocks.enqueued(job)
                if policy.on_pending(job):
                    self._dirty = True
            if self._dirty:
                self._dirty = False
                self._started_in_pass = 0
                if policy.pending_count() > 0 or policy.plans_when_idle:
                    self.passes += 1
                    policy.schedule(t)
                    self.accounts.classify(t)
                if self.record_series:
                    self._sample(t)
            if blocks is not None:
                blocks.observe(t)
            pending = policy.pending_count()
            wanted = pending or (policy.plans_when_idle and self.running_jobs > 0)
            if wanted and policy.uses_ticks and self._tick_due == math.inf:
                self._tick_due = t + self.settings.tick_s
                self._push(self._tick_due, _TICK, None, 0)
            if arrival >= n and self.running_jobs == 0 and (pending == 0 or self._started_in_pass == 0):
                # Everything finished, or what waits can never start (nothing runs, nothing
                # arrives, and the last pass started nothing; with trace-driven pools, for a
                # whole trace cycle, as their capacity may come back).
                if blocks is not None and pending and blocks.opens_later(t):
                    pass  # (a block's capacity is still to come)
                elif pending == 0 or not self._zones:
                    break
                if self._idle_since is None:
                    self._idle_since = t
                elif t - self._idle_since > max(zone.cycle_s for _, zone in self._zones):
                    break
            else:
                self._idle_since = None
        return self

    def _push(self, t: float, kind: int, payload: Any, token: int) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, kind, self._seq, payload, token))

    def _sample(self, t: float) -> None:
        used = sum(ps.used for ps in self.pools)
        self.series.append(Sample(t, used, self.policy.pending_count()))

    # --- what policies call -----------------------------------------------------------------

    def start(self, job: SimJob, ps: PoolState, reason: str = "") -> None:
        """Start (or resume) `job` in `ps` now."""
        now = self.now
        demand = ps.demand(job)
        if demand > ps.free:
            raise RuntimeError(
                f"{self.policy.name}: {job.id} needs {demand} GPUs, {ps.name} has {ps.free} free"
            )
        job.phase = Phase.RUNNING
        job.run_id += 1
        job.run_start = now
        job.run_base = job.saved
        job.run_overhead = job.restart if (job.preemptions or job.interruptions or job.moves) else 0.0
        job.pool = ps.index
        job.held = demand
        self._start_seq += 1
        job.start_seq = self._start_seq
        job.leave_at = math.inf
        job.leave_saved = None
        job.doomed_at = math.inf
        if job.first_start is None:
            job.first_start = now
        job.queued_s += now - job.enqueued
        self.accounts.started(job, now)
        if self.blocks is not None:
            self.blocks.started(job)
        ps.used += demand
        ps.held_by_rank[job.rank] += demand
        ps.running[job.idx] = job
        self.running_jobs += 1
        self._started_in_pass += 1
        self._push(job.end_if_undisturbed, _FINISH, job, job.run_id)
        if self.logging:
            self.log("admit", job.id, ps.name, (), reason or f"started in {ps.name}")

    def stop_now(self, job: SimJob, preemptor: SimJob | None, reason: str = "") -> None:
        """Preempt `job` at once: it keeps its latest periodic checkpoint and is requeued now."""
        self._count_futile(job)
        job.preemptions += 1
        self.preemptions += 1
        critical = preemptor is not None and preemptor.rank == acc.CRITICAL_RANK
        job.exit_cause = acc.STOP_NOW_CRITICAL if critical else acc.STOP_NOW
        self.accounts.preempted(job, preemptor, self.now)
        self._release(job, job.durable(self.now), Exit.PREEMPTED)

    def checkpoint_then_stop(self, job: SimJob, preemptor: SimJob | None = None) -> None:
        """Preempt `job` by checkpoint-then-stop: it writes a checkpoint of its state now, holds
        its GPUs while it writes, then leaves and is requeued (`preemptor`, when named, is
        counted as waiting for the write in the wait account)."""
        if job.phase is not Phase.RUNNING:
            raise RuntimeError(f"{self.policy.name}: {job.id} is not running")
        self._count_futile(job)
        job.preemptions += 1
        self.preemptions += 1
        job.exit_cause = acc.CHECKPOINT
        self._leave_later(job, self.now + job.write, job.progress(self.now), Exit.PREEMPTED)
        self.accounts.preempted(job, preemptor, self.now)

    def move(self, job: SimJob) -> None:
        """Move `job` between Spot and On-Demand of the policy's own accord: it checkpoints as a
        preemption's victim does, leaves and is requeued, but no other job asked for its GPUs, so
        it counts as a move (`moves`), not a preemption."""
        if job.phase is not Phase.RUNNING:
            raise RuntimeError(f"{self.policy.name}: {job.id} is not running")
        self._count_futile(job)
        job.moves += 1
        self.moves += 1
        job.exit_cause = acc.MOVE
        self._leave_later(job, self.now + job.write, job.progress(self.now), Exit.PREEMPTED)

    def resize(
        self,
        job: SimJob,
        gpus: int,
        nodes: int,
        restarted: Callable[[SimJob], None],
        for_job: bool,
        reason: str = "",
    ) -> None:
        """Resize the elastic `job` in place: it writes a checkpoint of its state now, holding its
        GPUs (and, for a growth, the GPUs it grows into) for the write, then restarts in the same
        pool on `gpus` over `nodes` with its restart cost; `restarted(job)` is called then.
        `for_job`: shrunk for another job (else grown into idle GPUs), for the loss account."""
        if job.phase is not Phase.RUNNING or job.elastic is None:
            raise RuntimeError(f"{self.policy.name}: {job.id} is not a running elastic job")
        ps, now = self.pools[job.pool], self.now
        demand = nodes * ps.pool.gpus_per_node if nodes > 1 else gpus
        extra = demand - job.held
        if extra > ps.free:
            raise RuntimeError(
                f"{self.policy.name}: {job.id} grows by {extra} GPUs, {ps.name} has {ps.free} free"
            )
        if extra > 0:
            # Held from now: the run's held GPU-seconds so far are counted at its old size.
            ps.used += extra
            ps.held_by_rank[job.rank] += extra
            self.accounts.team_used[job.team] = self.accounts.team_used.get(job.team, 0) + extra
            self._uncount_held(job, ps, extra)
            job.held += extra
        job.resize_times.append(now)
        job.exit_cause = acc.SHRINK if for_job else acc.GROW
        self._resizes[job.idx] = (gpus, nodes, restarted)
        self._leave_later(job, now + job.write, job.progress(now), Exit.RESIZED)
        if self.logging:
            self.log("resize", job.id, ps.name, (), reason)

    def _add_idle(self, t: float) -> None:
        """Count the GPUs nobody holds from `now` to `t` (within the arrival window)."""
        span = min(t, self.window_end) - max(self.now, self.window_start)
        if span > 0:
            self.idle_gpu_s += span * sum(max(0, ps.capacity - ps.used) for ps in self.pools)

    def _count_absorbed(self, job: SimJob) -> None:
        """At the end of a run of an elastic job: the GPU-seconds it held above the size it grew
        from (GPUs it took because they were idle)."""
        if job.grown_from and job.gpus > job.grown_from:
            job.absorbed_gpu_s += (job.gpus - job.grown_from) * (self.now - job.run_start)

    def _uncount_held(self, job: SimJob, ps: PoolState, gpus: int) -> None:
        """Take `gpus` held since the run's start out of the held counts (`_free` counts the GPUs
        held at the run's end over the whole run)."""
        now = self.now
        ps.held_gpu_s -= gpus * (now - job.run_start)
        cost = self.team_cost_gpu_s
        cost[job.team] = cost.get(job.team, 0.0) - gpus * (now - job.run_start) * ps.pool.price
        overlap = min(now, self.window_end) - max(job.run_start, self.window_start)
        if overlap > 0:
            ps.window_gpu_s -= gpus * overlap

    def _restart_resized(self, job: SimJob, keeps: float) -> None:
        """The resize's checkpoint is written: end the run (keeping `keeps`) and restart the job
        in its pool at its new size, with its restart cost, without queueing it."""
        now = self.now
        gpus, nodes, restarted = self._resizes.pop(job.idx)
        kept = (keeps - job.run_base) / job.speed
        job.useful_gpu_s += job.gpus * kept
        lost = job.gpus * ((now - job.run_start) - kept)
        job.lost_gpu_s += lost
        ps = self.pools[job.pool]
        self.priced_lost_gpu_s += lost * ps.pool.price
        restart = job.gpus * min(job.run_overhead, now - job.run_start)
        self.accounts.lose(job, lost - restart, restart)
        self.lost_since_checkpoint_gpu_s += _since_checkpoint(lost, restart, True)  # (it wrote one)
        job.restart_cause = job.exit_cause
        job.saved = keeps
        # Count the ended run's held GPU-seconds, then hold the new size from now.
        self._uncount_held(job, ps, -job.held)
        self._count_absorbed(job)
        old = job.held
        job.gpus, job.nodes = gpus, nodes
        job.speed = (gpus / job.declared_gpus) ** self.settings.elastic_scaling
        held = ps.demand(job)
        ps.used += held - old
        ps.held_by_rank[job.rank] += held  # (`_leave_later` took the old size out)
        self.accounts.team_used[job.team] = self.accounts.team_used.get(job.team, 0) + held - old
        job.held = held
        job.phase = Phase.RUNNING
        job.run_id += 1
        job.run_start = now
        job.run_base = keeps
        job.run_overhead = job.restart
        job.leave_at = math.inf
        job.leave_saved = None
        job.doomed_at = math.inf
        self._push(job.end_if_undisturbed, _FINISH, job, job.run_id)
        self._dirty = True
        restarted(job)

    def checkpoint_then_leave(self, job: SimJob) -> None:
        """`job` leaves its reserved block before the block ends: it writes a checkpoint of its
        state now, holds its GPUs while it writes, then leaves and is requeued (no preemption)."""
        if job.phase is not Phase.RUNNING:
            raise RuntimeError(f"{self.policy.name}: {job.id} is not running")
        job.exit_cause = acc.BLOCK_END
        self._leave_later(job, self.now + job.write, job.progress(self.now), Exit.PREEMPTED)

    def stop_for_block_end(self, job: SimJob) -> None:
        """`job` is stopped as its reserved block ends (drained or terminated): it keeps its
        latest periodic checkpoint and is requeued now."""
        job.exit_cause = acc.BLOCK_END
        self._release(job, job.durable(self.now), Exit.INTERRUPTED)

    def mark_dirty(self) -> None:
        """Demand or capacity changed: a pass runs at this instant."""
        self._dirty = True

    def _count_futile(self, job: SimJob) -> None:
        """Count a preemption of `job` before its run made progress (still restoring); past
        `MAX_FUTILE_PREEMPTIONS` in a row, stop the run with `PreemptionCycle`."""
        if self.now > job.run_start + job.run_overhead:
            job.futile_preemptions = 0
            return
        job.futile_preemptions += 1
        if job.futile_preemptions >= self.MAX_FUTILE_PREEMPTIONS:
            raise PreemptionCycle(
                f"{self.policy.name}: {job.id} was preempted {job.futile_preemptions} times in a row"
                f" before making any progress (at t={self.now:.0f} s): a preemption cycle, the run"
                " cannot finish"
            )

    def wake_at(self, t: float) -> None:
        """Run a pass at `t` (coalesced with the periodic tick): for a policy that deferred work."""
        if self.now < t < self._tick_due:
            self._tick_due = t
            self._push(t, _TICK, None, 0)

    def log(
        self, action: str, job_id: str, pool: str | None, victims: tuple[str, ...] | list[str], reason: str
    ) -> None:
        if self.sink is not None:
            self.sink(
                {
                    "policy": self.policy.name,
                    "t": self.now,
                    "action": action,
                    "job_id": job_id,
                    "pool": pool,
                    "victims": list(victims),
                    "reason": reason,
                }
            )

    def running_in(self, ps: PoolState) -> Iterator[SimJob]:
        return iter(ps.running.values())

    # --- events -----------------------------------------------------------------------------

    def _leave_later(self, job: SimJob, at: float, keeps: float | None, why: Exit) -> None:
        if job.phase is Phase.RUNNING and job.leave_at == math.inf:
            self.pools[job.pool].held_by_rank[job.rank] -= job.held
        job.phase = Phase.LEAVING
        job.leave_at = at
        job.leave_saved = keeps
        job.leave_exit = why
        if at < job.end_if_undisturbed:
            self._push(at, _LEAVE, job, job.run_id)

    def _on_finish(self, job: SimJob, run_id: int) -> None:
        if job.run_id != run_id or job.phase not in (Phase.RUNNING, Phase.LEAVING):
            return
        now = self.now
        if job.end_if_undisturbed != now:
            return
        kept = (job.work - job.run_base) / job.speed  # (seconds of this run that counted)
        job.useful_gpu_s += job.gpus * kept
        if self.blocks is not None:
            self.blocks.run_ended(job, kept)
        job.lost_gpu_s += job.gpus * job.run_overhead
        self.priced_lost_gpu_s += job.gpus * job.run_overhead * self.pools[job.pool].pool.price

        if job.elastic is not None:
            self._resizes.pop(job.idx, None)  # (it finished during a resize's write)
            self._count_absorbed(job)
        self.accounts.lose(job, 0.0, job.gpus * job.run_overhead)
        job.saved = job.work
        job.finish = now
        job.phase = Phase.DONE
        self.done_jobs += 1
        self._free(job)
        self._dirty = True
        if self.logging:
            self.log("finish", job.id, self.pools[job.pool].name, (), "completed")

    def _on_leave(self, job: SimJob, run_id: int) -> None:
        if job.run_id != run_id or job.phase is Phase.DONE or job.phase is Phase.PENDING:
            return
        now = self.now
        if job.doomed_at == now:
            job.exit_cause = acc.SPOT
            job.interruptions += 1
            self.interruptions += 1
            if self.logging:
                pool = self.pools[job.pool].name
                self.log(
                    "interrupt",
                    job.id,
                    pool,
                    (),
                    "Spot instance reclaimed; resumes from its latest periodic checkpoint",
                )
            self._release(job, job.durable(now), Exit.INTERRUPTED)
            return
        if job.leave_at != now:
            return
        keeps = job.leave_saved if job.leave_saved is not None else job.durable(now)
        if job.leave_exit is Exit.RESIZED:
            self._restart_resized(job, keeps)
            return
        self._release(job, keeps, job.leave_exit, wrote=job.leave_saved is not None)

    def _release(self, job: SimJob, keeps: float, why: Exit, wrote: bool = False) -> None:
        """End the current run of `job` early, keeping `keeps` seconds of progress (`wrote`: by a
        checkpoint written as it left), and requeue."""
        now = self.now
        if now > job.run_start + job.run_overhead:
            job.futile_preemptions = 0  # (this run made progress)
        kept = (keeps - job.run_base) / job.speed  # (seconds of this run that counted)
        job.useful_gpu_s += job.gpus * kept
        if self.blocks is not None:
            self.blocks.run_ended(job, kept)
        lost = job.gpus * ((now - job.run_start) - kept)
        job.lost_gpu_s += lost
        self.priced_lost_gpu_s += lost * self.pools[job.pool].pool.price
        restart = job.gpus * min(job.run_overhead, now - job.run_start)
        self.accounts.lose(job, lost - restart, restart)
        self.lost_since_checkpoint_gpu_s += _since_checkpoint(lost, restart, wrote or kept > 0)
        job.restart_cause = job.exit_cause
        job.saved = keeps
        if job.elastic is not None:
            self._count_absorbed(job)
        job.phase = Phase.PENDING
        job.enqueued = now
        self.accounts.enqueued(job, now)
        if self.blocks is not None:
            self.blocks.enqueued(job)
        job.run_id += 1
        self._free(job)
        self._dirty = True
        self.policy.on_pending(job)

    def _free(self, job: SimJob) -> None:
        ps = self.pools[job.pool]
        now = self.now
        ps.used -= job.held
        self.accounts.left(job)
        if job.leave_at == math.inf:  # (else `_leave_later` took it out of the counts)
            ps.held_by_rank[job.rank] -= job.held
        del ps.running[job.idx]
        ps.held_gpu_s += job.held * (now - job.run_start)
        cost = self.team_cost_gpu_s
        cost[job.team] = cost.get(job.team, 0.0) + job.held * (now - job.run_start) * ps.pool.price
        overlap = min(now, self.window_end) - max(job.run_start, self.window_start)
        if overlap > 0:
            ps.window_gpu_s += job.held * overlap
        self.running_jobs -= 1
        self.policy.on_released(job)

    def _next_reclaim(self, ps: PoolState, rng: random.Random, after: float) -> None:
        instances = ps.capacity // ps.pool.gpus_per_node
        rate_per_s = ps.pool.interruption_rate_per_hour * instances / 3600.0
        at = after + rng.expovariate(rate_per_s)
        instance = int(rng.random() * instances)
        self._push(at, _NOTICE, (ps, rng), instance)

    def _on_reclaim(self, payload: tuple[PoolState, random.Random], instance: int) -> None:
        ps, rng = payload
        now = self.now
        self._next_reclaim(ps, rng, now)
        per_node = ps.pool.gpus_per_node
        low, high = instance * per_node, (instance + 1) * per_node
        offset = 0
        hit: list[SimJob] = []
        for job in ps.running.values():
            if offset >= high:
                break
            if offset + job.held > low:
                hit.append(job)
            offset += job.held
        deadline = now + self.settings.notice_s
        for job in hit:
            self._notice(job, now, deadline)

    def _next_shortage(self, ps: PoolState, rng: random.Random, after: float) -> None:
        at = after + rng.expovariate(self.settings.shortage_rate_per_day / 86400.0)
        self._push(at, _SHORTAGE, (ps, rng), 0)

    def _on_shortage(self, payload: tuple[PoolState, random.Random], withdrawn: int) -> None:
        """A shortage starts (`withdrawn` 0) or ends (the GPUs it withdrew come back)."""
        ps, rng = payload
        now = self.now
        self._dirty = True
        self.capacity_changes += 1
        if withdrawn:
            ps.capacity += withdrawn
            self._next_shortage(ps, rng, now)
            return
        per_node = ps.pool.gpus_per_node
        instances = ps.capacity // per_node
        taken = min(instances, max(1, round(instances * self.settings.shortage_share))) * per_node
        ps.capacity -= taken
        duration = rng.expovariate(1.0 / (self.settings.shortage_mean_h * 3600.0))
        self._push(now + duration, _SHORTAGE, (ps, rng), taken)
        self._withdraw(ps, now)

    def _withdraw(self, ps: PoolState, now: float) -> None:
        """The jobs on instances beyond the pool's capacity (the last ones in packing order) get
        the 2-minute notice."""
        deadline = now + self.settings.notice_s
        offset = 0
        hit: list[SimJob] = []
        for job in ps.running.values():
            if offset + job.held > ps.capacity:
                hit.append(job)
            offset += job.held
        for job in hit:
            self._notice(job, now, deadline)

    def _next_capacity(self, ps: PoolState, zone: ZoneCapacity, tick: int) -> None:
        later = zone.next_change(tick)
        if later is not None:
            self._push(later * zone.gap_s, _CAPACITY, (ps, zone), later)

    def _on_capacity(self, payload: tuple[PoolState, ZoneCapacity], tick: int) -> None:
        """A trace-driven pool's capacity changes at `tick`: a drop withdraws instances."""
        ps, zone = payload
        now = self.now
        gpus = zone.gpus_at_tick(tick)
        dropped = gpus < ps.capacity
        ps.capacity = gpus
        self._dirty = True
        self.capacity_changes += 1
        self._next_capacity(ps, zone, tick)
        if dropped:
            self._withdraw(ps, now)

    def _notice(self, job: SimJob, now: float, deadline: float) -> None:
        """The 2-minute Spot notice for the instance `job` runs on."""
        ends_by = deadline
        if self.settings.notice_requeues_every_job and self.policy.acts_on_notices:
            ends_by = min(deadline, now + job.write)  # (only a job done before its write is spared)
        if job.end_if_undisturbed <= ends_by or job.leave_at <= deadline or job.doomed_at <= deadline:
            return  # it finishes, or leaves, before the reclaim anyway
        if not self.policy.acts_on_notices:
            job.doomed_at = deadline
            self._push(deadline, _LEAVE, job, job.run_id)
            return
        job.interruptions += 1
        self.interruptions += 1
        job.exit_cause = acc.SPOT
        if job.phase is Phase.RUNNING and now + job.write <= deadline:
            self._leave_later(job, now + job.write, job.progress(now), Exit.INTERRUPTED)
            reason = "Spot interruption notice: checkpointing inside the notice, then requeued"
        else:
            # No checkpoint fits before the reclaim: it keeps its latest periodic checkpoint.
            self._leave_later(job, deadline, None, Exit.INTERRUPTED)
            reason = "Spot interruption notice: no checkpoint fits before the reclaim"
        if self.logging:
            self.log("interrupt", job.id, self.pools[job.pool].name, (), reason)
        self.policy.on_leaving(job)
