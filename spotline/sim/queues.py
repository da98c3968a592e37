"""Pending jobs in buckets of interchangeable jobs, for the peers' scheduling passes.

Jobs with the same bucket key get the same answer from a peer's admission test (same team, class,
shape), so when the head of a bucket can neither start nor preempt, nothing behind it in that
bucket can in the same pass: a pass touches each bucket's head, not every waiting job.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Hashable, Iterator

from spotline.sim.model import SimJob

OrderKey = tuple[float, ...]
Entry = tuple[OrderKey, int, SimJob]


def _entry_key(entry: Entry) -> tuple[OrderKey, int]:
    return entry[0], entry[1]


class Buckets:
    """Pending jobs grouped by `key(job)`, each group sorted by `order(job)`, then job index."""

    def __init__(self, key: Callable[[SimJob], Hashable], order: Callable[[SimJob], OrderKey]) -> None:
        self.key = key
        self._order = order
        self.groups: dict[Hashable, list[Entry]] = {}
        self.count = 0

    def __len__(self) -> int:
        return self.count

    def add(self, job: SimJob) -> None:
        key = self.key(job)
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = []
        entry = (self._order(job), job.idx, job)
        if not group or _entry_key(group[-1]) < _entry_key(entry):
            group.append(entry)
        else:
            bisect.insort(group, entry, key=_entry_key)
        self.count += 1

    def head(self, key: Hashable) -> SimJob | None:
        group = self.groups.get(key)
        return group[0][2] if group else None

    def head_entry(self, key: Hashable) -> Entry | None:
        group = self.groups.get(key)
        return group[0] if group else None

    def pop(self, key: Hashable, position: int = 0) -> SimJob:
        """Take the job at `position` (0: the head) out of bucket `key`."""
        group = self.groups[key]
        _, _, job = group.pop(position)
        if not group:
            del self.groups[key]
        self.count -= 1
        return job

    def heads(self) -> Iterator[tuple[Hashable, Entry]]:
        for key, group in self.groups.items():
            yield key, group[0]

    def bucket(self, key: Hashable) -> list[Entry]:
        """The bucket's entries in order (read-only: use `pop` to take one)."""
        return self.groups.get(key, [])
