"""The deadline answer at submission (`POST /jobs`, `spotline submit`, `spotline explain`).

Reads what a scheduling pass reads (the jobs holding GPUs, bounded by the cluster's size, and
the window of the queue: one Query with Limit per class and one for the nearest deadlines), and
one page of the team's finished jobs for the run-time history. The answer is the domain's
(`spotline.domain.admission.answer_deadline`), with the run time predicted from that history
(`spotline.domain.runtime_history.predict_runtime`).
"""

from __future__ import annotations

from typing import Any

from spotline.control.lifecycle import iso
from spotline.control.pending import StorePendingQueue
from spotline.control.plane import ControlPlane
from spotline.domain import ClusterSnapshot, Job, JobState
from spotline.domain.admission import DeadlineAnswer, answer_deadline
from spotline.domain.models import Allocation
from spotline.domain.queue import WINDOW_PER_CLASS, read_window
from spotline.domain.runtime_history import PastRun, predict_runtime


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
    runtime = predict_runtime(job, past_runs(cp, job))
    return answer_deadline(job, runtime, snapshot, pending, now, cp.config.scheduler)


# The team's latest finished jobs read for a prediction: one page of the `finished` index.
HISTORY_PAGE = 100


def past_runs(cp: ControlPlane, job: Job) -> list[PastRun]:
    """The run times of the team's latest succeeded jobs of the same name (one bounded Query)."""
    records, _ = cp.jobs.list_finished(job.team, state=JobState.SUCCEEDED, limit=HISTORY_PAGE, max_pages=1)
    return [
        PastRun(runtime_s=r.job.runtime_s, declared_s=r.job.spec.expected_runtime_s)
        for r in records
        if r.job.spec.name == job.spec.name and r.job.runtime_s > 0
    ]


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
