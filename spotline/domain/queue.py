"""The queue a pass reads: the pending jobs as an index serves them (`PendingQueue`, in memory
`SortedQueue`), the bounded window of it that one pass decides about (`read_window`), and the
order in which the pass decides (`ranked`)."""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from spotline.domain.models import PRIORITIES_HIGH_FIRST, Job, Priority
from spotline.domain.priority import PriorityScorer


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


def read_window(queue: PendingQueue, limit: int) -> list[Job]:
    """The head of each class plus the most urgent deadlines, each job once."""
    return window_parts(queue, limit)[0]


# A part of the window: its first and last index + 1, the highest class among its jobs, and
# whether any of them has a deadline (what bounds the scores of its jobs).
WindowPart = tuple[int, int, Priority, bool]


def window_parts(queue: PendingQueue, limit: int) -> tuple[list[Job], dict[Priority, int], list[WindowPart]]:
    """`read_window`, how many of its jobs each class has, and its parts: the head of each class,
    then the urgent jobs not in one."""
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
        return window, counts, [(start, end, cls, False) for start, end, cls in heads]
    parts: list[WindowPart] = [
        (start, end, cls, any(job.spec.deadline is not None for job in window[start:end]))
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
        parts.append((start, len(window), highest, True))
    return window, counts, parts


def ranked(
    window: Sequence[Job], parts: Sequence[WindowPart], score: PriorityScorer
) -> Iterator[tuple[Job, float]]:
    """The jobs of `window`, best effective priority first (then submission time, then id), with
    their priorities: the order of a pass.

    A pass without explanations may stop early and need only the head of it, so the order is
    popped from a heap, and a part of the window is scored and pushed only when the heap's best
    might not outrank every job in it (`PriorityScorer.upper_bound`): the order is that of the
    whole window scored at once."""
    weights = score.weights
    unscored = [
        (
            -score.upper_bound(
                weights.class_term(weights.lift_ceiling_of(cls) if deadline else cls), deadline
            ),
            index,
            (start, end),
        )
        for index, (start, end, cls, deadline) in enumerate(parts)
    ]
    heapq.heapify(unscored)
    order: list[tuple[float, float, str, Job]] = []
    while order or unscored:
        # Score the parts whose bound reaches the heap's best (`<=`: a tie goes to submission time).
        while unscored and (not order or order[0][0] >= unscored[0][0]):
            _, _, (start, end) = heapq.heappop(unscored)
            jobs = window[start:end]
            order.extend(
                [
                    (-priority, job.submitted_at, job.id, job)
                    for job, priority in zip(jobs, score.scores(jobs), strict=True)
                ]
            )
            heapq.heapify(order)
        negative, _, _, job = heapq.heappop(order)
        yield job, -negative
