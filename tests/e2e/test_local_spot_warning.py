"""`spotline local spot-warning`: EC2's warning on the local bus; the fleet reclaims the instance
when the notice ends, the job resumes elsewhere from its checkpoint, capacity comes back, and the
next job admitted to the pool starts (no ghost node holding it ADMITTED)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from spotline.cli import app

from .conftest import running_plane, train_body, wait_for

pytestmark = pytest.mark.slow


def test_spot_warning_reclaims_the_instance_and_the_job_resumes_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPOTLINE_STATE_DIR", str(tmp_path))
    runner = CliRunner()
    with running_plane(tmp_path) as (local, info):
        assert local.fleet is not None
        api = httpx.Client(base_url=info["api_url"], timeout=30)
        nlp = info["teams"]["nlp"]["headers"]
        # Given a job running on a Spot node, with a checkpoint
        job_id = api.post("/jobs", json=train_body("victim", 150, spot="required"), headers=nlp).json()["id"]
        view = wait_for(api, job_id, nlp, {"RUNNING"})
        warned = view["instance_ids"][0]
        deadline = time.time() + 30
        while not api.get(f"/jobs/{job_id}", headers=nlp).json().get("last_checkpoint"):
            assert time.time() < deadline, "no checkpoint"
            time.sleep(0.3)
        # When the CLI sends the warning without naming an instance (the first running job's
        # Spot instance: the job's), then again naming it (EC2 may deliver a warning twice; the
        # node keeps its first deadline)
        sent = runner.invoke(app, ["local", "spot-warning"])
        assert sent.exit_code == 0, sent.output
        assert f"{warned} (job {job_id})" in sent.stdout and f"{info['spot_notice_s']} s" in sent.stdout
        again = runner.invoke(app, ["local", "spot-warning", "--instance", warned])
        assert again.exit_code == 0 and warned in again.stdout, again.output
        # Then the job is interrupted, requeued and resumes on another instance from its checkpoint
        moved = wait_for(api, job_id, nlp, {"RUNNING"}, timeout_s=60)
        deadline = time.time() + 60
        while moved["interruptions"] < 1 or warned in moved["instance_ids"] or moved["state"] != "RUNNING":
            assert time.time() < deadline, moved
            time.sleep(0.3)
            moved = api.get(f"/jobs/{job_id}", headers=nlp).json()
        # And the warned node is reclaimed when the notice ends
        node = next(n for n in local.fleet.nodes if n.instance_id == warned)
        deadline = time.time() + local.config.spot_notice_s + 10
        while node.alive:
            assert time.time() < deadline, "the warned node outlived its notice"
            time.sleep(0.3)
        # And a job admitted to the pool afterwards starts on the capacity that came back,
        # long before the reconciler's start timeout (no ghost node)
        vision = info["teams"]["vision"]["headers"]
        next_id = api.post("/jobs", json=train_body("next", 20, spot="required"), headers=vision).json()["id"]
        started = wait_for(api, next_id, vision, {"RUNNING", "SUCCEEDED"}, timeout_s=60)
        assert warned not in started["instance_ids"]
        final = wait_for(api, job_id, nlp, {"SUCCEEDED", "FAILED"}, timeout_s=150)
        assert final["state"] == "SUCCEEDED"
        logs = sorted((tmp_path / "logs").glob(f"spotline-{job_id}-*.log"), key=lambda p: p.stat().st_mtime)
        assert json.loads(logs[-1].read_text().strip().splitlines()[-1])["resumed_from_step"] > 0
        # And --job finds a job of any local team, and refuses one that runs nowhere
        ended = runner.invoke(app, ["local", "spot-warning", "--job", job_id])
        assert ended.exit_code == 1 and "is SUCCEEDED: it runs on no instance now" in ended.stderr
        unknown = runner.invoke(app, ["local", "spot-warning", "--job", "job-unknown"])
        assert unknown.exit_code == 1 and "no local team has it" in unknown.stderr


def test_spot_warning_refuses_bad_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPOTLINE_STATE_DIR", str(tmp_path))
    runner = CliRunner()
    both = runner.invoke(app, ["local", "spot-warning", "--job", "j", "--instance", "i-1"])
    assert both.exit_code == 2 and "not both" in both.stderr
    missing = runner.invoke(app, ["local", "spot-warning", "--instance", "i-1"])
    assert missing.exit_code == 1 and "local.json not found" in missing.stderr
