"""Moving to Spot (`SchedulerConfig.move_to_spot_min_remaining_s`): a job that runs On-Demand is
checkpointed and requeued to resume on Spot once Spot has room for it after a pass's decisions."""

from __future__ import annotations

import pytest

from spotline.domain import planner
from spotline.domain.models import MovingTo
from spotline.domain.planner import Move

from .builders import HOUR, NOW, JobBuilder, cluster, config, job, pool, run_plan, summary

OD = pool("od", capacity=16)
SPOT = pool("spot", capacity=16, purchase="spot")
MOVES = config(move_to_spot_min_remaining_s=2 * HOUR, protection_period_s=600.0)
# A normal job that has run an hour On-Demand of the ten it declared.
LONG = job("long").gpus(8).expected_runtime(10 * HOUR).running_since(NOW - HOUR)


def test_a_long_job_on_demand_moves_to_spot_room_left_by_the_pass() -> None:
    snapshot = cluster([OD, SPOT], [LONG.on("od"), job("s").gpus(8).on("spot")])
    decisions = run_plan(snapshot, [], MOVES)
    assert summary(decisions) == [("move", "long", "od", "spot")]
    move = decisions[0]
    assert isinstance(move, Move)
    assert move.draining_for == MovingTo(pool="spot")
    assert "9.0 h left" in move.reason


def test_the_pass_s_own_admissions_come_first() -> None:
    # A pending job takes the Spot room: nothing is left to move to.
    snapshot = cluster([OD, SPOT], [LONG.on("od"), job("s").gpus(8).on("spot")])
    pending = [job("p").gpus(8).build()]
    assert summary(run_plan(snapshot, pending, MOVES)) == [("admit", "p", "spot")]


@pytest.mark.parametrize(
    ("running", "why"),
    [
        (LONG.expected_runtime(2 * HOUR), "less than two hours left"),
        (LONG.running_since(NOW - 60), "inside its protection period"),
        (LONG.spot("never"), "asks for On-Demand only"),
        (LONG.critical(), "its class runs On-Demand"),
        (LONG.gpus(16), "more GPUs than Spot has free"),
    ],
)
def test_no_move_for(running: JobBuilder, why: str) -> None:
    spot = pool("spot", capacity=24, purchase="spot")
    snapshot = cluster([OD, spot], [running.on("od"), job("s").gpus(16).on("spot")])
    assert summary(run_plan(snapshot, [], MOVES)) == [], why


def test_off_at_zero_and_without_preemption_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    snapshot = cluster([OD, SPOT], [LONG.on("od")])
    assert summary(run_plan(snapshot, [], config(move_to_spot_min_remaining_s=0.0))) == []
    monkeypatch.setattr(planner, "MAX_PREEMPTIONS_PER_PASS", 0)
    assert summary(run_plan(snapshot, [], MOVES)) == []


def test_longest_left_moves_first_and_only_as_many_as_fit() -> None:
    shorter = job("shorter").gpus(8).expected_runtime(5 * HOUR).running_since(NOW - HOUR)
    snapshot = cluster([OD, SPOT], [shorter.on("od"), LONG.on("od"), job("s").gpus(8).on("spot")])
    assert summary(run_plan(snapshot, [], MOVES)) == [("move", "long", "od", "spot")]


def test_the_spot_gpus_stay_reserved_while_the_job_checkpoints() -> None:
    # `long` is checkpointing for its move: the 8 GPUs it goes to are not free for `p`, which
    # goes On-Demand instead; no second move is made into them either.
    moving = LONG.on("od", draining_for=MovingTo(pool="spot"))
    other = job("other").gpus(8).expected_runtime(10 * HOUR).running_since(NOW - HOUR).on("od")
    snapshot = cluster([pool("od", capacity=24), SPOT], [moving, other, job("s").gpus(8).on("spot")])
    pending = [job("p").gpus(8).build()]
    assert summary(run_plan(snapshot, pending, MOVES)) == [("admit", "p", "od")]


def test_moves_come_after_the_window_s_decisions() -> None:
    snapshot = cluster([OD, SPOT], [LONG.on("od"), job("s").gpus(8).on("spot")])
    pending = [job("w").gpus(16).spot("never").build()]  # waits: no room On-Demand
    assert summary(run_plan(snapshot, pending, MOVES)) == [("wait", "w"), ("move", "long", "od", "spot")]
