"""`spotline local up --state-dir DIR`: a restart keeps jobs, usage, checkpoints, team keys and
ports, and a job that was running when the runtime stopped resumes from its checkpoint; without a
state dir nothing is kept."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from spotline.local.state import StateError, StateStore

from .conftest import running_plane, train_body, wait_for

pytestmark = pytest.mark.slow


def test_a_restart_keeps_jobs_usage_checkpoints_keys_and_ports(tmp_path: Path) -> None:
    # Given a persistent runtime with a finished job and a job running with a checkpoint
    with running_plane(tmp_path, persistent=True) as (local, info):
        api = httpx.Client(base_url=info["api_url"], timeout=30)
        vision = info["teams"]["vision"]["headers"]
        done_id = api.post("/jobs", json=train_body("short", 10), headers=vision).json()["id"]
        assert wait_for(api, done_id, vision, {"SUCCEEDED", "FAILED"})["state"] == "SUCCEEDED"
        long_id = api.post("/jobs", json=train_body("long", 150), headers=vision).json()["id"]
        wait_for(api, long_id, vision, {"RUNNING"})
        for _ in range(60):
            before = api.get(f"/jobs/{long_id}", headers=vision).json()
            if (before.get("last_checkpoint") or {}).get("step"):
                break
            import time

            time.sleep(0.3)
        checkpoint = before["last_checkpoint"]
        assert checkpoint and checkpoint["step"] > 0
        usage_before = api.get("/usage", headers=vision).json()
    # When it stops (as on Ctrl-C) and starts again on the same directory
    assert (tmp_path / "state" / "state.json").exists()
    assert any((tmp_path / "state" / "checkpoints").rglob("*"))
    with running_plane(tmp_path, persistent=True) as (local, again):
        # Then the ports and the team keys are the same: local.json and scripts keep working
        assert again["api_url"] == info["api_url"]
        assert again["aws_endpoint_url"] == info["aws_endpoint_url"]
        assert again["teams"] == info["teams"]
        api = httpx.Client(base_url=again["api_url"], timeout=30)
        # And the jobs and the usage are there
        assert api.get(f"/jobs/{done_id}", headers=vision).json()["state"] == "SUCCEEDED"
        usage_after = api.get("/usage", headers=vision).json()
        assert usage_after["gpu_hours"] >= usage_before["gpu_hours"] > 0
        # And the job that was running is requeued as its run was lost with the old process,
        # then resumes from the checkpoint it had written (kept with the state)
        assert long_id in local.lost_runs
        final = wait_for(api, long_id, vision, {"SUCCEEDED", "FAILED"}, timeout_s=150)
        assert final["state"] == "SUCCEEDED" and final["interruptions"] >= 1
        logs = sorted((tmp_path / "logs").glob(f"spotline-{long_id}-*.log"), key=lambda p: p.stat().st_mtime)
        report = json.loads(logs[-1].read_text().strip().splitlines()[-1])
        assert report["resumed_from_step"] >= checkpoint["step"]


def test_without_a_state_dir_nothing_is_kept(tmp_path: Path) -> None:
    with running_plane(tmp_path) as (_, info):
        api = httpx.Client(base_url=info["api_url"], timeout=30)
        api.post("/jobs", json=train_body("gone", 5), headers=info["teams"]["nlp"]["headers"])
    assert not (tmp_path / "state").exists()


def test_a_damaged_state_file_is_refused_naming_it(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "state.json").write_text("{not json")
    with pytest.raises(StateError, match=r"state\.json: cannot read the saved local state"):
        StateStore(tmp_path).load()


def test_local_up_says_its_state_is_ephemeral_without_a_state_dir(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "COLUMNS": "200"}
    process = subprocess.Popen(
        [sys.executable, "-m", "spotline.cli", "local", "up"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        lines: list[str] = []
        deadline = time.time() + 60
        assert process.stdout is not None
        while time.time() < deadline:
            line = process.stdout.readline()
            lines.append(line)
            if "wrote" in line or not line:
                break
        output = "".join(lines)
        assert "state is ephemeral" in output and "--state-dir" in output, output
        assert "{" not in output.split("wrote")[0]  # no raw JSON log lines before local.json
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)
    assert not (tmp_path / ".spotline" / "state").exists()
