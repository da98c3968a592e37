"""The Spotline adapter's record copies (`spotline_policy._replace`): the same instance as
pydantic's `model_copy(update=...)`, which it stands in for on the hot path."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest
from pydantic import BaseModel

from spotline.domain import Allocation, Job, JobSpec, JobState, Priority
from spotline.sim.spotline_policy import _construct, _replace


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


def test_construct_makes_the_records_model_construct_makes() -> None:
    spec = _record().spec
    fields = {name: getattr(spec, name) for name in JobSpec.model_fields}
    assert _state(_construct(JobSpec, **fields)) == _state(JobSpec.model_construct(**fields))
    record = _record()
    fields = {name: getattr(record, name) for name in Job.model_fields}
    built = _construct(Job, **fields)
    assert _state(built) == _state(Job.model_construct(**fields))
    assert list(built.__dict__) == list(Job.model_construct(**fields).__dict__)  # the fields' order too
    allocation = {"job": record, "pool": "od", "gpus": 4, "draining_for": None}
    assert _state(_construct(Allocation, **allocation)) == _state(Allocation.model_construct(**allocation))
    with pytest.raises(pydantic.ValidationError):
        built.version = 9  # frozen, as a record made any other way


def test_construct_refuses_a_field_missing_or_unknown() -> None:
    with pytest.raises(TypeError, match=r"Allocation: missing fields \['draining_for'\], unknown"):
        _construct(Allocation, job=_record(), pool="od", gpus=4)
    with pytest.raises(TypeError, match=r"missing fields \['draining_for'\], unknown fields \['drain'\]"):
        _construct(Allocation, job=_record(), pool="od", gpus=4, drain=None)
