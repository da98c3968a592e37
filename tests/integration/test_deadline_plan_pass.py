"""The deadline guard's plan in a scheduling pass (on moto): with three days of a Spot pool's history
in the Ledger, the pass's guard fits its plan on that history and decides from it, and `explain`
shows the plan's decision."""

from __future__ import annotations

from datetime import UTC, datetime

from spotline.control.records import JobRecord
from spotline.control.scheduling import scheduling_pass
from spotline.domain.deadline import GuardSettings, Placement, job_state
from spotline.domain.deadline_plan import decide_from_signal
from spotline.domain.placement import changeover_h, step_h

from .helpers import Deployment, submit
from .test_explain_api import VISION, explain

SPOT = "a100-spot"
H = 3600.0


def iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat()


def _flapping_history(deployment: Deployment) -> tuple[JobRecord, float]:
    """An 8 h job due in 12 h, submitted an hour ago, and the pool's last three days as the
    control plane saw them: Spot there an hour, missing an hour, over and over; missing again for
    the last half hour."""
    store = deployment.plane.spot_pools
    assert store is not None
    start = deployment.clock.freeze()
    # an 8 h job due in 12 h, not started an hour later
    job = submit(deployment, "vision", expected_runtime_s=8 * 3600, deadline=iso(start + 12 * H))
    now = deployment.clock.advance(H)
    # the pool's last three days as the control plane saw them: Spot there an hour, missing an
    # hour, over and over; missing again for the last half hour
    t = now - 0.5 * H - 71 * H
    store.observe(SPOT, True, t)
    while t + 2 * H <= now - 0.5 * H:
        store.observe(SPOT, False, t + H)
        store.observe(SPOT, True, t + 2 * H)
        t += 2 * H
    store.observe(SPOT, False, now - 0.5 * H)
    return job, now


def test_the_pass_decides_from_the_plan_fitted_on_the_pools_history(deployment: Deployment) -> None:
    plane = deployment.plane
    store = plane.spot_pools
    assert store is not None
    job, now = _flapping_history(deployment)
    signal = store.signals([SPOT], now)[SPOT]
    assert not signal.available and len(signal.spans_s) == 35
    # the guard's rules alone would send it On-Demand (the outage is longer than its slack affords
    # for a pool like this); the plan waits: a Spot launch that waits for capacity is the wait
    config = plane.config.scheduler
    state = job_state(job.job, now, Placement.NONE, False, signal, step_h(config))
    rules = decide_from_signal(
        state, signal, GuardSettings(changeover_h=changeover_h(config)), use_plan=False
    )
    assert rules.placement is Placement.ON_DEMAND

    result = scheduling_pass(plane)

    assert result.admitted == [(job.id, SPOT)]
    status, body = explain(job.id, VISION)
    assert status == 200
    guard = body["deadline_guard"]
    assert guard["why"] == "plan-wait" and guard["planned"] is True
    assert "the cheapest expected schedule under the pool's history" in guard["summary"]
    assert guard["spot_history"]["observed_h"] == 71.5 and guard["spot_history"]["outages"] == 35


def test_explain_says_when_the_pass_budget_leaves_a_job_to_the_rules(deployment: Deployment) -> None:
    # With no plan in a pass (`deadline_plans_per_pass` 0), the pass decides by the guard's rules
    # (On-Demand: the outage is too long for its slack), and `explain` says so, as the pass does.
    plane = deployment.plane
    scheduler = plane.config.scheduler.model_copy(update={"deadline_plans_per_pass": 0})
    plane.settings = plane.settings.model_copy(
        update={"config": plane.config.model_copy(update={"scheduler": scheduler})}
    )
    job, _ = _flapping_history(deployment)

    status, body = explain(job.id, VISION)
    assert status == 200
    guard = body["deadline_guard"]
    assert guard["planned"] is False and guard["advice"] == "on-demand"
    assert "plan_left_to_rules" in guard

    result = scheduling_pass(plane)
    assert [pool for _, pool in result.admitted] != [SPOT]
