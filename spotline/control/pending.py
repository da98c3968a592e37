"""The domain's `PendingQueue` over the job store's `queue` and `deadline` indexes."""

from __future__ import annotations

from collections.abc import Sequence

from spotline.control.ports import JobStore, Quarantined
from spotline.control.records import JobRecord
from spotline.domain import Job, Priority


class StorePendingQueue:
    """The domain's `PendingQueue` over the `queue` and `deadline` indexes.

    Each call is one Query with `Limit`; the records read are kept by id, because acting on a
    decision needs the version the pass saw (the admission is conditional on it).
    """

    def __init__(self, jobs: JobStore) -> None:
        self.jobs = jobs
        self.records: dict[str, JobRecord] = {}
        self.items_read = 0
        # Unreadable items met in the indexes (quarantined, never planned).
        self.quarantined: Quarantined = []

    def head(self, priority: Priority, limit: int) -> Sequence[Job]:
        return self._keep(self.jobs.queue_head(priority, limit, skipped=self.quarantined))

    def urgent(self, limit: int) -> Sequence[Job]:
        return self._keep(self.jobs.deadline_head(limit, skipped=self.quarantined))

    def _keep(self, records: list[JobRecord]) -> list[Job]:
        self.items_read += len(records)
        for record in records:
            self.records.setdefault(record.id, record)
        return [r.job for r in records]
