"""Size-aware preemption: the checkpoint figures the agent measures reach the job, size its grace
period, and `explain` shows them."""

from __future__ import annotations

import pytest

from spotline.control.events import record_checkpoint
from spotline.control.insight import explain_job
from spotline.control.scheduling import scheduling_pass
from spotline.domain import JobState
from spotline.domain.checkpoint_cost import GRACE_FACTOR, GRACE_MARGIN_S

from .helpers import Deployment, start, submit


def test_a_large_checkpoint_gets_the_grace_its_measured_write_needs(deployment: Deployment) -> None:
    # Given a low job whose agent measured a 300 s write and a 90 s restore of a 40 GB checkpoint
    now = deployment.clock.freeze()
    victim = start(deployment, submit(deployment, priority="low", spot="never"), pool="a100-on-demand")
    recorded = record_checkpoint(
        deployment.plane,
        victim.id,
        run_id=victim.run_id,
        checkpoint_uri="s3://bucket/ckpt/manifest-000000000010.json",
        step=10,
        captured_at=now,
        size_bytes=40 * 10**9,
        write_s=300.0,
        restore_s=90.0,
        team="vision",
    )
    assert recorded is not None
    job = deployment.plane.jobs.get(victim.id).job
    assert (job.checkpoint_bytes, job.checkpoint_write_s, job.checkpoint_restore_s) == (
        40 * 10**9,
        300.0,
        90.0,
    )
    now = deployment.clock.advance(3600)

    # When a high On-Demand job preempts it
    submit(deployment, priority="high", spot="never", name="urgent")
    scheduling_pass(deployment.plane)

    # Then its deadline is its own grace, not the global one (which the write would overrun)
    stored = deployment.plane.jobs.get(victim.id)
    assert stored.state is JobState.CHECKPOINTING
    grace = GRACE_FACTOR * 300.0 + GRACE_MARGIN_S
    assert grace > deployment.plane.config.grace_period_s
    assert stored.checkpoint_deadline_at == pytest.approx(now + grace)

    # And explain shows the figures and what they mean
    explained = explain_job(deployment.plane, "vision", victim.id)
    assert explained["checkpoint"] == {
        "size_bytes": 40 * 10**9,
        "write_s": 300.0,
        "restore_s": 90.0,
        "grace_period_s": grace,
        "fits_spot_notice": False,
    }


def test_a_job_without_figures_keeps_the_global_grace(deployment: Deployment) -> None:
    now = deployment.clock.freeze()
    victim = start(deployment, submit(deployment, priority="low", spot="never"), pool="a100-on-demand")
    now = deployment.clock.advance(3600)
    submit(deployment, priority="high", spot="never", name="urgent")
    scheduling_pass(deployment.plane)
    stored = deployment.plane.jobs.get(victim.id)
    assert stored.checkpoint_deadline_at == now + deployment.plane.config.grace_period_s
    assert "checkpoint" not in explain_job(deployment.plane, "vision", victim.id)


@pytest.mark.parametrize("field", ["size_bytes", "write_s", "restore_s"])
def test_a_negative_figure_is_refused_by_the_event_model(field: str) -> None:
    from pydantic import ValidationError

    from spotline.aws.event_models import CheckpointCompletedDetail

    with pytest.raises(ValidationError, match=field):
        CheckpointCompletedDetail.model_validate(
            {"job_id": "j", "checkpoint_uri": "s3://b/m.json", "step": 1, field: -1}
        )


@pytest.mark.parametrize(("write_s", "waits_to_the_end"), [(None, False), (20.0, False), (80.0, True)])
def test_a_spot_interruption_waits_for_a_write_that_needs_the_whole_notice(
    deployment: Deployment, write_s: float | None, waits_to_the_end: bool
) -> None:
    from spotline.control.events import handle_spot_warning

    # Given a job on a Spot instance whose agent measured its checkpoint's write (or did not)
    now = deployment.clock.freeze()
    job = start(deployment, submit(deployment), instance_id="i-0aaaaaaaaaaaaaaa1")
    if write_s is not None:
        assert record_checkpoint(
            deployment.plane,
            job.id,
            run_id=job.run_id,
            checkpoint_uri="s3://bucket/ckpt/manifest-000000000001.json",
            step=1,
            captured_at=now,
            write_s=write_s,
            team="vision",
        )
    # When EC2 warns that instance
    assert handle_spot_warning(deployment.plane, "i-0aaaaaaaaaaaaaaa1", now) == [job.id]
    # Then the plane waits for the checkpoint until the notice less its margin, or, for a write
    # that 1.5 times over would end in the margin, until the notice's end
    config = deployment.plane.config
    end = now + config.spot_notice_s
    stored = deployment.plane.jobs.get(job.id)
    assert stored.checkpoint_deadline_at == (end if waits_to_the_end else end - config.spot_notice_margin_s)
