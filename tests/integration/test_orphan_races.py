"""An orphan run meeting a terminal event, in either order. The job's own
run is never touched, and a termination recorded for a run that had already ended is confirmed
by the reconciler (Batch reports it stopped) instead of being retried for ever."""

from __future__ import annotations

import functions.batch_state_change
from spotline.control.reconciler import reconcile
from spotline.domain import JobState

from .helpers import Deployment, batch_event, context, start, submit


def handle(job_id: str, batch_job_id: str, status: str, **kwargs: object) -> str:
    event = batch_event(job_id, batch_job_id, status, **kwargs)  # type: ignore[arg-type]
    return str(functions.batch_state_change.handler(event, context("batch_state_change"))["outcome"])


def test_an_orphans_terminal_event_before_its_running_event(deployment: Deployment) -> None:
    dep = deployment
    running = start(dep, submit(dep))
    # A second Batch job of the same run ended (Batch stopped it) before its RUNNING arrived
    assert handle(running.id, "batch-orphan", "FAILED", reason="Host terminated").startswith(
        "event of a run that ended"
    )
    # Its RUNNING, delivered late: it is stopped as an orphan (a pending termination)
    assert handle(running.id, "batch-orphan", "RUNNING").startswith("orphan stopped")
    stored = dep.plane.jobs.get(running.id)
    assert "batch-orphan" in stored.terminating_batch_job_ids
    assert (stored.state, stored.batch_job_id) == (JobState.RUNNING, running.batch_job_id)
    # The reconciler asks Batch, which reports it stopped: confirmed, nothing left pending
    result = reconcile(dep.plane)
    assert "batch-orphan" in result.terminations_confirmed
    assert dep.plane.jobs.get(running.id).terminating_batch_job_ids == ()
    assert dep.plane.jobs.get(running.id).state is JobState.RUNNING


def test_an_orphans_terminal_event_after_it_was_stopped_confirms_it(deployment: Deployment) -> None:
    dep = deployment
    running = start(dep, submit(dep))
    dep.launcher.terminate_ends = False
    assert handle(running.id, "batch-orphan", "RUNNING").startswith("orphan stopped")
    assert "batch-orphan" in dep.plane.jobs.get(running.id).terminating_batch_job_ids
    # Its terminal event confirms the termination and changes nothing else
    outcome = handle(running.id, "batch-orphan", "FAILED", reason="Terminated by Spotline")
    assert outcome.startswith("termination confirmed")
    stored = dep.plane.jobs.get(running.id)
    assert stored.terminating_batch_job_ids == ()
    assert (stored.state, stored.batch_job_id) == (JobState.RUNNING, running.batch_job_id)
