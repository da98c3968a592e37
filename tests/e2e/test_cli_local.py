"""The `spotline` client driven (typer's runner) against the local control plane: submit, status,
list, explain, priority, deadline, events, watch, logs, cancel, usage, and a bad spec."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from .conftest import cli, ok, train_body

pytestmark = pytest.mark.slow


def env_state() -> Path:
    return Path(os.environ["SPOTLINE_STATE_DIR"])


def spec_file(folder: Path, name: str, steps: int) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(train_body(name, steps), sort_keys=False))
    return path


def wait_state(job_id: str, states: set[str], timeout_s: float = 90) -> dict[str, Any]:
    deadline = time.time() + timeout_s
    while True:
        job: dict[str, Any] = ok("status", job_id)
        if job["state"] in states or time.time() > deadline:
            return job
        time.sleep(0.5)


def test_a_team_works_with_the_client(client_env: Path) -> None:
    # submit (with --set), status, list
    job = ok(
        "submit", str(spec_file(client_env, "cli-long", 400)), "--set", "priority=low", "--team", "vision"
    )
    job_id = job["id"]
    assert job["priority"] == "low" and job["team"] == "vision"
    assert ok("status", job_id)["id"] == job_id
    assert job_id in [j["id"] for j in ok("list", "--all")]
    assert job_id not in [j["id"] for j in ok("list", "--team", "nlp", "--all")]  # another team's view
    table = cli("list")
    assert table.exit_code == 0 and job_id in table.stdout and "ago" in table.stdout

    # explain while it waits or runs
    running = wait_state(job_id, {"RUNNING"})
    assert running["state"] == "RUNNING"
    explained = ok("explain", job_id)
    assert set(explained["priority"]["terms"]) >= {"class", "age", "fairshare"}
    assert explained["placement"]["pool"] == running["pool"]

    # priority and deadline
    assert ok("priority", job_id, "normal")["priority"] == "normal"
    deadline = (datetime.now(UTC) + timedelta(hours=3)).isoformat(timespec="seconds")
    assert ok("deadline", job_id, deadline)["deadline"] is not None

    # cancel, then events and watch (which returns at once for a finished job)
    assert ok("cancel", job_id)[0]["state"] == "CANCELLED"
    moves = [(e["from"], e["to"]) for e in ok("events", job_id)["events"]]
    assert ("PENDING", "ADMITTED") in moves and moves[-1][1] == "CANCELLED"
    watched = cli("watch", job_id, "--interval", "0.2")
    assert watched.exit_code == 0 and "CANCELLED" in watched.stdout

    # usage: the cancelled run is costed
    usage = ok("usage")
    assert usage["team"] == "vision" and usage["gpu_hours"] > 0 and usage["dollars"] > 0

    # a pending job is explained with a forecast
    short = ok("submit", str(spec_file(client_env, "cli-short", 10)), "--idempotency-key", "k-1")
    again = ok("submit", str(spec_file(client_env, "cli-short", 10)), "--idempotency-key", "k-1")
    assert again["id"] == short["id"]
    done = wait_state(short["id"], {"SUCCEEDED", "FAILED"})
    assert done["state"] == "SUCCEEDED"

    # logs: the finished run's output (the training example prints its report last)
    info = json.loads((env_state() / "local.json").read_text())
    paths = httpx.get(info["api_url"] + "/openapi.json", headers=info["teams"]["vision"]["headers"]).json()[
        "paths"
    ]
    if "/jobs/{job_id}/logs" not in paths:
        pytest.skip("this API has no GET /jobs/{id}/logs yet")
    logs = cli("logs", short["id"])
    assert logs.exit_code == 0, logs.output
    assert "resumed_from_step" in logs.stdout


def test_a_bad_spec_is_one_line_naming_the_field_and_its_line(client_env: Path) -> None:
    path = client_env / "bad.yaml"
    path.write_text("name: bad\nimage: spotline/train:latest\ngpus: 0\ncommand: [python, train.py]\n")
    result = cli("submit", str(path))
    assert result.exit_code == 1
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1 and f"{path}:3" in line and "gpus" in line
    assert "Traceback" not in result.output

    path.write_text("name: [unclosed\n")
    result = cli("submit", str(path))
    assert result.exit_code == 2 and "not valid YAML" in result.stderr

    result = cli("status", "job-does-not-exist")
    assert result.exit_code == 1 and "refused (404)" in result.stderr
    result = cli("priority", "job-x", "urgent")
    assert result.exit_code == 2 and "CLASS" in result.stderr


def test_a_deadline_is_answered_at_submission(client_env: Path) -> None:
    soon = datetime.now(UTC)

    def deadline_spec(name: str, steps: int, deadline: datetime) -> Path:
        path = client_env / f"{name}.yaml"
        body = {**train_body(name, steps), "deadline": deadline.isoformat(timespec="seconds")}
        path.write_text(yaml.safe_dump(body, sort_keys=False))
        return path

    # submit prints the answer: a few seconds of work due in 6 h can be promised
    roomy = deadline_spec("dl-roomy", 10, soon + timedelta(hours=6))
    job = ok("submit", str(roomy), "--idempotency-key", "dl-roomy-1")
    assert job["deadline_answer"]["kind"] in {"meets", "on-demand-only"}
    assert job["deadline_answer"]["feasible"] is True
    printed = cli("submit", str(roomy), "--idempotency-key", "dl-roomy-1")
    assert printed.exit_code == 0 and "deadline answer" in printed.stdout and "meets it" in printed.stdout

    # --require-feasible refuses an hour of work due in 10 minutes, and submits nothing
    tight = client_env / "dl-tight.yaml"
    body = {**train_body("dl-tight", 10), "expected_runtime_s": 3600}
    body["deadline"] = (soon + timedelta(minutes=10)).isoformat(timespec="seconds")
    tight.write_text(yaml.safe_dump(body, sort_keys=False))
    refused = cli("submit", str(tight), "--require-feasible")
    assert refused.exit_code == 1
    assert "deadline" in refused.output and "cannot: the earliest finish is" in refused.output
    assert "dl-tight" not in [j["name"] for j in ok("list", "--all")]
    # without the flag it is stored, flagged
    flagged = ok("submit", str(tight))
    assert flagged["deadline_answer"]["kind"] == "cannot"

    # explain shows it, with the run time it planned with
    explained = cli("explain", flagged["id"])
    assert explained.exit_code == 0 and "deadline answer: cannot" in explained.stdout
    assert "run time planned 1.00 h (declared" in explained.stdout
    ok("cancel", job["id"], flagged["id"])
