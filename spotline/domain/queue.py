"""The queue a pass reads: the pending jobs as an index serves them (`PendingQueue`, in memory
`SortedQueue`), the bounded window of it that one pass decides about (`read_window`), and the
order in which the pass decides (`ranked`)."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter, itemgetter
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


# Jobs a pass reads per class (and of the nearest deadlines): one DynamoDB query page per class;
# a job that fits can start only once it is in the window.
WINDOW_PER_CLASS = 256


def read_window(queue: PendingQueue, limit: int) -> list[Job]:
    """The head of each class (`limit` jobs at most), then the `limit` most urgent deadlines
    not among them: each job once."""
    window: list[Job] = []
    for priority in PRIORITIES_HIGH_FIRST:
        window.extend(queue.head(priority, limit))
    urgent = queue.urgent(limit)
    if not urgent:
        return window  # (no deadline queued: no set of the window's ids to build)
    seen = {job.id for job in window}
    for job in urgent:
        if job.id not in seen:
            seen.add(job.id)
            window.append(job)
    return window


def ranked(window: Sequence[Job], score: PriorityScorer) -> list[tuple[Job, float]]:
    """The jobs of `window` with their effective priorities, best first (then submission time,
    then id): the order of a pass."""
    # In submission order (then id) first: the stable sort by priority keeps that order among
    # equal priorities, as a key (-priority, submission time, id) would, without a key per job.
    jobs = sorted(window, key=_SUBMISSION)
    return sorted(zip(jobs, score.scores(jobs), strict=True), key=_PRIORITY, reverse=True)


_SUBMISSION = attrgetter("submitted_at", "id")
_PRIORITY = itemgetter(1)
