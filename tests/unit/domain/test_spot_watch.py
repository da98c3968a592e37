"""A Spot pool's history as the control plane keeps it (`PoolWatch`), and the deadline guard
reading it from the snapshot (`SpotPoolSignal`) in placement and moves."""

from __future__ import annotations

from spotline.domain.deadline import SpotHistory, spot_unsafe, stays_on_demand
from spotline.domain.models import Job, SpotPoolSignal
from spotline.domain.spot_watch import AT_RISK_S, WINDOW_S, PoolWatch

from .builders import job

H = 3600.0


def test_an_outage_is_recorded_from_its_start_to_the_launch_that_started() -> None:
    watch = PoolWatch.first(True, 0.0)
    down = watch.observe(False, 10 * H)
    assert down is not None and not down.available and down.changed_at == 10 * H
    up = down.observe(True, 13 * H)
    assert up is not None and up.outages == ((10 * H, 13 * H),)
    signal = up.signal(20 * H)
    assert signal.available and signal.outage_s == 0
    assert signal.observed_s == 20 * H and signal.available_s == 17 * H and signal.outages_s == (3 * H,)


def test_repeats_and_late_observations_change_nothing() -> None:
    down = PoolWatch.first(True, 0.0).observe(False, 10 * H)
    assert down is not None
    assert down.observe(False, 11 * H) is None  # the same state again (a duplicate event)
    assert down.observe(True, 9 * H) is None  # older than the last change: delivered late


def test_the_outage_under_way_counts_as_missing_and_the_window_is_bounded() -> None:
    watch = PoolWatch.first(True, 0.0)
    watch = watch.observe(False, 1 * H) or watch
    watch = watch.observe(True, 2 * H) or watch
    watch = watch.observe(False, WINDOW_S + 5 * H) or watch
    signal = watch.signal(WINDOW_S + 6 * H)
    assert not signal.available and signal.outage_s == 1 * H
    # the first outage ended before the window's start: gone from the history
    assert signal.outages_s == () and signal.observed_s == WINDOW_S
    assert signal.available_s == WINDOW_S - 1 * H
    up = watch.observe(True, WINDOW_S + 7 * H)
    assert up is not None and up.outages == ((WINDOW_S + 5 * H, WINDOW_S + 7 * H),)


def test_spot_history_from_a_signal() -> None:
    history = SpotHistory.from_signal(
        SpotPoolSignal(observed_s=48 * H, available_s=36 * H, outages_s=(3 * H, 1 * H))
    )
    assert history.observed_h == 48 and history.availability == 0.75 and history.outages == (1.0, 3.0)
    assert SpotHistory.from_signal(None) == SpotHistory()


def deadline_job(now: float, *, runtime_h: float, deadline_h: float, progress: float) -> Job:
    return (
        job("j")
        .expected_runtime(runtime_h * H)
        .deadline(now + deadline_h * H)
        .submitted(now)
        .progress(progress)
        .build()
    )


C = 0.2
STEP = 5 / 60


def test_spot_missing_with_rich_history_of_short_outages_waits_on_spot() -> None:
    # 4 h done of a 10 h job, 5 h in, due at 20 h: far ahead of its line. Spot is missing for 20 min.
    job = deadline_job(0.0, runtime_h=10, deadline_h=20, progress=0.4)
    rich = SpotPoolSignal(
        available=False,
        outage_s=20 * 60,
        observed_s=14 * 24 * H,
        available_s=13 * 24 * H,
        outages_s=(H,) * 20,
    )
    assert spot_unsafe(job, 5 * H, on_spot=False, spot=rich, changeover_h=C, step_h=STEP) is None


def test_spot_missing_behind_the_line_goes_on_demand_and_stays() -> None:
    # 2 h done of a 10 h job, 8 h in, due at 20 h: behind its line (8 * 10 / 20 = 4 h)
    job = deadline_job(0.0, runtime_h=10, deadline_h=20, progress=0.2)
    missing = SpotPoolSignal(available=False, outage_s=600, observed_s=600, available_s=0)
    why = spot_unsafe(job, 8 * H, on_spot=False, spot=missing, changeover_h=C, step_h=STEP)
    assert why is not None and "behind its line" in why
    # Spot there: the same job may start on Spot (only the safety net refuses it then)
    assert spot_unsafe(job, 8 * H, on_spot=False, spot=None, changeover_h=C, step_h=STEP) is None
    # On-Demand, Spot missing: it stays whatever its line
    ahead = deadline_job(0.0, runtime_h=10, deadline_h=30, progress=0.9)
    assert stays_on_demand(ahead, 5 * H, spot=missing, changeover_h=C, step_h=STEP) is not None
    assert stays_on_demand(ahead, 5 * H, spot=None, changeover_h=C, step_h=STEP) is None


def test_the_history_decides_between_waiting_and_on_demand() -> None:
    # Ahead of its line, Spot missing for 2 h: a pool whose outages are short (history) lets it
    # wait; with thin history it waits too (ahead of the line); with a history of long outages and
    # little slack, it goes On-Demand.
    job = deadline_job(0.0, runtime_h=10, deadline_h=12.5, progress=0.5)
    now = 6 * H  # line 6 * 10 / 12.5 = 4.8 h: 0.2 h ahead; slack 12.5 - 6 - 5 - 0.2 = 1.3 h
    long_outages = SpotPoolSignal(
        available=False,
        outage_s=2 * H,
        observed_s=14 * 24 * H,
        available_s=7 * 24 * H,
        outages_s=(12 * H,) * 14,
    )
    thin = SpotPoolSignal(available=False, outage_s=2 * H, observed_s=3 * H, available_s=H)
    assert spot_unsafe(job, now, on_spot=False, spot=thin, changeover_h=C, step_h=STEP) is None
    # (outage lengths without their places in time: the rules decide, not the plan)
    why = spot_unsafe(job, now, on_spot=False, spot=long_outages, changeover_h=C, step_h=STEP)
    assert why is not None and "longer than the slack affords" in why
    short_outages = long_outages.model_copy(update={"outages_s": (0.5 * H,) * 14})
    assert spot_unsafe(job, now, on_spot=False, spot=short_outages, changeover_h=C, step_h=STEP) is None
    # The histories the control plane keeps place their outages in time: the plan decides. Waiting
    # is free while the safety net keeps the deadline, so it waits out even a long outage (Spot
    # may come back before the net fires: a Spot launch that waits is the wait) ...
    placed_long = watched(spell_h=12, outage_h=12, missing_for_h=2, at=now)
    assert spot_unsafe(job, now, on_spot=False, spot=placed_long, changeover_h=C, step_h=STEP) is None
    # ... and covers an outage On-Demand when the pool's hour-long spells and outages make that
    # the cheapest schedule
    flapping = watched(spell_h=1, outage_h=1, missing_for_h=0.5, at=now)
    why = spot_unsafe(job, now, on_spot=False, spot=flapping, changeover_h=C, step_h=STEP)
    assert why is not None and "On-Demand: the cheapest expected schedule" in why


def watched(*, spell_h: float, outage_h: float, missing_for_h: float, at: float) -> SpotPoolSignal:
    """A pool's signal at `at` as `PoolWatch` keeps it: spells and outages in turn over the 14 days
    before, then Spot missing for `missing_for_h`."""
    t = at - WINDOW_S
    watch = PoolWatch.first(True, t)
    while t + spell_h * H + outage_h * H < at - missing_for_h * H:
        watch = watch.observe(False, t + spell_h * H) or watch
        watch = watch.observe(True, t + (spell_h + outage_h) * H) or watch
        t += (spell_h + outage_h) * H
    watch = watch.observe(False, at - missing_for_h * H) or watch
    return watch.signal(at)


def test_a_rebalance_recommendation_holds_the_pool_at_risk_for_a_while() -> None:
    watch = PoolWatch.first(True, 0.0)
    risky = watch.observe_risk(10 * H)
    assert risky is not None and risky.at_risk_at == 10 * H
    assert risky.observe_risk(10 * H) is None  # delivered twice
    assert risky.observe_risk(9 * H) is None  # an older one, delivered late
    assert not watch.signal(10 * H).at_risk
    assert risky.signal(10 * H + 60).at_risk
    assert risky.signal(10 * H + AT_RISK_S).at_risk
    assert not risky.signal(10 * H + AT_RISK_S + 1).at_risk  # the risk has passed
    # Spot gone: missing, not at risk (the outage rules decide)
    gone = risky.observe(False, 10 * H + 60)
    assert gone is not None and not gone.signal(10 * H + 120).at_risk
    # the risk and the history survive each other's writes
    back = gone.observe(True, 10 * H + 600)
    assert back is not None and back.at_risk_at == 10 * H and back.signal(10 * H + 660).at_risk


def test_a_pool_at_risk_is_not_bet_on_by_a_job_behind_its_line() -> None:
    # 2 h done of a 10 h job, 8 h in, due at 20 h: behind its line (8 * 10 / 20 = 4 h)
    behind = deadline_job(0.0, runtime_h=10, deadline_h=20, progress=0.2)
    at_risk = SpotPoolSignal(observed_s=600, available_s=600, at_risk=True)
    for on_spot in (False, True):  # not placed on it, and moved off it (checkpoint-then-move)
        why = spot_unsafe(behind, 8 * H, on_spot=on_spot, spot=at_risk, changeover_h=C, step_h=STEP)
        assert why is not None and "at risk (a rebalance recommendation)" in why
        assert spot_unsafe(behind, 8 * H, on_spot=on_spot, spot=None, changeover_h=C, step_h=STEP) is None
    # ahead of its line: Spot still (its checkpoint is taken now)
    ahead = deadline_job(0.0, runtime_h=10, deadline_h=20, progress=0.6)
    for on_spot in (False, True):
        assert spot_unsafe(ahead, 8 * H, on_spot=on_spot, spot=at_risk, changeover_h=C, step_h=STEP) is None
    # On-Demand, far ahead: it does not return to a pool at risk, and does once the risk has passed
    far = deadline_job(0.0, runtime_h=10, deadline_h=30, progress=0.9)
    why = stays_on_demand(far, 5 * H, spot=at_risk, changeover_h=C, step_h=STEP)
    assert why is not None and "at risk" in why
    calm = at_risk.model_copy(update={"at_risk": False})
    assert stays_on_demand(far, 5 * H, spot=calm, changeover_h=C, step_h=STEP) is None
