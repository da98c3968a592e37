"""The running allocations as a scheduling pass reads them: `RunningIndex`.

A pass needs the GPUs used per pool and per team (its ledger), the allocations checkpointing for
each preemptor, and the allocations grouped by pool and class (its victim search). `plan` builds
the index from the snapshot's allocations (`RunningIndex.of`).
"""

from __future__ import annotations

from collections.abc import Iterable

from spotline.domain.models import Allocation, DrainTarget, Priority


class RunningIndex:
    """Allocations by job, with their sums per pool and team and their groups by pool and class."""

    __slots__ = ("_held", "dated", "draining", "elastic", "groups", "pool_used", "team_counts", "team_used")

    def __init__(self) -> None:
        self._held: dict[str, Allocation] = {}  # job id -> its allocation
        self.pool_used: dict[str, int] = {}
        self.team_used: dict[str, int] = {}
        # What they leave for (a preemptor's id, a move) -> job id -> the allocation checkpointing.
        self.draining: dict[DrainTarget, dict[str, Allocation]] = {}
        # Pool -> class -> job id -> allocation (draining ones included).
        self.groups: dict[str, dict[Priority, dict[str, Allocation]]] = {}
        # Pool -> class -> team -> how many of that group's allocations are the team's.
        self.team_counts: dict[str, dict[Priority, dict[str, int]]] = {}
        # Pool -> the elastic jobs' allocations there, in the order held.
        self.elastic: dict[str, list[Allocation]] = {}
        # The allocations of jobs with a deadline or a deadline's answer, in the order held: what
        # the pass's deadline plans and On-Demand holds read of the running jobs.
        self.dated: list[Allocation] = []

    @classmethod
    def of(cls, allocations: Iterable[Allocation]) -> RunningIndex:
        """The index of `allocations` (a job may hold one allocation only)."""
        index = cls()
        held, groups, team_counts = index._held, index.groups, index.team_counts
        pool_used, team_used, draining = index.pool_used, index.team_used, index.draining
        for allocation in allocations:
            job = allocation.job
            job_id = job.id
            if job_id in held:
                raise ValueError(
                    f"job {job_id} holds two allocations ({held[job_id].pool}, {allocation.pool})"
                )
            held[job_id] = allocation
            spec = job.spec
            pool, gpus, team, priority = allocation.pool, allocation.gpus, job.team, spec.priority
            # (Looked up before inserting: a pass indexes every running job, most into groups
            # that exist already.)
            classes = groups.get(pool)
            if classes is None:
                classes = groups[pool] = {}
                team_counts[pool] = {}
            members = classes.get(priority)
            if members is None:
                members = classes[priority] = {}
                team_counts[pool][priority] = {}
            members[job_id] = allocation
            teams = team_counts[pool][priority]
            teams[team] = teams.get(team, 0) + 1
            pool_used[pool] = pool_used.get(pool, 0) + gpus
            team_used[team] = team_used.get(team, 0) + gpus
            if allocation.draining_for is not None:
                draining.setdefault(allocation.draining_for, {})[job_id] = allocation
            if spec.elastic is not None:
                index.elastic.setdefault(pool, []).append(allocation)
            if spec.deadline is not None or job.deadline_answer is not None:
                index.dated.append(allocation)
        return index

    def __len__(self) -> int:
        return len(self._held)

    def get(self, job_id: str) -> Allocation | None:
        """The allocation `job_id` holds, or None."""
        return self._held.get(job_id)

    def allocations(self) -> list[Allocation]:
        """Every allocation held."""
        return list(self._held.values())
