"""Sweeps, pipelines and cost per job with the `spotline` client against the local control
plane: real processes, the local bus and the same handlers as on AWS. Kept short: each element
and step is a process that prints its environment and exits."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import cli, ok

pytestmark = pytest.mark.slow

PRINT_ENV = (
    "import os, time; time.sleep(0.5); "
    "print('index', os.environ.get('SPOTLINE_ARRAY_INDEX'), 'lr', os.environ.get('SPOTLINE_PARAM_LR'))"
)


def spec(folder: Path, name: str, code: str = PRINT_ENV, **fields: Any) -> Path:
    path = folder / f"{name}.yaml"
    body = {
        "name": name,
        "gpus": 1,
        "image": "spotline/train:latest",
        "command": [sys.executable, "-c", code],
    }
    path.write_text(yaml.safe_dump({**body, **fields}, sort_keys=False))
    return path


def wait_until(check: Any, timeout_s: float = 120.0) -> Any:
    deadline = time.time() + timeout_s
    while True:
        found = check()
        if found or time.time() > deadline:
            return found
        time.sleep(0.3)


def test_a_sweep_of_16_never_runs_more_than_4(client_env: Path) -> None:
    array = ok("submit", str(spec(client_env, "sweep16", array="0-15", max_running=4)))
    array_id = array["id"]
    assert array["size"] == 16 and [j["array_index"] for j in array["jobs"]] == list(range(16))
    most = 0

    def finished() -> bool:
        nonlocal most
        view = ok("status", array_id)
        most = max(most, view["holding_gpus"])
        return view["finished"] == 16

    assert wait_until(finished, 240), ok("status", array_id)
    view = ok("status", array_id)
    assert view["counts"] == {"SUCCEEDED": 16}
    assert most == 4  # the cap was reached, and never passed
    assert len(ok("list", "--array", array_id, "--all")) == 16
    table = cli("status", array_id)
    assert table.exit_code == 0 and "16 SUCCEEDED" in table.stdout and "max_running" in table.stdout
    # Each element ran with its own index in its environment
    logs = cli("logs", f"{array_id}-7")
    assert logs.exit_code == 0 and "index 7" in logs.stdout


def test_a_sweep_matrix_and_cancelling_some_elements(client_env: Path) -> None:
    long = "import time; time.sleep(60)"
    array = ok(
        "submit", str(spec(client_env, "grid", code=long, sweep={"lr": [0.1, 0.01, 0.001]}, max_running=1))
    )
    array_id = array["id"]
    assert [j["array_params"] for j in array["jobs"]][2] == {"lr": "0.001"}
    explained = wait_until(lambda: "max_running=1" in (ok("explain", array_id).get("summary") or ""), 60)
    assert explained
    cancelled = ok("cancel", array_id, "--elements", "1-2")
    assert {j["id"]: j["state"] for j in cancelled}[f"{array_id}-2"] == "CANCELLED"
    ok("cancel", array_id)
    assert wait_until(lambda: ok("status", array_id)["counts"] == {"CANCELLED": 3}, 60)


def test_a_pipeline_of_three_steps(client_env: Path) -> None:
    first = ok("submit", str(spec(client_env, "prep")))
    second = ok("submit", str(spec(client_env, "train", after=[first["id"]])))
    third = ok("submit", str(spec(client_env, "eval", after=[second["id"]], dependency="afterok")))
    waiting = ok("explain", third["id"])
    assert waiting["waiting_for"]["job_id"] == second["id"]
    assert wait_until(lambda: ok("status", third["id"])["state"] == "SUCCEEDED", 120)
    steps = [ok("status", j["id"]) for j in (first, second, third)]
    assert [s["state"] for s in steps] == ["SUCCEEDED"] * 3
    # Each step was let into the queue, and admitted, after the one before it ended
    for before, after in ((steps[0], second), (steps[1], third)):
        events = ok("events", after["id"])["events"]
        queued = next(e for e in events if e["reason"].startswith("dependencies met"))
        admitted = next(e for e in events if e["to"] == "ADMITTED")
        assert before["finished_at"] <= queued["t"] <= admitted["t"]
    # Cost per job: status and usage --by job
    assert steps[0]["cost"]["spot_gpu_hours"] + steps[0]["cost"]["on_demand_gpu_hours"] > 0
    assert "GPU-h Spot" in cli("status", first["id"]).stdout
    rows = {r["id"]: r for r in ok("usage", "--by", "job")["jobs"]}
    assert rows[first["id"]]["dollars"] > 0
    table = cli("usage", "--by", "job")
    assert table.exit_code == 0 and first["id"] in table.stdout


def test_a_failed_dependency_cancels_the_chain(client_env: Path) -> None:
    failing = ok(
        "submit", str(spec(client_env, "broken", code="import sys, time; time.sleep(0.5); sys.exit(3)"))
    )
    second = ok("submit", str(spec(client_env, "after-broken", after=[failing["id"]])))
    third = ok("submit", str(spec(client_env, "after-that", after=[second["id"]])))
    anyway = ok("submit", str(spec(client_env, "cleanup", after=[failing["id"]], dependency="afterany")))
    assert wait_until(lambda: ok("status", third["id"])["state"] == "CANCELLED", 120)
    assert ok("status", failing["id"])["state"] == "FAILED"
    reason = ok("status", second["id"])["state_reason"]
    assert reason == f"cancelled: dependency {failing['id']} ended FAILED (afterok needs SUCCEEDED)"
    assert wait_until(lambda: ok("status", anyway["id"])["state"] == "SUCCEEDED", 120)
    # The API refuses another team's job as a dependency, in one line
    theirs = ok("submit", str(spec(client_env, "theirs")), "--team", "nlp")
    refused = cli("submit", str(spec(client_env, "mine", after=[theirs["id"]])))
    assert refused.exit_code == 1 and "after" in refused.stderr and "Traceback" not in refused.output
    assert os.environ["SPOTLINE_STATE_DIR"]


def test_the_example_sweep_and_pipeline_step(client_env: Path) -> None:
    examples = Path(__file__).resolve().parents[2] / "examples"
    array = ok("submit", str(examples / "sweep.yaml"))
    assert array["size"] == 4 and array["max_running"] == 2
    assert array["jobs"][3]["array_params"] == {"lr": "0.003"}
    step = ok("submit", str(examples / "pipeline.yaml"), "--set", f"after=[{array['id']}]")
    assert step["spec"]["after"] == [j["id"] for j in array["jobs"]]  # the array: all its elements
    assert ok("explain", step["id"])["waiting_for"]["job_id"] == f"{array['id']}-0"
    # Cancelling the sweep breaks the pipeline: its step ends CANCELLED, saying why
    ok("cancel", array["id"])
    assert wait_until(lambda: ok("status", step["id"])["state"] == "CANCELLED", 60)
    assert "ended CANCELLED" in ok("status", step["id"])["state_reason"]
