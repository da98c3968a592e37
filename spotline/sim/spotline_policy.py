"""Spotline in the simulator: every decision comes from the production `spotline.domain.plan`.

The adapter keeps what the control plane keeps: a `Job` record per job (the queue's and the
allocations' view of it), a `SortedQueue` of pending jobs maintained with add/remove, the
allocations, each team's decayed usage (fair-share), and the `Checkpoint Completed` facts
(`last_checkpoint_at`) as periodic checkpoints become durable. A pass builds a `ClusterSnapshot`
and calls `plan`; it acts on the decisions as the workflows do:

- Admit: the job starts in the pool;
- Preempt: each victim checkpoints (its state now, `write` seconds) and then leaves and is
  requeued; the preemptor waits (the plan says so) and is admitted by a later pass. A decision
  without `checkpoint` (a critical preemptor) stops the victims at once (they keep their latest
  periodic checkpoint), and a second pass at the same instant admits the preemptor, as the pass
  that the victims' Batch state changes start does in production;
- Wait: nothing.

Spot notices: a job on a reclaimed instance checkpoints inside the 2-minute notice when its write
fits, then is requeued (architecture.md: checkpoint, then requeue every job on the instance).

The Spot pools' history: the policy folds what the control plane would observe of each Spot pool
into a `spotline.domain.spot_watch.PoolWatch`, as `spotline.control.spot_signals` does, and each
pass plans from `PoolWatch.signal(now)` (`ClusterSnapshot.spot`):
- an interruption notice to one of its jobs there: capacity missing, from the notice;
- a Spot launch waiting past `SimSettings.spot_missing_after_s`: missing, from the threshold's end.
  A launch waits while the pool's capacity is 0 (the trace-driven model); the pass reads the pool
  at that size and places nothing there, so the launch that production would have made is taken
  to be waiting whenever a job in the window the pass reads could run on that pool (its nominal
  size, its Spot rules) while the capacity is 0;
- a Spot launch that starts (an admission there): capacity is there.
Never the trace itself: a drop that hits none of its jobs, or capacity that comes back while
nothing launches there, is not seen until one of those observations.

Records are built with pydantic's `model_construct` and copied with `model_copy` (no validation:
the values come from a validated trace).
"""

from __future__ import annotations

import bisect
import heapq
import random
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from spotline.domain import (
    Admit,
    Allocation,
    ClusterSnapshot,
    Decision,
    Job,
    JobSpec,
    JobState,
    Move,
    Pool,
    Preempt,
    SchedulerConfig,
    SortedQueue,
    SpotPreference,
    TeamQuota,
    plan,
)
from spotline.domain.admission import DeadlineAnswer, answer_deadline
from spotline.domain.decisions import Resize
from spotline.domain.elastic_spec import DEFAULT_COOLDOWN_S, ElasticSpec
from spotline.domain.extension import PlannerExtension
from spotline.domain.models import PRIORITIES_HIGH_FIRST, DrainTarget, SpotPoolSignal
from spotline.domain.placement import candidate_pools, spot_refusal
from spotline.domain.planner import queue_key
from spotline.domain.preemption import estimated_remaining_s
from spotline.domain.queue import WINDOW_PER_CLASS, read_window
from spotline.domain.reserved import block_drains, drain_at
from spotline.domain.runtime_history import PastRun, predict_runtime
from spotline.domain.spot_watch import PoolWatch
from spotline.sim.blocks import BlockEnd
from spotline.sim.model import Phase, SimJob, SimSettings, TeamShares
from spotline.sim.peers import estimate_model
from spotline.sim.usage import DecayedUsage

if TYPE_CHECKING:
    from spotline.sim.engine import PoolState, Simulation

# Called with each pass's time and decisions (`spotline.sim.fingerprint.DecisionDigest.observe`).
DecisionObserver = Callable[[float, Sequence[Decision]], None]


# The latest finished runs kept per history key (the control plane reads one page of 100).
HISTORY_RUNS = 100


def _history_key(record: Job) -> tuple[str, int]:
    return (record.team, record.spec.gpus)


class SpotlinePolicy:
    """Ours: priority with aging and fair-share, checkpoint-then-preempt, checkpoint resume."""

    name = "spotline"
    acts_on_notices = True
    uses_ticks = True
    # Passes at one instant: the first, and one more after victims were stopped at once.
    MAX_PASSES_AT_ONCE = 3
    # Jobs in a reserved block checkpoint and leave before it ends (`reserved.block_drains`).
    at_block_end = BlockEnd.CHECKPOINT

    def __init__(
        self,
        config: SchedulerConfig,
        shares: TeamShares,
        settings: SimSettings,
        seed: int,
        observer: DecisionObserver | None = None,
        extension: PlannerExtension | None = None,
    ) -> None:
        self.config = config
        self.observer = observer
        # A simulator variant's hooks (`spotline.sim.variants`), or None: the shipped policy.
        self.extension = extension
        self.acts_on_notices = settings.spotline_acts_on_notices
        # Moving jobs to Spot is decided about running jobs, with or without a queue.
        # So is growing elastic jobs into idle GPUs.
        self.plans_when_idle = config.move_to_spot_min_remaining_s > 0 or settings.elastic_share > 0
        self.seed = seed
        declared = settings.spotline_declared_runtimes
        self.estimates = estimate_model(settings.slurm_estimates) if declared else None
        self.quotas: dict[str, TeamQuota] = {q.team: q for q in shares.quotas()}
        self.rng = random.Random(f"spotline-sim:{seed}:policy:{self.name}")
        self.queue = SortedQueue()
        self.usage = DecayedUsage(config.usage_half_life_s)
        self.records: dict[int, Job] = {}
        # The allocations, by job id.
        self.running: dict[str, Allocation] = {}
        self.by_id: dict[str, SimJob] = {}
        self._specs: dict[int, JobSpec] = {}
        self._checkpoints: list[tuple[float, int, SimJob, int]] = []
        self._timer_seq = 0
        self._pools: dict[str, Pool] = {}
        self._capacity_seen = 0
        self._pool_states: dict[str, PoolState] = {}
        self._sim: Simulation | None = None
        # What the control plane would have seen of each Spot pool (module docstring).
        self.missing_after_s = settings.spot_missing_after_s
        self.watches: dict[str, PoolWatch] = {}
        self._launch_waits: dict[str, float] = {}
        self._signals: tuple[float, dict[str, SpotPoolSignal]] | None = None
        # Finished jobs' run times by (team, GPUs): a trace's jobs have no names to key by.
        self.history: dict[tuple[str, int], list[PastRun]] = {}

    @property
    def sim(self) -> Simulation:
        assert self._sim is not None, "attach the policy to a simulation first"
        return self._sim

    def attach(self, sim: Simulation) -> None:
        self._sim = sim
        self._pools = {ps.name: ps.pool for ps in sim.pools}
        self._pool_states = {ps.name: ps for ps in sim.pools}

    def pending_count(self) -> int:
        return len(self.queue)

    # --- the control plane's records --------------------------------------------------------

    def _spec(self, job: SimJob) -> JobSpec:
        spec = self._specs.get(job.idx)
        if spec is None:
            deadline = None if job.deadline is None else datetime.fromtimestamp(job.deadline, tz=UTC)
            spec = JobSpec.model_construct(
                name=job.id,
                priority=job.priority,
                gpus=job.gpus,
                image="trace-replay",
                command=["replay"],
                gpu_type=job.gpu_type,
                nodes=job.nodes,
                deadline=deadline,
                spot=SpotPreference.AUTO if job.spot_ok else SpotPreference.NEVER,
                checkpoint_interval_s=job.interval,
                expected_runtime_s=self._declared(job),
                max_runtime_s=None,
                elastic=None if job.elastic is None else _elastic_spec(*job.elastic),
            )
            self._specs[job.idx] = spec
        return spec

    def _declared(self, job: SimJob) -> float | None:
        """The run time the job declares: its trace's, else the estimate model's draw."""
        if self.estimates is None:
            return None
        if job.declared is not None:
            return job.declared
        return self.estimates.limit(job.id, job.work, self.seed)

    def on_pending(self, job: SimJob) -> bool:
        previous = self.records.get(job.idx)
        record = Job.model_construct(
            id=job.id,
            team=job.team,
            spec=self._spec(job),
            state=JobState.PENDING,
            version=0 if previous is None else previous.version + 1,
            submitted_at=job.submit,
            enqueued_at=job.enqueued,
            started_at=None,
            runtime_s=job.saved,
            last_checkpoint_at=None if previous is None else previous.last_checkpoint_at,
            last_checkpoint_step=None,
            last_checkpoint_uri=None,
            progress=None,
            utilization=None,
            preemptions=job.preemptions + job.moves,
            interruptions=job.interruptions,
            lost_work_s=job.lost_gpu_s / job.gpus,
            pool=None,
            # (an elastic job keeps its last resize and the size it grew from across a requeue)
            resized_at=None if previous is None else previous.resized_at,
            base_gpus=None if previous is None else previous.base_gpus,
            deadline_answer=None if previous is None else previous.deadline_answer,
        )
        if previous is None and job.deadline is not None:
            # Its deadline is answered at submission, as the control plane does (`admission`).
            answer = self._answer(record, self.sim.now)
            record = record.model_copy(update={"deadline_answer": answer})
            job.deadline_answer = answer.kind.value
        self.records[job.idx] = record
        self.by_id[job.id] = job
        self.queue.add(record)
        # A pass reads the head of each class (and the nearest deadlines): a job queued behind
        # the head changes nothing it reads.
        if job.deadline is not None:
            return True
        entries = self.queue.by_class[job.priority]
        position = bisect.bisect_left(entries, queue_key(record), key=lambda e: e[0])
        return position < WINDOW_PER_CLASS

    def _answer(self, record: Job, now: float) -> DeadlineAnswer:
        """The answer to a new job's deadline from what a pass would read now."""
        snapshot = ClusterSnapshot.model_construct(
            pools=self._pools,
            allocations=tuple(self.running.values()),
            quotas={},
            usage_gpu_hours={},
            spot={},
        )
        pending = read_window(self.queue, WINDOW_PER_CLASS)
        runtime = predict_runtime(record, self.history.get(_history_key(record), ()))
        return answer_deadline(record, runtime, snapshot, pending, now, self.config)

    def on_released(self, job: SimJob) -> None:
        del self.running[job.id]
        self.usage.change(job.team, -job.held, self.sim.now)
        if job.phase is Phase.DONE:
            # Its run time joins the history that predicts its like (`runtime_history`).
            record = self.records[job.idx]
            runs = self.history.setdefault(_history_key(record), [])
            runs.append(PastRun(runtime_s=job.work, declared_s=record.spec.expected_runtime_s))
            del runs[:-HISTORY_RUNS]
            del self.records[job.idx]
            del self.by_id[job.id]
            self._specs.pop(job.idx, None)

    def on_leaving(self, job: SimJob) -> None:
        """A Spot notice: the job checkpoints (or cannot) and leaves; nothing may pick it now."""
        record = self.records[job.idx]
        record = record.model_copy(
            update={
                "state": JobState.INTERRUPTED,
                "interruptions": job.interruptions,
                "version": record.version + 1,
            }
        )
        self.records[job.idx] = record
        allocation = self.running[job.id]
        self.observe(allocation.pool, False, self.sim.now)
        draining_for = allocation.draining_for or f"spot-reclaim:{job.id}"
        self.running[job.id] = allocation.model_copy(update={"job": record, "draining_for": draining_for})

    def _refresh_checkpoints(self, now: float) -> None:
        """Apply the `Checkpoint Completed` events of running jobs up to `now`."""
        timers = self._checkpoints
        while timers and timers[0][0] <= now:
            _, _, job, run_id = heapq.heappop(timers)
            if job.run_id != run_id or job.phase is not Phase.RUNNING:
                continue
            record = self.records[job.idx].model_copy(
                update={"last_checkpoint_at": job.last_checkpoint_at(now)}
            )
            self.records[job.idx] = record
            self.running[job.id] = self.running[job.id].model_copy(update={"job": record})
            self._timer(job, now)

    def _timer(self, job: SimJob, now: float) -> None:
        self._timer_seq += 1
        heapq.heappush(self._checkpoints, (job.next_checkpoint_at(now), self._timer_seq, job, job.run_id))

    # --- the Spot pools' history -------------------------------------------------------------

    def observe(self, pool: str, available: bool, at: float) -> None:
        """Fold an observation of a Spot pool into its watch (other pools are ignored)."""
        ps = self._pool_states.get(pool)
        if ps is None or not ps.is_spot:
            return
        watch = self.watches.get(pool)
        if watch is None:
            self.watches[pool] = PoolWatch.first(available, at)
        else:
            changed = watch.observe(available, at)
            if changed is None:
                return
            self.watches[pool] = changed
        self._signals = None

    def _watch_launches(self, now: float) -> None:
        """A Spot pool at capacity 0 with a job the pass reads that could launch there: the
        launch waits; past `missing_after_s`, the pool is seen missing from the threshold's end."""
        for ps in self.sim.pools:
            if not ps.is_spot:
                continue
            if ps.capacity > 0 or not self._would_launch(ps.pool, now):
                self._launch_waits.pop(ps.name, None)
                continue
            since = self._launch_waits.setdefault(ps.name, now)
            if now - since >= self.missing_after_s:
                self.observe(ps.name, False, since + self.missing_after_s)

    def _would_launch(self, pool: Pool, now: float) -> bool:
        """Whether a queued job in the window a pass reads may run on `pool` at its nominal size."""
        for priority in PRIORITIES_HIGH_FIRST:
            for _, job in self.queue.by_class[priority][:WINDOW_PER_CLASS]:
                if not pool.can_host(job):
                    continue
                remaining = estimated_remaining_s(job, now, self.config)
                if spot_refusal(job, pool, now, remaining, self.config) is None:
                    return True
        return False

    def spot_signals(self, now: float) -> dict[str, SpotPoolSignal]:
        """What a pass at `now` plans from: each watched Spot pool's `PoolWatch.signal`."""
        cached = self._signals
        if cached is None or cached[0] != now:
            cached = (now, {name: watch.signal(now) for name, watch in self.watches.items()})
            self._signals = cached
        return cached[1]

    # --- the pass ---------------------------------------------------------------------------

    def _pass_snapshot(self, now: float) -> ClusterSnapshot:
        """What a pass reads besides the queue."""
        return ClusterSnapshot.model_construct(
            pools=self._pools,
            allocations=tuple(self.running.values()),
            quotas=self.quotas,
            usage_gpu_hours=self.usage.gpu_hours(now),
            spot=self.spot_signals(now),
        )

    def schedule(self, now: float) -> None:
        self._refresh_checkpoints(now)
        self._watch_launches(now)
        if self.sim.capacity_changes != self._capacity_seen:
            # A Spot capacity shortage began or ended: the pass reads the pools' current size
            # (Batch reports the compute environment's instances; a launch beyond them finds none).
            self._capacity_seen = self.sim.capacity_changes
            self._pools = {
                ps.name: ps.pool.model_copy(update={"capacity_gpus": ps.capacity}) for ps in self.sim.pools
            }
        if self.sim.blocks is not None:
            self._drain_blocks(now)
        for _ in range(self.MAX_PASSES_AT_ONCE):
            stopped = False
            decisions = plan(
                self._pass_snapshot(now), self.queue, now, self.config, self.rng, extension=self.extension
            )
            if self.observer is not None:
                self.observer(now, decisions)
            for decision in decisions:
                if isinstance(decision, Admit):
                    self._admit(decision, now)
                elif isinstance(decision, Preempt):
                    self._preempt(decision)
                    stopped = stopped or not decision.checkpoint
                elif isinstance(decision, Move):
                    self._move(decision)
                elif isinstance(decision, Resize):
                    self._resize(decision)
            if not stopped:
                break
            # Victims stopped at once have left: the pass that their `Batch Job State Change`
            # events start in production admits the preemptors.
            self.sim.passes += 1
        if self.sim.blocks is not None:
            self._wake_for_drains(now)

    # --- reserved blocks ----------------------------------------------------------------------

    def on_block_warning(self, ps: PoolState) -> None:
        """A block's expiration warning (the safety net): its jobs still there checkpoint now."""
        self._drain_blocks(self.sim.now, frozenset({ps.name}))

    def _drain_blocks(self, now: float, warned: frozenset[str] = frozenset()) -> None:
        """Checkpoint and requeue the jobs whose block ends (`reserved.block_drains`), as the
        control plane does; a deadline job whose slack needs it resumes On-Demand (room held)."""
        snapshot = self._pass_snapshot(now)
        others = [p for p in self._pools.values() if not p.is_reserved]

        def placement(job: Job) -> Pool | None:
            remaining = estimated_remaining_s(job, now, self.config)
            pools = candidate_pools(job, others, now, remaining, self.config, snapshot.spot)
            return pools[0] if pools else None

        sim = self.sim
        for drain in block_drains(snapshot, now, self.config, placement, warned=warned):
            job = self.by_id[drain.job.id]
            if job.phase is not Phase.RUNNING:
                continue
            if sim.logging:
                sim.log("preempt", job.id, drain.pool, (job.id,), drain.reason)
            sim.checkpoint_then_leave(job)
            self._checkpointing(job, drain.draining_for)

    def _wake_for_drains(self, now: float) -> None:
        """A pass at the next planned drain of a job in a block."""
        soonest = min(
            (
                drain_at(allocation.job, self._pools[allocation.pool], self.config)
                for allocation in self.running.values()
                if allocation.draining_for is None and self._pools[allocation.pool].is_reserved
            ),
            default=None,
        )
        if soonest is not None and soonest > now:
            self.sim.wake_at(soonest)

    def _admit(self, decision: Admit, now: float) -> None:
        sim = self.sim
        job = self.by_id[decision.job.id]
        ps = self._pool_states[decision.pool]
        self.queue.remove(decision.job)
        sim.start(job, ps, decision.reason)
        self.observe(ps.name, True, now)
        record = decision.job.model_copy(
            update={
                "state": JobState.RUNNING,
                "started_at": now,
                "pool": ps.name,
                "version": decision.job.version + 1,
            }
        )
        self.records[job.idx] = record
        self.running[job.id] = Allocation.model_construct(
            job=record, pool=ps.name, gpus=job.held, draining_for=None
        )
        self.usage.change(job.team, job.held, now)
        self._timer(job, now)

    def _move(self, decision: Move) -> None:
        """A move to Spot: the job checkpoints and leaves as a preemption's victim does, and is
        requeued (logged as a preemption of itself, the decision log's contract)."""
        sim = self.sim
        if sim.logging:
            sim.log("preempt", decision.job.id, decision.source, (decision.job.id,), decision.reason)
        job = self.by_id[decision.job.id]
        sim.move(job)
        self._checkpointing(job, decision.draining_for)

    def _checkpointing(self, victim: SimJob, draining_for: DrainTarget) -> None:
        """Record that `victim` checkpoints before it leaves, for `draining_for`."""
        record = self.records[victim.idx]
        record = record.model_copy(
            update={
                "state": JobState.CHECKPOINTING,
                # The planner's disruption count: a move disrupts the job as a preemption does.
                "preemptions": victim.preemptions + victim.moves,
                "version": record.version + 1,
            }
        )
        self.records[victim.idx] = record
        held = self.running[victim.id]
        self.running[victim.id] = held.model_copy(update={"job": record, "draining_for": draining_for})

    def _preempt(self, decision: Preempt) -> None:
        sim = self.sim
        if sim.logging:
            sim.log("preempt", decision.job.id, decision.pool, decision.victims, decision.reason)
        preemptor = self.by_id[decision.job.id]
        shrunk = {r.job.id: r for r in decision.resizes}
        for victim_id in decision.victims:
            if victim_id in shrunk:
                self._resize(shrunk[victim_id])
                continue
            victim = self.by_id[victim_id]
            if not decision.checkpoint:
                sim.stop_now(victim, preemptor, decision.reason)
                continue
            sim.checkpoint_then_stop(victim, preemptor)
            self._checkpointing(victim, decision.job.id)

    def _resize(self, decision: Resize) -> None:
        """An elastic job's resize: it checkpoints (its allocation holds the larger size and is
        resizing) and restarts in its pool at the new size (`_resized`)."""
        sim, now = self.sim, self.sim.now
        job = self.by_id[decision.job.id]
        spec = self._spec(job).at_size(decision.to_gpus)
        self._specs[job.idx] = spec
        record = self.records[job.idx]
        base = record.base_gpus
        if decision.to_gpus > decision.from_gpus:
            base = decision.from_gpus if base is None else base
        elif base is not None and decision.to_gpus <= base:
            base = None
        record = record.model_copy(
            update={
                "state": JobState.CHECKPOINTING,
                "resized_at": now,
                "base_gpus": base,
                "version": record.version + 1,
            }
        )
        self.records[job.idx] = record
        ps = self._pool_states[decision.pool]
        demand = spec.nodes * ps.pool.gpus_per_node if spec.nodes > 1 else spec.gpus
        held = self.running[job.id]
        self.running[job.id] = held.model_copy(
            update={
                "job": record,
                "gpus": max(held.gpus, demand),
                "resize_to": demand,
                "draining_for": decision.for_job,
            }
        )
        if demand > held.gpus:
            self.usage.change(job.team, demand - held.gpus, now)
        sim.resize(job, spec.gpus, spec.nodes, self._resized, decision.for_job is not None, decision.reason)

    def _resized(self, job: SimJob) -> None:
        """A resized job restarted at its new size: its record and allocation say so."""
        now = self.sim.now
        held = self.running[job.id]
        record = self.records[job.idx].model_copy(
            update={
                "spec": self._specs[job.idx],
                # (`started_at` stays the run's: a resize renews no protection period)
                "state": JobState.RUNNING,
                "last_checkpoint_at": now,
                "version": self.records[job.idx].version + 1,
            }
        )
        self.records[job.idx] = record
        self.running[job.id] = Allocation.model_construct(
            job=record, pool=held.pool, gpus=job.held, draining_for=None, resize_to=None
        )
        self.usage.change(job.team, job.held - held.gpus, now)
        job.grown_from = record.base_gpus or 0
        self._timer(job, now)


def _elastic_spec(min_gpus: int, max_gpus: int) -> ElasticSpec:
    return ElasticSpec.model_construct(
        min_gpus=min_gpus, max_gpus=max_gpus, sizes=None, step=None, cooldown_s=DEFAULT_COOLDOWN_S
    )
