"""spotline.domain.checkpoint_cost: grace, lost work and the Spot notice from measured figures."""

from __future__ import annotations

import pytest

from spotline.domain.checkpoint_cost import (
    GRACE_FACTOR,
    GRACE_MARGIN_S,
    fits_spot_notice,
    grace_period_s,
    interruption_lost_s,
    restore_s,
    spot_wait_deadline,
)
from spotline.domain.config import SchedulerConfig
from spotline.domain.models import Job
from spotline.domain.placement import interruption_cost_s
from spotline.domain.preemption import lost_work_gpu_s
from tests.unit.domain.builders import job


def measured(write_s: float | None, restore: float | None = None, interval_s: float = 1800.0) -> Job:
    base = job("j").checkpoint_interval(interval_s).running_since(0).checkpointed(100).build()
    return base.model_copy(update={"checkpoint_write_s": write_s, "checkpoint_restore_s": restore})


def test_grace_is_the_global_one_unless_the_measured_write_needs_more() -> None:
    assert grace_period_s(measured(None), 120.0) == 120.0
    assert grace_period_s(measured(10.0), 120.0) == 120.0  # a small checkpoint: the default covers it
    assert grace_period_s(measured(300.0), 120.0) == GRACE_FACTOR * 300.0 + GRACE_MARGIN_S


@pytest.mark.parametrize(("write_s", "fits"), [(None, None), (60.0, True), (115.0, True), (115.1, False)])
def test_a_checkpoint_fits_the_notice_when_its_write_and_detection_do(
    write_s: float | None, fits: bool
) -> None:
    assert fits_spot_notice(measured(write_s)) is fits


def test_an_interruption_loses_half_an_interval_when_the_checkpoint_cannot_leave_in_the_notice() -> None:
    config = SchedulerConfig()
    assert interruption_lost_s(measured(None), config) == config.checkpoint_write_s  # as before
    assert interruption_lost_s(measured(40.0, restore=20.0), config) == 60.0
    assert interruption_lost_s(measured(400.0, restore=20.0, interval_s=1800.0), config) == 900.0 + 20.0
    assert interruption_cost_s(measured(400.0), config) == 900.0 + config.restart_cost_s


def test_a_preemption_also_costs_the_measured_restore() -> None:
    config = SchedulerConfig()
    without = lost_work_gpu_s(measured(None), 8, 200.0, config)
    with_restore = lost_work_gpu_s(measured(None, restore=50.0), 8, 200.0, config)
    assert with_restore - without == pytest.approx(8 * 50.0)
    assert restore_s(measured(None)) == 0.0


@pytest.mark.parametrize(
    ("write_s", "deadline"),
    [
        (None, 110.0),  # not measured: the notice less the margin
        (5.0, 110.0),  # 1.5 x 5 s fits before the margin
        (8.0, 120.0),  # 1.5 x 8 s would end in the margin: wait to the notice's end
        (300.0, 120.0),  # cannot fit at all: still no later than the notice's end
    ],
)
def test_an_interruption_waits_to_the_notices_end_for_a_write_that_needs_it(
    write_s: float | None, deadline: float
) -> None:
    # A request at t=100 on a notice that ends at t=120, with a 10 s margin
    assert (
        spot_wait_deadline(measured(write_s), requested_at=100.0, notice_end=120.0, margin_s=10.0) == deadline
    )
