"""`spotline local preempt --job ID`: a running job stopped as a preemption stops it (checkpoint,
stop, requeue) with no preemptor; it resumes from that checkpoint, and its status and timeline
name the step it resumed from. And a job's `env` reaches its process in the local runtime."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from spotline.cli import app

from .conftest import running_plane, train_body, wait_for

pytestmark = pytest.mark.slow


def test_local_preempt_checkpoints_stops_and_requeues_a_job_that_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPOTLINE_STATE_DIR", str(tmp_path))
    runner = CliRunner()
    with running_plane(tmp_path) as (_, info):
        api = httpx.Client(base_url=info["api_url"], timeout=30)
        vision = info["teams"]["vision"]["headers"]
        # Given a running job (its env set through the spec)
        body = {**train_body("victim", 120), "env": {"GREETING": "hello from the spec"}}
        body["command"] = [
            sys.executable,
            "-c",
            "import os, sys; from spotline.examples.train import main;"
            " print(os.environ['GREETING'], flush=True); sys.exit(main(sys.argv[1:]))",
            *body["command"][3:],
        ]
        job_id = api.post("/jobs", json=body, headers=vision).json()["id"]
        wait_for(api, job_id, vision, {"RUNNING"})
        time.sleep(1.5)
        # When it is preempted from the command line
        done = runner.invoke(app, ["local", "preempt", "--job", job_id])
        assert done.exit_code == 0 and "preempting" in done.stdout, done.output
        # (asked twice: the same workflow execution, or refused once the job is no longer RUNNING)
        again = runner.invoke(app, ["local", "preempt", "--job", job_id])
        assert again.exit_code in (0, 1), again.output
        # Then it is requeued once and runs again, from its checkpoint
        deadline = time.time() + 90
        view = api.get(f"/jobs/{job_id}", headers=vision).json()
        while not (view["preemptions"] == 1 and view["run"] == 2 and view.get("restored")):
            assert time.time() < deadline, view
            time.sleep(0.3)
            view = api.get(f"/jobs/{job_id}", headers=vision).json()
        step = view["restored"]["step"]
        assert step > 0 and view["restored"]["run"] == 2
        events = json.loads(runner.invoke(app, ["events", job_id, "--output", "json"]).stdout)["events"]
        reasons = [e["reason"] for e in events]
        assert any("requested directly" in r for r in reasons) and any(e["to"] == "PREEMPTED" for e in events)
        assert any(r.startswith(f"run 2 resumed from checkpoint step {step}") for r in reasons), reasons
        # And the spec's env reached the process
        logs = runner.invoke(app, ["logs", job_id])
        assert logs.exit_code == 0 and "hello from the spec" in logs.stdout, logs.output
        finished = wait_for(api, job_id, vision, {"SUCCEEDED"}, timeout_s=120)
        assert finished["preemptions"] == 1  # one preemption, however often it was asked
        # A job that is not running cannot be preempted; a job no team has is unknown
        ended = runner.invoke(app, ["local", "preempt", "--job", job_id])
        assert ended.exit_code == 1 and "only a RUNNING job" in ended.stderr
        unknown = runner.invoke(app, ["local", "preempt", "--job", "job-unknown"])
        assert unknown.exit_code == 1 and "no local team has it" in unknown.stderr
    missing = runner.invoke(app, ["local", "preempt"])
    assert missing.exit_code == 2
