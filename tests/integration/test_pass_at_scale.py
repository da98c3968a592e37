"""The pass on DynamoDB when capacity frees with a backlog: its window grows with the free GPUs,
it stops acting when its time is up and asks for the next pass, and a pass that changes nothing
writes nothing. (The 1,000-job figures are `bench/pass_scale.py`'s; here the same behaviour at a
size CI runs in seconds.)"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import pytest

from spotline.control import scheduling
from spotline.control.scheduling import scheduling_pass
from spotline.domain import JobState

from .helpers import Deployment, submit
from .test_scheduling_pass import pending_jobs

WRITES = {"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem"}


def with_windows(
    dep: Deployment, monkeypatch: pytest.MonkeyPatch, window_per_class: int, max_window_per_class: int
) -> None:
    monkeypatch.setattr(scheduling, "WINDOW_PER_CLASS", window_per_class)
    monkeypatch.setattr(scheduling, "MAX_WINDOW_PER_CLASS", max_window_per_class)


@contextmanager
def counting_calls(dep: Deployment) -> Iterator[Counter[str]]:
    """DynamoDB operations called while inside (botocore's events on the repositories' client)."""
    calls: Counter[str] = Counter()

    def before_call(model: Any, **kwargs: Any) -> None:
        calls[model.name] += 1

    events = dep.dynamodb.meta.events
    events.register("before-call.dynamodb", before_call)
    try:
        yield calls
    finally:
        events.unregister("before-call.dynamodb", before_call)


def test_a_pass_reads_as_many_jobs_as_gpus_are_free(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a window of 4 jobs per class, 24 free GPUs (16 Spot, 8 On-Demand) and 20 pending
    # 1-GPU jobs of one class
    with_windows(deployment, monkeypatch, window_per_class=4, max_window_per_class=2048)
    deployment.clock.freeze()
    jobs = [submit(deployment, gpus=1) for _ in range(20)]

    # When one pass runs
    result = scheduling_pass(deployment.plane)

    # Then it read 24 jobs per class (the free GPUs), so it admitted all 20 at once
    assert result.window == 24
    assert len(result.admitted) == 20
    assert {deployment.plane.jobs.get(j.id).state for j in jobs} == {JobState.ADMITTED}
    assert not result.more_work


def test_the_cap_bounds_the_window(deployment: Deployment, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the same, with the window capped at 4 per class
    with_windows(deployment, monkeypatch, window_per_class=4, max_window_per_class=4)
    deployment.clock.freeze()
    for _ in range(20):
        submit(deployment, gpus=1)

    # When passes run back to back while they ask for more
    admitted = []
    result = scheduling_pass(deployment.plane)
    admitted.append(len(result.admitted))
    while result.more_work:
        result = scheduling_pass(deployment.plane)
        admitted.append(len(result.admitted))

    # Then each admitted one window of 4; the fifth's window was full too, so a sixth pass looked
    # and found the queue empty, which ended the chain
    assert admitted == [4, 4, 4, 4, 4, 0]


def test_a_pass_out_of_time_leaves_the_rest_to_the_next_pass(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given 3 jobs that fit
    deployment.clock.freeze()
    jobs = [submit(deployment, gpus=1) for _ in range(3)]

    # When a pass's time to act is already over
    result = scheduling_pass(deployment.plane, act_until=time.monotonic() - 1)

    # Then it admitted nothing and left its 3 decisions to the next pass; having acted on none,
    # it asks for no pass at once (it would fare no better: the next trigger or tick runs one)
    assert result.admitted == [] and result.left_for_next_pass == 3 and not result.more_work
    assert {deployment.plane.jobs.get(j.id).state for j in jobs} == {JobState.PENDING}

    # When a pass runs out of time after its first admission (the pass's clock: 0 s at its first
    # decision, 10 s after)
    readings = iter([0.0])
    monkeypatch.setattr(scheduling, "time", SimpleNamespace(monotonic=lambda: next(readings, 10.0)))
    partial = scheduling_pass(deployment.plane, act_until=5.0)
    monkeypatch.undo()

    # Then it asks for the next pass at once
    assert len(partial.admitted) == 1 and partial.left_for_next_pass == 2 and partial.more_work

    # And the next pass, with time, admits the rest
    assert len(scheduling_pass(deployment.plane).admitted) == 2


def test_a_pass_that_changes_nothing_writes_nothing(deployment: Deployment) -> None:
    # Given 5 jobs waiting (for h100 GPUs: no pool has them), a team usage that the pass keeps
    # for the API, and a pass that wrote their wait reasons
    now = deployment.clock.freeze()
    deployment.plane.jobs.bulk_load(pending_jobs(0, 5, now - 10))
    first = scheduling_pass(deployment.plane)
    assert first.admitted == [] and first.wait_reasons_written == 5
    assert deployment.plane.ledger.fairshare_usage() == {"nlp": 0.0, "vision": 0.0}

    # When another pass runs a minute later with nothing changed
    deployment.clock.advance(60)
    with counting_calls(deployment) as calls:
        again = scheduling_pass(deployment.plane)

    # Then it decided the same and wrote nothing: no wait reason, no fair-share usage
    assert again.admitted == [] and again.waiting == 5 and again.wait_reasons_written == 0
    assert {op: n for op, n in calls.items() if op in WRITES} == {}


def test_the_usage_shown_is_rewritten_when_it_moved(deployment: Deployment) -> None:
    """A running job's usage grows: the usage the API shows is rewritten once it moved by more
    than 1% (or 0.01 GPU-hour), not at every pass."""
    # Given an 8-GPU job admitted at t0
    t0 = deployment.clock.freeze()
    submit(deployment, gpus=8)
    assert len(scheduling_pass(deployment.plane).admitted) == 1
    assert deployment.plane.ledger.fairshare_usage()["vision"] == 0.0

    # When a pass runs 1 s later (8 GPU-seconds: under 0.01 GPU-hour), nothing is written
    deployment.clock.advance(1)
    with counting_calls(deployment) as calls:
        scheduling_pass(deployment.plane)
    assert not {op for op in calls if op in WRITES}
    assert deployment.plane.ledger.fairshare_usage()["vision"] == 0.0

    # But a pass an hour later writes the 8 GPU-hours
    deployment.clock.freeze(t0 + 3600)
    scheduling_pass(deployment.plane)
    assert deployment.plane.ledger.fairshare_usage()["vision"] == pytest.approx(8.0, rel=0.01)
