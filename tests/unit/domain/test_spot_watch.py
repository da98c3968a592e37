"""A Spot pool's history as the control plane keeps it (`PoolWatch`), and the deadline guard
reading it from the snapshot (`SpotPoolSignal`) in placement and moves."""

from __future__ import annotations

from spotline.domain.deadline import SpotHistory, spot_unsafe, stays_on_demand
from spotline.domain.models import Job, SpotPoolSignal
from spotline.domain.spot_watch import WINDOW_S, PoolWatch

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
