"""An agent started without SPOTLINE_RUN_ID sends events that name no run.
They are dropped (they cannot be credited to a run), but never silently: a warning that names
the missing variable, and the AgentEventsWithoutRun metric besides AgentEventsDropped."""

from __future__ import annotations

import json
import logging

import pytest

import functions.checkpoint_completed
import functions.heartbeat

from .helpers import Deployment, context, eventbridge, heartbeat_recorded, start, submit


def _metrics(printed: str) -> dict[str, float]:
    """The EMF metrics the handler printed (Powertools Metrics writes one JSON line)."""
    found: dict[str, float] = {}
    for line in printed.splitlines():
        if line.startswith("{") and '"_aws"' in line:
            document = json.loads(line)
            for definition in document["_aws"]["CloudWatchMetrics"][0]["Metrics"]:
                value = document[definition["Name"]]
                found[definition["Name"]] = sum(value) if isinstance(value, list) else value
    return found


@pytest.mark.parametrize("kind", ["heartbeat", "checkpoint"])
def test_an_event_without_a_run_id_is_dropped_with_a_warning_and_a_metric(
    deployment: Deployment, kind: str, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    record = start(deployment, submit(deployment))
    detail = {"job_id": record.id, "step": 5, "run_id": None}
    capsys.readouterr()
    with caplog.at_level(logging.INFO):
        if kind == "heartbeat":
            recorded = heartbeat_recorded(eventbridge("job_heartbeat", detail=detail))
        else:
            detail["checkpoint_uri"] = f"s3://ckpt/{record.id}/step-5/"
            recorded = functions.checkpoint_completed.handler(
                eventbridge("checkpoint_completed", detail=detail), context("checkpoint_completed")
            )["recorded"]
    assert recorded is False
    warnings = [
        r for r in caplog.records if r.levelno == logging.WARNING and "SPOTLINE_RUN_ID" in r.getMessage()
    ]
    assert len(warnings) == 1 and f"{kind} dropped" in warnings[0].getMessage()
    metrics = _metrics(capsys.readouterr().out)
    assert metrics.get("AgentEventsWithoutRun") == 1
    assert metrics.get("AgentEventsDropped") == 1
    stored = deployment.plane.jobs.get(record.id)
    assert (stored.step, stored.version) == (record.step, record.version)
