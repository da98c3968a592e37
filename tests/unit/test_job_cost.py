"""A job's own cost: each released run adds what it held and lost (`records.charge_run`), and
the run going now is added when read (`job_cost.held_gpu_s`)."""

from __future__ import annotations

import pytest

from spotline.control.job_cost import held_gpu_s
from spotline.control.records import JobRecord, charge_run
from spotline.domain import Job, JobSpec, JobState

NOW = 1_800_000_000.0
SPEC = JobSpec(name="j", gpus=8, image="img", command=["train"])


def running(pool: str, since: float, **fields: object) -> JobRecord:
    job = Job(
        id="j", team="a", spec=SPEC, state=JobState.RUNNING, submitted_at=0.0, enqueued_at=0.0, pool=pool
    )
    return JobRecord(job=job, updated_at=since, gpus_held=8, admitted_at=since, **fields)  # type: ignore[arg-type]


def test_a_release_adds_the_run_and_its_lost_work_to_the_job() -> None:
    record = running("spot", NOW - 3600, gpu_s_by_pool={"od": 100.0}, lost_gpu_s=8.0)
    changes = charge_run(record, NOW, lost_s=30.0)
    assert changes == {"gpu_s_by_pool": {"od": 100.0, "spot": 8 * 3600.0}, "lost_gpu_s": 8.0 + 8 * 30.0}


def test_nothing_is_charged_for_a_job_that_held_nothing() -> None:
    record = running("spot", NOW - 60).model_copy(update={"gpus_held": 0})
    assert charge_run(record, NOW, lost_s=10.0) == {}


def test_the_run_going_now_counts_when_read_and_only_while_it_holds_gpus() -> None:
    record = running("spot", NOW - 1800, gpu_s_by_pool={"spot": 3600.0})
    assert held_gpu_s(record, NOW) == {"spot": pytest.approx(3600.0 + 8 * 1800.0)}
    pending = record.with_changes(job={"state": JobState.PENDING}, gpus_held=0)
    assert held_gpu_s(pending, NOW) == {"spot": 3600.0}
