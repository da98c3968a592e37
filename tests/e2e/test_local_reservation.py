"""A local reserved pool (`spotline local up --reservation`): a job runs in the block first
(prepaid), is checkpointed before the block ends (planned from the known end, no warning needed)
and resumes On-Demand from its checkpoint; `spotline local reservation-warning` puts AWS's
expiration warning on the local bus."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from spotline.cli import app
from spotline.domain.reserved import DEFAULT_GRACE_S, TERMINATION_LEAD_S
from spotline.local.runtime import LocalConfig, reserved_pool

from .conftest import running_plane, train_body, wait_for

pytestmark = pytest.mark.slow

# The block's planned drain comes this long after the plane is asked to start (its start takes
# seconds on a loaded machine: the job must reach the block first).
DRAIN_AFTER_S = 45.0


def test_a_job_leaves_its_block_checkpointed_and_resumes_on_demand(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPOTLINE_STATE_DIR", str(tmp_path))
    now = time.time()
    block = reserved_pool(1, 4, now, now + TERMINATION_LEAD_S + DEFAULT_GRACE_S + DRAIN_AFTER_S)
    with running_plane(tmp_path, pools=(*LocalConfig().pools, block)) as (_, info):
        api = httpx.Client(base_url=info["api_url"], timeout=30)
        nlp = info["teams"]["nlp"]["headers"]
        # Given a job (On-Demand only, once it leaves the block) that runs longer than the block lasts
        job_id = api.post("/jobs", json=train_body("in-block", 400, spot="never"), headers=nlp).json()["id"]
        running = wait_for(api, job_id, nlp, {"RUNNING"})
        assert running["pool"] == block.name
        # When the block's end nears, the job is checkpointed and requeued without any warning
        moved = running
        deadline = time.time() + DRAIN_AFTER_S + 60
        while moved["pool"] != "a100-on-demand" or moved["state"] != "RUNNING":
            assert time.time() < deadline, moved
            time.sleep(0.3)
            moved = api.get(f"/jobs/{job_id}", headers=nlp).json()
        # Then it resumes On-Demand from the checkpoint it wrote as it left the block
        assert moved["interruptions"] == 1 and moved["preemptions"] == 0
        while not moved.get("restored"):  # (the agent reports what it restored once it has)
            assert time.time() < deadline, moved
            time.sleep(0.3)
            moved = api.get(f"/jobs/{job_id}", headers=nlp).json()
        assert moved["restored"]["step"] > 0
        events = api.get(f"/jobs/{job_id}/events", headers=nlp).json()["events"]
        reasons = " ".join(e["reason"] for e in events)
        assert "checkpoint planned from its end" in reasons and "reserved, prepaid" in reasons
        # And the warning command knows the local block, and refuses a pool that is not one
        runner = CliRunner()
        sent = runner.invoke(app, ["local", "reservation-warning"])
        assert sent.exit_code == 0 and "Capacity Block Expiration Warning" in sent.stdout, sent.output
        wrong = runner.invoke(app, ["local", "reservation-warning", "--pool", "a100-spot"])
        assert wrong.exit_code == 2 and "is not a reserved pool" in wrong.stderr
