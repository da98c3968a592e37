"""`deadline.on_demand_to_spot_note` and `deadline.stays_on_demand` share one path: for every job
On-Demand, the note is the guard's decision, and the job stays exactly when that decision is not
Spot. Checked against the guard's rules called directly, over a grid of jobs and Spot signals."""

from __future__ import annotations

import itertools

from spotline.domain.deadline import (
    GuardSettings,
    GuardState,
    Placement,
    SpotHistory,
    decide,
    on_demand_to_spot_note,
    stays_on_demand,
)
from spotline.domain.models import SpotPoolSignal

from .builders import job

H = 3600.0
C = 0.2
STEP = 5 / 60
SIGNALS = (
    None,
    SpotPoolSignal(observed_s=2 * H, available_s=2 * H),
    SpotPoolSignal(available=False, outage_s=600, observed_s=3 * H, available_s=2 * H),
    SpotPoolSignal(observed_s=2 * H, available_s=2 * H, at_risk=True),
)


def test_the_note_is_the_guards_decision_and_the_job_stays_unless_it_is_spot() -> None:
    stayed = moved = 0
    for runtime_h, deadline_h, now_h, progress, signal in itertools.product(
        (2.0, 10.0), (4.0, 12.0, 30.0), (0.5, 3.0, 6.0), (0.0, 0.3, 0.9), SIGNALS
    ):
        if now_h >= deadline_h:
            continue
        j = (
            job("j")
            .expected_runtime(runtime_h * H)
            .deadline(deadline_h * H)
            .submitted(0.0)
            .progress(progress)
            .build()
        )
        there = signal is None or signal.available
        expected = decide(
            GuardState(
                job_h=runtime_h,
                deadline_h=deadline_h,
                elapsed_h=now_h,
                progress_h=progress * runtime_h,
                placement=Placement.ON_DEMAND,
                changeover_left_h=0.0,
                spot_available=there,
                outage_h=0.0 if there or signal is None else signal.outage_s / H,
                step_h=STEP,
                at_risk=signal is not None and signal.at_risk,
            ),
            SpotHistory.from_signal(signal),
            GuardSettings(changeover_h=C),
        )
        note = on_demand_to_spot_note(j, now_h * H, changeover_h=C, step_h=STEP, spot=signal)
        stays = stays_on_demand(j, now_h * H, changeover_h=C, step_h=STEP, spot=signal)
        assert note == f"deadline guard: {expected.describe()}"
        if expected.placement is Placement.SPOT:
            assert stays is None
            moved += 1
        else:
            assert stays == note
            stayed += 1
    assert stayed > 10 and moved > 10  # both answers are exercised


def test_a_job_without_a_deadline_or_runtime_gets_neither() -> None:
    plain = job("j").build()
    assert on_demand_to_spot_note(plain, H) is None
    assert stays_on_demand(plain, H) is None
