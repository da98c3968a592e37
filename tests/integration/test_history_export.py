"""`GET /admin/history`: the deployment's history for its admins, through the API's resolver."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import functions.api

from .helpers import Deployment, api_event, batch_event, context, start, submit

ADMIN = {"userArn": "arn:aws:sts::123456789012:assumed-role/spotline-admins/ops"}
VISION = {"userArn": "arn:aws:sts::123456789012:assumed-role/vision-researchers/alice"}


def call(query: dict[str, str], identity: dict[str, Any] = ADMIN) -> tuple[int, Any]:
    event = api_event("GET", "/admin/history", identity=identity, query=query)
    response = functions.api.handler(event, context("api"))
    return response["statusCode"], json.loads(response["body"])


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat()


def _finished(dep: Deployment, **spec: Any) -> str:
    import functions.batch_state_change

    running = start(dep, submit(dep, **spec))
    assert running.batch_job_id is not None
    functions.batch_state_change.handler(
        batch_event(running.id, running.batch_job_id, "SUCCEEDED", started_at_ms=int(dep.clock() * 1000)),
        context(),
    )
    return running.id


def test_an_admin_reads_every_teams_jobs_with_names_as_digests(deployment: Deployment) -> None:
    since = deployment.clock() - 60
    done = _finished(deployment, name="secret-run", expected_runtime_s=3600)
    waiting = submit(deployment, team="nlp", name="other").id

    status, page = call({"since": iso(since)})

    assert status == 200, page
    rows = {row["job_id"]: row for row in page["jobs"]}
    assert set(rows) == {done, waiting}
    finished = rows[done]
    assert finished["state"] == "SUCCEEDED"
    assert finished["name"].startswith("sha256:") and "secret" not in json.dumps(finished)
    assert finished["command"].startswith("sha256:")
    assert finished["team"] == "vision" and finished["gpus"] == 8
    assert finished["expected_runtime_s"] == 3600
    assert finished["checkpoint_interval_s"] == 60
    assert finished["finished_at"] is not None and finished["run_s"] >= 0
    assert rows[waiting]["state"] == "PENDING"
    cluster = page["cluster"]
    assert [p["name"] for p in cluster["pools"]] == ["a100-spot", "a100-on-demand"]
    assert {t["team"] for t in cluster["teams"]} == {"vision", "nlp"}
    assert cluster["scheduler"] == {"protection_period_s": 0.0, "preemption_delay_s": 0.0}
    assert page["next_token"] is None

    status, named = call({"since": iso(since), "include_names": "true"})
    assert status == 200
    assert {row["name"] for row in named["jobs"]} == {"secret-run", "other"}


def test_a_team_cannot_read_the_history(deployment: Deployment) -> None:
    status, body = call({"since": iso(deployment.clock() - 60)}, identity=VISION)
    assert status == 403
    assert "admins" in body["message"]


def test_pages_follow_each_other_across_the_teams(deployment: Deployment) -> None:
    since = deployment.clock() - 60
    made = {submit(deployment, team=team).id for team in ("vision", "nlp", "vision")}
    seen: list[str] = []
    query = {"since": iso(since), "limit": "1"}
    for _ in range(10):
        status, page = call(query)
        assert status == 200, page
        seen += [row["job_id"] for row in page["jobs"]]
        if page["next_token"] is None:
            break
        query = {**query, "next_token": page["next_token"]}
    assert sorted(seen) == sorted(made)


def test_jobs_submitted_before_since_are_left_out(deployment: Deployment) -> None:
    t0 = deployment.clock.freeze()
    old = submit(deployment).id
    deployment.clock.advance(600)
    new = submit(deployment).id
    deployment.clock.advance(60)
    status, page = call({"since": iso(t0 + 300)})
    assert status == 200, page
    assert [row["job_id"] for row in page["jobs"]] == [new]
    assert old != new
    status, body = call({"since": iso(t0 + 3600)})
    assert status == 422 and "since" in json.dumps(body)  # the future


def test_a_bad_since_is_named(deployment: Deployment) -> None:
    status, body = call({"since": "last tuesday"})
    assert status == 422
    assert "since" in json.dumps(body)
