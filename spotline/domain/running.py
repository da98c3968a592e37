"""The running allocations as a scheduling pass reads them: `RunningIndex`.

A pass needs the GPUs used per pool and per team (its ledger), the allocations checkpointing for
each preemptor, and the allocations grouped by pool and class (its victim search). `plan` builds
the index from the snapshot's allocations (`RunningIndex.of`); a caller that keeps the
allocations itself across passes (the simulator) may keep them in an index instead, with `put`
and `remove` as allocations start, change and end, and pass it to `plan`: the pass then reads it
and not the snapshot's allocations, and decides the same.
"""

from __future__ import annotations

from collections.abc import Iterable

from spotline.domain.models import Allocation, Priority


class RunningIndex:
    """Allocations by job, with their sums and groups kept as allocations come, change and go.

    Nothing is kept for a pool, team, preemptor or group once its last allocation is removed, so
    an index kept up to date equals one built from scratch from the same allocations (tested).
    """

    __slots__ = ("_held", "draining", "groups", "pool_used", "team_counts", "team_used")

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


def _decrement(counts: dict[str, int], key: str, amount: int) -> None:
    left = counts[key] - amount
    if left:
        counts[key] = left
    else:
        del counts[key]
