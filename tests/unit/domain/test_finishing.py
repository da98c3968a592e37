"""Waiting for running jobs that end within the victims' checkpoint write instead of preempting
(`SchedulerConfig.wait_for_ending_jobs`, `finishing.ending_soon`)."""

from __future__ import annotations

import pytest

from spotline.domain import Allocation, Priority
from spotline.domain.decisions import EndingSoon
from spotline.domain.explain import wait_text
from spotline.domain.finishing import horizon_s
from spotline.domain.planner import Preempt, Wait

from .builders import DAY, NOW, cluster, config, job, pool, run_plan, summary

OD16 = pool("od", capacity=16)


def low_ending_in(job_id: str, remaining_s: float | None, gpus: int = 8) -> Allocation:
    """A low job of team b running for a day, with `remaining_s` left by its declared run time
    (None: none declared)."""
    built = job(job_id).low().gpus(gpus).team("b").running_since(NOW - DAY)
    if remaining_s is not None:
        built = built.expected_runtime(DAY + remaining_s)
    return built.on("od")


HIGH = job("p").high().gpus(8).spot("never")


@pytest.mark.parametrize(
    ("remaining_s", "waits"),
    [
        (30.0, True),  # ends within the 60 s write: waits for it
        (60.0, True),  # ends as the write would finish
        (90.0, False),  # ends after the write: preempting is sooner
        (0.0, False),  # ran past its declared time: the estimate is wrong, not counted on
        (None, False),  # nothing declared
    ],
)
def test_waits_for_a_job_ending_within_the_write(remaining_s: float | None, waits: bool) -> None:
    snapshot = cluster([OD16], [low_ending_in("ending", remaining_s), low_ending_in("other", None)])
    policy = config(wait_for_ending_jobs=True, checkpoint_write_s=60.0)
    [decision] = run_plan(snapshot, [HIGH.build()], policy)
    if waits:
        assert isinstance(decision, Wait)
        assert decision.why == EndingSoon("pool od has 0 free GPUs of the 8 needed", "od", ("ending",), 60.0)
        assert decision.reason == wait_text(decision.why)
        assert "ending in od end within 60 s" in decision.reason
    else:
        assert isinstance(decision, Preempt)


def test_off_it_preempts() -> None:
    snapshot = cluster([OD16], [low_ending_in("ending", 30.0), low_ending_in("other", None)])
    [decision] = run_plan(snapshot, [HIGH.build()], config(checkpoint_write_s=60.0))
    assert isinstance(decision, Preempt)


@pytest.mark.parametrize(("measured_write_s", "waits"), [(600.0, True), (None, False)])
def test_the_victims_measured_write_sets_the_horizon(measured_write_s: float | None, waits: bool) -> None:
    # `ending` (critical, so no victim) ends in 300 s; the only victim, `other`, writes for its
    # measured 600 s (the wait is shorter than the write) or the default 60 s (preempting is).
    ending = job("ending").critical().gpus(8).team("b").running_since(NOW - DAY).expected_runtime(DAY + 300)
    other = job("other").low().gpus(8).team("b").running_since(NOW - DAY).build()
    other = other.with_changes(checkpoint_write_s=measured_write_s, pool="od")
    snapshot = cluster([OD16], [ending.on("od"), Allocation(job=other, pool="od", gpus=8)])
    policy = config(wait_for_ending_jobs=True, checkpoint_write_s=60.0)
    [decision] = run_plan(snapshot, [HIGH.build()], policy)
    if waits:
        assert isinstance(decision, Wait)
        assert decision.why == EndingSoon("pool od has 0 free GPUs of the 8 needed", "od", ("ending",), 600.0)
    else:
        assert summary([decision]) == [("preempt", "p", "od", "other")]


def test_one_ending_job_is_counted_on_by_one_preemptor() -> None:
    snapshot = cluster([OD16], [low_ending_in("ending", 30.0), low_ending_in("other", None)])
    first = job("p1").high().gpus(8).spot("never").submitted(NOW - 100).build()
    second = job("p2").high().gpus(8).spot("never").submitted(NOW - 50).build()
    decisions = run_plan(
        snapshot, [first, second], config(wait_for_ending_jobs=True, checkpoint_write_s=60.0)
    )
    assert summary(decisions) == [("wait", "p1"), ("preempt", "p2", "od", "other")]


def test_the_ends_must_free_enough() -> None:
    # A 4-GPU job ends soon, but the preemptor needs 8: it preempts.
    snapshot = cluster(
        [OD16],
        [
            low_ending_in("ending", 30.0, gpus=4),
            low_ending_in("other", None, gpus=4),
            low_ending_in("big", None),
        ],
    )
    [decision] = run_plan(
        snapshot, [HIGH.build()], config(wait_for_ending_jobs=True, checkpoint_write_s=60.0)
    )
    assert isinstance(decision, Preempt)


def test_no_wait_when_the_victims_stop_at_once() -> None:
    # Victims that checkpointed in the last 60 s are stopped at once: no write to wait for.
    fresh = job("other").low().gpus(8).team("b").running_since(NOW - DAY).checkpointed(NOW - 10).on("od")
    snapshot = cluster([OD16], [low_ending_in("ending", 30.0), fresh])
    policy = config(wait_for_ending_jobs=True, checkpoint_write_s=60.0, fresh_checkpoint_s=60.0)
    [decision] = run_plan(snapshot, [HIGH.build()], policy)
    assert isinstance(decision, Preempt)
    assert not decision.checkpoint


@pytest.mark.parametrize(
    ("weighs_loss", "no_delay_for", "waits"),
    [
        (False, frozenset(), False),  # 1,000 s is past the 60 s write
        (True, frozenset(), True),  # within 60 + 8 x (60 + 120) / 1 = 1,500 s
        (True, frozenset({Priority.HIGH}), False),  # a class that does not wait: the write only
    ],
)
def test_weighing_the_loss_waits_longer_for_a_small_preemptor(
    weighs_loss: bool, no_delay_for: frozenset[Priority], waits: bool
) -> None:
    ending = job("ending").critical().gpus(8).team("b").running_since(NOW - DAY).expected_runtime(DAY + 1000)
    snapshot = cluster([OD16], [ending.on("od"), low_ending_in("other", None)])
    policy = config(
        wait_for_ending_jobs=True,
        wait_for_ending_weighs_loss=weighs_loss,
        no_preemption_delay_for=no_delay_for,
        checkpoint_write_s=60.0,
        restart_cost_s=120.0,
    )
    [decision] = run_plan(snapshot, [HIGH.gpus(1).build()], policy)
    if waits:
        assert isinstance(decision, Wait)
        assert decision.why == EndingSoon(
            "pool od has 0 free GPUs of the 1 needed", "od", ("ending",), 1500.0
        )
    else:
        assert summary([decision]) == [("preempt", "p", "od", "other")]


def test_horizon_counts_each_victims_gpus_write_restart_and_restore() -> None:
    victim = job("v").low().gpus(4).running_since(NOW - DAY).build().with_changes(checkpoint_restore_s=30.0)
    allocation = Allocation(job=victim, pool="od", gpus=4)
    preemptor = HIGH.gpus(2).build()
    policy = config(wait_for_ending_weighs_loss=True, checkpoint_write_s=60.0, restart_cost_s=120.0)
    assert horizon_s(preemptor, 2, [allocation], policy) == 60.0 + 4 * (60.0 + 120.0 + 30.0) / 2
    assert horizon_s(preemptor, 2, [allocation], config(checkpoint_write_s=60.0)) == 60.0
