"""One scheduling pass: `plan(snapshot, queue, now, config, rng)` -> ordered decisions.

The pass reads a bounded window of the queue (`queue.read_window`: the head of each priority
class, plus the jobs with the nearest deadlines), ranks that window by effective priority
(`queue.ranked`), and for each job in turn decides, in Kueue's decide-then-act style: a short,
ordered list of checks (`_Pass.CHECKS`), each of which returns a decision (`decisions.py`) or
nothing. The first decision is the job's; a decision that takes capacity charges the pass's
working ledger at once, so one plan never over-commits a pool or a quota.

The parts live beside it: the queue and the window (`queue.py`), the decision types and the
structured wait reasons (`decisions.py`, rendered by `explain.wait_text`), the running jobs as
victims (`victims.py`, with `preemption.select_victims`), what preemptors hold while their
victims leave (`reservations.py`), and moves to Spot (`moves.py`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

from spotline.domain.admission import AnswerKind, PassHolds
from spotline.domain.config import SchedulerConfig
from spotline.domain.deadline import PassPlans
from spotline.domain.decisions import (
    Admit,
    ArrayCap,
    BehindClassHead,
    BudgetSpent,
    Decision,
    Draining,
    HeldByVariant,
    HeldForDeadlines,
    HeldForGang,
    Move,
    NoGpuType,
    NoPool,
    NoVictim,
    PlanStats,
    Preempt,
    PreemptionDelay,
    ReleaseSoon,
    Resize,
    SpareClaimed,
    Wait,
    WaitReason,
)
from spotline.domain.elastic import Shrink, growth_sizes, shrinks_for
from spotline.domain.explain import wait_text
from spotline.domain.extension import PassHooks, PlannerExtension
from spotline.domain.gang_hold import GANG_HOLD_AFTER_S, GangHold, backfill_into, hold_for
from spotline.domain.models import Allocation, ClusterSnapshot, Job, MovingTo, Pool, Priority
from spotline.domain.moves import moves_to_on_demand, moves_to_spot
from spotline.domain.placement import PassPlacement, candidate_pools, guard_refused_spot
from spotline.domain.preemption import Candidate, estimated_remaining_s, select_victims, stops_at_once
from spotline.domain.priority import PriorityScorer, fairshare_factors, wait_s
from spotline.domain.queue import (
    WINDOW_PER_CLASS,
    PendingQueue,
    SortedQueue,
    deadline_key,
    queue_key,
    ranked,
    read_window,
)
from spotline.domain.quota import quota_fits
from spotline.domain.release import PassReleases
from spotline.domain.reservations import add_spare, claim_spare, reserve_for_preemptor
from spotline.domain.reserved import admitted_text, block_text, open_blocks, reserved_pools
from spotline.domain.running import RunningIndex
from spotline.domain.victims import RunningJobs

__all__ = [
    "Admit",
    "Decision",
    "Move",
    "PendingQueue",
    "PlanStats",
    "Preempt",
    "Resize",
    "SortedQueue",
    "Wait",
    "deadline_key",
    "plan",
    "plan_with_stats",
    "queue_key",
    "read_window",
    "stops_at_once",
]

# Preemptions (and moves) one pass may start: bounds the work and the disruption of one pass.
MAX_PREEMPTIONS_PER_PASS = 16


def plan(
    snapshot: ClusterSnapshot,
    queue: PendingQueue,
    now: float,
    config: SchedulerConfig,
    rng: random.Random,
    *,
    window_per_class: int = WINDOW_PER_CLASS,
    extension: PlannerExtension | None = None,
) -> list[Decision]:
    """Decide what to do with the top of the queue now. See `plan_with_stats`."""
    return plan_with_stats(
        snapshot, queue, now, config, rng, window_per_class=window_per_class, extension=extension
    )[0]


def plan_with_stats(
    snapshot: ClusterSnapshot,
    queue: PendingQueue,
    now: float,
    config: SchedulerConfig,
    rng: random.Random,
    *,
    window_per_class: int = WINDOW_PER_CLASS,
    extension: PlannerExtension | None = None,
) -> tuple[list[Decision], PlanStats]:
    """Ordered decisions for the window of the queue, and what the pass examined.

    1. Read at most `window_per_class` jobs of each class and as many of the nearest
       deadlines (`WINDOW_PER_CLASS`; the control plane reads more when many GPUs are free);
       rank them by effective priority (then submission time, then id).
    2. For each, in that order, the first of `_Pass.CHECKS` that decides: wait if victims are
       still checkpointing for it (what it needs stays reserved for it meanwhile); wait as a job
       alike ranked before it waits; wait if no pool can host it; admit it to the first
       candidate pool where it fits (capacity and quota); claim GPUs that leaving victims free
       beyond their preemptors' needs, and wait for them; wait behind its class's head (with
       `preempt_for_class_head_only`); wait if the pass's preemption budget
       (`MAX_PREEMPTIONS_PER_PASS`) is spent, or until it has waited `preemption_delay_s`
       (unless its class is in `stop_at_once_for`); preempt the fewest eligible victims in one
       pool (the pool needing the fewest, in preference order); else wait, with the reason.
    3. Then move deadline jobs on Spot whose guard's safety net fires to On-Demand room
       (`moves.moves_to_on_demand`), and, with `move_to_spot_min_remaining_s` and budget left,
       On-Demand jobs to Spot room left (`moves.moves_to_spot`).

    The scheduler Lambda, the local runtime, the simulator and the start forecast all plan
    through this one path: every job of the window gets its decision, a wait with its reason.
    `extension`: a simulator variant's hooks (`extension.PassHooks`; none in production).
    """
    teams = {*snapshot.usage_gpu_hours, *snapshot.quotas}
    fairshare = fairshare_factors(teams, snapshot.quotas, snapshot.usage_gpu_hours)
    score = PriorityScorer(
        now, config.weights, fairshare, lambda job: estimated_remaining_s(job, now, config)
    )
    window = read_window(queue, window_per_class)
    indexed = RunningIndex.of(snapshot.allocations)
    state = _Pass(snapshot, RunningJobs(snapshot, indexed, score, now, config), score, now, config, rng)
    if extension is not None:
        state.hooks = extension.for_pass(snapshot, now, config)
        state.variant = extension.name
        state.extended = True
    state.indexed = indexed
    state.elastic = {pool: list(allocations) for pool, allocations in indexed.elastic.items()}
    # (The deadline plans and the On-Demand holds read only jobs with a deadline or its answer.)
    dated = [job for job in window if job.spec.deadline is not None or job.deadline_answer is not None]
    state.plans = PassPlans.for_pass(snapshot, dated, config, now, indexed.dated)
    state.holds = PassHolds.of(dated, snapshot, indexed.dated)
    state.reserve_for_draining(window)
    decisions: list[Decision] = [state.decide(job, priority) for job, priority in ranked(window, score)]
    moves = moves_to_on_demand(
        snapshot, indexed, state.ledger, state.taken, score, now, state.preemptions_left, config
    )
    state.taken.update(m.job.id for m in moves)
    budget = state.preemptions_left - len(moves)
    if config.move_to_spot_min_remaining_s > 0 and budget > 0:
        moves += moves_to_spot(
            snapshot, indexed, state.ledger, state.taken, score, now, config, budget, state.plans
        )
        state.taken.update(m.job.id for m in moves)  # (a job moving to Spot is not grown)
    for move in moves:
        state.hooks.decided(move)
    decisions.extend(moves)
    decisions.extend(state.grow_elastic(budget - len(moves)))
    return decisions, PlanStats(candidates_examined=len(window), running_considered=len(indexed))


@dataclass(slots=True)
class _Turn:
    """One job's turn in the pass: what the checks learn about it on the way."""

    job: Job
    priority: float
    # What decides the pass's answer for the job besides its priority (the alike key, `decide`).
    alike: tuple[object, ...] | None
    # Its candidate pools, in preference order (found by `_Pass._no_pool`).
    pools: list[Pool] = field(default_factory=list)
    # Why it does not fit the first of them, when found (`_Pass._shortfall`).
    shortfall: str | None = None
    # The reserved pools it may start in now (`reserved.open_blocks`), before its other pools.
    blocks: list[Pool] = field(default_factory=list)


# A check: the pass, the turn -> its decision, or None to leave the turn to the next check.
_Check = Callable[["_Pass", _Turn], "Decision | None"]


class _Pass:
    """A pass's working state (the ledger, the victims taken, the spare GPUs, the preemption
    budget left, the waits of jobs alike) and the checks that decide a job's turn."""

    def __init__(
        self,
        snapshot: ClusterSnapshot,
        running: RunningJobs,
        score: PriorityScorer,
        now: float,
        config: SchedulerConfig,
        rng: random.Random,
    ) -> None:
        self.snapshot = snapshot
        self.running = running
        self.score = score
        self.now = now
        self.config = config
        self.rng = rng
        self.ledger = running.ledger
        self.draining = running.draining
        self.taken: set[str] = set()
        self.preemptions_left = MAX_PREEMPTIONS_PER_PASS
        # GPUs that leaving victims free beyond their preemptors' needs, per pool.
        self.surplus: dict[str, int] = {}
        # Jobs that wait for the same reason as a job alike ranked before them (the alike key:
        # `decide`), as long as no admission or preemption changed the ledger since: key -> (the highest
        # priority the reason holds for, the reason).
        self.waits: dict[tuple[object, ...], tuple[float, WaitReason, str]] = {}
        # The words of each reason a job of the pass waits for (`explain.wait_text`): a reason's
        # fields have one type each in a pass (counts int, windows float), so equal reasons read alike.
        self.texts: dict[WaitReason, str] = {}
        # The candidate pools of jobs placed alike (`_placed_alike`).
        self.placements: dict[tuple[object, ...], list[Pool]] = {}
        # The pools by job shape, found when first needed (`placement.PassPlacement`).
        self.placement: PassPlacement | None = None
        # Elements of each array holding (or about to hold) GPUs, counted when first needed.
        self.array_held: dict[str, int] | None = None
        self.window: list[Job] = []
        self.indexed = RunningIndex()
        self.plans = PassPlans()  # the deadline guard's plans: the pass's budget, those solved
        self.holds = PassHolds({})  # On-Demand GPUs held for deadline jobs (`admission`)
        # The head of each class in this pass: the first of its jobs that neither started nor
        # claimed spare GPUs (`_behind_class_head`).
        self.heads: dict[Priority, str] = {}
        # The GPUs held for the top blocked gang, or None.
        self.gang_hold: GangHold | None = None
        # The reserved pools (`reserved.py`): prepaid, first for the jobs that fit their window.
        self.blocks = reserved_pools(snapshot.pools.values())
        # A simulator variant's hooks, and its name (`extension.py`); the default ones do nothing.
        self.hooks = PassHooks()
        self.variant = ""
        self.extended = False
        # Pools a job of the window could use and waits for, or preempts in: no growth there.
        self.wanted: set[str] = set()
        # The running elastic jobs, by pool (none: the elastic checks do nothing).
        self.elastic: dict[str, list[Allocation]] = {}
        # The releases a job may wait for instead of preempting (`release.py`), made when first
        # asked; until then, the decisions that change them.
        self.releases: PassReleases | None = None
        self.before_releases: list[Decision] = []

    def reserve_for_draining(self, window: list[Job]) -> None:
        """Hold what earlier passes reserved: a preemptor whose victims are still checkpointing
        keeps the capacity it waits for, so no job of this pass takes it; what the victims free
        beyond its need (a 1-GPU job that preempted an 8-GPU one leaves 7) is spare, per pool
        (victims of a preemptor the pass did not read stay charged to the pool, spare included).
        A moving job (`Move`) keeps the GPUs it goes to until it has checkpointed, left and been
        requeued."""
        self.window = window
        pools, ledger = self.snapshot.pools, self.ledger
        for target, leaving in self.draining.items():
            if isinstance(target, MovingTo) and target.pool in pools:
                pool = pools[target.pool]
                moving = sum(pool.demand_gpus(allocation.job) for allocation in leaving)
                ledger.pool_used[pool.name] = ledger.pool_used.get(pool.name, 0) + moving
        if not self.draining:
            return
        for job in [j for j in window if j.id in self.draining]:
            leaving = self.draining[job.id]
            if leaving and leaving[0].pool in pools:
                pool = pools[leaving[0].pool]
                reserve_for_preemptor(ledger, job, pool, leaving)
                add_spare(self.surplus, job, pool, leaving)

    def decide(self, job: Job, priority: float) -> Decision:
        """The first decision of `CHECKS` for the job (`_preempt`, the last, always decides)."""
        # What decides its answer besides its priority: the job fields that `candidate_pools`,
        # `Ledger.shortfall` and the victims' eligibility read (team, class, shape, Spot wish,
        # interruptions); None with a deadline, whose placement also reads its remaining time.
        spec = job.spec
        alike: tuple[object, ...] | None = (
            None
            if spec.deadline is not None
            else (job.team, spec.priority, spec.gpus, spec.nodes, spec.gpu_type, spec.spot, job.interruptions)
        )
        if alike is not None and not self.blocks and self.waits:
            # The common turn, decided as `CHECKS` would: neither of the two checks before
            # `_waits_alike` applies, and a job alike ranked before it waits for a reason that holds.
            known = self.waits.get(alike)
            if (
                known is not None
                and priority <= known[0]
                and (job.array_id is None or job.max_running is None)
                and job.id not in self.draining
            ):
                wait = Wait(job, priority, known[1], known[2])
                if self.extended:  # (the default hooks observe nothing)
                    self.hooks.decided(wait)
                return wait
        turn = _Turn(job, priority, alike)
        if self.blocks:
            remaining = estimated_remaining_s(job, self.now, self.config)
            turn.blocks = open_blocks(job, self.blocks, self.now, remaining, self.config)
            if turn.alike is not None:  # (which blocks it fits depends on its remaining time)
                turn.alike = (*turn.alike, *(p.name for p in turn.blocks))
        for check in _Pass.CHECKS:
            decision = check(self, turn)
            if decision is not None:
                if job.array_id is not None and isinstance(decision, (Admit, Preempt)):
                    held = self._array_held()
                    held[job.array_id] = held.get(job.array_id, 0) + 1
                if isinstance(decision, Wait):
                    self._hold_for_gang(turn, decision)
                if self.releases is not None:
                    self.releases.decided(decision)
                elif isinstance(decision, (Admit, Preempt)) or getattr(decision, "holds", None):
                    self.before_releases.append(decision)
                self.hooks.decided(decision)
                return decision
        raise AssertionError("the last check always decides")

    # --- the checks, in order ---------------------------------------------------------------

    def _draining(self, turn: _Turn) -> Decision | None:
        """Victims chosen for it earlier are still leaving: it waits (its GPUs are held)."""
        if not self.draining or turn.job.id not in self.draining:
            return None
        return self._wait(turn, Draining(len(self.draining[turn.job.id])))

    def _array_cap(self, turn: _Turn) -> Decision | None:
        """Its array has `max_running` elements holding GPUs (or preempting for them): it waits."""
        job = turn.job
        if job.array_id is None or job.max_running is None:
            return None
        if self._array_held().get(job.array_id, 0) < job.max_running:
            return None
        return self._wait(turn, ArrayCap(job.array_id, job.max_running))

    def _array_held(self) -> dict[str, int]:
        """Elements per array that hold GPUs, or wait for victims chosen for them to leave."""
        if self.array_held is None:
            held: dict[str, int] = {}
            for allocation in self.indexed.allocations():
                array_id = allocation.job.array_id
                if array_id is not None:
                    held[array_id] = held.get(array_id, 0) + 1
            for job in self.window:
                if job.array_id is not None and job.id in self.draining:
                    held[job.array_id] = held.get(job.array_id, 0) + 1
            self.array_held = held
        return self.array_held

    def _waits_alike(self, turn: _Turn) -> Decision | None:
        """A job alike ranked before it waits for a reason that holds for it too."""
        known = self.waits.get(turn.alike) if turn.alike is not None else None
        if known is None or turn.priority > known[0]:
            return None
        self.wanted.update(pool.name for pool in turn.pools)
        return Wait(turn.job, turn.priority, known[1], known[2])

    def _no_pool(self, turn: _Turn) -> Decision | None:
        """Finds its candidate pools; with none, it waits."""
        job = turn.job
        placed = _placed_alike(job, turn.alike, self.config)
        pools = self.placements.get(placed) if placed is not None else None
        if pools is None:
            remaining = estimated_remaining_s(job, self.now, self.config)
            snapshot = self.snapshot
            if placed is None:  # (a deadline job: its Spot pools read the signals and the plans)
                pools = candidate_pools(
                    job, snapshot.pools.values(), self.now, remaining, self.config, snapshot.spot, self.plans
                )
            else:
                if self.placement is None:
                    self.placement = PassPlacement(snapshot.pools.values())
                pools = self.placement.candidate_pools(job, self.now, remaining, self.config)
                self.placements[placed] = pools
        turn.pools = self.hooks.candidate_pools(job, [*turn.blocks, *pools] if turn.blocks else pools)
        if turn.pools:
            return None
        # (When a variant left it no pool, that holds for this job only.)
        holds_for = math.inf if not pools else None
        gpu_type = job.spec.gpu_type
        if gpu_type is not None and gpu_type not in self.snapshot.gpu_types:
            return self._wait(turn, NoGpuType(gpu_type), holds_for=holds_for)
        return self._wait(turn, NoPool(job.gpus, job.nodes, job.spec.spot, job.priority), holds_for=holds_for)

    def _on_demand_held(self, turn: _Turn) -> Decision | None:
        """On-Demand GPUs held for other deadline jobs while it would run are not its: a pool
        without room beside them is left out; with none left, it waits."""
        answer = turn.job.deadline_answer
        if answer is not None and answer.kind is AnswerKind.ON_DEMAND_ONLY:
            # It was promised its deadline On-Demand only: its hold is there, not on Spot.
            turn.pools = [pool for pool in turn.pools if not pool.is_spot] or turn.pools
        if not self.holds.by_pool:
            return None
        job, held = turn.job, 0
        kept: list[Pool] = []
        short: list[str] = []
        remaining = estimated_remaining_s(job, self.now, self.config)
        for pool in turn.pools:
            against = 0 if pool.is_spot else self.holds.held_against(job, pool, self.now, remaining)
            if against and self.ledger.free(pool.name) - against < pool.demand_gpus(job):
                held = max(held, against)
                short.append(pool.name)
            else:
                kept.append(pool)
        if not short:
            return None
        turn.pools = kept
        return None if kept else self._wait(turn, HeldForDeadlines(tuple(short), held))

    def _admit(self, turn: _Turn) -> Decision | None:
        """It fits the first pool with room (capacity and quota): admitted there."""
        job, ledger = turn.job, self.ledger
        for pool in turn.pools:
            # (`Ledger.fits`, with the demand and the free GPUs kept for the reason)
            demand = pool.demand_gpus(job)
            free = ledger.free(pool.name)
            if demand <= free and quota_fits(job.team, demand, ledger.team_used, ledger.quotas):
                # The pool it prefers, when it had no room (found before the ledger takes this).
                first = turn.pools[0]
                passed = "" if pool is first else f"; not {first.name}: {self._shortfall(turn)}"
                ledger.take(job.team, pool.name, demand)
                self._changed_ledger()
                reason = f"admitted to {pool.name}: {demand} of {free} free GPUs{passed}"
                if self.blocks:
                    reason += self._block_reason(job, pool)
                if not pool.is_spot and job.spec.deadline_at is not None:
                    remaining = estimated_remaining_s(job, self.now, self.config)
                    refused = guard_refused_spot(
                        job, self.snapshot, self.now, remaining, self.config, self.plans
                    )
                    reason += f"; not Spot: {refused}" if refused else ""
                return Admit(job, pool.name, turn.priority, reason)
        return None

    def _held_for_gang(self, turn: _Turn) -> Decision | None:
        """It would fit but for the GPUs held for a blocked gang ranked before it: it waits,
        unless it may backfill into them (`gang_hold.backfill_into`): then it is admitted there."""
        hold = self.gang_hold
        if hold is None:
            return None
        for pool in turn.pools:
            if pool.name != hold.pool or pool.demand_gpus(turn.job) > self.ledger.free(pool.name) + hold.gpus:
                continue
            admitted, why = backfill_into(hold, turn.job, pool, self.ledger, self.now)
            if admitted is not None:
                self._changed_ledger()
                return Admit(turn.job, pool.name, turn.priority, admitted)
            return self._wait(turn, HeldForGang(self._shortfall(turn), hold.gang, hold.pool, why))
        return None

    def _claim_spare(self, turn: _Turn) -> Decision | None:
        """GPUs that leaving victims free beyond their preemptors' needs fit it: it claims them
        and waits for them instead of preempting more."""
        if not self.surplus or turn.job.priority in self.config.stop_at_once_for:
            return None
        claim = claim_spare(turn.job, turn.pools, self.surplus, self.ledger)
        if claim is None:
            return None
        return self._wait(turn, SpareClaimed(*claim))

    def _behind_class_head(self, turn: _Turn) -> Decision | None:
        """A job of its class ranked before it is the class's head in this pass (the first that
        neither started nor claimed spare GPUs): only the head preempts, the others wait (with
        `preempt_for_class_head_only`)."""
        cls = turn.job.priority
        if cls not in self.config.preempt_for_class_head_only:
            return None
        head = self.heads.get(cls)
        if head is None:
            self.heads[cls] = turn.job.id
            return None
        return self._wait(turn, BehindClassHead(self._shortfall(turn), head))

    def _shrink_elastic(self, turn: _Turn) -> Decision | None:
        """Shrinking running elastic jobs makes room for it in one of its pools (`elastic.shrinks_for`:
        GPUs they grew into first, then lower-class jobs toward their minimum): they restart
        smaller, it waits for them instead of a whole job being preempted."""
        if self.preemptions_left <= 0 or not self.elastic:
            return None
        job, now, config = turn.job, self.now, self.config
        for pool in turn.pools:
            running = self.elastic.get(pool.name, ())
            shrinks = shrinks_for(job, pool, running, self.ledger, self.taken, now, config)
            if not shrinks:
                continue
            if stops_at_once(job, [s.allocation.job for s in shrinks], now, config) is not None:
                return None  # (it would not wait for their checkpoints: a preemption stops them at once)
            return self._preempt_by_shrinking(turn, pool, shrinks)
        return None

    def _preempt_by_shrinking(self, turn: _Turn, pool: Pool, shrinks: list[Shrink]) -> Preempt:
        job = turn.job
        shortfall = self._shortfall(turn)
        self.wanted.add(pool.name)
        ids = tuple(s.allocation.job.id for s in shrinks)
        self.taken.update(ids)
        self.preemptions_left -= 1
        leaving = [s.allocation.model_copy(update={"resize_to": s.keeps}) for s in shrinks]
        reserve_for_preemptor(self.ledger, job, pool, leaving)
        add_spare(self.surplus, job, pool, leaving)
        self._changed_ledger()
        resizes = tuple(
            Resize(
                s.allocation.job,
                pool.name,
                s.allocation.job.spec.gpus,
                s.to_gpus,
                turn.priority,
                _shrink_reason(s, job.id),
                for_job=job.id,
            )
            for s in shrinks
        )
        reason = f"shrinking {len(ids)} elastic job(s) in {pool.name} instead of preempting: {shortfall}"
        return Preempt(job, pool.name, ids, turn.priority, reason, resizes=resizes)

    def grow_elastic(self, budget: int) -> list[Resize]:
        """Grow running elastic jobs into GPUs no queued job can use (`elastic.growth_sizes`): only
        in pools no job of the window waits for or preempts in (a job queued behind the window
        gets grown GPUs back first: `_shrink_elastic`)."""
        if not self.elastic or budget <= 0:
            return []
        open_pools = set(self.snapshot.pools) - self.wanted
        running = [a for pool in open_pools for a in self.elastic.get(pool, ())]
        grown = growth_sizes(
            self.snapshot.pools, running, self.ledger, open_pools, self.taken, self.now, self.config, budget
        )
        decisions = []
        for allocation, size, free in grown:
            job = allocation.job
            reason = (
                f"grown from {job.spec.gpus} to {size} GPUs: {free} GPUs idle in {allocation.pool}"
                " that no queued job can use"
            )
            priority = self.score.scores([job])[0]
            decisions.append(Resize(job, allocation.pool, job.spec.gpus, size, priority, reason))
        for decision in decisions:
            self.hooks.decided(decision)
        return decisions

    def _budget_spent(self, turn: _Turn) -> Decision | None:
        if self.preemptions_left > 0:
            return None
        return self._wait(turn, BudgetSpent(self._shortfall(turn)), holds_for=math.inf)

    def _preemption_delay(self, turn: _Turn) -> Decision | None:
        """It has not waited `preemption_delay_s` yet (unless its class stops victims at once).
        How long it has waited is the job's own, not part of the reason: a reason that changed
        every pass would be rewritten every pass."""
        config = self.config
        if config.preemption_delay_s <= 0 or config.waives_preemption_delay(turn.job.priority):
            return None
        if wait_s(turn.job, self.now) >= config.preemption_delay_s:
            return None
        return self._wait(turn, PreemptionDelay(self._shortfall(turn), config.preemption_delay_s))

    def _release_soon(self, turn: _Turn) -> Decision | None:
        """Running jobs free the GPUs it lacks in one of its pools within `release_wait_s` by
        their run times: it waits for them instead of preempting (unless its class stops victims
        at once)."""
        config = self.config
        if config.release_wait_s <= 0 or turn.job.priority in config.stop_at_once_for:
            return None
        if self.releases is None:
            self.releases = PassReleases(self.snapshot, self.indexed, self.now, config)
            for decision in self.before_releases:
                self.releases.decided(decision)
        release = self.releases.wait_for(turn.job, turn.pools)
        if release is None:
            return None
        why = ReleaseSoon(self._shortfall(turn), release.pool, release.gpus, release.within_s)
        return self._wait(turn, why)

    def _held_by_variant(self, turn: _Turn) -> Decision | None:
        """A simulator variant keeps it from preempting in this pass (`PassHooks.may_preempt`)."""
        why = self.hooks.may_preempt(turn.job, turn.priority)
        if why is None:
            return None
        return self._wait(turn, HeldByVariant(self._shortfall(turn), self.variant, why))

    def _preempt(self, turn: _Turn) -> Decision:
        """Preempt the fewest eligible victims in one of its pools; else it waits."""
        job, priority = turn.job, turn.priority
        best: tuple[Pool, list[Candidate]] | None = None
        for pool in turn.pools:
            possible = self.running.possible_victims(job, pool.name, self.ledger, self.taken)
            if not possible:
                continue  # select_victims would find no eligible victim
            victims = select_victims(
                job, pool, possible, self.ledger, self.now, self.config, self.rng, self.hooks.order_victims
            )
            if victims and (best is None or len(victims) < len(best[1])):
                best = (pool, victims)
        if best is None:
            # An alike job ranked lower waits too: its class, team and shape decide its victims.
            names = tuple(p.name for p in turn.pools)
            return self._wait(turn, NoVictim(self._shortfall(turn), names), holds_for=priority)
        shortfall = self._shortfall(turn)
        pool, victims = best
        self.wanted.add(pool.name)
        self.taken.update(v.job_id for v in victims)
        self.preemptions_left -= 1
        leaving = [v.allocation for v in victims]
        reserve_for_preemptor(self.ledger, job, pool, leaving)
        add_spare(self.surplus, job, pool, leaving)
        self._changed_ledger()
        config, now = self.config, self.now
        ids = tuple(v.job_id for v in victims)
        reason = f"preempting {len(ids)} job(s) in {pool.name} by {config.strategy.value}: {shortfall}"
        at_once = stops_at_once(job, [v.job for v in victims], now, config)
        if at_once is not None:
            reason += f"; {at_once}"
        return Preempt(job, pool.name, ids, priority, reason, checkpoint=at_once is None)

    def _hold_for_gang(self, turn: _Turn, wait: Wait) -> None:
        """After a job's wait: the first multi-node job of the pass that waits for capacity, and
        has waited `GANG_HOLD_AFTER_S`, has the free GPUs of its first candidate pool held for it,
        up to its demand, so the jobs ranked after it do not take them one by one."""
        if not turn.pools or not isinstance(wait.why, _SHORT_OF_CAPACITY):
            return
        job = turn.job
        if self.gang_hold is not None or job.nodes <= 1 or wait_s(job, self.now) < GANG_HOLD_AFTER_S:
            return
        pool = turn.pools[0]
        running = (a for members in self.indexed.groups.get(pool.name, {}).values() for a in members.values())
        self.gang_hold = hold_for(job, pool, self.ledger, running, self.now, self.config)
        if self.gang_hold is not None:
            wait.holds = (pool.name, self.gang_hold.gpus)
            self._changed_ledger()

    # --- helpers ------------------------------------------------------------------------------

    def _block_reason(self, job: Job, pool: Pool) -> str:
        """Why an admitted job is, or is not, in a reserved pool (`reserved.py`)."""
        remaining = estimated_remaining_s(job, self.now, self.config)
        if pool.is_reserved:
            return "; " + admitted_text(job, pool, self.now, remaining, self.config)
        why = block_text(job, self.blocks, self.now, remaining, self.config)
        return f"; not reserved: {why}" if why else ""

    def _wait(self, turn: _Turn, why: WaitReason, *, holds_for: float | None = None) -> Wait:
        """A wait for `why`; with `holds_for`, jobs alike ranked after it up to that priority
        wait for the same reason (until the ledger changes)."""
        text = self.texts.get(why)
        if text is None:
            text = self.texts[why] = wait_text(why)
        if holds_for is not None and turn.alike is not None:
            self.waits[turn.alike] = (holds_for, why, text)
        self.wanted.update([pool.name for pool in turn.pools])
        return Wait(turn.job, turn.priority, why, text)

    def _shortfall(self, turn: _Turn) -> str:
        """Why the job does not fit the first of its pools (none fits). The ledger is as it was
        until the job's decision, so it is the same whenever it is found."""
        if turn.shortfall is None:
            turn.shortfall = self.ledger.shortfall(turn.job, turn.pools[0]) or ""
        return turn.shortfall

    def _changed_ledger(self) -> None:
        self.waits.clear()

    # The checks of a turn, in order (plain functions: bound methods kept on the pass would make
    # each pass a reference cycle, left for the cyclic garbage collector to free).
    CHECKS: ClassVar[tuple[_Check, ...]] = (
        _draining,
        _array_cap,
        _waits_alike,
        _no_pool,
        _on_demand_held,
        _admit,
        _held_for_gang,
        _claim_spare,
        _behind_class_head,
        _shrink_elastic,
        _budget_spent,
        _preemption_delay,
        _release_soon,
        _held_by_variant,
        _preempt,
    )


def _shrink_reason(shrink: Shrink, preemptor: str) -> str:
    """What the timeline says of a shrink: a give-back of GPUs it grew into, or a shrink."""
    size, to = shrink.allocation.job.spec.gpus, shrink.to_gpus
    if shrink.give_back:
        return f"gives back GPUs it grew into: {size} to {to} GPUs for job {preemptor}"
    return f"shrunk from {size} to {to} GPUs for job {preemptor}"


# The waits of a job short of capacity (it could use GPUs, and found none it may take).
_SHORT_OF_CAPACITY = (NoVictim, PreemptionDelay, BudgetSpent, BehindClassHead)


def _placed_alike(
    job: Job, alike: tuple[object, ...] | None, config: SchedulerConfig
) -> tuple[object, ...] | None:
    """What `candidate_pools` reads of a job without a deadline (None for one with a deadline):
    its class, shape and Spot preference; once it reached `max_interruptions_on_spot`, its
    interruptions and run time too (`spot_cost_ratio`): then the whole alike key (`_Pass.decide`),
    whose first job's pools its alike jobs share."""
    if alike is None or job.interruptions >= config.max_interruptions_on_spot:
        return alike
    spec = job.spec
    return (spec.priority, spec.gpus, spec.nodes, spec.gpu_type, spec.spot)
