"""The deadline answer at submission through the API handler on moto: `POST /jobs` answers a
deadline (meets it / only On-Demand / cannot), stores it with the job, `require_feasible`
refuses what cannot be promised, explain shows it, and a pass keeps the On-Demand GPUs held."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

import functions.api
from spotline.control.scheduling import scheduling_pass

from .helpers import SPEC, Deployment, api_event, context

VISION = {"userArn": "arn:aws:sts::123456789012:assumed-role/vision-researchers/alice"}
HOUR = 3600.0


def iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat()


def call(method: str, path: str, body: Any = None, query: dict[str, str] | None = None) -> tuple[int, Any]:
    response = functions.api.handler(
        api_event(method, path, identity=VISION, body=body, query=query), context("api")
    )
    return response["statusCode"], json.loads(response["body"])


def post(now: float, hours_left: float, query: dict[str, str] | None = None, **spec: Any) -> tuple[int, Any]:
    body = {**SPEC, "expected_runtime_s": 2 * HOUR, "deadline": iso(now + hours_left * HOUR), **spec}
    return call("POST", "/jobs", body, query)


def test_each_deadline_gets_its_answer_and_the_on_demand_pool_is_held(deployment: Deployment) -> None:
    now = deployment.clock.freeze()
    # Given an empty cluster (a100-on-demand: 8 GPUs at 1.0 per GPU-hour)
    status, first = post(now, 6)
    assert status == 201
    answer = first["deadline_answer"]
    assert answer["kind"] == "meets" and answer["feasible"] is True
    assert answer["hold"]["pool"] == "a100-on-demand" and answer["hold"]["gpus"] == 8
    assert answer["hold"]["end_iso"].startswith(iso(now + 6 * HOUR)[:19])
    assert answer["on_demand_cost"] == 16.0
    assert answer["runtime"]["planned_s"] == 2 * HOUR

    # The same deadline again: the pool is held for the first at the end, so only now On-Demand.
    status, second = post(now, 6)
    assert status == 201
    assert second["deadline_answer"]["kind"] == "on-demand-only"
    assert "only On-Demand, at about $16.00" in second["deadline_answer"]["summary"]

    # A third cannot: both windows are held; the earliest finish is after the first's deadline.
    status, third = post(now, 6)
    assert status == 201 and third["deadline_answer"]["kind"] == "cannot"
    assert third["deadline_answer"]["earliest_finish"] > now + 6 * HOUR
    assert third["deadline_answer"]["summary"].startswith("cannot: the earliest finish is")

    # Stored with the job: GET and explain read it back from the table.
    status, read = call("GET", f"/jobs/{first['id']}")
    assert status == 200 and read["deadline_answer"] == answer
    status, explained = call("GET", f"/jobs/{third['id']}/explain")
    assert status == 200 and explained["deadline_answer"]["kind"] == "cannot"


def test_require_feasible_refuses_and_stores_nothing(deployment: Deployment) -> None:
    now = deployment.clock.freeze()
    status, error = post(now, 1.5, {"require_feasible": "true"})
    assert status == 422
    assert error["detail"][0]["loc"][-1] == "deadline"
    assert "cannot: the earliest finish is" in error["detail"][0]["msg"]
    assert call("GET", "/jobs")[1]["jobs"] == []
    # A feasible one goes through with the flag.
    status, created = post(now, 6, {"require_feasible": "true"})
    assert status == 201 and created["deadline_answer"]["kind"] == "meets"


def test_a_pass_keeps_the_held_gpus_from_other_jobs(deployment: Deployment) -> None:
    now = deployment.clock.freeze()
    status, held = post(now, 3, spot="never")
    assert status == 201 and held["deadline_answer"]["kind"] == "on-demand-only"
    # A critical job (On-Demand, ranked first by a pass) submitted after must not take the held GPUs.
    body = {**SPEC, "priority": "critical", "expected_runtime_s": 3 * HOUR}
    status, other = call("POST", "/jobs", body)
    assert status == 201 and other.get("deadline_answer") is None
    scheduling_pass(deployment.plane)
    states = {j["id"]: j for j in call("GET", "/jobs")[1]["jobs"]}
    assert states[held["id"]]["state"] == "ADMITTED"
    assert states[other["id"]]["state"] == "PENDING"
    assert "held for deadline jobs" in states[other["id"]]["wait_reason"]


def test_the_run_time_is_predicted_from_the_teams_history(deployment: Deployment) -> None:
    import functions.batch_state_change

    from .helpers import batch_event, start, submit

    now = deployment.clock.freeze()
    # Three earlier "nightly" jobs declared 1 h and ran 2 h each (the clock runs 2 h).
    for _ in range(3):
        running = start(deployment, submit(deployment, name="nightly", expected_runtime_s=HOUR))
        deployment.clock.advance(2 * HOUR)
        assert running.batch_job_id is not None
        functions.batch_state_change.handler(
            batch_event(running.id, running.batch_job_id, "SUCCEEDED", started_at_ms=int(now * 1000)),
            context(),
        )
        now = deployment.clock.advance(1)
    # A new one declares 1 h: history says its like take twice that.
    status, body = post(now, 6, name="nightly", expected_runtime_s=HOUR)
    assert status == 201
    runtime = body["deadline_answer"]["runtime"]
    assert runtime["source"] == "history: 3 runs' actual / declared" and runtime["samples"] == 3
    assert runtime["planned_s"] == pytest.approx(2 * HOUR, rel=0.01)
    # Another name has no history: its declaration stands.
    status, other = post(now, 6, name="other", expected_runtime_s=4 * HOUR)
    assert other["deadline_answer"]["runtime"]["source"] == "declared"


def test_a_moved_deadline_is_answered_again(deployment: Deployment) -> None:
    now = deployment.clock.freeze()
    status, job = post(now, 1.5)
    assert status == 201 and job["deadline_answer"]["kind"] == "cannot"
    status, moved = call("PATCH", f"/jobs/{job['id']}", {"deadline": iso(now + 6 * HOUR)})
    assert status == 200 and moved["deadline_answer"]["kind"] == "meets"
    assert moved["deadline_answer"]["hold"]["end_iso"].startswith(iso(now + 6 * HOUR)[:19])
    status, read = call("GET", f"/jobs/{job['id']}")
    assert read["deadline_answer"] == moved["deadline_answer"]
