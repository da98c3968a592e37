"""The Spotline adapter's record copies (`spotline_policy._replace`): the same instance as
pydantic's `model_copy(update=...)`, which it stands in for on the hot path."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest
from pydantic import BaseModel

from spotline.domain import Allocation, Job, JobSpec, JobState, Priority
from spotline.sim.spotline_policy import _replace


def _record() -> Job:
    spec = JobSpec(name="j1", priority=Priority.LOW, gpus=4, image="trace-replay", command=["replay"])
    return Job(id="j1", team="a", spec=spec, submitted_at=10.0, enqueued_at=10.0)


def _state(model: BaseModel) -> tuple[Any, ...]:
    return (
        type(model),
        model.__dict__,
        model.__pydantic_fields_set__,
        model.__pydantic_extra__,
        model.__pydantic_private__,
    )


@pytest.mark.parametrize(
    "changes",
    [
        {"last_checkpoint_at": 500.0},
        {"state": JobState.RUNNING, "started_at": 20.0, "pool": "od", "version": 1},
        {"state": JobState.CHECKPOINTING, "preemptions": 2, "version": 3},
        {},
    ],
)
def test_replace_makes_the_job_record_model_copy_makes(changes: dict[str, Any]) -> None:
    record = _record()
    copied = _replace(record, **changes)
    assert _state(copied) == _state(record.model_copy(update=changes))
    assert copied == record.model_copy(update=changes)
    assert copied is not record and copied.__dict__ is not record.__dict__
    assert _state(record) == _state(_record())  # the original is left as it was
    with pytest.raises(pydantic.ValidationError):
        copied.version = 9  # still frozen


def test_replace_makes_the_allocation_model_copy_makes() -> None:
    record = _record()
    allocation = Allocation.model_construct(job=record, pool="od", gpus=4, draining_for=None)
    changes = {"job": _replace(record, version=1), "draining_for": "j2"}
    copied = _replace(allocation, **changes)
    assert _state(copied) == _state(allocation.model_copy(update=changes))
    assert copied.job.version == 1 and copied.draining_for == "j2"
