"""The reconciler moves on jobs whose expected event never came."""

from __future__ import annotations

from typing import Any

import pytest

import functions.reconciler
from spotline.aws.ledger import LedgerRepository
from spotline.control.reconciler import CHECKPOINT_OVERRUN_S, LAUNCH_TIMEOUT_S, reconcile
from spotline.control.records import Counter, Disruption
from spotline.control.scheduling import admit
from spotline.domain import JobState

from .helpers import Deployment, context, load_event, start, submit


def test_a_healthy_cluster_is_left_alone(deployment: Deployment) -> None:
    deployment.clock.freeze()
    running = start(deployment, submit(deployment))

    result = functions.reconciler.handler(load_event("scheduled_event"), context("reconciler"))

    assert result == {"examined": 1, "requeued": [], "drift": {}, "repaired": {}}
    assert deployment.plane.jobs.get(running.id).state is JobState.RUNNING


def test_an_admitted_job_whose_launch_never_happened_is_requeued(deployment: Deployment) -> None:
    # Given a job admitted (GPUs reserved) whose launch workflow never ran
    deployment.clock.freeze()
    admitted = admit(deployment.plane, submit(deployment), "a100-spot", "fits", now=deployment.clock())

    # When the launch timeout has passed
    deployment.clock.advance(LAUNCH_TIMEOUT_S + 1)
    result = functions.reconciler.handler(load_event("scheduled_event"), context("reconciler"))

    # Then it is back in the queue and its GPUs are free
    assert result["requeued"] == [[admitted.id, "launch timed out"]]
    assert deployment.plane.jobs.get(admitted.id).state is JobState.PENDING
    assert deployment.plane.ledger.usage(["a100-spot"], [])[0] == {"a100-spot": 0}


def test_a_checkpointing_job_past_its_deadline_is_stopped_and_requeued(deployment: Deployment) -> None:
    # Given a job checkpointing for a preemption whose workflow died
    now = deployment.clock.freeze()
    running = start(deployment, submit(deployment))
    deployment.plane.jobs.transition(
        running,
        JobState.CHECKPOINTING,
        "preempted",
        now=now,
        changes={
            "disruption": Disruption.PREEMPT,
            "checkpoint_deadline_at": now + 10,
            "draining_for": "job-x",
        },
    )

    # When its deadline and the overrun allowance have passed
    deployment.clock.advance(10 + CHECKPOINT_OVERRUN_S + 1)
    functions.reconciler.handler(load_event("scheduled_event"), context("reconciler"))

    # Then it was stopped and requeued as preempted
    requeued = deployment.plane.jobs.get(running.id)
    assert requeued.state is JobState.PENDING and requeued.job.preemptions == 1
    assert [b for b, _ in deployment.launcher.terminated] == [running.batch_job_id]


def test_a_running_job_without_heartbeats_is_presumed_lost_with_its_host(deployment: Deployment) -> None:
    deployment.clock.freeze()
    running = start(deployment, submit(deployment))

    deployment.clock.advance(deployment.plane.config.heartbeat_timeout_s + 1)
    functions.reconciler.handler(load_event("scheduled_event"), context("reconciler"))

    requeued = deployment.plane.jobs.get(running.id)
    assert requeued.state is JobState.PENDING and requeued.job.interruptions == 1
    entries, _ = deployment.plane.timeline.list(running.id)
    assert entries[-2].target == "INTERRUPTED" and "no heartbeat" in entries[-2].reason
    assert entries[-2].kind == "host-loss"  # no Spot warning was sent: a lost host, not a warning


def test_ledger_drift_is_reported_then_repaired_when_seen_again(deployment: Deployment) -> None:
    # Given a pool counter that says 3 GPUs where the running job holds 8
    deployment.clock.freeze()
    start(deployment, submit(deployment))
    ledger = deployment.plane.ledger
    ledger.set_usage({"a100-spot": 3}, {})

    # When the reconciler runs, it reports the drift and only marks it: it may be a race
    first = functions.reconciler.handler(load_event("scheduled_event"), context("reconciler"))
    assert first["drift"] == {"POOL#a100-spot": [3, 8]} and first["repaired"] == {}
    assert ledger.usage(["a100-spot"], [])[0] == {"a100-spot": 3}

    # Then the next run, seeing the same drift, sets the counter to what the jobs hold
    second = functions.reconciler.handler(load_event("scheduled_event"), context("reconciler"))
    assert second["repaired"] == {"POOL#a100-spot": [3, 8]}
    assert ledger.usage(["a100-spot"], [])[0] == {"a100-spot": 8}
    assert ledger.counters(["a100-spot"], [])["POOL#a100-spot"] == Counter(8, moves=1)

    # And a run after that finds nothing to report
    third = functions.reconciler.handler(load_event("scheduled_event"), context("reconciler"))
    assert third["drift"] == {} and third["repaired"] == {}


def test_a_drift_that_changed_between_runs_is_not_repaired(deployment: Deployment) -> None:
    deployment.clock.freeze()
    start(deployment, submit(deployment))
    ledger = deployment.plane.ledger
    ledger.set_usage({"a100-spot": 3}, {})
    functions.reconciler.handler(load_event("scheduled_event"), context("reconciler"))

    # When the counter moves before the next run (a release, an admission racing the read)
    ledger.set_usage({"a100-spot": 5}, {})
    again = functions.reconciler.handler(load_event("scheduled_event"), context("reconciler"))

    # Then the new drift is only marked, not repaired
    assert again["drift"] == {"POOL#a100-spot": [5, 8]} and again["repaired"] == {}
    assert ledger.counters(["a100-spot"], [])["POOL#a100-spot"] == Counter(5, drift_mark=(5, 8, 0))


def test_a_repair_loses_to_a_counter_that_moved_after_the_read(deployment: Deployment) -> None:
    deployment.clock.freeze()
    ledger = deployment.plane.ledger
    ledger.set_usage({"a100-spot": 3}, {})
    assert ledger.mark_drift("POOL#a100-spot", 3, 0, moves=0)
    take_and_give(ledger, "a100-spot", 1, give=False)  # an admission after the reconciler read 3

    assert not ledger.repair_drift("POOL#a100-spot", 3, 0, moves=0)
    assert ledger.usage(["a100-spot"], [])[0] == {"a100-spot": 4}


def test_the_same_drift_after_an_admission_and_a_release_is_marked_again_not_repaired(
    deployment: Deployment,
) -> None:
    # Given a drift the reconciler marked
    deployment.clock.freeze()
    ledger = deployment.plane.ledger
    ledger.set_usage({"a100-spot": 3}, {})
    functions.reconciler.handler(load_event("scheduled_event"), context("reconciler"))
    assert ledger.counters(["a100-spot"], [])["POOL#a100-spot"] == Counter(3, drift_mark=(3, 0, 0))

    # When a job takes 4 GPUs and gives them back before the next run (the counter reads 3 again:
    # what a race of the reads against an admission looks like, twice in a row)
    take_and_give(ledger, "a100-spot", 4)
    again = functions.reconciler.handler(load_event("scheduled_event"), context("reconciler"))

    # Then the same drift is only marked again, at the new change count
    assert again["drift"] == {"POOL#a100-spot": [3, 0]} and again["repaired"] == {}
    assert ledger.counters(["a100-spot"], [])["POOL#a100-spot"] == Counter(3, moves=2, drift_mark=(3, 0, 2))
    # And repaired by the run after, the counter having stayed still
    third = functions.reconciler.handler(load_event("scheduled_event"), context("reconciler"))
    assert third["repaired"] == {"POOL#a100-spot": [3, 0]}
    assert ledger.usage(["a100-spot"], [])[0] == {"a100-spot": 0}


def take_and_give(ledger: LedgerRepository, pool: str, gpus: int, *, give: bool = True) -> None:
    """Apply a job's admission (and release) to a pool counter, as the job transactions do."""
    take, _ = ledger.reserve_items(pool=pool, capacity_gpus=16, team="vision", gpus=gpus)
    give_items, _ = ledger.release_items(pool=pool, team="vision", gpus=gpus)
    for item in [take[0], *(give_items[:1] if give else [])]:
        ledger.table.client.update_item(**item["Update"])


def test_a_counter_that_agrees_again_loses_its_mark(deployment: Deployment) -> None:
    deployment.clock.freeze()
    ledger = deployment.plane.ledger
    ledger.set_usage({"a100-spot": 3}, {})
    functions.reconciler.handler(load_event("scheduled_event"), context("reconciler"))
    assert ledger.counters(["a100-spot"], [])["POOL#a100-spot"] == Counter(3, drift_mark=(3, 0, 0))

    ledger.set_usage({"a100-spot": 0}, {})
    result = functions.reconciler.handler(load_event("scheduled_event"), context("reconciler"))

    assert result["drift"] == {} and ledger.counters(["a100-spot"], [])["POOL#a100-spot"] == Counter(0)


def test_a_counter_item_that_is_missing_is_repaired_too(deployment: Deployment) -> None:
    deployment.clock.freeze()
    start(deployment, submit(deployment))
    ledger = deployment.plane.ledger
    ledger.table.client.delete_item(TableName=ledger.table.name, Key={"pk": {"S": "POOL#a100-spot"}})

    first = functions.reconciler.handler(load_event("scheduled_event"), context("reconciler"))
    second = functions.reconciler.handler(load_event("scheduled_event"), context("reconciler"))

    assert first["drift"] == {"POOL#a100-spot": [0, 8]} and first["repaired"] == {}
    assert second["repaired"] == {"POOL#a100-spot": [0, 8]}
    assert ledger.usage(["a100-spot"], [])[0] == {"a100-spot": 8}


def test_an_admission_between_the_reconcilers_reads_is_no_drift(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a running job, and a waiting one that a pass admits while the reconciler reads
    deployment.clock.freeze()
    start(deployment, submit(deployment))
    waiting = submit(deployment)
    plane = deployment.plane
    read_active = plane.jobs.active

    def active_then_an_admission(*args: Any, **kwargs: Any) -> Any:
        found = read_active(*args, **kwargs)
        admit(plane, plane.jobs.get(waiting.id), "a100-spot", "fits", now=deployment.clock())
        return found

    monkeypatch.setattr(plane.jobs, "active", active_then_an_admission)

    # When the reconciler reads the jobs before the admission and the counters after it
    result = reconcile(plane)

    # Then the counters the admission moved between its reads are no drift: nothing reported
    assert result.drift == {} and result.repaired == {}
    assert plane.ledger.usage(["a100-spot"], [])[0] == {"a100-spot": 16}
