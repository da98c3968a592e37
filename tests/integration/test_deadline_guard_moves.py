"""The deadline guard in the control plane's scheduling pass: a deadline job on Spot that could no
longer absorb a reclaim is checkpointed and moved to On-Demand, and resumes there, not on Spot."""

from __future__ import annotations

from datetime import UTC, datetime

from spotline.control.records import Disruption
from spotline.control.scheduling import scheduling_pass
from spotline.control.workflow_tasks import finish_preemption
from spotline.domain import JobState

from .helpers import Deployment, start, submit


def iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat()


def test_a_deadline_job_on_spot_moves_to_on_demand_and_resumes_there(deployment: Deployment) -> None:
    # Given a 4 h job due in 4.25 h, running on Spot: a reclaim would leave no time to restart
    now = deployment.clock.freeze()
    plane = deployment.plane
    late = submit(deployment, "vision", expected_runtime_s=4 * 3600, deadline=iso(now + 4.25 * 3600))
    start(deployment, late, pool="a100-spot")
    deployment.clock.advance(60)

    # When a pass runs with nothing pending
    result = scheduling_pass(plane)

    # Then it checkpoints to move to On-Demand (its preempt workflow started)
    assert result.moved == [(late.id, "a100-on-demand")] and result.admitted == []
    stored = plane.jobs.get(late.id)
    assert stored.state is JobState.CHECKPOINTING and stored.disruption is Disruption.PREEMPT
    assert stored.draining_for == "a move to a100-on-demand"

    # And once its checkpoint is done and it is requeued, the next pass admits it On-Demand,
    # though Spot has room: the guard refuses it Spot
    assert finish_preemption(plane, late.id)["finished"] is True
    assert plane.jobs.get(late.id).state is JobState.PENDING
    deployment.clock.advance(1)
    assert scheduling_pass(plane).admitted == [(late.id, "a100-on-demand")]


def test_a_deadline_job_with_slack_stays_on_spot(deployment: Deployment) -> None:
    now = deployment.clock.freeze()
    job = submit(deployment, "vision", expected_runtime_s=4 * 3600, deadline=iso(now + 10 * 3600))
    start(deployment, job, pool="a100-spot")
    deployment.clock.advance(60)
    assert scheduling_pass(deployment.plane).moved == []
    assert deployment.plane.jobs.get(job.id).state is JobState.RUNNING
