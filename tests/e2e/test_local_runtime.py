"""End to end on the local control plane: the real API over HTTP, handlers, workflows, moto,
and real training processes that checkpoint and resume."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import boto3
import httpx
import pytest

from spotline.local.runtime import LocalControlPlane

from .conftest import put_spot_warning, running_plane, train_body, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalControlPlane, dict[str, Any]]]:
    with running_plane(tmp_path_factory.mktemp("spotline")) as started:
        yield started


def test_local_json_describes_the_running_plane(plane: tuple[LocalControlPlane, dict[str, Any]]) -> None:
    local, info = plane
    written = json.loads((local.config.state_dir / "local.json").read_text())
    assert written == info
    assert set(info) == {
        "api_url",
        "aws_endpoint_url",
        "region",
        "event_bus",
        "teams",
        "spot_notice_s",
        "admin",
    }
    # Any SDK client pointed at the endpoint sees the local tables.
    dynamodb = boto3.client("dynamodb", endpoint_url=info["aws_endpoint_url"], region_name=info["region"])
    assert any(name.endswith("-jobs") for name in dynamodb.list_tables()["TableNames"])


def test_requests_without_a_known_key_are_refused(plane: tuple[LocalControlPlane, dict[str, Any]]) -> None:
    _, info = plane
    api = httpx.Client(base_url=info["api_url"])
    assert api.get("/jobs").status_code == 403
    assert api.get("/jobs", headers={"x-spotline-access-key": "not-a-key"}).status_code == 403


def test_a_team_sees_only_its_own_jobs(plane: tuple[LocalControlPlane, dict[str, Any]]) -> None:
    _, info = plane
    api = httpx.Client(base_url=info["api_url"], timeout=30)
    vision, nlp = info["teams"]["vision"]["headers"], info["teams"]["nlp"]["headers"]
    created = api.post("/jobs", json=train_body("private", 5, priority="low"), headers=vision)
    assert created.status_code == 201
    job_id = created.json()["id"]
    assert api.get(f"/jobs/{job_id}", headers=vision).status_code == 200
    assert api.get(f"/jobs/{job_id}", headers=nlp).status_code == 404
    assert job_id not in [j["id"] for j in api.get("/jobs", headers=nlp).json()["jobs"]]
    wait_for(api, job_id, vision, {"SUCCEEDED"})
    # Its training log (the run's process output) is the team's to read, and only the team's
    logs = api.get(f"/jobs/{job_id}/logs", params={"tail": "true", "limit": "5"}, headers=vision)
    assert logs.status_code == 200, logs.text
    lines = [line["message"] for line in logs.json()["lines"]]
    assert lines and json.loads(lines[-1])["job_id"] == job_id  # the training script's last report
    assert api.get(f"/jobs/{job_id}/logs", headers=nlp).status_code == 404


def test_heartbeats_reach_the_control_plane_through_their_queue(
    plane: tuple[LocalControlPlane, dict[str, Any]],
) -> None:
    # Given a running job, whose agent heartbeats as it starts (then every 30 s)
    _, info = plane
    api = httpx.Client(base_url=info["api_url"], timeout=30)
    headers = info["teams"]["vision"]["headers"]
    job_id = api.post("/jobs", json=train_body("heartbeating", 60), headers=headers).json()["id"]
    wait_for(api, job_id, headers, {"RUNNING"})
    # Then the heartbeat function, handed them a batch at a time from the heartbeat queue (as
    # Lambda's event source mapping does), records them on the job: only a heartbeat sets its step
    # (the admission cleared it)
    dynamodb = boto3.client("dynamodb", endpoint_url=info["aws_endpoint_url"], region_name=info["region"])
    [table] = [name for name in dynamodb.list_tables()["TableNames"] if name.endswith("-jobs")]
    deadline = time.monotonic() + 30
    item: dict[str, Any] = {}
    while "N" not in item.get("step", {}) and time.monotonic() < deadline:
        item = dynamodb.get_item(TableName=table, Key={"job_id": {"S": job_id}}).get("Item", {})
        time.sleep(0.5)
    assert "N" in item.get("step", {}), item
    assert item["state"]["S"] in ("RUNNING", "CHECKPOINTING", "SUCCEEDED")


def test_bad_job_spec_is_refused_naming_the_field(plane: tuple[LocalControlPlane, dict[str, Any]]) -> None:
    _, info = plane
    api = httpx.Client(base_url=info["api_url"])
    body = train_body("bad", 5) | {"gpus": 0}
    response = api.post("/jobs", json=body, headers=info["teams"]["vision"]["headers"])
    assert 400 <= response.status_code < 500
    assert "gpus" in response.text


def test_spot_warning_on_the_default_bus_requeues_and_resumes_from_checkpoint(
    plane: tuple[LocalControlPlane, dict[str, Any]],
) -> None:
    # Given a job running on a Spot node
    local, info = plane
    api = httpx.Client(base_url=info["api_url"], timeout=30)
    headers = info["teams"]["nlp"]["headers"]
    job_id = api.post("/jobs", json=train_body("spot-victim", 120), headers=headers).json()["id"]
    view = wait_for(api, job_id, headers, {"RUNNING"})
    assert view["pool"] == "a100-spot"
    instance = view["instance_ids"][0]
    time.sleep(4)  # let it make progress and write a periodic checkpoint
    # When EC2's warning, in AWS's documented shape, is put on the default bus with boto3
    put_spot_warning(info, instance)
    assert local.fleet is not None
    local.fleet.reclaim_after(instance, local.config.spot_notice_s)
    # Then it goes INTERRUPTED -> PENDING -> RUNNING -> SUCCEEDED, resuming from its checkpoint
    final = wait_for(api, job_id, headers, {"SUCCEEDED", "FAILED"}, timeout_s=150)
    assert final["state"] == "SUCCEEDED"
    assert final["interruptions"] >= 1
    transitions = [
        (e["from"], e["to"]) for e in api.get(f"/jobs/{job_id}/events", headers=headers).json()["events"]
    ]
    assert ("INTERRUPTED", "PENDING") in transitions
    after = transitions[transitions.index(("INTERRUPTED", "PENDING")) :]
    assert ("ADMITTED", "RUNNING") in after and after[-1] == ("RUNNING", "SUCCEEDED")
    logs = sorted(
        (local.config.state_dir / "logs").glob(f"spotline-{job_id}-*.log"), key=lambda p: p.stat().st_mtime
    )
    report = json.loads(logs[-1].read_text().strip().splitlines()[-1])
    assert report["resumed_from_step"] > 0
