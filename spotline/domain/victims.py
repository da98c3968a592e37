"""The running jobs as a pass's preemption candidates (`RunningJobs`): which of them may be
victims of a job (`possible_victims`), and whether any job left in the pass can still be admitted
or preempt (`nothing_left_to_decide`).

`select_victims` (`preemption.py`) then chooses among the candidates found here.
"""

from __future__ import annotations

import bisect
import functools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from spotline.domain.config import SchedulerConfig
from spotline.domain.models import Allocation, ClusterSnapshot, Job, Priority
from spotline.domain.preemption import (
    Candidate,
    _may_reclaim,
    _reclaim_allowed,
    reclaim_allowed_between,
    shielded,
)
from spotline.domain.priority import PriorityScorer, score_floor
from spotline.domain.quota import Ledger, borrowed_gpus
from spotline.domain.running import Ordered, RunningIndex


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
    """A group's jobs scored so far in a pass by `RunningJobs._below`: every stoppable job that
    may score below `upto`, by effective priority; and per team, how far its order was read."""

    upto: float = -math.inf
    reached: dict[str, int] = field(default_factory=dict)
    candidates: list[Candidate] = field(default_factory=list)
    priorities: list[float] = field(default_factory=list)


class RunningJobs:
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
        self._step = weights.effective_class_step
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
