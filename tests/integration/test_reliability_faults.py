"""Faults the control plane must survive (issue 11): the team quota under interleaved passes, a
Spot warning during a preemption, Batch throttling during a launch, a lost checkpoint,
SubmitJob failing, and Spot warnings for an unknown instance or one running two jobs.

Every test drives the handlers and workflow tasks directly on moto (`deployment`), except
where it says it runs the real workflow (`sfn_deployment`).
"""

from __future__ import annotations

from typing import Any

import pytest

from spotline.aws.settings import SpotlineConfig
from spotline.control import scheduling
from spotline.control.scheduling import scheduling_pass
from spotline.domain import JobState

from .conftest import CONFIG, Deployment, start, submit


def use_config(dep: Deployment, **changes: Any) -> None:
    """Run `dep` under CONFIG with `changes` (pools, teams, ...)."""
    config = SpotlineConfig.model_validate({**CONFIG, **changes})
    dep.plane.settings = dep.plane.settings.model_copy(update={"config": config})


# --- finding 6: the team quota is enforced by the ledger -------------------------------------

COHORT = {
    "pools": [{**CONFIG["pools"][0], "capacity_gpus": 64}],
    # nlp has no borrowing limit; vision lends nothing, audio lends at most 8 of its 16.
    "teams": [
        {"team": "nlp", "nominal_gpus": 8},
        {"team": "vision", "nominal_gpus": 8, "lending_limit_gpus": 0},
        {"team": "audio", "nominal_gpus": 16, "lending_limit_gpus": 8},
    ],
}


def run_another_pass_inside_the_next(dep: Deployment, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Make the next scheduling pass run a second whole pass after it read the active jobs and
    before it plans: the first pass then decides from an active index that is stale. Returns
    the list that receives the inner pass's result."""
    inner: list[Any] = []
    real_plan = scheduling.plan_with_stats

    def plan_after_another_pass(*args: Any, **kwargs: Any) -> Any:
        if not inner:
            inner.append(None)
            inner[0] = scheduling.scheduling_pass(dep.plane)
        return real_plan(*args, **kwargs)

    monkeypatch.setattr(scheduling, "plan_with_stats", plan_after_another_pass)
    return inner


def test_two_interleaved_passes_cannot_borrow_past_what_the_cohort_lends(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    dep = deployment
    use_config(dep, **COHORT)
    # Given nlp at its nominal 8 GPUs, and two more nlp jobs of 8 waiting: the cohort lends nlp
    # 8 GPUs (audio's limit; vision lends none), so only one of them may run
    start(dep, submit(dep, team="nlp"))
    first, second = submit(dep, team="nlp"), submit(dep, team="nlp")

    # When two passes interleave (the outer one decides from the active jobs it read before
    # the inner one admitted)
    inner = run_another_pass_inside_the_next(dep, monkeypatch)
    outer = scheduling_pass(dep.plane)

    # Then exactly one more nlp job was admitted, and the ledger never let nlp past 16 GPUs
    admitted = [job for job, _ in inner[0].admitted + outer.admitted]
    assert len(admitted) == 1 and admitted[0] in (first.id, second.id)
    assert [why for _, why in outer.skipped] == [
        "team quota exhausted: nlp is at its nominal 8 GPUs and no idle quota to borrow"
    ]
    _, teams = dep.plane.ledger.usage(["a100-spot"], ["nlp"])
    assert teams == {"nlp": 16}
    states = {dep.plane.jobs.get(j.id).state for j in (first, second)}
    assert states == {JobState.ADMITTED, JobState.PENDING}


def test_the_ledger_refuses_borrowing_that_other_teams_do_not_lend(deployment: Deployment) -> None:
    dep = deployment
    use_config(dep, **COHORT)
    # Given nlp at 16 GPUs (its nominal 8 and all the 8 the cohort lends it)
    start(dep, submit(dep, team="nlp"))
    start(dep, submit(dep, team="nlp"))
    late = submit(dep, team="nlp")

    # When an admission is attempted anyway (a pass deciding from a stale snapshot)
    with pytest.raises(Exception, match="quota exhausted"):
        scheduling.admit(dep.plane, late, "a100-spot", "stale decision", now=dep.clock())

    # Then nothing moved
    assert dep.plane.jobs.get(late.id).state is JobState.PENDING
    assert dep.plane.ledger.usage(["a100-spot"], ["nlp"]) == ({"a100-spot": 16}, {"nlp": 16})


def test_a_lender_that_grows_after_the_borrowing_was_read_fails_the_admission(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    dep = deployment
    use_config(dep, **COHORT)
    # Given nlp at its nominal 8, so its next job borrows audio's idle quota
    start(dep, submit(dep, team="nlp"))
    borrower = submit(dep, team="nlp")
    ledger = dep.plane.ledger
    real_counters = ledger.counters

    def counters_then_audio_grows(pools: Any, teams: Any) -> Any:
        read = real_counters(pools, teams)
        # audio takes 16 of its own right after the borrower's admission read the counters
        ledger.set_usage({}, {"audio": 16})
        return read

    monkeypatch.setattr(ledger, "counters", counters_then_audio_grows)

    # When the admission commits, audio no longer has anything idle to lend
    with pytest.raises(Exception, match="lends less"):
        scheduling.admit(dep.plane, borrower, "a100-spot", "borrowing", now=dep.clock())
    assert dep.plane.jobs.get(borrower.id).state is JobState.PENDING
