"""JobSpec validation, the job lifecycle, and what a Job and a Pool compute."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from spotline.domain import TERMINAL_STATES, Job, JobSpec, JobState, Pool, can_transition

from .builders import DAY, NOW, job, pool

VALID: dict[str, Any] = {"name": "train", "gpus": 8, "image": "img:1", "command": ["python", "train.py"]}
CONTEXT: dict[str, Any] = {"now": NOW, "gpu_types": {"a100", "h100"}}


def named_field(error: ErrorDetails) -> str:
    """The field an error names: its location, or for a whole-model check the `field:` prefix
    of its message."""
    if error["loc"]:
        return str(error["loc"][0])
    message = error["msg"].removeprefix("Value error, ")
    return message.split(":", 1)[0]


# --- JobSpec validation -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "context", "field"),
    [
        ({"gpus": 0}, None, "gpus"),
        ({"gpus": -8}, None, "gpus"),
        ({"priority": "urgent"}, None, "priority"),
        ({"deadline": "2023-12-31T23:00:00Z"}, CONTEXT, "deadline"),
        ({"deadline": "2024-01-01T00:00:00Z"}, CONTEXT, "deadline"),
        ({"deadline": "2024-06-01T00:00:00"}, CONTEXT, "deadline"),
        ({"deadline": "2024-06-01T00:00:00"}, None, "deadline"),
        ({"gpus": 12, "nodes": 8}, None, "nodes"),
        ({"nodes": 0}, None, "nodes"),
        ({"gpu_type": "tpu-v5"}, CONTEXT, "gpu_type"),
        ({"command": []}, None, "command"),
        ({"spot": "sometimes"}, None, "spot"),
        ({"expected_runtime_s": 7200, "max_runtime_s": 3600}, None, "expected_runtime_s"),
        ({"team": "other"}, None, "team"),
    ],
    ids=[
        "gpus-zero",
        "gpus-negative",
        "unknown-priority",
        "deadline-in-the-past",
        "deadline-exactly-now",
        "naive-deadline-with-now",
        "naive-deadline-without-context",
        "gang-size-does-not-divide-gpus",
        "zero-nodes",
        "unknown-gpu-type",
        "empty-command",
        "unknown-spot-setting",
        "expected-runtime-above-max",
        "team-is-not-a-body-field",
    ],
)
def test_bad_spec_names_its_field(
    changes: dict[str, Any], context: dict[str, Any] | None, field: str
) -> None:
    with pytest.raises(ValidationError) as raised:
        JobSpec.model_validate({**VALID, **changes}, context=context)
    errors = raised.value.errors()
    assert [named_field(e) for e in errors] == [field]


@pytest.mark.parametrize(
    ("changes", "context", "gpus_per_node", "deadline_at"),
    [
        ({}, None, 8, None),
        ({"gpus": 16, "nodes": 2}, None, 8, None),
        ({"deadline": "2024-01-01T01:00:00Z"}, CONTEXT, 8, NOW + 3600),
        ({"deadline": "2024-01-01T02:00:00+01:00"}, CONTEXT, 8, NOW + 3600),
        ({"gpu_type": "h100"}, CONTEXT, 8, None),
        ({"gpu_type": "tpu-v5"}, None, 8, None),
    ],
    ids=[
        "minimal",
        "gang-of-two-nodes",
        "deadline-in-the-future",
        "deadline-with-offset",
        "known-gpu-type",
        "gpu-type-unchecked-without-context",
    ],
)
def test_good_spec(
    changes: dict[str, Any], context: dict[str, Any] | None, gpus_per_node: int, deadline_at: float | None
) -> None:
    spec = JobSpec.model_validate({**VALID, **changes}, context=context)
    assert spec.gpus_per_node == gpus_per_node
    assert spec.deadline_at == deadline_at


# --- lifecycle ----------------------------------------------------------------------------

S = JobState


@pytest.mark.parametrize(
    ("source", "target", "allowed"),
    [
        (S.PENDING, S.ADMITTED, True),
        (S.PENDING, S.RUNNING, False),
        (S.PENDING, S.CANCELLED, True),
        (S.ADMITTED, S.RUNNING, True),
        (S.ADMITTED, S.PENDING, True),
        (S.RUNNING, S.CHECKPOINTING, True),
        (S.RUNNING, S.PREEMPTED, False),
        (S.RUNNING, S.PENDING, False),
        (S.RUNNING, S.INTERRUPTED, True),
        (S.RUNNING, S.SUCCEEDED, True),
        (S.CHECKPOINTING, S.PREEMPTED, True),
        (S.CHECKPOINTING, S.RUNNING, True),
        (S.CHECKPOINTING, S.PENDING, False),
        (S.PREEMPTED, S.PENDING, True),
        (S.PREEMPTED, S.RUNNING, False),
        (S.INTERRUPTED, S.PENDING, True),
        (S.INTERRUPTED, S.RUNNING, False),
        (S.SUCCEEDED, S.PENDING, False),
        (S.FAILED, S.RUNNING, False),
        (S.CANCELLED, S.PENDING, False),
    ],
    ids=lambda v: v.value if isinstance(v, JobState) else ("allowed" if v else "refused"),
)
def test_can_transition(source: JobState, target: JobState, allowed: bool) -> None:
    assert can_transition(source, target) is allowed


@pytest.mark.parametrize("terminal", sorted(TERMINAL_STATES), ids=str)
def test_terminal_states_have_no_way_out(terminal: JobState) -> None:
    assert [t for t in JobState if can_transition(terminal, t)] == []


# --- remaining time, unsaved work ---------------------------------------------------------


@pytest.mark.parametrize(
    ("subject", "remaining"),
    [
        (job("j").expected_runtime(3600).build(), 3600.0),
        (job("j").expected_runtime(3600).running_since(NOW - 600).build(), 3000.0),
        (job("j").expected_runtime(3600).runtime(1000).running_since(NOW - 600).build(), 2000.0),
        (job("j").expected_runtime(10_000).progress(0.25).running_since(NOW - 1000).build(), 3000.0),
        (
            job("j").expected_runtime(10_000).progress(0.5).runtime(400).running_since(NOW - 600).build(),
            1000.0,
        ),
        (job("j").expected_runtime(5000).progress(0.0).running_since(NOW - 1000).build(), 4000.0),
        (job("j").expected_runtime(5000).progress(0.4).build(), 5000.0),
        (job("j").progress(1.0).running_since(NOW - 1000).build(), 0.0),
        (job("j").expected_runtime(600).running_since(NOW - 1000).build(), 0.0),
        (job("j").running_since(NOW - 1000).build(), None),
    ],
    ids=[
        "expected-runtime-while-pending",
        "expected-minus-current-run",
        "expected-minus-earlier-runs-and-current-run",
        "progress-wins-over-expected",
        "progress-counts-earlier-runs",
        "zero-progress-falls-back-to-expected",
        "progress-without-elapsed-falls-back-to-expected",
        "finished-by-progress",
        "overran-expected-runtime",
        "unknown",
    ],
)
def test_remaining_s(subject: Job, remaining: float | None) -> None:
    assert subject.remaining_s(NOW) == remaining


@pytest.mark.parametrize(
    ("subject", "unsaved"),
    [
        (job("j").running_since(NOW - 1000).build(), 1000.0),
        (job("j").running_since(NOW - 1000).checkpointed(NOW - 300).build(), 300.0),
        (job("j").running_since(NOW - 1000).checkpointed(NOW - 2000).build(), 1000.0),
        (job("j").checkpointed(NOW - 300).build(), 0.0),
    ],
    ids=["no-checkpoint-yet", "since-last-checkpoint", "checkpoint-of-an-earlier-run", "not-running"],
)
def test_unsaved_work_s(subject: Job, unsaved: float) -> None:
    assert subject.unsaved_work_s(NOW) == unsaved


# --- pools: gang jobs take whole nodes ----------------------------------------------------


@pytest.mark.parametrize(
    ("target", "subject", "demand", "hosts"),
    [
        (pool("p", capacity=32, per_node=8), job("j").gpus(4).build(), 4, True),
        (pool("p", capacity=32, per_node=8), job("j").gpus(8).nodes(2).build(), 16, True),
        (pool("p", capacity=32, per_node=8), job("j").gpus(4).nodes(2).build(), 16, True),
        (pool("p", capacity=8, per_node=8), job("j").gpus(4).nodes(2).build(), 16, False),
        (pool("p", capacity=32, per_node=8), job("j").gpus(16).build(), 16, False),
        (pool("p", capacity=32, gpu_type="h100"), job("j").gpus(4).gpu_type("a100").build(), 4, False),
        (pool("p", capacity=32, gpu_type="h100"), job("j").gpus(4).gpu_type("h100").build(), 4, True),
    ],
    ids=[
        "single-node-takes-its-gpus",
        "gang-full-nodes",
        "gang-half-nodes-still-takes-whole-nodes",
        "gang-larger-than-pool",
        "single-node-job-wider-than-a-node",
        "wrong-gpu-type",
        "right-gpu-type",
    ],
)
def test_pool_demand_and_hosting(target: Pool, subject: Job, demand: int, hosts: bool) -> None:
    assert target.demand_gpus(subject) == demand
    assert target.can_host(subject) is hosts


def test_job_builder_defaults_are_pending_and_aged_zero() -> None:
    built = job("j").submitted(NOW - DAY).build()
    assert (built.state, built.submitted_at, built.enqueued_at, built.started_at) == (
        JobState.PENDING,
        NOW - DAY,
        NOW - DAY,
        None,
    )
