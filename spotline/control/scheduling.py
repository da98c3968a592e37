"""The scheduling pass: read a bounded window, let the domain plan, act on each decision.

Reads per pass: one Query with Limit per priority class and one for the nearest deadlines
(`pass_window` items each at most: `window_per_class`, or as many as the GPUs free when more,
up to `MAX_WINDOW_PER_CLASS`), plus the jobs holding GPUs (bounded by the cluster's size).
Nothing scales with the length of the queue.

Every action is a conditional write, so a pass that races another pass (or an event handler)
loses cleanly: the decision is skipped and the next pass decides again.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field

from spotline.control.arrays import HeldResult, release_held
from spotline.control.errors import (
    CapacityExhausted,
    ConditionFailed,
    InvalidTransition,
    StaleJobError,
    StorageUnavailable,
)
from spotline.control.lifecycle import requeue_unstarted, start_disruption, stop_runs
from spotline.control.pending import StorePendingQueue
from spotline.control.plane import ControlPlane
from spotline.control.ports import PreparedTransition, execution_name
from spotline.control.records import Disruption, JobRecord, drain_target, entry_time, stored_drain_target
from spotline.control.reserved import drain_blocks
from spotline.control.spot_signals import signals as spot_signals
from spotline.control.usage import budget_pass, soften
from spotline.domain import (
    PRIORITIES_HIGH_FIRST,
    Admit,
    Allocation,
    ClusterSnapshot,
    Decision,
    JobState,
    Move,
    Preempt,
    Wait,
    plan_with_stats,
)
from spotline.domain.checkpoint_cost import grace_period_s
from spotline.domain.decisions import Resize
from spotline.domain.preemption import estimated_remaining_s, lost_work_gpu_s
from spotline.domain.priority import wait_s
from spotline.domain.queue import WINDOW_PER_CLASS
from spotline.domain.usage import decayed_usage_gpu_s

logger = logging.getLogger(__name__)


@dataclass
class PassResult:
    """What one pass did (the scheduler function turns it into metrics)."""

    now: float
    admitted: list[tuple[str, str]] = field(default_factory=list)  # (job id, pool)
    preempted: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)  # (preemptor, victims)
    moved: list[tuple[str, str]] = field(default_factory=list)  # (job id, Spot pool it moves to)
    resized: list[tuple[str, int]] = field(default_factory=list)  # (elastic job id, its new size)
    # Held jobs let into the queue, or cancelled by a broken dependency, before planning.
    held: HeldResult = field(default_factory=HeldResult)
    waiting: int = 0
    wait_reasons_written: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (job id, why)
    candidates: int = 0
    running: int = 0
    queue_items_read: int = 0
    active_items_read: int = 0
    # Longest wait in each class's window (the head of a class is its oldest submission).
    oldest_wait_s: dict[str, float] = field(default_factory=dict)
    window_by_class: dict[str, int] = field(default_factory=dict)
    # The pass admitted jobs and some class's window was full (jobs beyond it may fit the
    # capacity left), or it ran out of time before acting on every decision: the next pass
    # should follow at once rather than at the next trigger.
    more_work: bool = False
    # Jobs read per class this pass (`pass_window`), and the decisions it left to the next pass
    # when its time ran out (`act_until`).
    window: int = 0
    left_for_next_pass: int = 0
    # This month's spend of each team with a budget (dollars).
    spend_usd: dict[str, float] = field(default_factory=dict)
    # (job id, why) of each unreadable record met and quarantined: left out, never planned.
    quarantined: list[tuple[str, str]] = field(default_factory=list)
    # Jobs whose reserved block ends soon, started checkpointing to leave it (`reserved`).
    drained: list[str] = field(default_factory=list)


def team_usage_gpu_hours(
    cp: ControlPlane, active: list[JobRecord], now: float, shown: dict[str, float] | None = None
) -> dict[str, float]:
    """Each team's decayed GPU usage at `now` (fair-share's input): its completed runs from the
    ledger's usage buckets (one BatchGetItem per 100 teams) plus its jobs holding GPUs now.
    `shown` gets the usage the latest pass kept for the API (same BatchGetItem)."""
    teams = {t.team for t in cp.config.teams} | {r.team for r in active}
    buckets = cp.ledger.usage_buckets(teams, shown=shown)
    running: dict[str, list[tuple[int, float]]] = {}
    for r in active:
        if r.gpus_held > 0 and r.admitted_at is not None:
            running.setdefault(r.team, []).append((r.gpus_held, r.admitted_at))
    half_life = cp.config.scheduler.usage_half_life_s
    return {
        team: decayed_usage_gpu_s(buckets.get(team, {}), running.get(team, ()), now, half_life) / 3600.0
        for team in sorted(teams)
    }


def build_snapshot(
    cp: ControlPlane,
    active: list[JobRecord],
    now: float,
    over_budget: frozenset[str] = frozenset(),
    shown: dict[str, float] | None = None,
) -> ClusterSnapshot:
    """What the pass plans from; the teams `over_budget` (soft threshold) count with a lower
    fair-share weight (`spotline.control.usage`). `shown`: see `team_usage_gpu_hours`."""
    pools = cp.config.pools_by_name
    allocations = [
        Allocation(job=r.job, pool=r.job.pool, gpus=r.gpus_held, draining_for=drain_target(r.draining_for))
        for r in active
        if r.job.pool in pools and r.gpus_held > 0
    ]
    return ClusterSnapshot.build(
        pools=cp.config.pools,
        allocations=allocations,
        quotas=soften(cp.config.teams, over_budget) if over_budget else cp.config.teams,
        usage_gpu_hours=team_usage_gpu_hours(cp, active, now, shown),
        spot=spot_signals(cp, now),
    )


# The fair-share usage kept for the API is rewritten when a team's moved by more than this
# fraction of it, or this many GPU-hours, whichever is more (or a team came or went).
USAGE_SHOWN_RELATIVE = 0.01
USAGE_SHOWN_ABSOLUTE_GPU_H = 0.01


def usage_moved(shown: dict[str, float], usage: dict[str, float]) -> bool:
    """Whether the fair-share usage kept for the API (`shown`) is no longer `usage`: its decay
    moves it a little at every pass, so only a change past the tolerance counts."""
    if shown.keys() != usage.keys():
        return True
    return any(
        abs(usage[team] - value) > max(USAGE_SHOWN_ABSOLUTE_GPU_H, USAGE_SHOWN_RELATIVE * abs(value))
        for team, value in shown.items()
    )


# The most a pass reads per class when many GPUs are free: what one pass reads and acts on stays
# bounded (a Lambda's minute), while a freed cluster still fills in a few passes.
MAX_WINDOW_PER_CLASS = 2048


def pass_window(snapshot: ClusterSnapshot, window_per_class: int, max_window_per_class: int) -> int:
    """How many jobs of each class (and of the nearest deadlines) a pass reads: the configured
    window, or the GPUs free in every pool together when more (each admission takes one GPU at
    least, so no more jobs than that can be admitted), capped at `max_window_per_class`. A freed
    cluster with a backlog of jobs that fit then fills in one pass instead of one window per
    pass; with nothing free the pass reads what it always read."""
    free = sum(max(0, snapshot.free_gpus(name)) for name in snapshot.pools)
    return max(window_per_class, min(free, max_window_per_class))


def scheduling_pass(cp: ControlPlane, *, act_until: float | None = None) -> PassResult:
    """One pass: admit what fits, preempt for what may, and record why the rest waits.

    `act_until` (a `time.monotonic()` instant): the pass stops acting on its decisions then,
    leaves the rest to the next pass and asks for it at once (`more_work`), so a pass that admits
    a large window ends before its function's timeout."""
    now = cp.clock()
    result = PassResult(now=now)
    # Jobs whose dependencies ended join the queue before it is read (spotline.control.arrays).
    result.held = release_held(cp, now)
    queue = StorePendingQueue(cp.jobs)
    active = cp.jobs.active(skipped=result.quarantined)
    result.active_items_read = len(active)
    active_by_id = {r.id: r for r in active}
    over_budget = budget_pass(cp, active, now, result.spend_usd)
    shown: dict[str, float] = {}
    snapshot = build_snapshot(cp, active, now, frozenset(over_budget), shown)
    # What the API shows as a job's effective priority uses the usage of a recent pass: written
    # when it moved, so a pass that changes nothing writes nothing.
    if usage_moved(shown, snapshot.usage_gpu_hours):
        cp.ledger.put_fairshare_usage(snapshot.usage_gpu_hours, now)

    window = pass_window(snapshot, WINDOW_PER_CLASS, MAX_WINDOW_PER_CLASS)
    result.window = window
    decisions, stats = plan_with_stats(
        snapshot, queue, now, cp.config.scheduler, cp.rng, window_per_class=window
    )
    result.candidates = stats.candidates_examined
    result.running = stats.running_considered
    result.queue_items_read = queue.items_read
    result.quarantined += queue.quarantined
    for record in queue.records.values():
        name = record.job.priority.value
        result.window_by_class[name] = result.window_by_class.get(name, 0) + 1
        result.oldest_wait_s[name] = max(result.oldest_wait_s.get(name, 0.0), wait_s(record.job, now))
    for priority in PRIORITIES_HIGH_FIRST:
        result.window_by_class.setdefault(priority.value, 0)

    # Each team's GPUs as this pass counts them (its snapshot, then its own admissions): an
    # admission within the team's nominal quota reads no ledger counters (`admit`).
    team_held = snapshot.team_usage()
    progressed = False  # out of time after acting on some decisions: the next pass continues
    # Its Job State Changed events go ten to a PutEvents call, the rest when it ends.
    batch = AdmissionBatch(cp, now, active_by_id, team_held, result)
    with cp.publisher.batched():
        for done, decision in enumerate(decisions):
            if act_until is not None and time.monotonic() >= act_until:
                # Out of time: what is left is planned again by the next pass, from fresh reads. A
                # pass that could act on nothing asks for no next pass (that one would fare no
                # better): the next trigger or tick runs it.
                progressed = done > 0
                result.left_for_next_pass = len(decisions) - done
                break
            # (A move's job is a running one, not one of the queue's.)
            moving = isinstance(decision, (Move, Resize))
            subject = active_by_id.get(decision.job.id) if moving else queue.records[decision.job.id]
            if subject is None:
                continue
            if isinstance(decision, Admit) and batch.add(subject, decision):
                continue
            batch.flush()  # decisions are carried out in the planner's order
            act(cp, subject, decision, active_by_id, team_held, result, now=now)
        batch.flush()
    # Jobs in reserved blocks that end soon checkpoint and leave, planned from the known end.
    result.drained = drain_blocks(cp, snapshot, now)
    full = any(n >= window for n in result.window_by_class.values())
    # Jobs let in (or a chain cancelled) by this pass: the queue index may show them only to the
    # next read (GSI reads are eventually consistent), and a long chain ends a few rounds a pass.
    changed_held = bool(result.held.released or result.held.cancelled)
    result.more_work = progressed or (bool(result.admitted) and full) or changed_held
    return result


def act(
    cp: ControlPlane,
    record: JobRecord,
    decision: Decision,
    active_by_id: dict[str, JobRecord],
    team_held: dict[str, int],
    result: PassResult,
    *,
    now: float,
) -> None:
    """Carry out one of a pass's decisions into `result`. `team_held`: each team's GPUs as the
    pass counts them, grown by its admissions (`admit`'s usage hint). A lost race is skipped:
    the next pass decides again from fresh reads."""
    try:
        if isinstance(decision, Admit):
            admitted = admit(
                cp,
                record,
                decision.pool,
                decision.reason,
                now=now,
                team_usage_hint=team_held.get(record.team, 0),
            )
            team_held[record.team] = team_held.get(record.team, 0) + admitted.gpus_held
            result.admitted.append((record.id, decision.pool))
        elif isinstance(decision, Preempt):
            victims = preempt(cp, record, decision, active_by_id, now=now)
            result.preempted.append((record.id, victims))
            leaving = f"waiting for {len(victims)} preempted job(s) to checkpoint and leave"
            if note_wait(cp, record, leaving, now=now):
                result.wait_reasons_written += 1
        elif isinstance(decision, Move):
            if move(cp, record, decision, now=now):
                result.moved.append((record.id, decision.pool))
        elif isinstance(decision, Resize):
            if grow(cp, record, decision, now=now):
                result.resized.append((record.id, decision.to_gpus))
        elif isinstance(decision, Wait):
            result.waiting += 1
            if note_wait(cp, record, decision.reason, now=now):
                result.wait_reasons_written += 1
    except (StaleJobError, CapacityExhausted, InvalidTransition, ConditionFailed) as error:
        # Lost a race (or the ledger disagrees with the snapshot).
        logger.info("decision skipped", extra={"job_id": record.id, "why": str(error)})
        result.skipped.append((record.id, str(error)))


def admit(
    cp: ControlPlane,
    record: JobRecord,
    pool_name: str,
    reason: str,
    *,
    now: float,
    team_usage_hint: int | None = None,
) -> JobRecord:
    """PENDING -> ADMITTED with the pool and team ledger reservation in the same transaction
    (the pool's capacity and the team's quota, borrowing included, as the planner counts it:
    `LedgerRepository.reserve_items`), then start the launch workflow (submit to the pool's
    Batch job queue).

    `team_usage_hint` (the pass's count of the team's GPUs): within the team's nominal quota the
    reservation reads no counters; where the team's counter refuses it (the hint was low: a
    stale index, drift), the reservation is made again from a strongly consistent read, as
    without a hint."""
    pool = cp.config.pools_by_name[pool_name]
    demand = pool.demand_gpus(record.job)

    def reserve_and_commit(hint: int | None) -> JobRecord:
        reserve = cp.ledger.reserve_items(
            pool=pool_name,
            capacity_gpus=pool.capacity_gpus,
            team=record.team,
            gpus=demand,
            quotas=cp.config.teams_by_name,
            team_usage_hint=hint,
        )
        prepared = _admission(cp, record, pool_name, demand, reason, now)
        cp.jobs.commit_together([prepared], *reserve)
        return prepared.new

    try:
        admitted = reserve_and_commit(team_usage_hint)
    except CapacityExhausted:
        if team_usage_hint is None:
            raise
        admitted = reserve_and_commit(None)
    _start_launch(cp, admitted, pool_name)
    return admitted


def _admission(
    cp: ControlPlane, record: JobRecord, pool_name: str, demand: int, reason: str, now: float
) -> PreparedTransition:
    """PENDING -> ADMITTED in `pool_name`, holding `demand` GPUs, as transaction items. The pass
    read its clock before the queue: a job written since is admitted at its own last stamp."""
    now = entry_time(record, now)
    return cp.jobs.prepare_transition(
        record,
        JobState.ADMITTED,
        reason,
        now=now,
        job={"pool": pool_name},
        # A new run (RUN_IDENTITY): its id is fixed here, and its progress starts afresh.
        changes={
            "gpus_held": demand,
            "admitted_at": now,
            "wait_reason": None,
            "wait_reason_at": None,
            "run": record.run + 1,
            "step": None,
            "last_heartbeat_at": None,
        },
    )


def _start_launch(cp: ControlPlane, admitted: JobRecord, pool_name: str) -> None:
    """Start the launch workflow of an admitted job (its name makes the start exactly-once)."""
    try:
        cp.workflows.start(
            cp.settings.state_machine_arn("launch"),
            execution_name("launch", admitted.id, admitted.version),
            {"job_id": admitted.id, "version": admitted.version, "run": admitted.run, "pool": pool_name},
        )
    except Exception:
        # The job stays ADMITTED without a Batch job; the reconciler requeues it after
        # LAUNCH_TIMEOUT_S.
        logger.exception("launch workflow not started", extra={"job_id": admitted.id})


# TransactWriteItems takes at most 100 items.
MAX_TRANSACTION_ITEMS = 100


@dataclass
class AdmissionBatch:
    """A pass's consecutive admissions, committed together: the jobs' transitions and the
    counters' reservations in one transaction of at most `MAX_TRANSACTION_ITEMS` items (a pool's
    counter and a team's take the sum of their jobs' GPUs, under the same limits as one at a
    time). A freed cluster then fills with a transaction per few dozen jobs instead of one per
    job, and the pool's counter, which every admission writes, is written once per batch.

    Only admissions within their team's nominal quota join (as the pass counts the team's GPUs);
    a borrowing admission is made alone, reading the counters (`admit`). Where the transaction
    is refused (a job changed since the pass read it, a counter disagrees with the snapshot,
    a conflict), each job is admitted alone, so one lost race skips that job only."""

    cp: ControlPlane
    now: float
    active_by_id: dict[str, JobRecord]
    team_held: dict[str, int]
    result: PassResult
    pending: list[tuple[JobRecord, Admit, PreparedTransition, int]] = field(default_factory=list)
    items: int = 0
    # What the gathered admissions take of each pool's and each team's counter: (GPUs, admissions).
    pools: dict[str, tuple[int, int]] = field(default_factory=dict)
    teams: dict[str, tuple[int, int]] = field(default_factory=dict)

    def add(self, record: JobRecord, decision: Admit) -> bool:
        """Gather an admission (after committing what is gathered when this one would not fit
        in its transaction); False where it must be made alone."""
        pool = self.cp.config.pools_by_name.get(decision.pool)
        if pool is None:
            return False
        demand = pool.demand_gpus(record.job)
        quota = self.cp.config.teams_by_name.get(record.team)
        in_batch = self.teams.get(record.team, (0, 0))[0]
        if quota is not None and self.team_held.get(record.team, 0) + in_batch + demand > quota.nominal_gpus:
            return False
        try:
            prepared = _admission(self.cp, record, decision.pool, demand, decision.reason, self.now)
        except InvalidTransition:
            return False
        counters = len(self.pools) + len(self.teams)
        counters += (decision.pool not in self.pools) + (record.team not in self.teams)
        if self.items + len(prepared.items) + counters > MAX_TRANSACTION_ITEMS:
            self.flush()
        self.pending.append((record, decision, prepared, demand))
        self.items += len(prepared.items)
        for totals, key in ((self.pools, decision.pool), (self.teams, record.team)):
            gpus, admissions = totals.get(key, (0, 0))
            totals[key] = (gpus + demand, admissions + 1)
        return True

    def flush(self) -> None:
        """Commit what is gathered, then start each job's launch workflow."""
        pending, self.pending, self.items = self.pending, [], 0
        pools, self.pools = self.pools, {}
        teams, self.teams = self.teams, {}
        if len(pending) == 1:
            record, decision, _, _ = pending[0]
            act(self.cp, record, decision, self.active_by_id, self.team_held, self.result, now=self.now)
            return
        if not pending:
            return
        cp = self.cp
        try:
            reserve = cp.ledger.reserve_together_items(
                pools={
                    name: (gpus, cp.config.pools_by_name[name].capacity_gpus, admissions)
                    for name, (gpus, admissions) in pools.items()
                },
                teams={
                    name: (gpus, _nominal(cp, name), admissions) for name, (gpus, admissions) in teams.items()
                },
            )
            cp.jobs.commit_together([prepared for _, _, prepared, _ in pending], *reserve)
        except (StaleJobError, CapacityExhausted, ConditionFailed, StorageUnavailable) as error:
            logger.info(
                "admissions together refused; one at a time",
                extra={"jobs": len(pending), "why": str(error)},
            )
            for record, decision, _, _ in pending:
                act(cp, record, decision, self.active_by_id, self.team_held, self.result, now=self.now)
            return
        for record, decision, _, demand in pending:
            self.team_held[record.team] = self.team_held.get(record.team, 0) + demand
            self.result.admitted.append((record.id, decision.pool))
        for _, decision, prepared, _ in pending:
            _start_launch(cp, prepared.new, decision.pool)


def _nominal(cp: ControlPlane, team: str) -> int | None:
    quota = cp.config.teams_by_name.get(team)
    return None if quota is None else quota.nominal_gpus


def preempt(
    cp: ControlPlane, preemptor: JobRecord, decision: Preempt, active: dict[str, JobRecord], *, now: float
) -> tuple[str, ...]:
    """Start the checkpoint-then-preempt workflow for each victim. A victim that has not
    started yet (ADMITTED) has nothing to checkpoint and is put back in the queue at once.
    A decision without `checkpoint` (a preemptor in `stop_at_once_for`) gives the victims no
    time to checkpoint: the workflow stops them after its shortest wait (1 s) and they resume
    from their latest durable checkpoint."""
    started: list[str] = []
    for victim_id in decision.victims:
        victim = active.get(victim_id)
        if victim is None:
            continue
        # Each victim's own grace: longer for a checkpoint whose measured write needs it.
        deadline = now + grace_period_s(victim.job, cp.config.grace_period_s) if decision.checkpoint else now
        reason = f"preempted for {preemptor.id} ({preemptor.job.priority.value}): {decision.reason}"
        reason += _victim_criterion(cp, victim, now)
        shrink = next((r for r in decision.resizes if r.job.id == victim_id), None)
        if shrink is not None:
            reason = f"{shrink.reason}: checkpoint, stop, requeue at {shrink.to_gpus} GPUs; {decision.reason}"

        try:
            if victim.state is JobState.RUNNING:
                start_disruption(
                    cp,
                    victim,
                    Disruption.PREEMPT,
                    now=now,
                    deadline_at=deadline,
                    draining_for=preemptor.id,
                    reason=reason,
                    resize_to=None if shrink is None else shrink.to_gpus,
                )
            elif victim.state is JobState.ADMITTED:
                moved = requeue_unstarted(
                    cp, victim, now=now, reason=reason + " before it started", preempted=True
                )
                stop_runs(
                    cp, victim.id, moved.terminating_batch_job_ids, f"preempted for {preemptor.id} (Spotline)"
                )
            else:
                continue
        except (StaleJobError, InvalidTransition) as error:
            logger.info("victim changed; skipped", extra={"job_id": victim_id, "why": str(error)})
            continue
        started.append(victim_id)
    return tuple(started)


def grow(cp: ControlPlane, record: JobRecord, decision: Resize, *, now: float) -> bool:
    """Grow an elastic job into idle GPUs: it checkpoints, stops and is requeued at the larger
    size (`requeue_after_disruption`), keeping its place. False when it is no longer running as
    the pass saw it."""
    if record.state is not JobState.RUNNING or record.job.version != decision.job.version:
        return False
    try:
        start_disruption(
            cp,
            record,
            Disruption.PREEMPT,
            now=now,
            deadline_at=now + grace_period_s(record.job, cp.config.grace_period_s),
            draining_for=f"resize:{record.id}",
            reason=f"{decision.reason}: checkpoint, stop, requeue at {decision.to_gpus} GPUs",
            resize_to=decision.to_gpus,
        )
    except (StaleJobError, InvalidTransition) as error:
        logger.info("job changed; not grown", extra={"job_id": record.id, "why": str(error)})
        return False
    return True


def move(cp: ControlPlane, record: JobRecord, decision: Move, *, now: float) -> bool:
    """Start the checkpoint-then-preempt workflow for a job that moves from On-Demand to Spot (or,
    sent by the deadline guard, from Spot to On-Demand): it checkpoints, stops, and is requeued;
    the next pass admits it where it fits first (Spot first, unless the guard refuses it Spot).
    False when the job is no longer running as the pass saw it."""
    if record.state is not JobState.RUNNING or record.job.version != decision.job.version:
        return False
    reason = f"moving to {'Spot' if decision.to_spot else 'On-Demand'}: {decision.reason}"
    try:
        start_disruption(
            cp,
            record,
            Disruption.PREEMPT,
            now=now,
            deadline_at=now + grace_period_s(record.job, cp.config.grace_period_s),
            draining_for=stored_drain_target(decision.draining_for),
            reason=reason,
        )
    except (StaleJobError, InvalidTransition) as error:
        logger.info("job changed; not moved", extra={"job_id": record.id, "why": str(error)})
        return False
    return True


_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def wait_meaning(reason: str) -> str:
    """What a wait reason says, without its figures: the blocking pool or team and the cause stay,
    the free-GPU counts that move with every start and finish do not."""
    return _NUMBER.sub("#", reason)


def _victim_criterion(cp: ControlPlane, victim: JobRecord, now: float) -> str:
    """The numbers the victim strategies order by, for the victim's timeline (`explain`)."""
    config = cp.config.scheduler
    lost = lost_work_gpu_s(victim.job, max(victim.gpus_held, 1), now, config)
    remaining = estimated_remaining_s(victim.job, now, config)
    return (
        f"; this victim: {lost:.0f} GPU-s of unsaved work and restart, ~{remaining:.0f} s left"
        f" (strategy {config.strategy.value})"
    )


def note_wait(cp: ControlPlane, record: JobRecord, reason: str, *, now: float) -> bool:
    """Record why a job waits, with the time of the pass (`now`) that decided it, only when what
    the reason says changed (one small conditional write); a reason whose only change is a
    figure (free GPUs now) is left as written, with the time of the pass that wrote those
    figures, so a pass rewrites no unchanged item and a screen never shows figures undated. How
    long the job has waited is computed when read (the API's `waited_s`)."""
    if record.wait_reason is not None and wait_meaning(record.wait_reason) == wait_meaning(reason):
        return False
    try:
        cp.jobs.update_fields(
            record.id,
            states=[JobState.PENDING],
            version=record.version,
            set_fields={"wait_reason": reason, "wait_reason_at": now},
        )
    except StaleJobError:
        return False
    return True
