"""The running jobs as a pass's preemption candidates (`RunningJobs.possible_victims`), and the
pass's working ledger and leaving allocations, read from the snapshot's `RunningIndex`.

`select_victims` (`preemption.py`) then chooses among the candidates found here.
"""

from __future__ import annotations

from spotline.domain.config import SchedulerConfig
from spotline.domain.models import Allocation, ClusterSnapshot, DrainTarget, Job, Priority
from spotline.domain.preemption import Candidate, _may_reclaim, reclaim_allowed_between, shielded
from spotline.domain.priority import PriorityScorer
from spotline.domain.quota import Ledger, borrowed_gpus
from spotline.domain.running import RunningIndex


class RunningJobs:
    """The running jobs of a pass, by pool and class: each group's stoppable jobs (not
    `shielded`) as scored candidates, made when a preemptor first asks for the group."""

    def __init__(
        self,
        snapshot: ClusterSnapshot,
        index: RunningIndex,
        score: PriorityScorer,
        now: float,
        config: SchedulerConfig,
    ) -> None:
        self._index = index
        self._score = score
        self._now = now
        self._config = config
        # The pass's working ledger, from the index's sums.
        self.ledger = Ledger(
            pools=snapshot.pools,
            quotas=snapshot.quotas,
            pool_used=dict(index.pool_used),
            team_used=dict(index.team_used),
        )
        # What leaving allocations leave for (a preemptor's id, a move) -> those allocations.
        self.draining: dict[DrainTarget, list[Allocation]] = {
            target: list(allocations.values()) for target, allocations in index.draining.items()
        }
        self._groups: dict[tuple[str, Priority], list[Candidate]] = {}
        # (pool, preemptor's class) -> its possible victims there when only lower classes may be
        # (the taken ones aside); None when it may also reclaim from a class there.
        self._lower: dict[tuple[str, Priority], list[Candidate] | None] = {}

    def _stoppable(self, pool: str, cls: Priority) -> list[Candidate]:
        """The group's running jobs that some preemptor may stop now, scored."""
        found = self._groups.get((pool, cls))
        if found is None:
            now, config = self._now, self._config
            members = self._index.groups[pool][cls].values()
            stoppable = [a for a in members if shielded(a, now, config) is None]
            scores = self._score.scores([a.job for a in stoppable])
            found = [Candidate(a, p, at=(now, config)) for a, p in zip(stoppable, scores, strict=True)]
            self._groups[(pool, cls)] = found
        return found

    def possible_victims(self, job: Job, pool: str, ledger: Ledger, taken: set[str]) -> list[Candidate]:
        """The pool's stoppable running jobs, not yet chosen in this pass, that `eligibility` may
        accept as victims for `job`: those of a lower class, and those of a team that borrows
        there in a class the reclaim policy lets `job` reclaim from."""
        groups = self._index.groups.get(pool)
        if not groups:
            return []
        key = (pool, job.spec.priority)
        if key not in self._lower:
            self._lower[key] = self._lower_only(pool, job.spec.priority)
        lower = self._lower[key]
        if lower is not None:
            return [c for c in lower if c.job_id not in taken] if taken else list(lower)
        borrowing: set[str] | None = None  # the teams `job` may reclaim from here, found when needed
        chosen: list[Candidate] = []
        for cls in groups:
            if cls.rank < job.priority.rank:
                chosen.extend(self._stoppable(pool, cls))
            elif reclaim_allowed_between(cls, job.priority, self._config):
                if borrowing is None:
                    borrowing = self._borrowing(job, pool, ledger)
                if borrowing:
                    chosen.extend(c for c in self._stoppable(pool, cls) if c.job.team in borrowing)
        if taken:
            chosen = [c for c in chosen if c.job_id not in taken]
        return chosen

    def _lower_only(self, pool: str, preemptor: Priority) -> list[Candidate] | None:
        """The stoppable jobs of the classes below `preemptor` in `pool`, in the order
        `possible_victims` lists them; None when a class there is one it may reclaim from."""
        chosen: list[Candidate] = []
        for cls in self._index.groups[pool]:
            if cls.rank < preemptor.rank:
                chosen.extend(self._stoppable(pool, cls))
            elif reclaim_allowed_between(cls, preemptor, self._config):
                return None
        return chosen

    def _borrowing(self, job: Job, pool: str, ledger: Ledger) -> set[str]:
        """The other teams running in `pool` that borrow, if `job`'s team may reclaim there."""
        usage = ledger.team_used
        if not _may_reclaim(job, usage, ledger, pool):
            return set()
        teams = set().union(*self._index.team_counts[pool].values())
        return {t for t in teams if t != job.team and borrowed_gpus(t, usage, ledger.quotas) > 0}
