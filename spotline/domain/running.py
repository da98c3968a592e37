"""The running allocations as a scheduling pass reads them: `RunningIndex`.

A pass needs the GPUs used per pool and per team (its ledger), the allocations checkpointing for
each preemptor, and the allocations grouped by pool and class (its victim search). `plan` builds
the index from the snapshot's allocations (`RunningIndex.of`); a caller that keeps the
allocations itself across passes (the simulator) may keep them in an index instead, with `put`
and `remove` as allocations start, change and end, and pass it to `plan`: the pass then reads it
and not the snapshot's allocations, and decides the same.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable, Iterable

from spotline.domain.models import Allocation, Job, Priority

# One team's allocations in a group, as `RunningIndex.ordered` keeps them: (key, job id), ascending.
Ordered = list[tuple[float, str]]
# What an order's key function gives for a job: its key until a time, that time, its key after.
OrderKey = tuple[float, float, float]


class RunningIndex:
    """Allocations by job, with their sums and groups kept as allocations come, change and go.

    Nothing is kept for a pool, team, preemptor or group once its last allocation is removed, so
    an index kept up to date equals one built from scratch from the same allocations (tested).
    """

    __slots__ = (
        "_held",
        "_order_expiry",
        "_order_key",
        "_order_keys",
        "_order_token",
        "_ordered",
        "draining",
        "groups",
        "pool_used",
        "team_counts",
        "team_used",
    )

    def __init__(self) -> None:
        self._held: dict[str, Allocation] = {}  # job id -> its allocation
        self.pool_used: dict[str, int] = {}
        self.team_used: dict[str, int] = {}
        # Preemptor id -> job id -> the allocation checkpointing to make room for it.
        self.draining: dict[str, dict[str, Allocation]] = {}
        # Pool -> class -> job id -> allocation (draining ones included).
        self.groups: dict[str, dict[Priority, dict[str, Allocation]]] = {}
        # Pool -> class -> team -> how many of that group's allocations are the team's.
        self.team_counts: dict[str, dict[Priority, dict[str, int]]] = {}
        # `ordered`: (pool, class) -> team -> its allocations by a key of their job records, made
        # for a group when first asked and kept up to date by `put` and `remove` from then on;
        # the key of each job kept, and the key function with the token it was asked with.
        self._ordered: dict[tuple[str, Priority], dict[str, Ordered]] = {}
        self._order_keys: dict[str, OrderKey] = {}
        self._order_key: Callable[[Job], OrderKey] | None = None
        self._order_token: object = None
        # (time, job id) of the keys that change at a time (stale ones are skipped).
        self._order_expiry: list[tuple[float, str]] = []

    @classmethod
    def of(cls, allocations: Iterable[Allocation]) -> RunningIndex:
        """The index of `allocations` (a job may hold one allocation only)."""
        index = cls()
        for allocation in allocations:
            job_id = allocation.job.id
            if job_id in index._held:
                raise ValueError(
                    f"job {job_id} holds two allocations ({index._held[job_id].pool}, {allocation.pool})"
                )
            index.put(allocation)
        return index

    def __len__(self) -> int:
        return len(self._held)

    def allocations(self) -> list[Allocation]:
        """Every allocation held."""
        return list(self._held.values())

    def held(self, job_id: str) -> Allocation:
        """The allocation `job_id` holds."""
        allocation = self._held.get(job_id)
        if allocation is None:
            raise KeyError(f"job {job_id} holds no allocation")
        return allocation

    def put(self, allocation: Allocation) -> None:
        """Hold `allocation` for its job: a new one, or the job's allocation as it changed. When
        only the job's record changed (a checkpoint, a state), it takes the old one's place and no
        sum moves."""
        job = allocation.job
        job_id = job.id
        old = self._held.get(job_id)
        if old is not None:
            was = old.job
            cls = job.spec.priority
            if (
                allocation.pool == old.pool
                and allocation.gpus == old.gpus
                and allocation.draining_for == old.draining_for
                and job.team == was.team
                and cls == was.spec.priority
            ):
                self._held[job_id] = allocation
                self.groups[allocation.pool][cls][job_id] = allocation
                if allocation.draining_for is not None:
                    self.draining[allocation.draining_for][job_id] = allocation
                if job is not was and self._ordered and not _same_order_fields(job, was):
                    ordered = self._ordered.get((allocation.pool, cls))
                    if ordered is not None:
                        assert self._order_key is not None
                        key = self._order_key(job)
                        old_key = self._order_keys[job_id]
                        if key != old_key:
                            entries = ordered[job.team]
                            _drop(entries, old_key[0], job_id)
                            self._keep_key(entries, job_id, key)
                return
            self.remove(job_id)
        pool, gpus, team = allocation.pool, allocation.gpus, job.team
        cls = job.spec.priority
        self._held[job_id] = allocation
        self.groups.setdefault(pool, {}).setdefault(cls, {})[job_id] = allocation
        teams = self.team_counts.setdefault(pool, {}).setdefault(cls, {})
        teams[team] = teams.get(team, 0) + 1
        self.pool_used[pool] = self.pool_used.get(pool, 0) + gpus
        self.team_used[team] = self.team_used.get(team, 0) + gpus
        if allocation.draining_for is not None:
            self.draining.setdefault(allocation.draining_for, {})[job_id] = allocation
        if self._ordered:
            ordered = self._ordered.get((pool, cls))
            if ordered is not None:
                assert self._order_key is not None
                self._keep_key(ordered.setdefault(team, []), job_id, self._order_key(job))

    def remove(self, job_id: str) -> Allocation:
        """Stop holding `job_id`'s allocation, and return it."""
        allocation = self.held(job_id)
        del self._held[job_id]
        job = allocation.job
        pool, gpus, team = allocation.pool, allocation.gpus, job.team
        cls = job.spec.priority
        classes = self.groups[pool]
        members = classes[cls]
        del members[job_id]
        if self._ordered:
            ordered = self._ordered.get((pool, cls))
            if ordered is not None:
                entries = ordered[team]
                _drop(entries, self._order_keys.pop(job_id)[0], job_id)
                if not entries:
                    del ordered[team]
                if not members:
                    del self._ordered[(pool, cls)]
        if not members:
            del classes[cls]
            if not classes:
                del self.groups[pool]
        team_classes = self.team_counts[pool]
        teams = team_classes[cls]
        _decrement(teams, team, 1)
        if not teams:
            del team_classes[cls]
            if not team_classes:
                del self.team_counts[pool]
        _decrement(self.pool_used, pool, gpus)
        _decrement(self.team_used, team, gpus)
        if allocation.draining_for is not None:
            leaving = self.draining[allocation.draining_for]
            del leaving[job_id]
            if not leaving:
                del self.draining[allocation.draining_for]
        return allocation

    def ordered(
        self, pool: str, cls: Priority, key: Callable[[Job], OrderKey], token: object, now: float
    ) -> dict[str, Ordered]:
        """The allocations of class `cls` in `pool` per team, each team's as (k, job id) in
        ascending order of k, where `key(job)` = (k until a time, that time, k from then on) and
        the time is compared with `now`. Made when first asked and kept up to date as allocations
        come, change and go, and as the times pass (a caller that keeps the index across passes
        reads it again at little cost); `token` names `key` (asked with another token, every group
        is made again with the new key). `key` may read a job's spec, `started_at`, `enqueued_at`,
        `runtime_s`, `preemptions` and `interruptions` only."""
        if self._order_key is None or (token is not self._order_token and token != self._order_token):
            self._ordered.clear()
            self._order_keys.clear()
            self._order_expiry.clear()
            self._order_key = key
            self._order_token = token
        expiry = self._order_expiry
        while expiry and expiry[0][0] <= now:
            self._expire(*heapq.heappop(expiry))
        found = self._ordered.get((pool, cls))
        if found is None:
            found = {}
            keys = self._order_keys
            for job_id, allocation in self.groups[pool][cls].items():
                job = allocation.job
                value = keys[job_id] = key(job)
                if value[1] != math.inf:
                    if value[1] <= now:
                        value = keys[job_id] = (value[2], math.inf, value[2])
                    else:
                        heapq.heappush(expiry, (value[1], job_id))
                found.setdefault(job.team, []).append((value[0], job_id))
            for entries in found.values():
                entries.sort()
            self._ordered[(pool, cls)] = found
        return found

    def _keep_key(self, entries: Ordered, job_id: str, key: OrderKey) -> None:
        self._order_keys[job_id] = key
        bisect.insort(entries, (key[0], job_id))
        if key[1] != math.inf:
            heapq.heappush(self._order_expiry, (key[1], job_id))

    def _expire(self, at: float, job_id: str) -> None:
        """The key of `job_id` changes at `at` (unless it changed or left since)."""
        key = self._order_keys.get(job_id)
        if key is None or key[1] != at:
            return
        allocation = self._held[job_id]
        job = allocation.job
        entries = self._ordered[(allocation.pool, job.spec.priority)][job.team]
        _drop(entries, key[0], job_id)
        after = key[2]
        self._order_keys[job_id] = (after, math.inf, after)
        bisect.insort(entries, (after, job_id))


def _same_order_fields(job: Job, was: Job) -> bool:
    """Whether the fields an order's key reads are the same in both records (`ordered`'s key may
    read the spec, the start, enqueue and run times and the disruptions)."""
    return (
        job.spec is was.spec
        and job.started_at == was.started_at
        and job.enqueued_at == was.enqueued_at
        and job.runtime_s == was.runtime_s
        and job.preemptions == was.preemptions
        and job.interruptions == was.interruptions
    )


def _drop(entries: Ordered, key: float, job_id: str) -> None:
    index = bisect.bisect_left(entries, (key, job_id))
    assert entries[index] == (key, job_id)
    del entries[index]


def _decrement(counts: dict[str, int], key: str, amount: int) -> None:
    left = counts[key] - amount
    if left:
        counts[key] = left
    else:
        del counts[key]
