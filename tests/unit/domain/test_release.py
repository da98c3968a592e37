"""A job short of GPUs waits for running jobs that free them within `release_wait_s` instead of
preempting (`spotline.domain.release`). A release after the window, an overrun, or a critical
preemptor preempts; a release counted for one job is not counted for the next."""

from __future__ import annotations

import random

from spotline.domain import ClusterSnapshot, Job, SchedulerConfig, SortedQueue, plan
from spotline.domain.decisions import Decision, ReleaseSoon, Wait
from spotline.domain.models import Allocation
from tests.unit.domain.builders import HOUR, NOW, cluster, config, job, pool, summary

OD16 = pool("od", capacity=16)
OFF = config()
TEN_MINUTES = config(release_wait_s=600.0)
TWENTY_MINUTES = config(release_wait_s=1200.0)


def run(snapshot: ClusterSnapshot, pending: list[Job], policy: SchedulerConfig) -> list[Decision]:
    return plan(snapshot, SortedQueue.of(pending), NOW, policy, random.Random(0))


def low(name: str, ran_s: float, declared_s: float, gpus: int = 8) -> Allocation:
    """A low job on `gpus` GPUs, running `ran_s` of its declared `declared_s`."""
    return job(name).low().gpus(gpus).expected_runtime(declared_s).running_since(NOW - ran_s).on("od")


def test_a_job_whose_missing_gpus_free_within_the_window_waits_for_them() -> None:
    # 4 GPUs are free; the high job needs 8. A job on 4 GPUs ends by its declared run time in
    # 5 minutes: with a 10-minute window the high job waits, without one it preempts.
    snapshot = cluster([OD16], [low("soon", HOUR - 300, HOUR, 4), low("long", 60, 10 * HOUR, 8)])
    pending = [job("h").high().gpus(8).build()]
    assert summary(run(snapshot, pending, OFF))[0][0] == "preempt"
    decisions = run(snapshot, pending, TEN_MINUTES)
    assert summary(decisions) == [("wait", "h")]
    wait = decisions[0]
    assert isinstance(wait, Wait) and wait.why == ReleaseSoon(wait.why.shortfall, "od", 4, 600.0)
    assert "free the 4 GPUs it lacks in od within 10 min" in wait.reason


def test_a_release_after_the_window_does_not_hold_the_job() -> None:
    # The 4 GPUs end in 15 minutes: past a 10-minute window it preempts; a 20-minute window holds it.
    snapshot = cluster([OD16], [low("later", HOUR - 900, HOUR, 4), low("long", 60, 10 * HOUR, 8)])
    pending = [job("h").high().gpus(8).build()]
    off = summary(run(snapshot, pending, OFF))
    assert off[0][0] == "preempt"
    assert summary(run(snapshot, pending, TEN_MINUTES)) == off
    assert summary(run(snapshot, pending, TWENTY_MINUTES)) == [("wait", "h")]


def test_a_job_past_its_declared_end_frees_nothing() -> None:
    snapshot = cluster([OD16], [low("overrun", HOUR + 60, HOUR, 4), low("long", 60, 10 * HOUR, 8)])
    pending = [job("h").high().gpus(8).build()]
    off = summary(run(snapshot, pending, OFF))
    assert off[0][0] == "preempt"
    assert summary(run(snapshot, pending, TWENTY_MINUTES)) == off


def test_a_class_that_stops_victims_at_once_preempts() -> None:
    snapshot = cluster([OD16], [low("soon", HOUR - 300, HOUR, 4), low("long", 60, 10 * HOUR, 8)])
    pending = [job("c").critical().gpus(8).build()]
    off = summary(run(snapshot, pending, OFF))
    assert off[0][0] == "preempt"
    assert summary(run(snapshot, pending, TEN_MINUTES)) == off


def test_a_release_counted_for_one_job_is_not_counted_for_the_next() -> None:
    # 4 GPUs end soon; two 8-GPU high jobs lack 4 each (4 free). The first waits for them; the
    # second finds them counted and preempts the long job.
    snapshot = cluster([OD16], [low("soon", HOUR - 300, HOUR, 4), low("long", 60, 10 * HOUR, 8)])
    pending = [job("h1").high().gpus(8).submitted(NOW - 60).build(), job("h2").high().gpus(8).build()]
    assert summary(run(snapshot, pending, TEN_MINUTES)) == [("wait", "h1"), ("preempt", "h2", "od", "long")]


def test_the_shipped_policy_waits_for_releases_within_ninety_minutes() -> None:
    assert SchedulerConfig().release_wait_s == 5400.0
