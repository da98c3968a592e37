"""`spotline local up` as a person runs it, in a process of its own: the handlers' logs go to
STATE_DIR/control-plane.log (not the terminal, and no Powertools warning there either), and
Ctrl-C (SIGINT) stops it cleanly. How fast it stops is measured by `bench/cli_startup.py`."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from .conftest import train_body

pytestmark = pytest.mark.slow


def test_ctrl_c_stops_local_up_and_the_handlers_logs_are_in_the_file(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "spotline.cli", "local", "up", "--state-dir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    local_json = tmp_path / "local.json"
    try:
        deadline = time.time() + 180  # generous: a loaded machine starts the plane slowly
        while not local_json.exists() and time.time() < deadline and process.poll() is None:
            time.sleep(0.2)
        info = json.loads(local_json.read_text())
        vision = info["teams"]["vision"]["headers"]
        api = httpx.Client(base_url=info["api_url"], timeout=30)
        # Given a job the handlers admit and start
        job_id = api.post("/jobs", json=train_body("interrupted", 400), headers=vision).json()["id"]
        deadline = time.time() + 90
        while api.get(f"/jobs/{job_id}", headers=vision).json()["state"] != "RUNNING":
            assert time.time() < deadline, "the job never ran"
            time.sleep(0.3)
    finally:
        # When Ctrl-C comes
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    # Then it stopped cleanly, with the handlers' logs in the file and nothing of theirs on the
    # terminal
    stdout, stderr = out.decode(), err.decode()
    assert process.returncode == 0, stdout + stderr
    assert "stopped" in stdout and not local_json.exists()
    assert "No application metrics to publish" not in stdout + stderr
    logged = [json.loads(line) for line in (tmp_path / "control-plane.log").read_text().splitlines()]
    assert any(job_id in json.dumps(line) for line in logged)
    assert all(line.get("service") for line in logged)
