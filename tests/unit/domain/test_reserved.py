"""Reserved pools: routing (block before Spot before On-Demand), admission by the block's end,
the drains planned from the end, and the reasons `explain` shows."""

from __future__ import annotations

import pytest

from spotline.domain.decisions import Admit, Wait
from spotline.domain.models import MovingTo, Pool, Purchase, ReservedWindow
from spotline.domain.reserved import (
    TERMINATION_LEAD_S,
    block_drains,
    block_refusal,
    drain_at,
    first_checkpoint_s,
)
from tests.unit.domain.builders import NOW, cluster, config, job, pool, run_plan, summary

H = 3600.0


def block(
    name: str = "block", *, start: float = NOW - H, end: float = NOW + 10 * H, capacity: int = 16
) -> Pool:
    return Pool(
        name="block",
        gpu_type="a100",
        purchase=Purchase.ON_DEMAND,
        capacity_gpus=capacity,
        price=0.0,
        reservation=ReservedWindow(start=start, end=end, reservation_id="cr-0123456789abcdef0"),
    )


SPOT = pool("spot", purchase="spot", capacity=16)
ON_DEMAND = pool("od", capacity=16)
SHORT = job("short").gpus(8).expected_runtime(2 * H)
LONG = job("long").gpus(8).expected_runtime(40 * H)


class TestAdmission:
    @pytest.mark.parametrize(
        "name, window, pending, want",
        [
            ("block before Spot before On-Demand", {}, [SHORT], [("admit", "short", "block")]),
            ("a long job whose checkpoint lands in time", {}, [LONG], [("admit", "long", "block")]),
            ("not yet open: Spot", {"start": NOW + H}, [SHORT], [("admit", "short", "spot")]),
            (
                "draining: Spot",
                {"end": NOW + TERMINATION_LEAD_S + 60.0},
                [SHORT],
                [("admit", "short", "spot")],
            ),
            (
                "full: the job ranked second goes to Spot",
                {"capacity": 8},
                [SHORT, job("b").gpus(8).expected_runtime(2 * H).submitted(NOW + 1)],
                [("admit", "short", "block"), ("admit", "b", "spot")],
            ),
        ],
    )
    def test_routing(self, name: str, window: dict[str, float], pending: list, want: list) -> None:
        snapshot = cluster([block(**window), SPOT, ON_DEMAND])
        decisions = run_plan(snapshot, [p.build() for p in pending])
        assert summary(decisions) == want, name

    def test_a_job_whose_run_and_first_checkpoint_land_after_the_end_stays_out(self) -> None:
        # Given a block that terminates in 30 minutes, and a 2-hour job checkpointing every 30 min
        # (its first checkpoint is durable 2 + 30 + 1 minutes after a start)
        ends = NOW + TERMINATION_LEAD_S + 30 * 60.0
        snapshot = cluster([block(end=ends), ON_DEMAND])
        pending = job("j").gpus(8).expected_runtime(2 * H).checkpoint_interval(1800.0).build()
        # When a pass plans it
        (decision,) = run_plan(snapshot, [pending])
        # Then it goes On-Demand, and the reason says why not the block
        assert isinstance(decision, Admit) and decision.pool == "od"
        assert "not reserved: neither its predicted run" in decision.reason

    def test_a_short_job_is_admitted_near_the_end_with_its_reason(self) -> None:
        ends = NOW + TERMINATION_LEAD_S + 40 * 60.0
        snapshot = cluster([block(end=ends), ON_DEMAND])
        (decision,) = run_plan(snapshot, [job("j").gpus(8).expected_runtime(600.0).build()])
        assert isinstance(decision, Admit) and decision.pool == "block"
        assert "reserved, prepaid: its predicted run ends" in decision.reason

    def test_the_rule(self) -> None:
        b = block(end=NOW + 10 * H)
        short = SHORT.build()
        policy = config()
        assert block_refusal(short, b, NOW, 2 * H, policy) is None
        # past the last checkpoint that lands before the termination: refused
        late = NOW + 10 * H - TERMINATION_LEAD_S - first_checkpoint_s(short, policy) + 1.0
        assert block_refusal(short, b, late, 40 * H, policy) is not None
        assert block_refusal(short, b, late, 600.0, policy) is None

    def test_a_gang_fits_the_block(self) -> None:
        snapshot = cluster([block(capacity=16), SPOT, ON_DEMAND])
        gang = job("g").gpus(16).nodes(2).expected_runtime(H).build()
        assert summary(run_plan(snapshot, [gang])) == [("admit", "g", "block")]

    def test_a_full_block_waits_no_one(self) -> None:
        running = [job("r").gpus(16).on("block")]
        snapshot = cluster([block(capacity=16), ON_DEMAND], running)
        (decision,) = run_plan(snapshot, [SHORT.build()])
        assert not isinstance(decision, Wait) and decision.pool == "od"


class TestDrains:
    def test_drains_are_planned_from_the_end(self) -> None:
        b = block(end=NOW + H)
        inside = job("in").gpus(8).on("block")
        snapshot = cluster([b, ON_DEMAND], [inside])
        policy = config()
        when = drain_at(inside.job, b, policy)
        assert when == pytest.approx(NOW + H - TERMINATION_LEAD_S - 120.0)
        assert block_drains(snapshot, when - 1.0, policy) == []
        (drain,) = block_drains(snapshot, when, policy)
        assert drain.job.id == "in" and drain.resume_in is None
        assert drain.draining_for == "block-end:block"
        assert "checkpoint planned from its end" in drain.reason

    def test_the_warning_drains_at_once(self) -> None:
        snapshot = cluster([block(end=NOW + 10 * H), ON_DEMAND], [job("in").gpus(8).on("block")])
        (drain,) = block_drains(snapshot, NOW, config(), warned=frozenset({"block"}))
        assert "expiration warning" in drain.reason

    def test_a_deadline_job_resumes_on_demand_in_room_held_for_it(self) -> None:
        b = block(end=NOW + H)
        tight = job("tight").gpus(8).deadline(NOW + 5 * H).expected_runtime(4 * H).on("block")
        loose = job("loose").gpus(8).on("block")
        snapshot = cluster([b, ON_DEMAND], [tight, loose])
        drains = block_drains(snapshot, NOW + H, config(), lambda j: ON_DEMAND)
        by_id = {d.job.id: d for d in drains}
        assert by_id["tight"].draining_for == MovingTo(pool="od")
        assert by_id["loose"].resume_in is None

    def test_leaving_jobs_are_not_drained_twice(self) -> None:
        snapshot = cluster(
            [block(end=NOW + H)], [job("in").gpus(8).on("block", draining_for="block-end:block")]
        )
        assert block_drains(snapshot, NOW + H, config()) == []


def test_a_reserved_pool_is_not_spot() -> None:
    with pytest.raises(ValueError, match="not Spot"):
        Pool(
            name="b",
            gpu_type="a100",
            purchase=Purchase.SPOT,
            capacity_gpus=8,
            reservation=ReservedWindow(start=0.0, end=1.0),
        )


def test_a_window_ends_after_it_starts() -> None:
    with pytest.raises(ValueError, match="end after it starts"):
        ReservedWindow(start=1.0, end=1.0)
