"""The deadline answer at submission (`POST /jobs`, `spotline submit`, `spotline explain`).

Reads what a scheduling pass reads, no more: the jobs holding GPUs (bounded by the cluster's
size) and the window of the queue (one Query with Limit per class and one for the nearest
deadlines). The answer itself is the domain's (`spotline.domain.admission.answer_deadline`),
with the run time predicted from the team's history (`spotline.domain.runtime_history`).
"""

from __future__ import annotations

from typing import Any

from spotline.control.lifecycle import iso
from spotline.control.pending import StorePendingQueue
from spotline.control.plane import ControlPlane
from spotline.domain import ClusterSnapshot, Job
from spotline.domain.admission import DeadlineAnswer, answer_deadline, declared_runtime
from spotline.domain.models import Allocation
from spotline.domain.queue import WINDOW_PER_CLASS, read_window


def answer_at_submission(cp: ControlPlane, job: Job, now: float) -> DeadlineAnswer | None:
    """The answer to `job`'s deadline (None when it has none)."""
    if job.spec.deadline_at is None:
        return None
    pools = cp.config.pools_by_name
    allocations = [
        Allocation(job=r.job, pool=r.job.pool, gpus=r.gpus_held)
        for r in cp.jobs.active()
        if r.job.pool in pools and r.gpus_held > 0
    ]
    snapshot = ClusterSnapshot.build(pools=cp.config.pools, allocations=allocations)
    pending = read_window(StorePendingQueue(cp.jobs), WINDOW_PER_CLASS)
    return answer_deadline(job, declared_runtime(job), snapshot, pending, now, cp.config.scheduler)


def answer_view(answer: DeadlineAnswer | None) -> dict[str, Any] | None:
    """The answer as the API shows it: its times also as ISO-8601 UTC."""
    if answer is None:
        return None
    out = answer.model_dump(mode="json", exclude_none=True)
    if answer.earliest_finish is not None:
        out["earliest_finish_iso"] = iso(answer.earliest_finish)
    if answer.hold is not None:
        out["hold"]["start_iso"] = iso(answer.hold.start)
        out["hold"]["end_iso"] = iso(answer.hold.end)
    out["feasible"] = answer.feasible
    return out
