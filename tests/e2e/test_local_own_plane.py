"""End to end on control planes of their own: the short demo, `spotline local up` in a
subprocess, and a plane whose nodes are all undrained.

They live apart from `test_local_runtime.py` because only one local control plane runs in a
process at a time (moto's backends and the handlers' environment are process-wide), and that
module keeps its plane up until its last test."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from spotline.local.demo import SHORT_SCENARIO, run_demo
from spotline.local.runtime import LocalConfig, LocalControlPlane, PlaneAlreadyRunning

from .conftest import put_spot_warning, running_plane, train_body, wait_for

pytestmark = pytest.mark.slow


def test_short_demo_preempts_with_checkpoint_and_recovers_a_spot_interruption(tmp_path: Path) -> None:
    shown: list[tuple[float, str, str]] = []
    result = run_demo(
        SHORT_SCENARIO,
        LocalConfig(state_dir=tmp_path),
        on_transition=lambda entry, name: shown.append((entry.t, entry.job_id, entry.target)),
    )
    jobs = {j["name"]: j for j in result.jobs}
    # What the demo prints: every entry once, in time order (within a job's own order, a pass's
    # clock may read a few ms before the submission it admits)
    assert len(shown) == len(result.timeline)
    latest: dict[str, float] = {}
    order = []
    for t, job_id, _ in shown:
        latest[job_id] = max(t, latest.get(job_id, t))
        assert latest[job_id] - t < 1.0, shown
        order.append(latest[job_id])
    assert order == sorted(order), shown
    for job_id in latest:
        assert next(target for _, job, target in shown if job == job_id) == "PENDING"
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


def test_a_second_plane_in_the_same_process_is_refused_and_the_first_keeps_serving(
    fresh_plane: tuple[LocalControlPlane, dict[str, Any]], tmp_path: Path
) -> None:
    # Given a running plane
    local, info = fresh_plane
    headers = info["teams"]["vision"]["headers"]
    # When a second one is started in the same process
    second = LocalControlPlane(LocalConfig(state_dir=tmp_path / "second"))
    with pytest.raises(PlaneAlreadyRunning, match="already running"):
        second.start()
    # Then the first one's tables and queues are untouched: it still admits and runs a job
    api = httpx.Client(base_url=info["api_url"], timeout=30)
    job_id = api.post("/jobs", json=train_body("after-refusal", 10), headers=headers).json()["id"]
    assert wait_for(api, job_id, headers, {"RUNNING", "SUCCEEDED"})["state"] in {"RUNNING", "SUCCEEDED"}
    assert json.loads((local.config.state_dir / "local.json").read_text()) == info
