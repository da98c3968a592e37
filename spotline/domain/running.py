"""The running allocations as a scheduling pass reads them: `RunningIndex`.

A pass needs the GPUs used per pool and per team (its ledger), the allocations checkpointing for
each preemptor, and the allocations grouped by pool and class (its victim search). `plan` builds
the index from the snapshot's allocations (`RunningIndex.of`); a caller that keeps the
allocations itself across passes (the simulator) may keep the index up to date instead, with
`add` and `remove` as allocations start, change and end, and pass it to `plan`: the pass then
reads it and not the snapshot's allocations, and decides the same.
"""

from __future__ import annotations

from collections.abc import Iterable

from spotline.domain.models import Allocation, Priority


class RunningIndex:
    """Sums and groups of a set of allocations, kept as allocations are added and removed.

    `remove` takes the allocation as it was added (its pool, GPUs, class, team and
    `draining_for` find what to take back). Nothing is kept for a pool, team, preemptor or
    group once its last allocation is removed, so an index kept up to date equals one built
    from scratch from the same allocations (tested).
    """

    __slots__ = ("count", "draining", "groups", "pool_used", "team_counts", "team_used")

    def __init__(self) -> None:
        self.pool_used: dict[str, int] = {}
        self.team_used: dict[str, int] = {}
        # Preemptor id -> job id -> the allocation checkpointing to make room for it.
        self.draining: dict[str, dict[str, Allocation]] = {}
        # Pool -> class -> job id -> allocation (draining ones included).
        self.groups: dict[str, dict[Priority, dict[str, Allocation]]] = {}
        # Pool -> class -> team -> how many of that group's allocations are the team's.
        self.team_counts: dict[str, dict[Priority, dict[str, int]]] = {}
        self.count = 0

    @classmethod
    def of(cls, allocations: Iterable[Allocation]) -> RunningIndex:
        index = cls()
        for allocation in allocations:
            index.add(allocation)
        return index

    def __len__(self) -> int:
        return self.count

    def allocations(self) -> list[Allocation]:
        """Every allocation held (in no particular order)."""
        return [
            a for classes in self.groups.values() for members in classes.values() for a in members.values()
        ]

    def add(self, allocation: Allocation) -> None:
        job = allocation.job
        pool, gpus, team, job_id = allocation.pool, allocation.gpus, job.team, job.id
        cls = job.spec.priority
        members = self.groups.setdefault(pool, {}).setdefault(cls, {})
        if job_id in members:
            raise ValueError(f"job {job_id} already holds an allocation in pool {pool}")
        members[job_id] = allocation
        teams = self.team_counts.setdefault(pool, {}).setdefault(cls, {})
        teams[team] = teams.get(team, 0) + 1
        self.pool_used[pool] = self.pool_used.get(pool, 0) + gpus
        self.team_used[team] = self.team_used.get(team, 0) + gpus
        if allocation.draining_for is not None:
            self.draining.setdefault(allocation.draining_for, {})[job_id] = allocation
        self.count += 1

    def remove(self, allocation: Allocation) -> None:
        job = allocation.job
        pool, gpus, team, job_id = allocation.pool, allocation.gpus, job.team, job.id
        cls = job.spec.priority
        classes = self.groups.get(pool, {})
        members = classes.get(cls, {})
        if job_id not in members:
            raise KeyError(f"job {job_id} holds no allocation of class {cls.value} in pool {pool}")
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
        self.count -= 1

    def replace(self, old: Allocation, new: Allocation) -> None:
        """`remove(old)` then `add(new)`. When only the job's record changed (a checkpoint, a
        state), the new allocation takes the old one's place and no sum moves."""
        job, was = new.job, old.job
        cls = job.spec.priority
        if (
            job.id == was.id
            and new.pool == old.pool
            and new.gpus == old.gpus
            and new.draining_for == old.draining_for
            and job.team == was.team
            and cls == was.spec.priority
        ):
            members = self.groups.get(new.pool, {}).get(cls, {})
            if job.id not in members:
                raise KeyError(f"job {job.id} holds no allocation of class {cls.value} in pool {new.pool}")
            members[job.id] = new
            if new.draining_for is not None:
                self.draining[new.draining_for][job.id] = new
            return
        self.remove(old)
        self.add(new)


def _decrement(counts: dict[str, int], key: str, amount: int) -> None:
    left = counts[key] - amount
    if left:
        counts[key] = left
    else:
        del counts[key]
