"""The deadline guard in the planner: Spot placement refused, and jobs on Spot moved to
On-Demand (checkpoint-then-move), when the guard's safety net says a Spot loss would no longer
leave time for an On-Demand restart (`deadline.spot_unsafe`, `moves.moves_to_on_demand`)."""

from __future__ import annotations

import pytest

from spotline.domain import planner
from spotline.domain.models import MovingTo
from spotline.domain.placement import spot_refusal
from spotline.domain.planner import Move

from .builders import HOUR, NOW, cluster, config, job, pool, run_plan, summary

OD = pool("od", capacity=16)
SPOT = pool("spot", capacity=16, purchase="spot")
# 9 h done of 10, 1.2 h to its deadline: a reclaim now would leave no time for a restart
LATE = (
    job("late").gpus(8).expected_runtime(10 * HOUR).submitted(NOW - 9 * HOUR)
    .deadline(NOW + 1.2 * HOUR).progress(0.9).running_since(NOW - HOUR)
)  # fmt: skip
EARLY = (
    job("early").gpus(8).expected_runtime(10 * HOUR).submitted(NOW - HOUR)
    .deadline(NOW + 20 * HOUR).progress(0.1).running_since(NOW - HOUR)
)  # fmt: skip


def test_a_deadline_job_on_spot_that_can_no_longer_absorb_a_reclaim_moves_to_on_demand() -> None:
    snapshot = cluster([OD, SPOT], [LATE.on("spot"), EARLY.on("spot")])
    decisions = run_plan(snapshot, [], config())
    assert summary(decisions) == [("move", "late", "spot", "od")]
    move = decisions[0]
    assert isinstance(move, Move) and not move.to_spot
    assert move.draining_for == MovingTo(pool="od")
    assert "deadline guard: On-Demand to the end" in move.reason


def test_no_move_without_on_demand_room_or_for_a_job_that_requires_spot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    full = cluster([OD, SPOT], [LATE.on("spot"), job("x").gpus(16).on("od")])
    assert summary(run_plan(full, [], config())) == []
    required = cluster([OD, SPOT], [LATE.spot("required").on("spot")])
    assert summary(run_plan(required, [], config())) == []
    monkeypatch.setattr(planner, "MAX_PREEMPTIONS_PER_PASS", 0)
    assert summary(run_plan(cluster([OD, SPOT], [LATE.on("spot")]), [], config())) == []


def test_spot_placement_is_refused_by_the_guard_s_safety_net() -> None:
    lenient = config(spot_slack_factor=0.0)
    late = (
        job("late").gpus(8).expected_runtime(10 * HOUR).submitted(NOW - 9 * HOUR)
        .deadline(NOW + 1.2 * HOUR).progress(0.9).build()
    )  # fmt: skip
    why = spot_refusal(late, SPOT, NOW, HOUR, lenient)
    assert why is not None and why.startswith("deadline guard: On-Demand to the end")
    early = job("early").gpus(8).expected_runtime(10 * HOUR).deadline(NOW + 20 * HOUR).build()
    assert spot_refusal(early, SPOT, NOW, 10 * HOUR, lenient) is None
    assert summary(run_plan(cluster([OD, SPOT], []), [late], lenient)) == [("admit", "late", "od")]
