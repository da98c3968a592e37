"""`GET /jobs/{id}/explain` shows the deadline guard for a job with a deadline and a declared
runtime: where it should run, why, and how far ahead of or behind its line it is."""

from __future__ import annotations

from datetime import UTC, datetime

from rich.console import Console

from spotline.cli.render import explain_view

from .conftest import Deployment, start, submit
from .test_explain_api import VISION, explain


def iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat()


def test_a_deadline_job_on_spot_is_explained_against_its_line(deployment: Deployment) -> None:
    now = deployment.clock.freeze()
    job = submit(deployment, "vision", expected_runtime_s=4 * 3600, deadline=iso(now + 10 * 3600))
    start(deployment, job, pool="a100-spot")
    deployment.clock.advance(3600)

    status, body = explain(job.id, VISION)

    assert status == 200
    guard = body["deadline_guard"]
    assert guard["now"] == "spot" and guard["advice"] == "spot" and guard["why"] == "spot-runs"
    # one hour in, one hour of work done: the line stands at 1 h * 4 / 10 = 0.4 h
    assert abs(guard["ahead_of_line_h"] - 0.6) < 0.01
    assert "ahead of its line" in guard["summary"]
    console = Console(width=200, record=True)
    console.print(explain_view(body))
    assert "deadline guard: spot (now spot): Spot: capacity is there" in console.export_text()


def test_a_waiting_deadline_job_without_slack_is_sent_to_on_demand(deployment: Deployment) -> None:
    now = deployment.clock.freeze()
    # two full Spot jobs hold the Spot pool; a 4 h job due in 4.25 h cannot wait 5 minutes for Spot
    for n in (1, 2):
        start(
            deployment,
            submit(deployment, "vision", expected_runtime_s=7200),
            pool="a100-spot",
            instance_id=f"i-0aaaaaaaaaaaaaa{n}0",
        )
    late = submit(deployment, "vision", expected_runtime_s=4 * 3600, deadline=iso(now + 4.25 * 3600))

    status, body = explain(late.id, VISION)

    assert status == 200
    guard = body["deadline_guard"]
    assert guard["now"] == "none" and guard["advice"] == "on-demand" and guard["why"] == "safety-net"
    assert guard["slack_h"] < 0.2


def test_a_job_without_a_deadline_has_no_guard(deployment: Deployment) -> None:
    deployment.clock.freeze()
    job = submit(deployment, "vision", expected_runtime_s=3600)
    status, body = explain(job.id, VISION)
    assert status == 200 and "deadline_guard" not in body
