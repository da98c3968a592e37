"""End to end on the local control plane: the real API over HTTP, handlers, workflows, moto,
and real training processes that checkpoint and resume."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest

from spotline.local.demo import SHORT_SCENARIO, run_demo
from spotline.local.runtime import LocalConfig, LocalControlPlane

from .conftest import running_plane, train_body

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalControlPlane, dict[str, Any]]]:
    with running_plane(tmp_path_factory.mktemp("spotline")) as started:
        yield started


def wait_for(
    api: httpx.Client, job_id: str, headers: dict[str, str], states: set[str], timeout_s: float = 90.0
) -> dict[str, Any]:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        view: dict[str, Any] = api.get(f"/jobs/{job_id}", headers=headers).json()
        if view["state"] in states:
            return view
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} never reached {states}: {view}")


def put_spot_warning(info: dict[str, Any], instance: str) -> None:
    """EC2's Spot interruption warning, in AWS's documented shape, put on the default bus by a
    plain SDK client."""
    events = boto3.client("events", endpoint_url=info["aws_endpoint_url"], region_name=info["region"])
    events.put_events(
        Entries=[
            {
                "Source": "aws.ec2",
                "DetailType": "EC2 Spot Instance Interruption Warning",
                "Detail": json.dumps({"instance-id": instance, "instance-action": "terminate"}),
                "Resources": [f"arn:aws:ec2:us-east-1a:instance/{instance}"],
            }
        ]
    )


def test_local_json_describes_the_running_plane(plane: tuple[LocalControlPlane, dict[str, Any]]) -> None:
    local, info = plane
    written = json.loads((local.config.state_dir / "local.json").read_text())
    assert written == info
    assert set(info) == {"api_url", "aws_endpoint_url", "region", "event_bus", "teams"}
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


def test_short_demo_preempts_with_checkpoint_and_recovers_a_spot_interruption(tmp_path: Path) -> None:
    result = run_demo(SHORT_SCENARIO, LocalConfig(state_dir=tmp_path))
    jobs = {j["name"]: j for j in result.jobs}
    assert result.all_succeeded, result.jobs
    assert jobs["low-1"]["preemptions"] >= 1 and jobs["low-1"]["resumed_from_checkpoint"]
    assert jobs["normal-1"]["interruptions"] >= 1 and jobs["normal-1"]["resumed_from_checkpoint"]
    assert jobs["critical-1"]["preemptions"] == 0
    moves = {(e.source, e.target) for e in result.timeline}
    assert {("RUNNING", "CHECKPOINTING"), ("CHECKPOINTING", "PREEMPTED"), ("PREEMPTED", "PENDING")} <= moves
    assert ("INTERRUPTED", "PENDING") in moves
    document = result.to_json()
    assert set(document) == {"jobs", "timeline"}
    assert set(document["jobs"][0]) >= {
        "id",
        "team",
        "priority",
        "final_state",
        "preemptions",
        "interruptions",
        "resumed_from_checkpoint",
        "lost_gpu_seconds",
    }
    assert set(document["timeline"][0]) == {"t", "job_id", "from", "to", "reason"}


def test_local_up_writes_local_json_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    import signal
    import subprocess

    process = subprocess.Popen(
        [sys.executable, "-m", "spotline.cli", "local", "up", "--state-dir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    local_json = tmp_path / "local.json"
    try:
        deadline = time.time() + 180  # generous: a loaded machine starts the plane slowly
        while not local_json.exists() and time.time() < deadline and process.poll() is None:
            time.sleep(0.2)
        info = json.loads(local_json.read_text())
        vision = info["teams"]["vision"]["headers"]
        assert httpx.get(f"{info['api_url']}/jobs", headers=vision).status_code == 200
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output.decode()
    assert not local_json.exists()


@pytest.fixture
def fresh_plane(tmp_path: Path) -> Iterator[tuple[LocalControlPlane, dict[str, Any]]]:
    """A control plane of its own: the module's plane has a node drained by an earlier test."""
    with running_plane(tmp_path / "spotline") as started:
        yield started


def test_a_spot_warning_from_any_client_drains_the_node(
    fresh_plane: tuple[LocalControlPlane, dict[str, Any]],
) -> None:
    # Given a job running on a Spot node
    local, info = fresh_plane
    api = httpx.Client(base_url=info["api_url"], timeout=30)
    headers = info["teams"]["vision"]["headers"]
    job_id = api.post("/jobs", json=train_body("warned", 80, spot="required"), headers=headers).json()["id"]
    view = wait_for(api, job_id, headers, {"RUNNING"})
    warned = view["instance_ids"][0]
    time.sleep(2)
    # When a warning for its instance is put on the default bus by a plain SDK client (the
    # fleet injects nothing: the instance lives on)
    put_spot_warning(info, warned)
    # Then the warned node drains (the router's observer sees the warning before its handler)
    assert local.fleet is not None
    node = next(n for n in local.fleet.nodes if n.instance_id == warned)
    deadline = time.time() + 120
    while not node.draining:
        assert time.time() < deadline, "the warned node never drained"
        time.sleep(0.3)
    # and the job, requeued by the warning, runs again on Spot but not on the warned node (on a
    # loaded machine the reconciler may have requeued it for a late heartbeat first: what
    # counts is the run after the warning's requeue)
    while True:
        view = api.get(f"/jobs/{job_id}", headers=headers).json()
        moves = api.get(f"/jobs/{job_id}/events", headers=headers).json()["events"]
        warned_at = [i for i, e in enumerate(moves) if "Spot interruption warning" in (e.get("reason") or "")]
        if (
            warned_at
            and view["state"] == "RUNNING"
            and ("ADMITTED", "RUNNING") in [(e["from"], e["to"]) for e in moves[warned_at[0] :]]
        ):
            break
        assert time.time() < deadline, f"not running again after the warning: {view}"
        time.sleep(0.3)
    assert view["pool"] == "a100-spot" and view["interruptions"] >= 1
    assert warned not in view["instance_ids"]
    api.delete(f"/jobs/{job_id}", headers=headers)
