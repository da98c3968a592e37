"""Spot pool history in the control plane (on moto): the control plane records what it sees of a
Spot pool (warnings, launches sitting RUNNABLE, launches that start) in one item per pool, with
conditional writes that a repeat or a late event cannot apply twice; the scheduling pass and the
reconciler read it, and the deadline guard decides from it; `explain` shows it."""

from __future__ import annotations

from datetime import UTC, datetime

from rich.console import Console

from spotline.cli.render import explain_view
from spotline.control.events import handle_spot_warning
from spotline.control.reconciler import reconcile
from spotline.control.scheduling import admit, scheduling_pass
from spotline.control.workflow_tasks import record_batch_job, submit_batch_job
from spotline.domain import JobState

from .helpers import Deployment, start, submit
from .test_explain_api import VISION, explain

SPOT = "a100-spot"


def iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat()


def test_observations_are_recorded_once_and_late_ones_change_nothing(deployment: Deployment) -> None:
    store = deployment.plane.spot_pools
    assert store is not None
    now = deployment.clock.freeze()
    assert store.signals([SPOT], now) == {}  # nothing seen yet
    assert store.observe(SPOT, True, now - 3600) is True
    assert store.observe(SPOT, False, now - 600) is True
    assert store.observe(SPOT, False, now - 300) is False  # a repeat
    assert store.observe(SPOT, True, now - 900) is False  # older than the last change
    signal = store.signals([SPOT, "a100-on-demand"], now)[SPOT]
    assert not signal.available and signal.outage_s == 600
    assert signal.observed_s == 3600 and signal.available_s == 3000
    assert store.observe(SPOT, True, now) is True
    back = store.signals([SPOT], now + 60)[SPOT]
    assert back.available and back.outages_s == (600.0,)


def test_a_warning_records_spot_missing_and_a_launch_that_starts_records_it_back(
    deployment: Deployment,
) -> None:
    plane = deployment.plane
    assert plane.spot_pools is not None
    now = deployment.clock.freeze()
    job = start(deployment, submit(deployment, "vision", expected_runtime_s=7200), pool=SPOT)
    assert plane.spot_pools.signals([SPOT], now)[SPOT].available  # the launch started
    deployment.clock.advance(600)
    assert handle_spot_warning(plane, "i-0aaaaaaaaaaaaaaa1", event_time=deployment.clock()) == [job.id]
    handle_spot_warning(plane, "i-0aaaaaaaaaaaaaaa1", event_time=deployment.clock())  # delivered twice
    signal = plane.spot_pools.signals([SPOT], deployment.clock() + 60)[SPOT]
    assert not signal.available and signal.outage_s == 60
    deployment.clock.advance(1200)
    start(deployment, submit(deployment, "vision", expected_runtime_s=7200), pool=SPOT, instance_id="i-0b2")
    signal = plane.spot_pools.signals([SPOT], deployment.clock())[SPOT]
    assert signal.available and [round(o) for o in signal.outages_s] == [1200]  # Batch times are in ms


def test_the_pass_sends_a_deadline_job_behind_its_line_on_demand_while_spot_is_missing(
    deployment: Deployment,
) -> None:
    plane = deployment.plane
    assert plane.spot_pools is not None
    now = deployment.clock.freeze()
    # a 4 h job due in 9 h, 3 h later still waiting: behind its line (3 * 4 / 9 = 1.3 h)
    late = submit(deployment, "vision", expected_runtime_s=4 * 3600, deadline=iso(now + 9 * 3600))
    now = deployment.clock.advance(3 * 3600) or deployment.clock()
    plane.spot_pools.observe(SPOT, False, now - 600)

    result = scheduling_pass(plane)

    assert result.admitted == [(late.id, "a100-on-demand")]
    status, body = explain(late.id, VISION)
    assert status == 200
    history = body["deadline_guard"]["spot_history"]
    assert history["pool"] == SPOT and history["spot_there"] is False and history["observed_h"] > 0
    console = Console(width=200, record=True)
    console.print(explain_view(body))
    assert f"Spot history ({SPOT}): Spot missing for" in console.export_text()


def test_with_spot_there_the_same_job_goes_to_spot(deployment: Deployment) -> None:
    plane = deployment.plane
    assert plane.spot_pools is not None
    now = deployment.clock.freeze()
    late = submit(deployment, "vision", expected_runtime_s=4 * 3600, deadline=iso(now + 9 * 3600))
    now = deployment.clock.advance(3 * 3600) or deployment.clock()
    plane.spot_pools.observe(SPOT, True, now - 600)
    assert scheduling_pass(plane).admitted == [(late.id, SPOT)]


def test_the_reconciler_moves_a_deadline_job_waiting_for_missing_spot(deployment: Deployment) -> None:
    plane = deployment.plane
    assert plane.spot_pools is not None
    now = deployment.clock.freeze()
    # a 4 h job due in 6 h, admitted to Spot, its Batch job RUNNABLE (capacity missing)
    job = submit(deployment, "vision", expected_runtime_s=4 * 3600, deadline=iso(now + 6 * 3600))
    admitted = admit(plane, job, SPOT, "admitted by the test", now=now)
    batch_job_id = submit_batch_job(plane, job.id, version=admitted.version, run=admitted.run, pool=SPOT)[
        "batch_job_id"
    ]
    record_batch_job(plane, job.id, version=admitted.version, run=admitted.run, batch_job_id=batch_job_id)
    # a while later, still RUNNABLE past the threshold: the reconciler records Spot missing, and
    # once the job is behind its line it requeues the job (its Batch job stopped)
    deployment.clock.advance(plane.config.spot_missing_after_s + 1200)

    result = reconcile(plane)

    assert not plane.spot_pools.signals([SPOT], deployment.clock())[SPOT].available
    assert [j for j, _ in result.requeued] == [job.id]
    assert "deadline guard" in dict(result.requeued)[job.id]
    assert plane.jobs.get(job.id).state is JobState.PENDING
    assert batch_job_id in [b for b, _ in deployment.launcher.terminated]
    assert scheduling_pass(plane).admitted == [(job.id, "a100-on-demand")]
