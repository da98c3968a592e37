"""Moves to Spot weigh the target pool's history (`move_value.move_value`): the saving on the
remaining run against the move's write and restart and the reclaims the pool's outages predict."""

from __future__ import annotations

import pytest

from spotline.domain import moves
from spotline.domain.models import ClusterSnapshot, SpotPoolSignal
from spotline.domain.move_value import MoveValue, move_value
from spotline.domain.planner import Move

from .builders import HOUR, NOW, JobBuilder, cluster, config, job, pool, run_plan, summary

DAY = 24 * HOUR


def _signal(days: float, outages: tuple[float, ...], available: float | None = None) -> SpotPoolSignal:
    observed = days * DAY
    up = observed - sum(outages) if available is None else available
    return SpotPoolSignal(available=True, observed_s=observed, available_s=up, outages_s=outages)


def _value(
    signal: SpotPoolSignal | None, remaining_s: float = 10 * DAY, spot_price: float = 0.35
) -> MoveValue | None:
    return move_value(
        remaining_s=remaining_s,
        gpus=8,
        spot_price=spot_price,
        on_demand_price=1.0,
        signal=signal,
        write_s=60.0,
        restart_s=120.0,
        min_history_s=DAY,
    )


def test_thin_history_gives_no_verdict() -> None:
    assert _value(None) is None
    assert _value(_signal(0.5, ())) is None  # half a day seen, below the day asked for
    assert _value(_signal(1.0, ())) is not None


def test_a_pool_without_outages_pays_for_a_move_longer_than_its_write_and_restart() -> None:
    steady = _signal(7, ())
    value = _value(steady)
    assert value is not None and value.worth and value.reclaims == 0.0
    # 180 s of write and restart at the On-Demand price against 65% saved: 277 s of run break even.
    short = _value(steady, remaining_s=250.0)
    long = _value(steady, remaining_s=300.0)
    assert short is not None and not short.worth
    assert long is not None and long.worth


def test_bulk_outages_make_a_move_cost_more_than_it_saves_however_long_the_job() -> None:
    # Seven days seen, six outages of 12 h: missing 3 of the 4 available days' worth (0.75x of
    # available time), above the 0.65 share Spot saves.
    bulk = _signal(7, (12 * HOUR,) * 6)
    for days in (1, 10, 100):
        value = _value(bulk, remaining_s=days * DAY)
        assert value is not None and not value.worth, days
        assert value.reclaims == pytest.approx(days * 6 / 4)


def test_the_verdict_turns_where_the_missing_share_passes_the_saving() -> None:
    # Outages of 1 h; the rate sets the missing time over available time: 0.5 moves, 0.8 does not
    # (Spot saves 0.65 of the On-Demand price).
    def with_missing_share(share: float) -> SpotPoolSignal:
        available = 10 * DAY
        count = round(share * available / HOUR)
        return _signal(20, (HOUR,) * count, available=available)

    verdicts = [_value(with_missing_share(0.5)), _value(with_missing_share(0.8))]
    cheaper = _value(with_missing_share(0.8), spot_price=0.1)  # saves more: pays for the same pool
    assert [v is not None and v.worth for v in (*verdicts, cheaper)] == [True, False, True]


def test_a_pool_never_seen_with_capacity_is_not_worth_a_move() -> None:
    value = _value(_signal(3, (), available=0.0))
    assert value is not None and not value.worth


# --- in the planner -------------------------------------------------------------------------

OD = pool("od", capacity=16)
SPOT = pool("spot", capacity=16, purchase="spot")
MOVES = config(move_to_spot_min_remaining_s=2 * HOUR, protection_period_s=600.0)
LONG = job("long").gpus(8).expected_runtime(10 * HOUR).running_since(NOW - HOUR)
BULK = _signal(7, (12 * HOUR,) * 6)
STEADY = _signal(7, (HOUR,))


def _with_history(signal: SpotPoolSignal, long: JobBuilder = LONG) -> ClusterSnapshot:
    snapshot = cluster([OD, SPOT], [long.on("od"), job("s").gpus(8).on("spot")])
    return snapshot.model_copy(update={"spot": {"spot": signal}})


def test_the_planner_moves_to_a_steady_pool_and_says_what_the_move_weighs() -> None:
    decisions = run_plan(_with_history(STEADY), [], MOVES)
    assert summary(decisions) == [("move", "long", "od", "spot")]
    move = decisions[0]
    assert isinstance(move, Move)
    assert "saves 46.8 GPU-h" in move.reason and "1 outages in 167 h of Spot there" in move.reason


def test_the_planner_does_not_move_to_a_pool_whose_outages_cost_more_than_spot_saves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert summary(run_plan(_with_history(BULK), [], MOVES)) == []
    # Thin history (less seen than MOVE_MIN_HISTORY_S): the remaining-time threshold alone decides.
    monkeypatch.setattr(moves, "MOVE_MIN_HISTORY_S", 30 * DAY)
    assert summary(run_plan(_with_history(BULK), [], MOVES)) == [("move", "long", "od", "spot")]


def test_a_deadline_job_is_left_to_the_deadline_guard() -> None:
    # No declared-runtime guard verdict against it (far from its deadline): the weighing is not
    # applied to deadline jobs, whose return to Spot the guard decides.
    far = LONG.deadline(NOW + 30 * DAY)
    assert summary(run_plan(_with_history(BULK, far), [], MOVES)) == [("move", "long", "od", "spot")]
