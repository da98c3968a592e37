"""A deadline job admitted to a Spot pool last seen without capacity waits there (its Batch job
RUNNABLE, or its launch not yet recorded) while the deadline guard lets it, and the reconciler
sends it On-Demand once it falls behind its line, whatever work it had done before (on moto, the
clock frozen)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from spotline.control.reconciler import reconcile
from spotline.control.scheduling import admit
from spotline.control.workflow_tasks import record_batch_job, submit_batch_job
from spotline.domain import JobState

from .helpers import Deployment, submit

SPOT = "a100-spot"


def iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat()


@pytest.mark.parametrize(("runtime_done_s", "launch_recorded"), [(0.0, True), (600.0, True), (0.0, False)])
def test_a_deadline_job_waiting_on_missing_spot_goes_on_demand_once_behind_its_line(
    deployment: Deployment, runtime_done_s: float, launch_recorded: bool
) -> None:
    plane = deployment.plane
    store = plane.spot_pools
    assert store is not None
    t0 = deployment.clock.freeze()
    # a 1 h job due in 2 h; Spot seen a minute, then missing
    job = submit(deployment, "vision", expected_runtime_s=3600, deadline=iso(t0 + 7200))
    store.observe(SPOT, True, t0 - 60)
    store.observe(SPOT, False, t0)
    if runtime_done_s:
        done = job.job.model_copy(update={"runtime_s": runtime_done_s})
        plane.jobs.annotate(job, "work done by an earlier run", now=t0, job={"runtime_s": done.runtime_s})
        job = plane.jobs.get(job.id)
    admitted = admit(plane, job, SPOT, "admitted by the test", now=t0)
    if launch_recorded:
        submitted = submit_batch_job(plane, job.id, version=admitted.version, run=admitted.run, pool=SPOT)
        record_batch_job(
            plane, job.id, version=admitted.version, run=admitted.run, batch_job_id=submitted["batch_job_id"]
        )

    left_at = None
    for _ in range(120):
        now = deployment.clock.advance(30)
        result = reconcile(plane)
        if result.requeued:
            assert [job_id for job_id, _ in result.requeued] == [job.id], result.requeued
            left_at = now
            break
    assert left_at is not None, "the job never left the missing Spot pool"
    record = plane.jobs.get(job.id)
    assert record.state is JobState.PENDING
    entries, _ = plane.timeline.list(job.id)
    assert entries[-1].reason.startswith(f"left Spot {SPOT}, missing for"), entries[-1].reason
    # in time: the rest of its work still fits before the deadline, On-Demand
    assert left_at + 3600 - runtime_done_s <= t0 + 7200
    if not launch_recorded:
        # the launch that was under way finds the run gone: it submits nothing
        late = submit_batch_job(plane, job.id, version=admitted.version, run=admitted.run, pool=SPOT)
        assert late["submitted"] is False, late
        assert plane.jobs.get(job.id).state is JobState.PENDING
