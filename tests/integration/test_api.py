"""The HTTP API through its resolver, with API Gateway's REST proxy events (IAM identity)."""

from __future__ import annotations

import json
from typing import Any

import pytest

import functions.api
from spotline.domain import JobState

from .helpers import NLP_LOCAL_KEY, NLP_ROLE, SPEC, Deployment, api_event, context, start

# An assumed-role session of the vision team's role (as in the sample event), and the nlp team.
VISION = {"userArn": "arn:aws:sts::123456789012:assumed-role/vision-researchers/alice"}
NLP = {"userArn": NLP_ROLE, "caller": "AIDANLP", "accessKey": "AKIANLP"}
NLP_LOCAL = {"userArn": None, "caller": None, "user": None, "accessKey": NLP_LOCAL_KEY}
STRANGER = {
    "userArn": "arn:aws:iam::123456789012:user/mallory",
    "caller": "AIDAMAL",
    "accessKey": "AKIAMAL",
    "user": "AIDAMAL",
}


def call(method: str, path: str, identity: dict[str, Any] = VISION, **kwargs: Any) -> tuple[int, Any]:
    response = functions.api.handler(api_event(method, path, identity=identity, **kwargs), context("api"))
    body = response.get("body")
    return response["statusCode"], json.loads(body) if body else None


def post_job(identity: dict[str, Any] = VISION, **spec: Any) -> tuple[int, Any]:
    return call("POST", "/jobs", identity, body={**SPEC, **spec})


def test_submit_returns_201_with_the_pending_job_of_the_callers_team(deployment: Deployment) -> None:
    status, job = post_job(name="resnet", priority="high")

    assert status == 201
    assert job["state"] == "PENDING" and job["team"] == "vision" and job["priority"] == "high"
    assert job["id"].startswith("job-") and job["effective_priority"] > 2000
    assert deployment.plane.jobs.get(job["id"]).team == "vision"


def test_a_local_access_key_maps_to_its_team(deployment: Deployment) -> None:
    status, job = post_job(NLP_LOCAL)
    assert status == 201 and job["team"] == "nlp"


def test_the_team_cannot_be_chosen_in_the_body(deployment: Deployment) -> None:
    status, error = post_job(team="nlp")
    assert status == 422
    assert "team" in error["message"]
    assert deployment.plane.jobs.list_team("nlp")[0] == []


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"gpus": 0}, "gpus"),
        ({"gpus": 9, "nodes": 2}, "nodes"),
        ({"gpus": 16, "nodes": 2, "spot": "required"}, "spot"),  # no multi-node job on Spot
        ({"gpus": 16, "nodes": 2}, "only On-Demand"),  # the 8 On-Demand GPUs cannot host the gang
        ({"priority": "urgent"}, "priority"),
        ({"gpu_type": "h100"}, "gpu_type"),
        ({"deadline": "2001-01-01T00:00:00Z"}, "deadline"),
        ({"gpus": 64}, "gpus"),  # larger than any pool
        ({"command": []}, "command"),
    ],
)
def test_bad_input_gets_422_naming_the_field(
    deployment: Deployment, spec: dict[str, Any], field: str
) -> None:
    status, error = post_job(**spec)
    assert status == 422
    assert field in error["message"]
    assert any(field in [str(p) for p in d["loc"]] or field in d["msg"] for d in error["detail"])
    assert deployment.plane.jobs.list_team("vision")[0] == []  # nothing half-written


def test_a_priority_above_the_teams_policy_is_refused(deployment: Deployment) -> None:
    status, error = post_job(NLP, priority="critical")
    assert status == 422 and "priority" in error["message"]


def test_a_body_that_is_not_json_is_refused(deployment: Deployment) -> None:
    status, error = call("POST", "/jobs", body="{not json")
    assert status in (400, 422)
    assert error["message"]


def test_an_unknown_identity_is_forbidden(deployment: Deployment) -> None:
    assert call("GET", "/jobs", STRANGER)[0] == 403
    assert post_job(STRANGER)[0] == 403


def test_a_team_sees_only_its_own_jobs(deployment: Deployment) -> None:
    # Given a vision job
    _, job = post_job()

    # Then vision reads it and nlp gets 404 for reading, cancelling, changing or its events
    assert call("GET", f"/jobs/{job['id']}")[0] == 200
    assert call("GET", f"/jobs/{job['id']}", NLP)[0] == 404
    assert call("DELETE", f"/jobs/{job['id']}", NLP)[0] == 404
    assert call("PATCH", f"/jobs/{job['id']}", NLP, body={"priority": "low"})[0] == 404
    assert call("GET", f"/jobs/{job['id']}/events", NLP)[0] == 404
    assert call("GET", "/jobs", NLP)[1]["jobs"] == []
    assert deployment.plane.jobs.get(job["id"]).state is JobState.PENDING


def test_get_shows_the_running_job_with_its_instances_and_counters(deployment: Deployment) -> None:
    _, job = post_job()
    start(deployment, deployment.plane.jobs.get(job["id"]), instance_id="i-0123456789abcdef0")

    status, shown = call("GET", f"/jobs/{job['id']}")

    assert status == 200
    assert shown["state"] == "RUNNING" and shown["pool"] == "a100-spot"
    assert shown["instance_ids"] == ["i-0123456789abcdef0"]
    assert shown["preemptions"] == 0 and shown["interruptions"] == 0 and shown["lost_work_s"] == 0
    assert shown["last_checkpoint"] is None


def test_list_filters_by_state_and_paginates(deployment: Deployment) -> None:
    deployment.clock.freeze()
    ids = []
    for i in range(3):  # a second apart: newest first is by submission time, to the millisecond
        ids.append(post_job(name=f"j{i}")[1]["id"])
        deployment.clock.advance(1)
    call("DELETE", f"/jobs/{ids[0]}")

    status, page = call("GET", "/jobs", query={"state": "PENDING", "limit": "1"})
    assert status == 200 and len(page["jobs"]) == 1 and page["next_token"]
    _, rest = call("GET", "/jobs", query={"state": "PENDING", "limit": "1", "next_token": page["next_token"]})

    listed = [j["id"] for j in page["jobs"] + rest["jobs"]]
    assert listed == [ids[2], ids[1]]


def test_list_with_an_unknown_state_names_the_parameter(deployment: Deployment) -> None:
    status, error = call("GET", "/jobs", query={"state": "SLEEPING"})
    assert status == 422 and "state" in error["message"]


def test_cancel_is_idempotent_and_a_finished_job_cannot_be_cancelled(deployment: Deployment) -> None:
    _, job = post_job()

    first = call("DELETE", f"/jobs/{job['id']}")
    again = call("DELETE", f"/jobs/{job['id']}")

    assert first[0] == 200 and first[1]["state"] == "CANCELLED"
    assert again[0] == 200 and again[1]["state"] == "CANCELLED"
    assert call("DELETE", "/jobs/job-doesnotexist")[0] == 404


def test_cancelling_a_running_job_stops_its_batch_job_and_frees_its_gpus(deployment: Deployment) -> None:
    _, job = post_job()
    running = start(deployment, deployment.plane.jobs.get(job["id"]))

    status, cancelled = call("DELETE", f"/jobs/{job['id']}")

    assert status == 200 and cancelled["state"] == "CANCELLED"
    assert [b for b, _ in deployment.launcher.terminated] == [running.batch_job_id]
    assert deployment.plane.ledger.usage(["a100-spot"], [])[0] == {"a100-spot": 0}


def test_patch_changes_the_priority_and_records_it_in_the_timeline(deployment: Deployment) -> None:
    _, job = post_job(priority="low")

    status, changed = call("PATCH", f"/jobs/{job['id']}", body={"priority": "high"})

    assert status == 200 and changed["priority"] == "high" and changed["version"] == 1
    stored = deployment.plane.jobs.get(job["id"])
    assert stored.job.priority.value == "high"
    _, events = call("GET", f"/jobs/{job['id']}/events")
    assert [(e["from"], e["to"]) for e in events["events"]] == [("-", "PENDING"), ("PENDING", "PENDING")]
    assert "priority low -> high" in events["events"][-1]["reason"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"deadline": "2001-01-01T00:00:00Z"}, "deadline"),
        ({"priority": "critical", "gpus": 1}, "gpus"),  # only priority and deadline may change
        ({}, "priority"),
    ],
)
def test_patch_validates_against_policy(deployment: Deployment, body: dict[str, Any], field: str) -> None:
    _, job = post_job(NLP)
    status, error = call("PATCH", f"/jobs/{job['id']}", NLP, body=body)
    assert status == 422 and field in error["message"]


def test_patch_above_the_teams_policy_is_refused(deployment: Deployment) -> None:
    _, job = post_job(NLP)
    status, error = call("PATCH", f"/jobs/{job['id']}", NLP, body={"priority": "critical"})
    assert status == 422 and "priority" in error["message"]


def test_an_idempotency_key_makes_a_retried_submit_return_the_same_job(deployment: Deployment) -> None:
    first = post_job_with_key("retry-1")
    second = post_job_with_key("retry-1")
    assert first[0] == 201 and second[0] == 200 and first[1]["id"] == second[1]["id"]
    assert len(deployment.plane.jobs.list_team("vision")[0]) == 1


def post_job_with_key(key: str) -> tuple[int, Any]:
    return call("POST", "/jobs", body=SPEC, headers={"Idempotency-Key": key})


def test_openapi_document_lists_the_routes(deployment: Deployment) -> None:
    status, document = call("GET", "/openapi.json")
    assert status == 200
    assert document["openapi"].startswith("3.")
    assert {"/jobs", "/jobs/{job_id}", "/jobs/{job_id}/events"} <= set(document["paths"])
    assert {"get", "post"} <= set(document["paths"]["/jobs"])
    assert {"get", "delete", "patch"} <= set(document["paths"]["/jobs/{job_id}"])
    assert "JobSpec" in json.dumps(document["components"])
