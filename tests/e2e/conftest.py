"""What the end-to-end tests share: a local control plane started and stopped around a test
(or a module), the `spotline` client's environment pointed at one, the body of a real
training job that checkpoints, and a recorder of the events a local fleet emits."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from typer.testing import CliRunner, Result

from spotline.cli import app
from spotline.local.runtime import LocalConfig, LocalControlPlane

STEP_TIME_S = 0.15


def cli(*args: str) -> Result:
    """The `spotline` client, run in this process (the environment points it at a local plane)."""
    return CliRunner().invoke(app, list(args))


def ok(*args: str) -> Any:
    """A `spotline` command that must succeed, its `--output json` parsed."""
    result = cli(*args, "--output", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


class Events:
    """The events a `LocalFleet` (without the control plane) puts on its bus, recorded as they
    come (the fleet's sink; its threads call it)."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def __call__(self, entries: list[dict[str, Any]]) -> None:
        with self._lock:
            self.entries.extend(entries)

    def warnings(self) -> list[str]:
        """The instances EC2's Spot interruption warning was sent for, in order."""
        with self._lock:
            return [
                json.loads(e["Detail"])["instance-id"]
                for e in self.entries
                if e["DetailType"] == "EC2 Spot Instance Interruption Warning"
            ]

    def _job_changes(self) -> list[dict[str, Any]]:
        with self._lock:
            changes = [e for e in self.entries if e["DetailType"] == "Batch Job State Change"]
        return [json.loads(e["Detail"]) for e in changes]

    def status(self, job_id: str) -> str | None:
        """A job's last Batch status so far (None before any)."""
        mine = [d["status"] for d in self._job_changes() if d["jobId"] == job_id]
        return mine[-1] if mine else None

    def final(self, job_id: str, timeout_s: float = 30.0) -> dict[str, Any]:
        """A job's first SUCCEEDED or FAILED change, waited for."""
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            for detail in self._job_changes():
                if detail["jobId"] == job_id and detail["status"] in ("SUCCEEDED", "FAILED"):
                    return detail
            time.sleep(0.05)
        raise AssertionError(f"{job_id} never finished")


@contextmanager
def running_plane(state_dir: Path, **config: Any) -> Iterator[tuple[LocalControlPlane, dict[str, Any]]]:
    """A local control plane on `state_dir` (its `local.json` info with it), stopped after."""
    local = LocalControlPlane(LocalConfig(state_dir=state_dir, **config))
    info = local.start()
    try:
        yield local, info
    finally:
        local.stop()


@pytest.fixture(scope="module")
def local_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The state directory of a local control plane that runs while the module's tests do."""
    state = tmp_path_factory.mktemp("spotline")
    with running_plane(state):
        yield state


@pytest.fixture
def client_env(local_state: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The `spotline` client's environment for one test: the module's local plane as its endpoint
    (no SPOTLINE_ENDPOINT override), a config folder of its own and wide tables; returns the
    test's folder for its spec files."""
    monkeypatch.setenv("SPOTLINE_STATE_DIR", str(local_state))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("SPOTLINE_ENDPOINT", raising=False)
    monkeypatch.setenv("COLUMNS", "200")
    return tmp_path


def train_body(name: str, steps: int, priority: str = "normal", spot: str = "auto") -> dict[str, Any]:
    """A `POST /jobs` body whose command is the example trainer: `steps` steps of 0.15 s, a
    checkpoint every 1.5 s, resumable."""
    return {
        "name": name,
        "priority": priority,
        "gpus": 4,
        "image": "spotline/train:latest",
        "command": [
            sys.executable,
            "-m",
            "spotline.examples.train",
            "--steps",
            str(steps),
            "--step-time-s",
            str(STEP_TIME_S),
            "--seed",
            "3",
        ],
        "spot": spot,
        "checkpoint_interval_s": 1.5,
        "expected_runtime_s": steps * STEP_TIME_S,
    }


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
