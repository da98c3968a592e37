"""Events Spotline emits on its own bus (architecture.md, "Events").

`Job State Changed` goes out for every committed transition: `EventPublisher.on_commit` is a
`JobStore` listener, so no code path can change a state without announcing it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from spotline import resources
from spotline.control.errors import PublishFailed
from spotline.control.ports import EventSink
from spotline.control.records import NO_STATE, JobRecord, TimelineEntry

logger = logging.getLogger(__name__)

# PutEvents takes at most 10 entries per call: held events go ten at a time.
_MAX_ENTRIES = 10


class EventPublisher:
    """Spotline's events, by name.

    Inside `batched()` (a scheduling pass), the Job State Changed events of this thread are
    held and put ten to a PutEvents call (its limit) instead of one call per transition; the
    rest go when the block ends, whether or not it raised."""

    def __init__(self, sink: EventSink) -> None:
        self.sink = sink
        self._held = threading.local()

    @contextlib.contextmanager
    def batched(self) -> Iterator[None]:
        if getattr(self._held, "details", None) is not None:  # already batching: the outer block flushes
            yield
            return
        self._held.details = []
        try:
            yield
        finally:
            details, self._held.details = self._held.details, None
            self._put_state_changes(details)

    def _put_state_changes(self, details: list[dict[str, Any]]) -> None:
        if not details:
            return
        try:
            self.sink.put(resources.SOURCE_SCHEDULER, resources.DETAIL_JOB_STATE_CHANGED, details)
        except PublishFailed:
            jobs = sorted({str(d["job_id"]) for d in details})
            logger.exception("Job State Changed not published", extra={"job_ids": jobs})

    def job_submitted(self, record: JobRecord) -> None:
        self.jobs_submitted([record])

    def jobs_submitted(self, records: Sequence[JobRecord]) -> None:
        """One Job Submitted per job, ten to a PutEvents call (an array's elements)."""
        self.sink.put(
            resources.SOURCE_API,
            resources.DETAIL_JOB_SUBMITTED,
            [
                {
                    "job_id": record.id,
                    "team": record.team,
                    "priority": record.job.priority.value,
                    "gpus": record.job.gpus,
                    "submitted_at": record.job.submitted_at,
                }
                for record in records
            ],
        )

    def job_state_changed(self, record: JobRecord, entries: Sequence[TimelineEntry]) -> None:
        details = [
            {
                "job_id": record.id,
                "team": record.team,
                "from": entry.source,
                "to": entry.target,
                "reason": entry.reason,
                "version": entry.seq,
                "at": entry.at,
                "pool": record.job.pool,
                "priority": record.job.priority.value,
            }
            for entry in entries
            # The submission has its own event; a spec change (from == to) is not a transition.
            if entry.source != NO_STATE and entry.source != entry.target
        ]
        if not details:
            return
        held = getattr(self._held, "details", None)
        if held is None:
            self.sink.put(resources.SOURCE_SCHEDULER, resources.DETAIL_JOB_STATE_CHANGED, details)
            return
        held.extend(details)
        if len(held) >= _MAX_ENTRIES:
            self._held.details = []
            self._put_state_changes(held)

    def on_commit(self, record: JobRecord, entries: Sequence[TimelineEntry]) -> None:
        """Repository listener. The write is already committed, so a refused event is logged
        rather than raised: failing the caller would not undo the transition, and its retry
        would find nothing left to do. The scheduler's periodic tick covers a lost trigger."""
        try:
            self.job_state_changed(record, entries)
        except PublishFailed:
            logger.exception("Job State Changed not published", extra={"job_id": record.id})
