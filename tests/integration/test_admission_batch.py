"""A pass commits its consecutive admissions together (`AdmissionBatch`): one transaction per
batch, counters that take the sum under the same limits, a borrower admitted alone, and, where
the transaction is refused, each job admitted alone so that a lost race skips only its job."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from functions.runtime import use_control_plane
from spotline.control import scheduling
from spotline.control.jobs import cancel_job
from spotline.control.records import pool_key, team_key
from spotline.control.scheduling import MAX_TRANSACTION_ITEMS, scheduling_pass

from .conftest import Deployment, submit


@contextmanager
def transactions(dep: Deployment) -> Iterator[list[int]]:
    """The item count of each TransactWriteItems call the repositories make."""
    sizes: list[int] = []

    def before_call(params: dict[str, Any], model: Any, **kwargs: Any) -> None:
        if model.name == "TransactWriteItems":
            sizes.append(len(params["TransactItems"]))

    events = dep.dynamodb.meta.events
    events.register("before-parameter-build.dynamodb", before_call)
    try:
        yield sizes
    finally:
        events.unregister("before-parameter-build.dynamodb", before_call)


def counter(dep: Deployment, key: str) -> tuple[int, int]:
    """(GPUs in use, moves) of a ledger counter."""
    found = dep.plane.ledger.counters(["a100-spot", "a100-on-demand"], ["vision", "nlp"])
    return (found[key].used, found[key].moves) if key in found else (0, 0)


def states(dep: Deployment, ids: list[str]) -> list[str]:
    return [dep.plane.jobs.get(i).state.value for i in ids]


def test_a_pass_admits_its_jobs_in_one_transaction(deployment: Deployment) -> None:
    # Given six one-GPU jobs of a team within its nominal quota (12 GPUs)
    deployment.clock.freeze()
    jobs = [submit(deployment, gpus=1, name=f"small-{i}") for i in range(6)]

    # When a pass runs
    with transactions(deployment) as sizes:
        result = scheduling_pass(deployment.plane)

    # Then every job is admitted by one transaction: each job's update and timeline entry, the
    # pool's counter and the team's, each counter taking 6 GPUs and counting 6 admissions
    assert len(result.admitted) == 6 and result.skipped == []
    assert sizes == [6 * 2 + 2]
    assert states(deployment, [j.id for j in jobs]) == ["ADMITTED"] * 6
    assert counter(deployment, pool_key("a100-spot")) == (6, 6)
    assert counter(deployment, team_key("vision")) == (6, 6)
    # And each job's launch workflow starts, with the version of its own transition
    assert deployment.starter is not None
    assert sorted(deployment.starter.names()) == sorted(f"launch-{j.id}-v1" for j in jobs)


def test_a_job_changed_after_the_plan_is_skipped_and_the_others_are_admitted(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given four one-GPU jobs, one of which is cancelled after the pass planned it
    deployment.clock.freeze()
    jobs = [submit(deployment, gpus=1, name=f"small-{i}") for i in range(4)]
    planned = scheduling.plan_with_stats

    def plan_then_cancel(*args: Any, **kwargs: Any) -> Any:
        decided = planned(*args, **kwargs)
        cancel_job(deployment.plane, "vision", jobs[2].id)
        return decided

    monkeypatch.setattr(scheduling, "plan_with_stats", plan_then_cancel)

    # When the pass acts: the batch's transaction is refused (the job's version moved)
    with transactions(deployment) as sizes:
        result = scheduling_pass(deployment.plane)

    # Then (after the cancellation's own transaction) each job is admitted alone: the cancelled
    # one is skipped, the three others admitted
    assert sizes[1] == 4 * 2 + 2 and sizes[2:] == [2 + 2] * 4
    assert sorted(result.admitted) == sorted((j.id, "a100-spot") for j in jobs if j is not jobs[2])
    assert [job_id for job_id, _ in result.skipped] == [jobs[2].id]
    assert states(deployment, [j.id for j in jobs]) == ["ADMITTED", "ADMITTED", "CANCELLED", "ADMITTED"]
    # And the counters hold what the admitted jobs hold, nothing of the refused transaction
    assert counter(deployment, pool_key("a100-spot")) == (3, 3)
    assert counter(deployment, team_key("vision")) == (3, 3)


def test_a_counter_that_disagrees_with_the_snapshot_admits_one_at_a_time_what_fits(
    deployment: Deployment,
) -> None:
    # Given a Spot pool counter that says 14 of its 16 GPUs are taken, while no job holds any
    # (drift: the pass plans from the jobs, the counter decides), and four one-GPU jobs
    deployment.clock.freeze()
    deployment.plane.ledger.set_usage({"a100-spot": 14}, {})
    jobs = [submit(deployment, gpus=1, name=f"small-{i}", spot="required") for i in range(4)]

    # When a pass runs
    result = scheduling_pass(deployment.plane)

    # Then the four together do not fit the counter; alone, two do and two are skipped: the
    # counter is never over-committed
    admitted = {job_id for job_id, _ in result.admitted}
    assert len(admitted) == 2 and {job_id for job_id, _ in result.skipped} == {j.id for j in jobs} - admitted
    assert sorted(states(deployment, [j.id for j in jobs])) == ["ADMITTED", "ADMITTED", "PENDING", "PENDING"]
    assert counter(deployment, pool_key("a100-spot"))[0] == 16


def test_a_team_counter_that_disagrees_refuses_the_batch_and_each_job_is_decided_alone(
    deployment: Deployment,
) -> None:
    # Given a team counter that says 10 of the team's 12 nominal GPUs are in use while none of
    # its jobs holds any, and four one-GPU jobs of that team
    deployment.clock.freeze()
    deployment.plane.ledger.set_usage({}, {"vision": 10})
    jobs = [submit(deployment, gpus=1, name=f"small-{i}") for i in range(4)]

    # When a pass runs
    with transactions(deployment) as sizes:
        result = scheduling_pass(deployment.plane)

    # Then the batch (4 more GPUs under a limit of 12) is refused, and each job is admitted
    # alone: two within the quota as the counter says, two borrowing from the idle team
    assert sizes[0] == 4 * 2 + 2 and len(sizes) > 1
    assert len(result.admitted) == 4
    assert states(deployment, [j.id for j in jobs]) == ["ADMITTED"] * 4
    assert counter(deployment, team_key("vision"))[0] == 14


def test_a_borrowing_admission_is_made_alone_with_its_lender_checks(deployment: Deployment) -> None:
    # Given four 4-GPU jobs of a team whose nominal quota is 12 GPUs, and an idle lender
    deployment.clock.freeze()
    jobs = [submit(deployment, gpus=4, name=f"mid-{i}", spot="required") for i in range(4)]

    # When a pass runs
    with transactions(deployment) as sizes:
        result = scheduling_pass(deployment.plane)

    # Then the three within the quota go together; the fourth borrows, alone, checking that the
    # lender's counter has not grown (its job, its timeline entry, the pool, the team, the lender)
    assert len(result.admitted) == 4
    assert sizes == [3 * 2 + 2, 1 * 2 + 3]
    assert counter(deployment, team_key("vision")) == (16, 4)
    assert states(deployment, [j.id for j in jobs]) == ["ADMITTED"] * 4


def test_a_large_backlog_is_admitted_in_transactions_of_at_most_100_items(deployment: Deployment) -> None:
    # Given a 200-GPU Spot pool, a team that may use all of it, and 120 one-GPU jobs
    config = deployment.plane.settings.config
    pools = [
        p.model_copy(update={"capacity_gpus": 200}) if p.name == "a100-spot" else p for p in config.pools
    ]
    teams = [t.model_copy(update={"nominal_gpus": 200}) for t in config.teams]
    config = config.model_copy(update={"pools": pools, "teams": teams})
    plane = dataclasses.replace(
        deployment.plane, settings=deployment.plane.settings.model_copy(update={"config": config})
    )
    use_control_plane(plane)
    deployment.clock.freeze()
    jobs = [submit(deployment, gpus=1, name=f"small-{i}", spot="required") for i in range(120)]

    # When a pass runs
    with transactions(deployment) as sizes:
        result = scheduling_pass(plane)

    # Then all are admitted, in three transactions none of which passes DynamoDB's limit
    assert len(result.admitted) == 120 and result.skipped == []
    assert len(sizes) == 3 and max(sizes) <= MAX_TRANSACTION_ITEMS
    assert sum(sizes) == 120 * 2 + 3 * 2
    assert set(states(deployment, [j.id for j in jobs])) == {"ADMITTED"}
    assert counter(deployment, pool_key("a100-spot")) == (120, 120)
