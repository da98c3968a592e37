"""One scheduling pass: `plan(snapshot, queue, now, config, rng)` -> ordered decisions.

The pass reads a bounded window of the queue (the head of each priority class, plus the jobs
with the nearest deadlines), ranks that window by effective priority, and for each job in turn
decides: admit it to a pool, preempt victims to make room for it, or let it wait, saying why.
A working ledger is updated after each decision, so one plan never over-commits a pool or a
quota.
"""

from __future__ import annotations

import bisect
import functools
import heapq
import itertools
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from spotline.domain.config import SchedulerConfig
from spotline.domain.models import (
    PRIORITIES_HIGH_FIRST,
    Allocation,
    ClusterSnapshot,
    Job,
    JobState,
    Pool,
    Priority,
)
from spotline.domain.placement import candidate_pools, preference, spot_refusal
from spotline.domain.preemption import (
    Candidate,
    _may_reclaim,
    _reclaim_allowed,
    estimated_remaining_s,
    reclaim_allowed_between,
    select_victims,
    shielded,
)
from spotline.domain.priority import PriorityScorer, fairshare_factors, score_floor, wait_s
from spotline.domain.quota import Ledger, borrowed_gpus, quota_shortfall
from spotline.domain.running import Ordered, RunningIndex

# --- the queue a pass reads ---------------------------------------------------------------


class PendingQueue(Protocol):
    """The pending jobs as an index serves them: never read whole.

    On AWS these are DynamoDB Query calls with `Limit`; locally and in the simulator it is
    `SortedQueue`.
    """

    def head(self, priority: Priority, limit: int) -> Sequence[Job]:
        """The first `limit` pending jobs of one class, oldest submission first."""
        ...

    def urgent(self, limit: int) -> Sequence[Job]:
        """The first `limit` pending jobs that have a deadline, nearest deadline first."""
        ...


def queue_key(job: Job) -> tuple[float, str]:
    """Order within a class: original submission time (a requeued job keeps its place), id."""
    return (job.submitted_at, job.id)


def deadline_key(job: Job) -> tuple[float, str]:
    deadline = job.spec.deadline_at
    return (float("inf") if deadline is None else deadline, job.id)


@dataclass
class SortedQueue:
    """An in-memory `PendingQueue`: one sorted list per class and one by deadline.
    Insertion and removal are O(log n) searches (plus the list shift)."""

    by_class: dict[Priority, list[tuple[tuple[float, str], Job]]] = field(
        default_factory=lambda: {p: [] for p in PRIORITIES_HIGH_FIRST}
    )
    by_deadline: list[tuple[tuple[float, str], Job]] = field(default_factory=list)
    # The jobs of `by_class` and `by_deadline` alone, in the same order (`head` and `urgent`
    # slice them: a pass reads the head of every class).
    _class_jobs: dict[Priority, list[Job]] = field(init=False, repr=False, compare=False)
    _deadline_jobs: list[Job] = field(init=False, repr=False, compare=False)
    # How many jobs `by_class` holds, kept by `add` and `remove` (the simulator asks after every
    # event whether anything is pending).
    _size: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._class_jobs = {p: [job for _, job in self.by_class.get(p, ())] for p in PRIORITIES_HIGH_FIRST}
        self._deadline_jobs = [job for _, job in self.by_deadline]
        self._size = sum(len(v) for v in self.by_class.values())

    @classmethod
    def of(cls, jobs: Iterable[Job]) -> SortedQueue:
        by_class: dict[Priority, list[tuple[tuple[float, str], Job]]] = {p: [] for p in PRIORITIES_HIGH_FIRST}
        by_deadline: list[tuple[tuple[float, str], Job]] = []
        for job in jobs:
            by_class[job.priority].append((queue_key(job), job))
            if job.spec.deadline_at is not None:
                by_deadline.append((deadline_key(job), job))
        for entries in by_class.values():
            entries.sort(key=lambda e: e[0])
        by_deadline.sort(key=lambda e: e[0])
        return cls(by_class=by_class, by_deadline=by_deadline)

    def __len__(self) -> int:
        return self._size

    def add(self, job: Job) -> None:
        entries = self.by_class[job.priority]
        key = queue_key(job)
        index = bisect.bisect_left(entries, key, key=lambda e: e[0])
        entries.insert(index, (key, job))
        self._class_jobs[job.priority].insert(index, job)
        self._size += 1
        if job.spec.deadline_at is not None:
            key = deadline_key(job)
            index = bisect.bisect_left(self.by_deadline, key, key=lambda e: e[0])
            self.by_deadline.insert(index, (key, job))
            self._deadline_jobs.insert(index, job)

    def remove(self, job: Job) -> None:
        """Remove `job` (found by its queue key, so pass the job as it was added)."""
        _remove(self.by_class[job.priority], self._class_jobs[job.priority], queue_key(job))
        self._size -= 1
        if job.spec.deadline_at is not None:
            _remove(self.by_deadline, self._deadline_jobs, deadline_key(job))

    def head(self, priority: Priority, limit: int) -> Sequence[Job]:
        return self._class_jobs[priority][:limit]

    def urgent(self, limit: int) -> Sequence[Job]:
        return self._deadline_jobs[:limit]


def _remove(entries: list[tuple[tuple[float, str], Job]], jobs: list[Job], key: tuple[float, str]) -> None:
    index = bisect.bisect_left(entries, key, key=lambda e: e[0])
    if index < len(entries) and entries[index][0] == key:
        del entries[index]
        del jobs[index]
    else:
        raise KeyError(key[1])


# --- decisions ----------------------------------------------------------------------------
# Plain slotted dataclasses, not frozen ones: a pass makes one per job of its window, and a frozen
# dataclass's __init__ costs three times as much. Nothing changes a decision after the pass.


@dataclass(slots=True)
class Admit:
    job: Job
    pool: str
    effective_priority: float
    reason: str
    action: str = "admit"


@dataclass(slots=True)
class Preempt:
    """Checkpoint and stop `victims` in `pool` (or stop them at once when `checkpoint` is
    False: `SchedulerConfig.stop_at_once_for`); `job` is admitted once they have left."""

    job: Job
    pool: str
    victims: tuple[str, ...]
    effective_priority: float
    reason: str
    checkpoint: bool = True
    action: str = "preempt"


@dataclass(slots=True)
class Wait:
    job: Job
    effective_priority: float
    reason: str
    action: str = "wait"


@dataclass(slots=True)
class Move:
    """Checkpoint `job`, running On-Demand in `source`, and requeue it, to resume in Spot `pool`,
    which has room for it now (`SchedulerConfig.move_to_spot_min_remaining_s`). Acted on as a
    preemption with no preemptor: the job keeps its place and priority, and the next pass admits
    it where it fits first, Spot before On-Demand."""

    job: Job
    source: str
    pool: str
    effective_priority: float
    reason: str
    action: str = "move"

    @property
    def draining_for(self) -> str:
        """What the job's allocation says it leaves for while it checkpoints: a pass reserves
        its GPUs in `pool` meanwhile (`MOVE_TO`)."""
        return MOVE_TO + self.pool


# The `draining_for` of a job moving to Spot, before the pool's name.
MOVE_TO = "a move to "


Decision = Admit | Preempt | Wait | Move


@dataclass(frozen=True)
class PlanStats:
    """What one pass looked at (the benchmark reports it)."""

    candidates_examined: int
    running_considered: int


# --- the pass -----------------------------------------------------------------------------


def read_window(queue: PendingQueue, limit: int) -> list[Job]:
    """The head of each class plus the most urgent deadlines, each job once."""
    return _read_window(queue, limit)[0]


def _read_window(queue: PendingQueue, limit: int) -> tuple[list[Job], dict[Priority, int]]:
    """`read_window`, and how many of its jobs each class has."""
    window, counts, _ = _read_window_parts(queue, limit)
    return window, counts


# A part of the window: its first and last index + 1, the highest class among its jobs, whether
# any of them has a deadline, and whether it is the head of its class (else: the urgent jobs).
_Part = tuple[int, int, Priority, bool, bool]


def _read_window_parts(queue: PendingQueue, limit: int) -> tuple[list[Job], dict[Priority, int], list[_Part]]:
    """`_read_window`, and its parts: the head of each class, then the urgent jobs not in one."""
    window: list[Job] = []
    counts: dict[Priority, int] = {}
    heads: list[tuple[int, int, Priority]] = []
    for priority in PRIORITIES_HIGH_FIRST:
        head = queue.head(priority, limit)
        if head:
            heads.append((len(window), len(window) + len(head), priority))
            window.extend(head)
            counts[priority] = len(head)
    urgent = queue.urgent(limit)
    if not urgent:
        # (No pending job has a deadline.)
        return window, counts, [(start, end, cls, False, True) for start, end, cls in heads]
    parts: list[_Part] = [
        (start, end, cls, any(job.spec.deadline is not None for job in window[start:end]), True)
        for start, end, cls in heads
    ]
    seen = {job.id for job in window}
    start = len(window)
    highest: Priority | None = None
    for job in urgent:
        if job.id not in seen:
            seen.add(job.id)
            window.append(job)
            cls = job.spec.priority
            counts[cls] = counts.get(cls, 0) + 1
            if highest is None or cls.rank > highest.rank:
                highest = cls
    if highest is not None:
        parts.append((start, len(window), highest, True, False))
    return window, counts, parts


def plan(
    snapshot: ClusterSnapshot,
    queue: PendingQueue,
    now: float,
    config: SchedulerConfig,
    rng: random.Random,
    *,
    explain: bool = True,
    running: RunningIndex | None = None,
) -> list[Decision]:
    """Decide what to do with the top of the queue now. See `plan_with_stats`."""
    return plan_with_stats(snapshot, queue, now, config, rng, explain=explain, running=running)[0]


def plan_with_stats(
    snapshot: ClusterSnapshot,
    queue: PendingQueue,
    now: float,
    config: SchedulerConfig,
    rng: random.Random,
    *,
    explain: bool = True,
    running: RunningIndex | None = None,
) -> tuple[list[Decision], PlanStats]:
    """Ordered decisions for the window of the queue, and what the pass examined.

    1. Read at most `window_per_class` jobs of each class and as many of the nearest
       deadlines; rank them by effective priority (then submission time, then id).
    2. For each, in that order: wait if victims are still checkpointing for it (what it needs
       stays reserved for it meanwhile); else admit it to the first candidate pool where it
       fits (capacity and quota); else claim GPUs that leaving victims free beyond their
       preemptors' needs, and wait for them; else, within the per-pass preemption budget and
       once it has waited `preemption_delay_s` (unless its class is in `stop_at_once_for`),
       preempt the fewest eligible victims in one pool (the pool needing the fewest, in
       preference order); else wait, with the reason.

    With `explain=False` the pass stops once no job left in its order can be admitted or preempt
    (`_RunningJobs.nothing_left_to_decide`), and gives no `Wait`s (nor makes their reasons): the
    admissions, preemptions and moves are exactly those of `explain=True`, in the same order
    (tested), for a caller that does not show wait reasons (the simulator, the forecast).

    `running`, when given, is the snapshot's allocations already indexed (`RunningIndex`, kept up
    to date by a caller that owns them across passes); the pass reads it instead of
    `snapshot.allocations`.
    """
    teams = {*snapshot.usage_gpu_hours, *snapshot.quotas}
    fairshare = fairshare_factors(teams, snapshot.quotas, snapshot.usage_gpu_hours)
    score = PriorityScorer(
        now, config.weights, fairshare, lambda job: estimated_remaining_s(job, now, config)
    )

    window, classes_left, parts = _read_window_parts(queue, config.window_per_class)
    # The order of the pass, popped from a heap: a pass without explanations stops early, and
    # needs only the head of it. A part of the window (a class's head, the urgent jobs) is scored
    # and pushed only when the heap's best might not outrank every job in it (`upper_bound`), so
    # the order popped is that of the whole window scored at once.
    class_step = config.weights.class_step
    unscored: list[tuple[float, int, tuple[int, int]]] = []
    sources = itertools.count()
    for start, end, cls, deadline, _ in parts:
        bound = score.upper_bound(class_step * cls.rank, deadline)
        unscored.append((-bound, next(sources), (start, end)))
    heapq.heapify(unscored)
    ranked: list[tuple[float, float, str, Job]] = []

    indexed = RunningIndex.of(snapshot.allocations) if running is None else running
    running_jobs = _RunningJobs(snapshot, indexed, score, now, config)
    ledger = running_jobs.ledger
    draining = running_jobs.draining

    # A preemptor whose victims are still checkpointing keeps what the pass that chose them
    # reserved for it, so no job of this pass takes the capacity it waits for. What the victims
    # free beyond its need (a 1-GPU job that preempted an 8-GPU one leaves 7) is spare, per pool:
    # a job that does not fit claims it and waits for it instead of preempting more, and it does
    # not go to whatever is queued when the victims leave. (Victims of a preemptor the pass did
    # not read stay charged to the pool, spare included.)
    surplus: dict[str, int] = {}
    # A job moving to Spot (`Move`) keeps the GPUs it goes to until it has checkpointed, left
    # and been requeued, so no other job takes them meanwhile.
    for target, leaving in draining.items():
        if target.startswith(MOVE_TO) and target[len(MOVE_TO) :] in snapshot.pools:
            pool = snapshot.pools[target[len(MOVE_TO) :]]
            ledger.pool_used[pool.name] = ledger.pool_used.get(pool.name, 0) + sum(
                pool.demand_gpus(allocation.job) for allocation in leaving
            )
    if draining:
        for job in [j for j in window if j.id in draining]:
            leaving = draining[job.id]
            if leaving and leaving[0].pool in snapshot.pools:
                pool = snapshot.pools[leaving[0].pool]
                _reserve_for_preemptor(ledger, job, pool, leaving)
                _add_spare(surplus, job, pool, leaving)

    decisions: list[Decision] = []
    taken: set[str] = set()
    preemptions_left = config.max_preemptions_per_pass
    # Jobs that wait for the same reason as a job alike ranked before them (see `_alike`), as
    # long as no decision changed the ledger since: key -> (highest priority, reason).
    waits: dict[tuple[object, ...], tuple[float, str]] = {}
    # The candidate pools of alike jobs (placement reads only what `_alike` holds).
    placements: dict[tuple[object, ...], list[Pool]] = {}
    # (`classes_left`: the jobs of each class not yet decided, for `explain=False`'s stop.)
    changes = 0  # decisions so far that changed the ledger, the taken victims or the spare GPUs
    popped = 0  # jobs decided so far, for `explain=False`'s stop
    # (What the loop reads of the policy for each job, read once: a record's attributes cost
    # a dictionary lookup each.)
    stop_at_once = config.stop_at_once_for
    delay_s = config.preemption_delay_s
    while ranked or unscored:
        # Score the parts whose bound reaches the heap's best (`<=`: a tie goes to submission time).
        while unscored and (not ranked or ranked[0][0] >= unscored[0][0]):
            _, _, (start, end) = heapq.heappop(unscored)
            jobs = window[start:end]
            ranked.extend(
                [
                    (-priority, job.submitted_at, job.id, job)
                    for job, priority in zip(jobs, score.scores(jobs), strict=True)
                ]
            )
            heapq.heapify(ranked)
        negative, _, _, job = heapq.heappop(ranked)
        priority = -negative
        cls = job.spec.priority
        if not explain:
            if popped and running_jobs.nothing_left_to_decide(
                priority, classes_left, preemptions_left, surplus, taken, changes
            ):
                break
            popped += 1
            left = classes_left[cls] - 1
            if left:
                classes_left[cls] = left
            else:
                del classes_left[cls]
        if draining and job.id in draining:
            if explain:
                count = len(draining[job.id])
                reason = f"waiting for {count} preempted job(s) to checkpoint and leave"
                decisions.append(Wait(job, priority, reason))
            continue
        alike = _alike(job)
        known = waits.get(alike) if alike is not None else None
        if known is not None and priority <= known[0]:
            if explain:
                decisions.append(Wait(job, priority, known[1]))
            continue
        pools = placements.get(alike) if alike is not None else None
        if pools is None:
            remaining = estimated_remaining_s(job, now, config)
            pools = candidate_pools(job, snapshot.pools.values(), now, remaining, config)
            if alike is not None:
                placements[alike] = pools
        if not pools:
            reason = ""
            if explain:
                reason = _no_pool_reason(job, snapshot)
                decisions.append(Wait(job, priority, reason))
            if alike is not None:
                waits[alike] = (math.inf, reason)
            continue
        admitted = False
        for pool in pools:
            if ledger.fits(job, pool):
                demand = pool.demand_gpus(job)
                free = ledger.free(pool.name)
                ledger.take(job.team, pool.name, demand)
                decisions.append(
                    Admit(job, pool.name, priority, f"admitted to {pool.name}: {demand} of {free} free GPUs")
                )
                admitted = True
                break
        if admitted:
            waits.clear()  # the ledger changed
            changes += 1
            continue
        # Why it does not fit: in the first of its pools (none fits). Made only for a reason
        # given (a pass without explanations gives none for its waits); the ledger stays as it
        # is until the job's decision, so it is the same whenever it is made.
        first_shortfall = (ledger.shortfall(job, pools[0]) or "") if explain else ""
        if surplus and cls not in stop_at_once:
            claim = _claim_surplus(job, pools, surplus, ledger)
            if claim is not None:
                changes += 1
                if explain:
                    decisions.append(Wait(job, priority, claim))
                continue
        if preemptions_left <= 0:
            reason = ""
            if explain:
                reason = f"waiting: {first_shortfall}; preemption budget of this pass spent"
                decisions.append(Wait(job, priority, reason))
            if alike is not None:
                waits[alike] = (math.inf, reason)
            continue
        if delay_s > 0 and cls not in stop_at_once:
            waited = wait_s(job, now)
            if waited < delay_s:
                # How long it has waited is the job's own (the API computes it when read), not
                # part of the reason: a reason that changed every pass would be rewritten every pass.
                if explain:
                    reason = (
                        f"waiting: {first_shortfall}; it may preempt after waiting"
                        f" {config.preemption_delay_s:.0f} s in the queue"
                    )
                    decisions.append(Wait(job, priority, reason))
                continue
        best: tuple[Pool, list[Candidate]] | None = None
        for pool in pools:
            possible = running_jobs.possible_victims(job, priority, pool.name, ledger, taken)
            if not possible:
                continue  # select_victims would find no eligible victim
            victims = select_victims(job, priority, pool, possible, ledger, now, config, rng)
            if victims and (best is None or len(victims) < len(best[1])):
                best = (pool, victims)
        if best is None:
            reason = ""
            if explain:
                names = ", ".join(p.name for p in pools)
                reason = f"waiting: {first_shortfall}, and nothing lower-priority to preempt in pool {names}"
                decisions.append(Wait(job, priority, reason))
            if alike is not None:
                # An alike job ranked lower waits too: a lower priority only narrows who is lower
                # by the margin, so it finds no victim, or no set that frees enough.
                waits[alike] = (priority, reason)
            continue
        if not explain:
            first_shortfall = ledger.shortfall(job, pools[0]) or ""
        waits.clear()  # the ledger changed
        changes += 1
        pool, victims = best
        taken.update(v.job_id for v in victims)
        preemptions_left -= 1
        _reserve_for_preemptor(ledger, job, pool, [v.allocation for v in victims])
        _add_spare(surplus, job, pool, [v.allocation for v in victims])
        ids = tuple(v.job_id for v in victims)
        checkpoint = cls not in stop_at_once
        reason = f"preempting {len(ids)} job(s) in {pool.name} by {config.strategy.value}: {first_shortfall}"
        if not checkpoint:
            reason += f"; stopped at once for a {job.priority.value} job"
        elif config.fresh_checkpoint_s > 0 and all(
            v.job.unsaved_work_s(now) <= config.fresh_checkpoint_s for v in victims
        ):
            checkpoint = False
            reason += f"; stopped at once: each checkpointed in the last {config.fresh_checkpoint_s:.0f} s"
        decisions.append(Preempt(job, pool.name, ids, priority, reason, checkpoint=checkpoint))
    if config.move_to_spot_min_remaining_s > 0 and preemptions_left > 0:
        moves = _moves_to_spot(snapshot, indexed, ledger, taken, score, now, config, preemptions_left)
        decisions.extend(moves)
    return decisions, PlanStats(candidates_examined=len(window), running_considered=len(indexed))


def _moves_to_spot(
    snapshot: ClusterSnapshot,
    running: RunningIndex,
    ledger: Ledger,
    taken: set[str],
    score: PriorityScorer,
    now: float,
    config: SchedulerConfig,
    budget: int,
) -> list[Move]:
    """The On-Demand jobs to move to Spot room left after the pass's decisions (`Move`): those
    that may run on Spot, are neither leaving nor shielded (protection period, preemption cap),
    and have at least `move_to_spot_min_remaining_s` left, longest first, each to the first
    Spot pool (cheapest) where it fits the GPUs still free; at most `budget` of them."""
    spot = sorted(
        (p for p in snapshot.pools.values() if p.is_spot and ledger.free(p.name) > 0), key=preference
    )
    if not spot:
        return []
    least = config.move_to_spot_min_remaining_s
    candidates: list[tuple[float, str, Allocation]] = []
    for pool in snapshot.pools.values():
        if pool.is_spot:
            continue
        for group in running.groups.get(pool.name, {}).values():
            for allocation in group.values():
                job = allocation.job
                if job.state is not JobState.RUNNING or job.id in taken:
                    continue
                if shielded(allocation, now, config) is not None:
                    continue
                remaining = estimated_remaining_s(job, now, config)
                if remaining >= least:
                    candidates.append((remaining, job.id, allocation))
    if not candidates:
        return []
    candidates.sort(key=lambda c: (-c[0], c[1]))
    free = {p.name: ledger.free(p.name) for p in spot}
    moves: list[Move] = []
    for remaining, _, allocation in candidates:
        job = allocation.job
        for pool in spot:
            demand = pool.demand_gpus(job)
            if not pool.can_host(job) or demand > free[pool.name]:
                continue
            if spot_refusal(job, pool, now, remaining, config) is not None:
                continue
            free[pool.name] -= demand
            reason = (
                f"moving from {allocation.pool} to {pool.name}, which has {demand} GPUs free:"
                f" ~{remaining / 3600.0:.1f} h left to run at Spot's price"
            )
            moves.append(Move(job, allocation.pool, pool.name, score(job), reason))
            break
        if len(moves) >= budget or not any(free.values()):
            break
    return moves


@dataclass(slots=True)
class _Group:
    """The running jobs of one class in one pool, scored (and the shielded ones dropped) when
    first needed."""

    allocations: list[Allocation]
    # Their teams, with how many of the allocations each has (the index's count, read only).
    team_counts: Mapping[str, int]
    # Sorted by effective priority (lowest first), with their priorities; and the same per team
    # (made when a reclaim first needs it).
    candidates: list[Candidate] | None = None
    priorities: list[float] = field(default_factory=list)
    by_team: dict[str, tuple[list[Candidate], list[float]]] | None = None
    # Whether a preemptor of a class may reclaim from this class (`_reclaim_allowed`).
    reclaim_from: dict[Priority, bool] = field(default_factory=dict)


@dataclass(slots=True)
class _Scan:
    """A group's jobs scored so far in a pass by `_RunningJobs._below`: every stoppable job that
    may score below `upto`, by effective priority; and per team, how far its order was read."""

    upto: float = -math.inf
    reached: dict[str, int] = field(default_factory=dict)
    candidates: list[Candidate] = field(default_factory=list)
    priorities: list[float] = field(default_factory=list)


class _RunningJobs:
    """The running jobs as preemption candidates, grouped by pool and class, scored on first use
    (read from a `RunningIndex`, with the allocations checkpointing for each preemptor: `draining`).

    A performance device with no effect on decisions: `select_victims` only sees the candidates
    that `eligibility` may accept (not `shielded`; lower by the margin, or on a team the
    preemptor may reclaim from, as far as the reclaim policy allows for their class), a superset
    of the eligible ones, and the pass skips it when there are none (its answer would be "no
    victims"). A class is scored only when one of its jobs may be a victim: with non-negative
    weights no job of class rank r scores below `class_step * r - attained` (the attained-service
    term is the only one that lowers a score), and the reclaim policy is a
    matter of classes (`_reclaim_allowed` is asked once per class).
    """

    def __init__(
        self,
        snapshot: ClusterSnapshot,
        index: RunningIndex,
        score: PriorityScorer,
        now: float,
        config: SchedulerConfig,
    ) -> None:
        self._score = score
        self._now = now
        self._config = config
        weights = config.weights
        floors = (
            weights.age,
            weights.deadline,
            weights.size,
            weights.fairshare,
            weights.history,
            weights.shortest,
        )
        self._class_floor = min(floors) >= 0
        # The lowest score a job of class rank r can have is `class_step * r - _floor_drop`.
        self._floor_drop = weights.attained
        # The pass's working ledger (`Ledger.of`, from the index's sums).
        self.ledger = Ledger(
            pools=snapshot.pools,
            quotas=snapshot.quotas,
            pool_used=dict(index.pool_used),
            team_used=dict(index.team_used),
        )
        # Preemptor id -> the allocations checkpointing to make room for it.
        self.draining: dict[str, list[Allocation]] = {
            preemptor: list(allocations.values()) for preemptor, allocations in index.draining.items()
        }
        self._index = index
        # With no negative weight, each team's running jobs of a class in a pool are read in the
        # order of `score_floor` (`RunningIndex.ordered`, kept across passes by a caller that keeps
        # the index): a search scores only the jobs whose floor does not rule them out. Otherwise,
        # per pool, per class: the running jobs (shielded ones are dropped when scored).
        self._weights = weights
        self._floor_key = functools.partial(score_floor, weights=weights)
        self._step = weights.class_step
        self._at = (now, config)
        # Job id -> the running job as a candidate, or None when shielded (made when first read).
        self._candidates: dict[str, Candidate | None] = {}
        self._reclaim_from: dict[tuple[Priority, Priority], bool] = {}
        self._lowest_of: dict[tuple[str, Priority], float] = {}
        self._scans: dict[tuple[str, Priority], _Scan] = {}
        # `_pool_floor`: pool -> (size of `taken`, threshold, floor) when it was made.
        self._pool_floors: dict[str, tuple[int, float, float]] = {}
        self._ordered_of: dict[tuple[str, Priority], dict[str, Ordered]] = {}
        self._groups: dict[str, dict[Priority, _Group]] = (
            {}
            if self._class_floor
            else {
                pool: {
                    cls: _Group(allocations=list(members.values()), team_counts=index.team_counts[pool][cls])
                    for cls, members in classes.items()
                }
                for pool, classes in index.groups.items()
            }
        )
        # `nothing_left_to_decide`'s reading of the ledger, and the count of changes it was made at.
        self._facts: tuple[int, bool, float, frozenset[Priority]] | None = None

    @staticmethod
    def _teams(group: _Group) -> Iterable[str]:
        return group.team_counts.keys()

    def _scored(self, group: _Group) -> list[Candidate]:
        if group.candidates is None:
            now, config = self._now, self._config
            # (A shielded job is one no preemptor may stop now.)
            stoppable = [a for a in group.allocations if shielded(a, now, config) is None]
            priorities = self._score.scores([a.job for a in stoppable])
            # (Their remaining time and lost work are computed when an ordering reads them.)
            at = (now, config)
            candidates = [
                Candidate(alloc, priority, at=at)
                for alloc, priority in zip(stoppable, priorities, strict=True)
            ]
            candidates.sort(key=_by_priority)
            group.candidates = candidates
            group.priorities = [c.effective_priority for c in candidates]
        return group.candidates

    def _by_team(self, group: _Group) -> dict[str, tuple[list[Candidate], list[float]]]:
        """`_scored` per team (made when a reclaim first needs it)."""
        if group.by_team is None:
            by_team: dict[str, tuple[list[Candidate], list[float]]] = {}
            for candidate in self._scored(group):
                members, priorities = by_team.setdefault(candidate.job.team, ([], []))
                members.append(candidate)
                priorities.append(candidate.effective_priority)
            group.by_team = by_team
        return group.by_team

    def _ordered(self, pool: str, cls: Priority) -> dict[str, Ordered]:
        found = self._ordered_of.get((pool, cls))
        if found is None:
            found = self._ordered_of[(pool, cls)] = self._index.ordered(
                pool, cls, self._floor_key, self._weights, self._now
            )
        return found

    def _stoppable(self, members: Mapping[str, Allocation], ids: Iterable[str]) -> list[Candidate]:
        """The jobs `ids` (of `members`) that are not shielded, as candidates (each scored once
        per pass)."""
        known = self._candidates
        out: list[Candidate] = []
        fresh: list[Allocation] = []
        now, config = self._now, self._config
        for job_id in ids:
            if job_id in known:
                candidate = known[job_id]
                if candidate is not None:
                    out.append(candidate)
                continue
            allocation = members[job_id]
            if shielded(allocation, now, config) is None:
                fresh.append(allocation)
            else:
                known[job_id] = None
        if fresh:
            at = self._at
            for allocation, priority in zip(fresh, self._score.scores([a.job for a in fresh]), strict=True):
                candidate = known[allocation.job.id] = Candidate(allocation, priority, at=at)
                out.append(candidate)
        return out

    def _possible_ordered(
        self, job: Job, priority: float, pool: str, ledger: Ledger, taken: set[str]
    ) -> list[Candidate]:
        """`possible_victims` from the jobs in `score_floor` order: a job whose floor plus its
        team's fair-share term is not below the threshold is not lower by the margin."""
        index = self._index
        groups = index.groups.get(pool)
        if not groups:
            return []
        config = self._config
        threshold = priority - config.preemption_margin
        borrowing: set[str] | None = None  # teams `job` may reclaim from here, found when needed
        team_counts = index.team_counts[pool]
        chosen: list[Candidate] = []
        # (When no job of the pool not taken scores below the threshold, the groups' jobs below it
        # are all taken ones, which the end leaves out: only reclaims may give victims.)
        any_lower = self._pool_floor(pool, threshold, taken) < threshold
        preemptor = job.priority
        for cls, members in groups.items():
            lower = any_lower and self._step * cls.rank - self._floor_drop < threshold
            allowed = self._reclaim_from.get((cls, preemptor))
            if allowed is None:
                allowed = self._reclaim_from[(cls, preemptor)] = reclaim_allowed_between(
                    cls, preemptor, config
                )
            reclaim: list[str] = []
            if allowed:
                if borrowing is None:
                    borrowing = self._borrowing_in(job, pool, team_counts, ledger)
                teams = team_counts[cls]
                reclaim = [t for t in borrowing if t in teams]
            if not lower and not reclaim:
                continue
            ordered = self._ordered(pool, cls)
            if lower and not reclaim and self._lowest(pool, cls, ordered) >= threshold:
                continue  # no job of the group scores below the threshold
            if lower:
                below = self._below(pool, cls, members, ordered, threshold)
                if reclaim:
                    chosen.extend(c for c in below if c.job.team not in reclaim)
                else:
                    chosen.extend(below)
            for team in reclaim:
                entries = ordered.get(team, [])
                chosen.extend(self._stoppable(members, [i for _, i in entries]))
        if taken:
            chosen = [c for c in chosen if c.job_id not in taken]
        return chosen

    def _below(
        self,
        pool: str,
        cls: Priority,
        members: Mapping[str, Allocation],
        ordered: Mapping[str, Ordered],
        threshold: float,
    ) -> list[Candidate]:
        """The group's stoppable jobs that score below `threshold`. The jobs of each team whose
        floor plus the team's term may be below the highest threshold asked so far in the pass
        are scored once and kept in order (a pass asks with thresholds that mostly fall)."""
        scan = self._scans.get((pool, cls))
        if scan is None:
            scan = self._scans[(pool, cls)] = _Scan()
        if threshold > scan.upto:
            fresh: list[str] = []
            reached = scan.reached
            for team, entries in ordered.items():
                term = self._score.team_term(team)
                # (A job's score is its floor plus the term or more, up to rounding.)
                limit = threshold - term + _ROUNDING * (1.0 + abs(threshold) + abs(term))
                start = reached.get(team, 0)
                cut = bisect.bisect_left(entries, (limit,), start)
                if cut > start:
                    fresh.extend(i for _, i in entries[start:cut])
                    reached[team] = cut
            if fresh:
                scan.candidates.extend(self._stoppable(members, fresh))
                scan.candidates.sort(key=_by_priority)
                scan.priorities = [c.effective_priority for c in scan.candidates]
            scan.upto = threshold
        return scan.candidates[: bisect.bisect_left(scan.priorities, threshold)]

    def _lowest(self, pool: str, cls: Priority, ordered: Mapping[str, Ordered]) -> float:
        """A number no job of the group (`ordered`) scores below in this pass (kept for the pass)."""
        lowest = self._lowest_of.get((pool, cls))
        if lowest is None:
            lowest = math.inf
            for team, entries in ordered.items():
                term = self._score.team_term(team)
                value = entries[0][0]
                bound = value + term - _ROUNDING * (1.0 + abs(value) + abs(term))
                if bound < lowest:
                    lowest = bound
            self._lowest_of[(pool, cls)] = lowest
        return lowest

    def _borrowing_in(
        self, job: Job, pool: str, team_counts: Mapping[Priority, Mapping[str, int]], ledger: Ledger
    ) -> set[str]:
        """`_borrowing`, from the index's teams of `pool`."""
        usage = ledger.team_used
        if not _may_reclaim(job, usage, ledger, pool):
            return set()
        teams = set().union(*team_counts.values())
        return {t for t in teams if t != job.team and borrowed_gpus(t, usage, ledger.quotas) > 0}

    def _floor_ordered(self, threshold: float, taken: set[str]) -> float:
        """`_blocking_facts`'s floor from the jobs in `score_floor` order: the lowest of the pools'
        (`_pool_floor`), which is `threshold` when no job scores below it."""
        floor = threshold
        for pool in self._index.groups:
            lowest = self._pool_floor(pool, threshold, taken)
            if lowest < floor:
                floor = lowest
        return floor

    def _pool_floor(self, pool: str, threshold: float, taken: set[str]) -> float:
        """The lowest effective priority below `threshold` of a stoppable running job of `pool`
        not in `taken`, or `threshold` when none scores below it.

        Compared with any threshold t <= `threshold` (`floor < t`), it says whether a job of the
        pool not in `taken` scores below t. So it is kept for the pass, per pool, and made again
        only when `taken` grows (nothing else it reads changes in a pass: the scores and shields
        of running jobs do not depend on the ledger) or a higher threshold is asked (a pass asks
        with thresholds that fall, as it pops its jobs best first)."""
        kept = self._pool_floors.get(pool)
        if kept is not None and kept[0] == len(taken) and threshold <= kept[1]:
            return kept[2]
        floor = threshold
        step, drop = self._step, self._floor_drop
        known = self._candidates
        for cls, members in self._index.groups.get(pool, {}).items():
            if step * cls.rank - drop >= threshold:
                continue
            ordered = self._ordered(pool, cls)
            if self._lowest(pool, cls, ordered) >= floor:
                continue
            for team, entries in ordered.items():
                term = self._score.team_term(team)
                margin = _ROUNDING * (1.0 + abs(term))
                for value, job_id in entries:
                    if value + term - margin * (1.0 + abs(value)) >= floor:
                        break  # neither it nor any job after it scores below the floor
                    if job_id in taken:
                        continue
                    if job_id in known:
                        candidate = known[job_id]
                    else:
                        found = self._stoppable(members, (job_id,))
                        candidate = found[0] if found else None
                    if candidate is not None and candidate.effective_priority < floor:
                        floor = candidate.effective_priority
        self._pool_floors[pool] = (len(taken), threshold, floor)
        return floor

    def possible_victims(
        self, job: Job, priority: float, pool: str, ledger: Ledger, taken: set[str]
    ) -> list[Candidate]:
        """The pool's running jobs not yet chosen in this pass that `eligibility` may accept as
        victims for `job`."""
        if self._class_floor:
            return self._possible_ordered(job, priority, pool, ledger, taken)
        groups = self._groups.get(pool)
        if not groups:
            return []
        config = self._config
        threshold = priority - config.preemption_margin
        borrowing: set[str] | None = None  # teams `job` may reclaim from here, found when needed
        chosen: list[Candidate] = []
        # Without a class floor (some weight may lower a score) every group may hold jobs below
        # the threshold: each is read from its lowest score up.
        for group in groups.values():
            reclaim: list[str] = []
            allowed = group.reclaim_from.get(job.priority)
            if allowed is None:
                allowed = _reclaim_allowed(group.allocations[0].job, job, config)
                group.reclaim_from[job.priority] = allowed
            if allowed:
                if borrowing is None:
                    borrowing = self._borrowing(job, pool, groups, ledger)
                reclaim = [t for t in borrowing if t in self._teams(group)]
            candidates = self._scored(group)
            chosen.extend(candidates[: bisect.bisect_left(group.priorities, threshold)])
            by_team = self._by_team(group) if reclaim else {}
            for team in reclaim:
                if team not in by_team:
                    continue  # its jobs of this class are all shielded
                members, priorities = by_team[team]
                chosen.extend(members[bisect.bisect_left(priorities, threshold) :])
        if taken:
            chosen = [c for c in chosen if c.job_id not in taken]
        return chosen

    def nothing_left_to_decide(
        self,
        best: float,
        classes_left: Mapping[Priority, int],
        preemptions_left: int,
        surplus: Mapping[str, int],
        taken: set[str],
        changes: int,
    ) -> bool:
        """True when no job still to be decided (effective priority at most `best`, classes
        `classes_left`) can be admitted or preempt, as the ledger stands: every pool is full and
        no GPUs freed by leaving victims are spare (no admission, no claim); and the preemption
        budget is spent, or no running job is a victim for any of them (none lower by the
        margin than `best`, and none on a borrowing team in a class that a class left may
        reclaim from). Those jobs only wait, which changes nothing, so it stays true for all.

        What it reads of the ledger is kept until `changes` (the pass's count of decisions that
        changed the ledger, the victims taken or the spare GPUs) moves: `best` only falls."""
        facts = self._facts
        if facts is None or facts[0] != changes:
            facts = self._facts = (changes, *self._blocking_facts(best, surplus, taken))
        _, full, floor, reclaimers = facts
        if not full:
            return False
        if preemptions_left <= 0:
            return True
        if best - self._config.preemption_margin > floor:
            return False
        return reclaimers.isdisjoint(classes_left)

    def _blocking_facts(
        self, best: float, surplus: Mapping[str, int], taken: set[str]
    ) -> tuple[bool, float, frozenset[Priority]]:
        """Whether every pool is full with no spare GPUs; the lowest effective priority of an
        untaken running job that may be lower by the margin than a job of priority `best` or
        less (groups of a class that cannot be are skipped; with no negative weight, it is
        `best - margin` when no job is below that, which compares the same with any lower best);
        and the classes whose jobs may reclaim from a running job on a borrowing team
        (`reclaim_allowed_between`)."""
        ledger = self.ledger
        full = all(ledger.free(pool) <= 0 for pool in ledger.pools) and all(v <= 0 for v in surplus.values())
        if not full:
            return False, math.inf, frozenset()
        config = self._config
        threshold = best - config.preemption_margin
        floor = math.inf
        borrowed: set[Priority] = set()
        if self._class_floor:
            floor = self._floor_ordered(threshold, taken)
            borrowing = {t for t in ledger.team_used if borrowed_gpus(t, ledger.team_used, ledger.quotas) > 0}
            if borrowing:
                for team_classes in self._index.team_counts.values():
                    for cls, teams in team_classes.items():
                        if cls not in borrowed and not borrowing.isdisjoint(teams):
                            borrowed.add(cls)
            return True, floor, _reclaimers(frozenset(borrowed), config)
        for groups in self._groups.values():
            for cls, group in groups.items():
                for candidate in self._scored(group):
                    if candidate.job_id not in taken:
                        floor = min(floor, candidate.effective_priority)
                        break
                if cls not in borrowed and any(
                    borrowed_gpus(team, ledger.team_used, ledger.quotas) > 0 for team in self._teams(group)
                ):
                    borrowed.add(cls)
        return True, floor, _reclaimers(frozenset(borrowed), config)

    def _borrowing(self, job: Job, pool: str, groups: dict[Priority, _Group], ledger: Ledger) -> set[str]:
        """The other teams running in `pool` that borrow, if `job`'s team may reclaim there."""
        usage = ledger.team_used
        if not _may_reclaim(job, usage, ledger, pool):
            return set()
        teams = set().union(*(self._teams(g) for g in groups.values()))
        return {t for t in teams if t != job.team and borrowed_gpus(t, usage, ledger.quotas) > 0}


# Relative room for rounding when a sum of score terms is compared with a score.
_ROUNDING = 1e-6


def _reclaimers(borrowed: frozenset[Priority], config: SchedulerConfig) -> frozenset[Priority]:
    """The classes whose jobs may reclaim from a running job of one of the classes `borrowed`
    (`reclaim_allowed_between`)."""
    return frozenset(c for c in Priority if any(reclaim_allowed_between(v, c, config) for v in borrowed))


def _by_priority(candidate: Candidate) -> float:
    return candidate.effective_priority


def _alike(job: Job) -> tuple[object, ...] | None:
    """What decides a pass's answer for a job other than its effective priority: the job fields
    that `candidate_pools`, `Ledger.shortfall` and the victims' eligibility read (team, class,
    shape, spot preference, interruptions). None for a job with a deadline, whose placement
    also depends on its remaining time."""
    spec = job.spec
    if spec.deadline is not None:
        return None
    return (job.team, spec.priority, spec.gpus, spec.nodes, spec.gpu_type, spec.spot, job.interruptions)


def _add_spare(surplus: dict[str, int], job: Job, pool: Pool, victims: Sequence[Allocation]) -> None:
    """Count the GPUs that `victims` free in `pool` beyond what `job` takes there."""
    spare = sum(v.gpus for v in victims if v.pool == pool.name) - pool.demand_gpus(job)
    if spare > 0:
        surplus[pool.name] = surplus.get(pool.name, 0) + spare


def _claim_surplus(job: Job, pools: Sequence[Pool], surplus: dict[str, int], ledger: Ledger) -> str | None:
    """Claim, for `job`, GPUs that leaving victims free beyond their preemptors' needs, in the
    first of `pools` with enough of them and room in the job's team quota: the quota is charged
    now (the pool already is, for the victims), and the wait reason says so. None when none fits."""
    for pool in pools:
        demand = pool.demand_gpus(job)
        if surplus.get(pool.name, 0) < demand:
            continue
        if quota_shortfall(job.team, demand, ledger.team_used, ledger.quotas) is not None:
            continue
        surplus[pool.name] -= demand
        ledger.team_used[job.team] = ledger.team_used.get(job.team, 0) + demand
        return f"waiting for {demand} GPUs in {pool.name} that preempted jobs free as they leave"
    return None


def _reserve_for_preemptor(ledger: Ledger, job: Job, pool: Pool, victims: Sequence[Allocation]) -> None:
    """Charge the ledger for `job` running in `pool` once `victims` have left.

    Victims keep their pool GPUs until they have checkpointed and left, so the pool stays
    charged for them (nothing else may start there meanwhile); the part of the job's demand
    that they do not free comes from the pool's free GPUs and is reserved now, or a later job
    could take the same free GPUs and over-commit the pool. Quotas move at once.
    """
    demand = pool.demand_gpus(job)
    freed = sum(v.gpus for v in victims if v.pool == pool.name)
    ledger.pool_used[pool.name] = ledger.pool_used.get(pool.name, 0) + max(0, demand - freed)
    for victim in victims:
        ledger.team_used[victim.job.team] = ledger.team_used.get(victim.job.team, 0) - victim.gpus
    ledger.team_used[job.team] = ledger.team_used.get(job.team, 0) + demand


def _no_pool_reason(job: Job, snapshot: ClusterSnapshot) -> str:
    gpu_type = job.spec.gpu_type
    if gpu_type is not None and gpu_type not in snapshot.gpu_types:
        return f"waiting: no pool has GPU type {gpu_type}"
    return (
        f"waiting: no pool can host {job.gpus} GPUs on {job.nodes} node(s) with spot={job.spec.spot.value}"
        f" for a {job.priority.value} job"
    )
