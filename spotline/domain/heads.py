"""The head of a class's queue as a pass reads it in order, without scoring all of it: `streams`.

A pass without explanations pops the best few jobs of a window of hundreds, and its heads change
little from one pass to the next. Here each class's head is kept across passes (by the identity
of its job records, which are immutable), each team's jobs of it in two orders of an upper bound
on their score that does not depend on the pass:

- by `static`, the terms that do not change while the job waits (size, history, its
  shortest-declared term, the most its deadline term can be): a score is at most its class term +
  the age weight + static + its team's fair-share term;
- by `static - age * enqueued_at / max_age_s`: a score is also at most that + class term +
  age * now / max_age_s + team term (the age term is age * min(1, wait / max_age_s)).

A `Stream` walks one team's jobs down both orders at once (Fagin's threshold algorithm): a job it
has not yet given scores at most the smaller of the two bounds at its positions. The pass scores a
stream's next jobs only when that bound reaches its best scored job, so its order is that of the
whole window scored at once.

A pure performance device, with no effect on decisions (tested against scoring every job): a head
that changed too much since the last pass (a control plane that reads new records each pass) is
not kept, and the pass scores it whole.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from typing import cast

from spotline.domain.config import PriorityWeights
from spotline.domain.models import Job, Priority
from spotline.domain.priority import PriorityScorer

# Relative room for rounding in a bound (its terms are added in another order than a score's).
_ROUNDING = 1e-9
# A job of a stream: (key, id of the record).
_Entry = tuple[float, int]


class _Team:
    __slots__ = ("by_arrival", "by_static")

    def __init__(self) -> None:
        self.by_static: list[_Entry] = []  # ascending
        self.by_arrival: list[_Entry] = []  # ascending; inf for a job that started (no age bound)


class _Head:
    """One class's head as the last pass read it, and its teams' orders (None until made)."""

    __slots__ = ("jobs", "keys", "latest_enqueue", "plain_for", "seen", "teams", "weights")

    def __init__(self, weights: PriorityWeights, jobs: Sequence[Job]) -> None:
        self.weights = weights
        # The head's records in order, as the last pass read them.
        self.seen: list[Job] = list(jobs)
        # The records by id: holding them keeps an id from naming another record.
        self.jobs: dict[int, Job] = {id(job): job for job in jobs}
        self.teams: dict[str, _Team] | None = None
        self.keys: dict[int, tuple[str, float, float]] = {}  # id -> (team, static, arrival key)
        # No job of the head was enqueued later (kept as jobs leave: a bound needs no more).
        self.latest_enqueue = -math.inf
        # Passes left that score the head whole (a pass whose streams scored too many of its jobs
        # sets it: ties of many jobs at the top of a head make the streams dearer than scoring all).
        self.plain_for = 0

    def make(self, score: PriorityScorer) -> None:
        self.teams = {}
        self.keys = {}
        self.latest_enqueue = -math.inf
        for number, job in self.jobs.items():
            self._add(number, job, score)

    def _add(self, number: int, job: Job, score: PriorityScorer) -> None:
        assert self.teams is not None
        team, static, enqueued = score.static_bound(job)
        weights = self.weights
        if enqueued is None:
            arrival = math.inf
        else:
            arrival = static - weights.age * enqueued / weights.max_age_s
            if enqueued > self.latest_enqueue:
                self.latest_enqueue = enqueued
        self.keys[number] = (team, static, arrival)
        orders = self.teams.get(team)
        if orders is None:
            orders = self.teams[team] = _Team()
        bisect.insort(orders.by_static, (static, number))
        bisect.insort(orders.by_arrival, (arrival, number))

    def _remove(self, number: int) -> None:
        assert self.teams is not None
        team, static, arrival = self.keys.pop(number)
        orders = self.teams[team]
        _drop(orders.by_static, (static, number))
        _drop(orders.by_arrival, (arrival, number))
        if not orders.by_static:
            del self.teams[team]


def _drop(entries: list[_Entry], entry: _Entry) -> None:
    index = bisect.bisect_left(entries, entry)
    assert entries[index] == entry
    del entries[index]


# Per class: its head as the last pass read it.
_HEADS: dict[Priority, _Head] = {}


# The last weights asked about, and whether none is negative.
_CHECKED: list[tuple[PriorityWeights, bool]] = []


def _non_negative(weights: PriorityWeights) -> bool:
    if _CHECKED and _CHECKED[0][0] is weights:
        return _CHECKED[0][1]
    terms = (weights.age, weights.deadline, weights.size, weights.history, weights.fairshare)
    ok = min(terms) >= 0.0 and weights.shortest >= 0.0 and weights.attained >= 0.0
    _CHECKED[:] = [(weights, ok)]
    return ok


class Part:
    """A class's head as streams in one pass: the jobs its streams gave, and whether the pass
    stopped reading it by streams (`give`)."""

    __slots__ = ("budget", "given", "head", "jobs", "seen", "whole")

    def __init__(self, head: _Head, jobs: Sequence[Job]) -> None:
        self.head = head
        self.jobs = jobs
        self.seen: set[int] = set()
        self.given = 0
        self.budget = max(_BUDGET_MIN, len(jobs) // _BUDGET_SHARE)
        self.whole = False

    def give(self, count: int) -> list[Job] | None:
        """Count `count` more jobs given by its streams; past the budget, the jobs none of its
        streams gave yet (the pass scores them all and reads its streams no more), else None."""
        self.given += count
        if self.given <= self.budget:
            return None
        self.whole = True
        self.head.plain_for = _PLAIN_PASSES
        seen = self.seen
        return [job for job in self.jobs if id(job) not in seen]


# A part's streams give at most this many of its jobs (and at least `_BUDGET_MIN`) before the
# pass scores the rest whole, and the next `_PLAIN_PASSES` passes score it whole.
_BUDGET_SHARE = 8
_BUDGET_MIN = 16
_PLAIN_PASSES = 8


class Stream:
    """One team's jobs of a class's head, best bound first, for one pass."""

    __slots__ = (
        "_a",
        "_b",
        "_by_arrival",
        "_by_static",
        "_jobs",
        "_seen",
        "_to_arrival",
        "_to_static",
        "part",
    )

    def __init__(self, part: Part, orders: _Team, to_static: float, to_arrival: float | None) -> None:
        self.part = part
        self._jobs = part.head.jobs
        self._by_static = orders.by_static
        self._by_arrival = orders.by_arrival
        self._a = len(orders.by_static) - 1
        self._b = len(orders.by_arrival) - 1
        # A job's score is at most `to_static` + static, and at most `to_arrival` + its arrival
        # key (None: that bound does not hold in this pass).
        self._to_static = to_static
        self._to_arrival = to_arrival
        self._seen = part.seen  # (shared by the part's streams: a job is in one of them)

    def _advance(self) -> bool:
        """Move past the jobs already taken; False when none is left."""
        seen = self._seen
        by_static, a = self._by_static, self._a
        while a >= 0 and by_static[a][1] in seen:
            a -= 1
        self._a = a
        if a < 0:
            return False
        by_arrival, b = self._by_arrival, self._b
        while by_arrival[b][1] in seen:
            b -= 1
        self._b = b
        return True

    def bound(self) -> float:
        """A number no job of the stream not yet taken scores above (-inf when none is left)."""
        if not self._advance():
            return -math.inf
        static = self._by_static[self._a][0]
        bound = self._to_static + static
        size = abs(self._to_static) + abs(static)
        to_arrival = self._to_arrival
        if to_arrival is not None:
            arrival = self._by_arrival[self._b][0]
            other = to_arrival + arrival
            if other < bound:
                bound = other
                size = abs(to_arrival) + abs(arrival)
        return bound + _ROUNDING * (size + 1.0)

    def take(self, count: int) -> list[Job]:
        """The next `count` jobs at most, each from the order whose bound is the lower now."""
        out: list[Job] = []
        seen = self._seen
        to_static, to_arrival = self._to_static, self._to_arrival
        while len(out) < count and self._advance():
            static = self._by_static[self._a]
            number = static[1]
            if to_arrival is not None:
                arrival = self._by_arrival[self._b]
                if to_arrival + arrival[0] < to_static + static[0]:
                    number = arrival[1]
            seen.add(number)
            out.append(self._jobs[number])
        return out


def streams(cls: Priority, jobs: Sequence[Job], score: PriorityScorer, now: float) -> list[Stream] | None:
    """`_streams`, unless the head's last streams scored too many of it (`Part.give`)."""
    found = _streams(cls, jobs, score, now)
    if found:
        head = found[0].part.head
        if head.plain_for > 0:
            head.plain_for -= 1
            return None
    return found


def _same(seen: list[Job], jobs: Sequence[Job]) -> bool:
    """The same records in the same order, by identity. (Read as objects: compiled, reading a
    `Job` from a list checks its type, and this compares only identities.)"""
    mine = cast(list[object], seen)
    theirs = cast(list[object], jobs if isinstance(jobs, list) else list(jobs))
    count = len(mine)
    if count != len(theirs):
        return False
    return all(mine[index] is theirs[index] for index in range(count))


def _changes(
    seen: Sequence[object], known: Mapping[int, object], jobs: Sequence[object]
) -> tuple[list[object], list[object]] | None:
    """The records of `seen` that `jobs` no longer holds, and those of `jobs` new since, by
    identity (`known`: `seen` by id). Both are in the queue's order, and a record keeps its place
    in it, so one walk down both finds them: a record of `jobs` that `seen` holds further on
    means that those of `seen` before it left. None when the two are not in one order (a head
    read from another queue, or reordered): the caller makes the head again."""
    removed: list[object] = []
    added: list[object] = []
    count = len(seen)
    at = 0
    for job in jobs:
        if at < count and seen[at] is job:
            at += 1
            continue
        if known.get(id(job)) is not job:
            added.append(job)
            continue
        # In `seen`, further on (or before `at`, out of order: the walk runs off the end).
        while True:
            if at >= count:
                return None
            old = seen[at]
            at += 1
            if old is job:
                break
            removed.append(old)
    removed.extend(seen[at:])
    return removed, added


def _streams(cls: Priority, jobs: Sequence[Job], score: PriorityScorer, now: float) -> list[Stream] | None:
    """The head `jobs` of class `cls` as one stream per team, or None: score them all (the head
    changed too much since the last pass, or a weight is negative)."""
    weights = score.weights
    if not _non_negative(weights):
        return None
    head = _HEADS.get(cls)
    if head is None or (head.weights is not weights and head.weights != weights):
        _HEADS[cls] = _Head(weights, jobs)
        return None
    if not _same(head.seen, jobs):
        changed = _changes(head.seen, head.jobs, jobs)
        if changed is None or len(changed[0]) + len(changed[1]) > max(16, len(jobs) // 2):
            _HEADS[cls] = _Head(weights, jobs)
            return None
        removed, added = changed
        head.seen = list(jobs)
        known = head.jobs
        for job in removed:
            if head.teams is not None:
                head._remove(id(job))
            del known[id(job)]
        for job in added:
            record = known[id(job)] = cast(Job, job)
            if head.teams is not None:
                head._add(id(job), record, score)
    if head.teams is None:
        head.make(score)
    assert head.teams is not None
    class_term = weights.class_step * cls.rank
    # (The age bound by arrival holds when no job of the head was enqueued after `now`.)
    now_term = weights.age * now / weights.max_age_s if head.latest_enqueue <= now else None
    out: list[Stream] = []
    part = Part(head, jobs)
    for team, orders in head.teams.items():
        base = class_term + score.team_term(team)
        out.append(Stream(part, orders, base + weights.age, None if now_term is None else base + now_term))
    return out
