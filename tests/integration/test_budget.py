"""Costs and budgets: runs costed on release and while running, GET /usage, and the soft and hard
budget thresholds acting (fair-share weight, one event per crossing, 402 on submission)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

import functions.api
from spotline.control import usage as usage_service
from spotline.control.jobs import cancel_job
from spotline.control.scheduling import build_snapshot, scheduling_pass
from spotline.domain.priority import fairshare_factors

from . import helpers
from .helpers import SPEC, Deployment, api_event, context, start, submit

VISION = {"userArn": "arn:aws:sts::123456789012:assumed-role/vision-researchers/alice"}
NLP = {"userArn": helpers.NLP_ROLE}
SPOT_PRICE = 0.35  # helpers' a100-spot price per GPU-hour


@dataclass
class RecordingSink:
    events: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)

    def put(self, source: str, detail_type: str, details: Sequence[Mapping[str, Any]]) -> None:
        self.events += [(source, detail_type, dict(d)) for d in details]

    def budget(self) -> list[dict[str, Any]]:
        return [d for _, kind, d in self.events if kind == "Budget Threshold Crossed"]


@pytest.fixture
def budgeted(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Deployment, RecordingSink]]:
    teams = [
        {
            "team": "vision",
            "nominal_gpus": 12,
            "budget_usd": 10.0,
            "budget_soft": 0.5,
            "budget_critical_exempt": True,
        },
        {"team": "nlp", "nominal_gpus": 12, "max_priority": "high"},
    ]
    monkeypatch.setitem(helpers.CONFIG, "teams", teams)
    with helpers.make_deployment(real_workflows=False) as deployment:
        sink = RecordingSink()
        deployment.plane.publisher.sink = sink
        yield deployment, sink


def call(method: str, path: str, identity: dict[str, Any] = VISION, **kwargs: Any) -> tuple[int, Any]:
    response = functions.api.handler(api_event(method, path, identity=identity, **kwargs), context("api"))
    return response["statusCode"], json.loads(response["body"])


def run_for(dep: Deployment, hours: float, **spec: Any) -> None:
    """An 8-GPU vision job on Spot for `hours`, then cancelled (its GPUs released)."""
    record = start(dep, submit(dep, "vision", **spec), pool="a100-spot")
    dep.clock.advance(hours * 3600)
    cancel_job(dep.plane, "vision", record.id)


def test_usage_costs_ended_and_running_runs(budgeted: tuple[Deployment, RecordingSink]) -> None:
    dep, _ = budgeted
    dep.clock.freeze()
    run_for(dep, 1.0)  # ended: 8 GPU-hours on Spot
    running = start(dep, submit(dep, "vision"), pool="a100-spot", instance_id="i-0running")
    dep.clock.advance(1800)  # running: 4 GPU-hours so far

    status, usage = call("GET", "/usage")

    assert status == 200
    assert usage["team"] == "vision" and usage["runs_ended"] == 1 and usage["runs_going"] == 1
    assert usage["gpu_hours"] == pytest.approx(12.0, abs=0.01)
    assert usage["dollars"] == pytest.approx(12.0 * SPOT_PRICE, abs=0.01)
    assert usage["spot_share"] == 1.0
    assert usage["budget"]["level"] == "ok" and usage["budget"]["budget_usd"] == 10.0
    assert running.id
    # Another team's usage is not readable; a bad month names the field.
    assert call("GET", "/usage", query={"team": "nlp"})[0] == 403
    status, error = call("GET", "/usage", query={"month": "2026-13"})
    assert status == 422 and "month" in error["message"]


def test_soft_then_hard_threshold(budgeted: tuple[Deployment, RecordingSink]) -> None:
    dep, sink = budgeted
    dep.clock.freeze()
    # Soft: $5.60 of a $10 budget (soft at 50%).
    run_for(dep, 2.0)
    result = scheduling_pass(dep.plane)
    assert result is not None
    (event,) = sink.budget()
    assert event["team"] == "vision" and event["level"] == "soft" and event["dollars"] == pytest.approx(5.6)
    scheduling_pass(dep.plane)
    assert len(sink.budget()) == 1  # announced once per crossing
    # The pass plans with vision's fair-share weight halved: its factor drops below what it was.
    now = dep.clock()
    usage = {"vision": 16.0, "nlp": 16.0}
    soft = build_snapshot(dep.plane, [], now, frozenset({"vision"}))
    plain = build_snapshot(dep.plane, [], now)
    assert soft.quotas["vision"].weight == usage_service.BUDGET_SOFT_WEIGHT * plain.quotas["vision"].weight
    assert (
        fairshare_factors(["vision"], soft.quotas, usage)["vision"]
        < fairshare_factors(["vision"], plain.quotas, usage)["vision"]
    )
    # Still under the hard threshold: submissions pass.
    assert call("POST", "/jobs", body=SPEC)[0] == 201

    # Hard: a job that keeps running past $10 ($5.60 + 8 GPU x 2 h x $0.35 = $11.20).
    keeps = start(dep, submit(dep, "vision"), pool="a100-spot", instance_id="i-0keeps")
    dep.clock.advance(2 * 3600)
    scheduling_pass(dep.plane)
    assert [e["level"] for e in sink.budget()] == ["soft", "hard"]
    status, error = call("POST", "/jobs", body=SPEC)
    assert status == 402
    assert "budget" in error["message"] and "vision" in error["message"]
    assert call("POST", "/jobs", body={**SPEC, "priority": "critical"})[0] == 201  # exempt
    assert call("POST", "/jobs", body=SPEC, identity=NLP)[0] == 201  # another team is not affected
    # Running jobs continue.
    assert dep.plane.jobs.get(keeps.id).state.value == "RUNNING"
    status, usage = call("GET", "/usage")
    assert usage["budget"]["level"] == "hard" and usage["dollars"] == pytest.approx(11.2, abs=0.01)


def test_a_retry_of_an_accepted_job_gets_its_job_back_after_the_budget_ran_out(
    budgeted: tuple[Deployment, RecordingSink],
) -> None:
    # The budget was checked before the idempotency key, so a client that
    # retried an accepted submission (its first answer lost) got 402 for a job it already had.
    dep, sink = budgeted
    dep.clock.freeze()
    key = {"Idempotency-Key": "retry-after-402"}
    status, first = call("POST", "/jobs", body=SPEC, headers=key)
    assert status == 201
    # The hard budget is crossed afterwards.
    run_for(dep, 2.0)
    start(dep, submit(dep, "vision"), pool="a100-spot", instance_id="i-0keeps")
    dep.clock.advance(2 * 3600)
    scheduling_pass(dep.plane)
    assert "hard" in [e["level"] for e in sink.budget()]
    assert call("POST", "/jobs", body=SPEC)[0] == 402  # a new job is refused
    # The retry gets its job back (200), not 402
    status, again = call("POST", "/jobs", body=SPEC, headers=key)
    assert (status, again["id"]) == (200, first["id"])
    # A new request under a used key is still refused as such, not as a budget matter
    status, error = call("POST", "/jobs", body={**SPEC, "name": "other"}, headers=key)
    assert status == 422 and "Idempotency-Key" in json.dumps(error)
