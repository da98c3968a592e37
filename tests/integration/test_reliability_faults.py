"""Faults the control plane must survive: the team quota under interleaved passes, a
Spot warning during a preemption, Batch throttling during a launch, a lost checkpoint,
SubmitJob failing, and Spot warnings for an unknown instance or one running two jobs.

Every test drives the handlers and workflow tasks directly on moto (`deployment`), except
where it says it runs the real workflow (`sfn_deployment`).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import Any

import pytest

from spotline.control import scheduling
from spotline.control.errors import BatchThrottled, LaunchFailed
from spotline.control.events import handle_spot_warning, record_checkpoint
from spotline.control.ports import execution_name
from spotline.control.reconciler import CHECKPOINT_OVERRUN_S, reconcile
from spotline.control.records import Disruption, JobRecord
from spotline.control.scheduling import scheduling_pass
from spotline.control.settings import SpotlineConfig
from spotline.control.workflow_tasks import (
    MAX_LAUNCH_FAILURES,
    confirm_checkpointing,
    finish_preemption,
    mark_launch_failed,
    request_checkpoint,
    submit_batch_job,
    terminate_batch_job,
)
from spotline.domain import JobState

from .helpers import CONFIG, Deployment, preempt, start, submit


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


@pytest.mark.parametrize("hint", [None, 0], ids=["no-hint", "low-usage-hint"])
def test_the_ledger_refuses_borrowing_that_other_teams_do_not_lend(
    deployment: Deployment, hint: int | None
) -> None:
    dep = deployment
    use_config(dep, **COHORT)
    # Given nlp at 16 GPUs (its nominal 8 and all the 8 the cohort lends it)
    start(dep, submit(dep, team="nlp"))
    start(dep, submit(dep, team="nlp"))
    late = submit(dep, team="nlp")

    # When an admission is attempted anyway (a pass deciding from a stale snapshot; with a
    # usage hint that says nlp holds nothing, the fallback reads and refuses as well)
    with pytest.raises(Exception, match="quota exhausted"):
        scheduling.admit(
            dep.plane, late, "a100-spot", "stale decision", now=dep.clock(), team_usage_hint=hint
        )

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
    # audio takes 16 of its own right after the borrower's admission read the counters
    after_counter_reads(dep, monkeypatch, lambda: ledger.set_usage({}, {"audio": 16}))

    # When the admission commits, audio no longer has anything idle to lend
    with pytest.raises(Exception, match="lends less"):
        scheduling.admit(dep.plane, borrower, "a100-spot", "borrowing", now=dep.clock())
    assert dep.plane.jobs.get(borrower.id).state is JobState.PENDING


def after_counter_reads(dep: Deployment, monkeypatch: pytest.MonkeyPatch, then: Callable[[], object]) -> None:
    """Call `then` right after each read of the ledger's counters."""
    ledger = dep.plane.ledger
    real_counters = ledger.counters

    def reading(pools: Any, teams: Any) -> Any:
        read = real_counters(pools, teams)
        then()
        return read

    monkeypatch.setattr(ledger, "counters", reading)


def count_counter_reads(dep: Deployment, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that gets one entry per read of the ledger's counters."""
    reads: list[int] = []
    after_counter_reads(dep, monkeypatch, lambda: reads.append(1))
    return reads


def test_a_pass_admits_within_the_nominal_quota_without_reading_the_counters(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    dep = deployment
    use_config(dep, **COHORT)
    job = submit(dep, team="nlp")  # 8 GPUs: nlp's whole nominal quota
    reads = count_counter_reads(dep, monkeypatch)

    result = scheduling_pass(dep.plane)

    assert [j for j, _ in result.admitted] == [job.id]
    assert reads == []
    assert dep.plane.ledger.usage(["a100-spot"], ["nlp"]) == ({"a100-spot": 8}, {"nlp": 8})


def test_a_usage_hint_that_was_low_falls_back_to_reading_and_borrows_as_without_it(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    dep = deployment
    use_config(dep, **COHORT)
    # Given nlp at its nominal 8, and an admission whose caller thinks nlp holds nothing
    start(dep, submit(dep, team="nlp"))
    borrower = submit(dep, team="nlp")
    reads = count_counter_reads(dep, monkeypatch)

    admitted = scheduling.admit(
        dep.plane, borrower, "a100-spot", "stale hint", now=dep.clock(), team_usage_hint=0
    )

    # Then the team's counter refused the reservation, the counters were read, and nlp borrowed
    # audio's idle 8 GPUs as it would have without the hint
    assert admitted.state is JobState.ADMITTED
    assert reads == [1]
    assert dep.plane.ledger.usage(["a100-spot"], ["nlp"]) == ({"a100-spot": 16}, {"nlp": 16})


# --- finding 7: a Spot warning during a preemption shortens the wait -------------------------


def test_a_spot_warning_during_a_preemption_stops_the_job_by_the_earlier_deadline(
    sfn_deployment: Deployment,
) -> None:
    dep = sfn_deployment
    use_config(dep, grace_period_s=600)
    # Given a running job being preempted, with 10 minutes to checkpoint (its workflow waits)
    running = start(dep, submit(dep), instance_id="i-0bbbbbbbbbbbbbbb1", launch_workflow_runs=True)
    now = dep.clock()
    marked = preempt(dep.plane, running, 600, now=now)
    waiting = wait_for_token(dep, running.id)

    # When a Spot warning for its instance comes with less than 2 s of notice left
    warned_at = now - (dep.plane.config.spot_notice_s - dep.plane.config.spot_notice_margin_s) + 1
    assert handle_spot_warning(dep.plane, "i-0bbbbbbbbbbbbbbb1", warned_at) == [running.id]

    # Then the job is stopped and requeued as INTERRUPTED by the warning's deadline, long before
    # the preemption's
    escalated = dep.plane.jobs.get(running.id)
    assert escalated.disruption is Disruption.INTERRUPT
    assert escalated.checkpoint_deadline_at == pytest.approx(now + 1)
    described = dep.wait_for_execution("preempt", execution_name("interrupt", running.id, marked.version))
    assert described["status"] == "SUCCEEDED"
    requeued = dep.plane.jobs.get(running.id)
    assert requeued.state is JobState.PENDING and requeued.job.interruptions == 1
    assert [b for b, _ in dep.launcher.terminated] == [running.batch_job_id]
    # And the preemption's workflow is the one still waiting (its token was replaced): when it
    # times out it finds the job no longer CHECKPOINTING
    assert requeued.job.preemptions == 0 and requeued.checkpoint_task_token is None
    assert waiting.checkpoint_task_token is not None
    assert (
        dep.sfn.describe_execution(
            executionArn=dep.state_machines["preempt"].replace(":stateMachine:", ":execution:")
            + ":"
            + execution_name("preempt", running.id, marked.version)
        )["status"]
        == "RUNNING"
    )


def wait_for_token(dep: Deployment, job_id: str, timeout_s: float = 10.0) -> JobRecord:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        record = dep.plane.jobs.get(job_id)
        if record.checkpoint_task_token:
            return record
        time.sleep(0.02)
    raise AssertionError("the workflow never stored its task token")


# --- finding 8: throttling is not a launch failure -------------------------------------------


def test_throttling_that_outlasts_the_retries_requeues_without_counting_a_failure(
    deployment: Deployment,
) -> None:
    dep = deployment
    record = submit(dep)
    # Given a job whose launch is throttled past the workflow's retries, more times than a
    # launch may fail
    for attempt in range(MAX_LAUNCH_FAILURES + 1):
        admitted = scheduling.admit(
            dep.plane, dep.plane.jobs.get(record.id), "a100-spot", "test", now=dep.clock()
        )
        dep.launcher.failures.append(BatchThrottled("Too Many Requests"))
        with pytest.raises(BatchThrottled):
            submit_batch_job(dep.plane, record.id, version=admitted.version, pool="a100-spot")
        # When the workflow's Catch hands the error on
        result = mark_launch_failed(
            dep.plane,
            record.id,
            version=admitted.version,
            error="BatchThrottled",
            cause='{"errorMessage": "Too Many Requests", "errorType": "BatchThrottled"}',
        )
        # Then the job is back in the queue, its GPUs free, and no failure is counted
        stored = dep.plane.jobs.get(record.id)
        assert result["requeued"] and stored.state is JobState.PENDING, attempt
        assert stored.launch_failures == 0
        assert dep.plane.ledger.usage(["a100-spot"], ["vision"]) == ({"a100-spot": 0}, {"vision": 0})

    # And a real failure still counts
    admitted = scheduling.admit(
        dep.plane, dep.plane.jobs.get(record.id), "a100-spot", "test", now=dep.clock()
    )
    mark_launch_failed(
        dep.plane, record.id, version=admitted.version, error="LaunchFailed", cause="bad image"
    )
    assert dep.plane.jobs.get(record.id).launch_failures == 1


# --- Spot warnings: an unknown instance, an instance running two jobs ---------------------------


def test_a_spot_warning_for_an_unknown_instance_changes_no_job(deployment: Deployment) -> None:
    dep = deployment
    # Given two running jobs on known instances
    jobs = [start(dep, submit(dep, gpus=4), instance_id=f"i-0ccccccccccccccc{n}") for n in (1, 2)]
    before = [dep.plane.jobs.get(j.id) for j in jobs]

    # When a warning comes for an instance Spotline never saw
    affected = handle_spot_warning(dep.plane, "i-0ddddddddddddddd9", dep.clock())

    # Then no job changed and no workflow started
    assert affected == []
    assert [dep.plane.jobs.get(j.id) for j in jobs] == before
    assert dep.starter is not None and not [n for n in dep.starter.names() if not n.startswith("launch-")]


def test_a_spot_warning_for_an_instance_running_two_jobs_interrupts_both(deployment: Deployment) -> None:
    dep = deployment
    # Given two 4-GPU jobs sharing one 8-GPU instance, and a third job elsewhere
    shared = "i-0eeeeeeeeeeeeee01"
    both = [start(dep, submit(dep, gpus=4), instance_id=shared) for _ in range(2)]
    other = start(dep, submit(dep, gpus=4), instance_id="i-0eeeeeeeeeeeeee02")

    # When the warning for the shared instance comes (and comes again)
    now = dep.clock()
    first = handle_spot_warning(dep.plane, shared, now)
    again = handle_spot_warning(dep.plane, shared, now)

    # Then both jobs checkpoint for the interruption, each with its own workflow, once
    assert sorted(first) == sorted(j.id for j in both) and sorted(again) == sorted(first)
    for job in both:
        stored = dep.plane.jobs.get(job.id)
        assert stored.state is JobState.CHECKPOINTING and stored.disruption is Disruption.INTERRUPT
    assert dep.starter is not None
    interrupts = [n for n in dep.starter.names() if n.startswith("interrupt-")]
    assert sorted(set(interrupts)) == sorted(f"interrupt-{j.id}-v{j.version + 1}" for j in both)
    assert dep.plane.jobs.get(other.id).state is JobState.RUNNING


# --- a lost checkpoint: the grace timeout --------------------------------------------------------


def test_a_lost_checkpoint_event_ends_the_preemption_at_its_grace_timeout(deployment: Deployment) -> None:
    dep = deployment
    now = dep.clock.freeze()
    # Given a running job with a checkpoint at step 100, asked to checkpoint for a preemption
    running = start(dep, submit(dep))
    control_record_checkpoint(dep, running.id, step=100)
    now = dep.clock.advance(30)
    marked = preempt(dep.plane, dep.plane.jobs.get(running.id), dep.plane.config.grace_period_s, now=now)
    confirmed = confirm_checkpointing(dep.plane, running.id, version=marked.version, timeout_s=2)
    request_checkpoint(dep.plane, running.id, task_token="token-1")

    # When the agent's Checkpoint Completed is lost, the workflow's wait times out (grace
    # period): it stops the run and requeues the job
    dep.clock.advance(confirmed["timeout_s"])
    terminate_batch_job(dep.plane, running.id, batch_job_id=confirmed["batch_job_id"])
    finished = finish_preemption(dep.plane, running.id, version=marked.version)

    # Then the job is PENDING again, resumes from the last checkpoint recorded, and the work
    # since it is counted as lost
    requeued = dep.plane.jobs.get(running.id)
    assert finished["finished"] and requeued.state is JobState.PENDING
    assert requeued.job.last_checkpoint_step == 100 and requeued.job.preemptions == 1
    assert requeued.job.lost_work_s == pytest.approx(30 + confirmed["timeout_s"])
    assert dep.launcher.terminated[-1][0] == running.batch_job_id
    assert dep.plane.ledger.usage(["a100-spot"], ["vision"]) == ({"a100-spot": 0}, {"vision": 0})


def test_a_lost_checkpoint_and_a_dead_workflow_are_finished_by_the_reconciler(deployment: Deployment) -> None:
    dep = deployment
    now = dep.clock.freeze()
    # Given a job asked to checkpoint whose workflow died, and whose checkpoint never came
    running = start(dep, submit(dep))
    preempt(dep.plane, running, dep.plane.config.grace_period_s, now=now)

    # When the reconciler runs before, then after the deadline plus the overrun allowance
    config = dep.plane.config
    dep.clock.advance(config.grace_period_s)
    assert reconcile(dep.plane).requeued == []
    dep.clock.advance(CHECKPOINT_OVERRUN_S + 1)
    result = reconcile(dep.plane)

    # Then the job was stopped and requeued (restarting from the beginning), its GPUs freed
    assert result.requeued == [(running.id, "checkpoint overran")]
    requeued = dep.plane.jobs.get(running.id)
    assert requeued.state is JobState.PENDING and requeued.job.preemptions == 1
    assert dep.launcher.terminated[-1][0] == running.batch_job_id
    assert dep.plane.ledger.usage(["a100-spot"], ["vision"]) == ({"a100-spot": 0}, {"vision": 0})


# --- SubmitJob failing; concurrent passes ---------------------------------------------------------


def test_submitjob_failing_for_good_fails_the_job_after_three_launches(deployment: Deployment) -> None:
    dep = deployment
    record = submit(dep)
    # Given Batch refuses every SubmitJob for good (a bad job definition)
    for attempt in range(1, MAX_LAUNCH_FAILURES + 1):
        admitted = scheduling.admit(
            dep.plane, dep.plane.jobs.get(record.id), "a100-spot", "test", now=dep.clock()
        )
        dep.launcher.failures.append(LaunchFailed("CLIENT_ERROR: job definition not found"))
        with pytest.raises(LaunchFailed):
            submit_batch_job(dep.plane, record.id, version=admitted.version, pool="a100-spot")
        mark_launch_failed(
            dep.plane,
            record.id,
            version=admitted.version,
            error="LaunchFailed",
            cause="job definition not found",
        )
        stored = dep.plane.jobs.get(record.id)
        # Then it is requeued with the failure counted, and FAILED at the third
        assert stored.launch_failures == attempt
        assert stored.state is (JobState.FAILED if attempt == MAX_LAUNCH_FAILURES else JobState.PENDING)
        assert dep.plane.ledger.usage(["a100-spot"], ["vision"]) == ({"a100-spot": 0}, {"vision": 0})
    assert "launch failed 3 times" in dep.plane.jobs.get(record.id).state_reason


def test_two_interleaved_passes_never_overcommit_a_pool(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    dep = deployment
    use_config(dep, pools=[CONFIG["pools"][0]], teams=[])
    # Given a 16-GPU pool and three 8-GPU jobs waiting
    jobs = [submit(dep) for _ in range(3)]

    # When two passes interleave, each deciding from what it read before the other admitted
    inner = run_another_pass_inside_the_next(dep, monkeypatch)
    outer = scheduling_pass(dep.plane)

    # Then two jobs run, the pool is exactly full, and the third waits
    admitted = inner[0].admitted + outer.admitted
    assert len(admitted) == 2
    assert dep.plane.ledger.usage(["a100-spot"], [])[0] == {"a100-spot": 16}
    states = sorted(dep.plane.jobs.get(j.id).state.value for j in jobs)
    assert states == ["ADMITTED", "ADMITTED", "PENDING"]


def control_record_checkpoint(dep: Deployment, job_id: str, *, step: int) -> None:
    """The agent's Checkpoint Completed for the job's current run."""
    record = dep.plane.jobs.get(job_id)
    extra: dict[str, Any] = {}
    if "run_id" in inspect.signature(record_checkpoint).parameters:
        extra["run_id"] = getattr(record, "run_id", None)
    stored = record_checkpoint(
        dep.plane, job_id, checkpoint_uri=f"s3://checkpoints/{job_id}/{step}", step=step, **extra
    )
    assert stored is not None
