"""The gang hold, backfill-aware (`spotline/domain/gang_hold.py`): GPUs held for the top blocked
multi-node job go to a job ranked after it only when its declared run time ends before the gang's
projected start, or it fits what the gang leaves free then."""

from __future__ import annotations

import math

import pytest

from spotline.domain.decisions import Admit
from spotline.domain.gang_hold import ENDS_AFTER, GANG_HOLD_AFTER_S, NO_RUN_TIME, projected_start
from spotline.domain.models import ClusterSnapshot, Job

from .builders import HOUR, NOW, cluster, config, job, pool, run_plan, summary

POLICY = config(protection_period_s=600.0)
# When a gang that has waited long enough for a hold was submitted.
HELD = NOW - GANG_HOLD_AFTER_S - 10


def _snapshot() -> ClusterSnapshot:
    # A 16-GPU pool; a low job started a minute ago (inside its protection period) holds 8 GPUs
    # and declares an hour left: the blocked 16-GPU gang's projected start is in an hour.
    fresh = job("f").low().gpus(8).team("b").expected_runtime(HOUR + 60).running_since(NOW - 60).on("od")
    return cluster([pool("od", capacity=16)], [fresh])


def _pending() -> list[Job]:
    return [
        job("gang").high().gpus(16).nodes(2).submitted(HELD).build(),
        job("short").gpus(4).expected_runtime(HOUR / 2).submitted(NOW - 5).build(),
        job("long").gpus(4).expected_runtime(2 * HOUR).submitted(NOW - 4).build(),
        job("undeclared").gpus(4).submitted(NOW - 3).build(),
    ]


def test_only_a_job_that_ends_before_the_gangs_projected_start_backfills() -> None:
    # The job that ends in half an hour, before the gang could start (in an hour), takes 4 of the
    # held GPUs; the one that would run 2 h and the one that declares no run time wait, each
    # saying why.
    got = run_plan(_snapshot(), _pending(), POLICY)
    assert summary(got) == [
        ("wait", "gang"),
        ("admit", "short", "od"),
        ("wait", "long"),
        ("wait", "undeclared"),
    ]
    admitted = got[1]
    assert isinstance(admitted, Admit)
    assert admitted.reason == (
        "admitted to od: 4 GPUs, 4 of them held for the blocked job gang, backfilled:"
        " it ends in 0.5 h, before the gang's projected start in 1.0 h"
    )
    assert got[2].reason.endswith(f"held for the blocked multi-node job gang ({ENDS_AFTER})")
    assert got[3].reason.endswith(f"held for the blocked multi-node job gang ({NO_RUN_TIME})")


def test_a_job_running_past_the_projected_start_backfills_into_the_gpus_the_gang_leaves_free() -> None:
    # 24 GPUs, 8 free (held for the gang, which needs 16): a job of 12 GPUs ends in an hour, one
    # of 4 in 9 h. At the gang's projected start (in an hour) 8 + 12 = 20 are free: 4 beyond its
    # demand. The first 4-GPU job that runs 5 h may take them; the second may not (none is left).
    ends_soon = job("e").low().gpus(12).team("b").expected_runtime(HOUR + 60).running_since(NOW - 60).on("od")
    ends_late = job("l").low().gpus(4).team("b").expected_runtime(9 * HOUR).running_since(NOW - 60).on("od")
    pending = [
        job("gang").high().gpus(16).nodes(2).submitted(HELD).build(),
        job("a").gpus(4).expected_runtime(5 * HOUR).submitted(NOW - 5).build(),
        job("b").gpus(4).expected_runtime(5 * HOUR).submitted(NOW - 4).build(),
    ]
    got = run_plan(cluster([pool("od", capacity=24)], [ends_soon, ends_late]), pending, POLICY)
    assert summary(got) == [("wait", "gang"), ("admit", "a", "od"), ("wait", "b")]
    assert got[1].reason.endswith("it fits the GPUs left free at the gang's projected start in 1.0 h")
    assert got[2].reason.endswith(f"({ENDS_AFTER})")


def test_the_projected_start_is_when_enough_gpus_free_by_the_running_jobs_ends() -> None:
    policy = config()
    first = job("a").gpus(4).expected_runtime(2 * HOUR).running_since(NOW).on("od")
    second = job("b").gpus(8).expected_runtime(3 * HOUR).running_since(NOW).on("od")
    leaving = job("c").gpus(8).expected_runtime(HOUR).running_since(NOW).on("od", draining_for="x")
    # 2 free: the 4 GPUs at 2 h are not enough for 12; the 8 more at 3 h are (2 left over). The
    # job already leaving for a preemptor frees nothing for the gang.
    assert projected_start(12, 2, [first, second, leaving], NOW, policy) == (NOW + 3 * HOUR, 2)
    assert projected_start(12, 16, [], NOW, policy) == (NOW, 4)
    assert projected_start(20, 2, [first, second, leaving], NOW, policy) == (math.inf, 0)


@pytest.mark.parametrize(
    ("waited", "decisions"),
    [
        # The gang has waited 10 minutes, under GANG_HOLD_AFTER_S (15): nothing is held, the small
        # job that declares no run time takes 4 of the free GPUs.
        (600.0, [("wait", "gang"), ("admit", "small", "od")]),
        # 20 minutes: the free GPUs are held for it; the small job may not backfill.
        (1200.0, [("wait", "gang"), ("wait", "small")]),
    ],
)
def test_the_hold_waits_until_the_gang_has_waited_long_enough(
    waited: float, decisions: list[tuple[str, ...]]
) -> None:
    pending = [
        job("gang").high().gpus(16).nodes(2).submitted(NOW - waited).build(),
        job("small").gpus(4).submitted(NOW - 5).build(),
    ]
    assert summary(run_plan(_snapshot(), pending, POLICY)) == decisions
