"""One definition of each fact a screen shows about a job: its step and progress
(`control.progress`), the stamp of a timeline entry (`records.entry_time`, never before the one it
follows) and an entry's kind (`records.transition_kind`: a host lost is not a Spot warning)."""

from __future__ import annotations

from typing import Any

import pytest

from spotline.control.errors import InvalidTransition
from spotline.control.items import transitioned
from spotline.control.progress import job_progress
from spotline.control.records import Disruption, JobRecord, TimelineEntry, stored_kind
from spotline.domain import Job, JobSpec, JobState

NOW = 1_800_000_000.0
SPEC = JobSpec(name="j", gpus=4, image="img", command=["train"])


def record(state: JobState, *, progress: float | None = None, **fields: Any) -> JobRecord:
    job_fields = {k: fields.pop(k) for k in ("last_checkpoint_step", "last_checkpoint_at") if k in fields}
    job = Job(
        id="j",
        team="a",
        spec=SPEC,
        state=state,
        submitted_at=NOW - 100,
        enqueued_at=NOW - 100,
        progress=progress,
        **job_fields,
    )
    return JobRecord(job=job, updated_at=fields.pop("updated_at", NOW - 50), **fields)


RUNNING, PENDING = JobState.RUNNING, JobState.PENDING


@pytest.mark.parametrize(
    ("name", "given", "step", "fraction"),
    [
        # A heartbeat's step trails a newer checkpoint of the same run: the checkpoint's step,
        # and the fraction carried to it
        (
            "checkpoint ahead of the heartbeat",
            record(
                RUNNING,
                progress=0.36,
                run=1,
                step=360,
                progress_step=360,
                last_checkpoint_step=459,
                last_checkpoint_run=1,
            ),
            459,
            0.459,
        ),
        # A new run that has not said what it restored stands at the durable checkpoint, not at
        # its first heartbeat's step 0, and not at the last run's fraction
        (
            "a new run before its restore",
            record(
                RUNNING,
                progress=0.54,
                run=2,
                step=0,
                progress_step=540,
                last_checkpoint_step=270,
                last_checkpoint_run=1,
            ),
            270,
            0.27,
        ),
        # Once it restored an older checkpoint than the newest recorded, what it restored counts
        (
            "a run that restored less",
            record(
                RUNNING,
                progress=0.5,
                run=2,
                step=120,
                progress_step=500,
                last_checkpoint_step=500,
                last_checkpoint_run=1,
                restored_run=2,
                restored_step=100,
            ),
            120,
            0.12,
        ),
        # Waiting after a requeue: where it resumes
        (
            "requeued",
            record(PENDING, progress=0.6, run=1, progress_step=600, last_checkpoint_step=450),
            450,
            0.45,
        ),
        ("never ran", record(PENDING), None, None),
        ("succeeded", record(JobState.SUCCEEDED, progress=0.9, step=990, progress_step=990), 990, 1.0),
    ],
)
def test_a_jobs_step_and_progress_are_defined_once(
    name: str, given: JobRecord, step: int | None, fraction: float | None
) -> None:
    progress = job_progress(given)
    assert (progress.step, progress.fraction) == (step, fraction), name


def test_a_transition_is_never_stamped_before_the_write_it_follows() -> None:
    # Given a job requeued at t=55 (its record's last stamp), admitted by a pass whose clock read 53
    requeued = record(PENDING, updated_at=NOW + 55)
    admitted, entries, _ = transitioned(requeued, JobState.ADMITTED, "fits", now=NOW + 53)
    # Then the admission is stamped at 55, not before the requeue
    assert [e.at for e in entries] == [NOW + 55] and admitted.updated_at == NOW + 55
    # And a later clock is used as it is
    later, entries, _ = transitioned(requeued, JobState.ADMITTED, "fits", now=NOW + 60)
    assert entries[0].at == later.updated_at == NOW + 60
    with pytest.raises(InvalidTransition):
        transitioned(requeued, JobState.SUCCEEDED, "no", now=NOW)


def test_each_entry_is_stamped_with_what_it_records() -> None:
    running = record(RUNNING, gpus_held=4, run=1)
    # A host lost with no warning: a host loss, then a requeue
    _, lost, _ = transitioned(running, PENDING, "r", now=NOW, via=JobState.INTERRUPTED)
    assert [e.kind for e in lost] == ["host-loss", "requeue"]
    # A Spot warning's checkpoint, and its requeue
    _, warned, _ = transitioned(
        running, JobState.CHECKPOINTING, "w", now=NOW, changes={"disruption": Disruption.INTERRUPT}
    )
    checkpointing = running.with_changes(
        job={"state": JobState.CHECKPOINTING},
        disruption=Disruption.INTERRUPT,
        draining_for="interruption:i-1",
    )
    _, ended, _ = transitioned(checkpointing, PENDING, "r", now=NOW, via=JobState.INTERRUPTED)
    assert [e.kind for e in warned + ended] == ["spot-warning", "spot-warning", "requeue"]
    # A preemption, and a move to Spot
    _, preempted, _ = transitioned(
        running,
        JobState.CHECKPOINTING,
        "p",
        now=NOW,
        changes={"disruption": Disruption.PREEMPT, "draining_for": "job-x"},
    )
    _, moving, _ = transitioned(
        running,
        JobState.CHECKPOINTING,
        "m",
        now=NOW,
        changes={"disruption": Disruption.PREEMPT, "draining_for": "a move to a100-spot"},
    )
    assert [e.kind for e in preempted + moving] == ["preemption", "move"]


@pytest.mark.parametrize(
    ("source", "target", "reason", "kind"),
    [
        ("-", "PENDING", "submitted", "submitted"),
        ("RUNNING", "INTERRUPTED", "Host EC2 (instance i-1) terminated.", "host-loss"),
        ("RUNNING", "INTERRUPTED", "no heartbeat for 70s: host presumed lost", "host-loss"),
        ("CHECKPOINTING", "INTERRUPTED", "Spot interruption warning for i-1", "spot-warning"),
        ("RUNNING", "CHECKPOINTING", "Spot interruption warning for i-1 (terminate)", "spot-warning"),
        ("RUNNING", "CHECKPOINTING", "preempted for job-x (critical)", "preemption"),
        ("RUNNING", "RUNNING", "run 2 resumed from checkpoint step 4", "checkpoint"),
        ("PENDING", "PENDING", "changed by the team: priority", "change"),
    ],
)
def test_an_entry_stored_before_kinds_gets_one_from_its_states(
    source: str, target: str, reason: str, kind: str
) -> None:
    entry = TimelineEntry("j", 1, NOW, source, target, reason)
    assert stored_kind(entry).value == kind == entry.to_json()["kind"]
