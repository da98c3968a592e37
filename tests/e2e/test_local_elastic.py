"""An elastic job on the local runtime: shrunk for a more important job, then grown back once the
GPUs are idle, each time through a checkpoint, a stop and a requeue at the new size, and resumed
from its checkpoint; the timeline says so."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import running_plane, train_body, wait_for

pytestmark = pytest.mark.slow


def _events(api: httpx.Client, job_id: str, headers: dict[str, str]) -> list[dict[str, Any]]:
    body = api.get(f"/jobs/{job_id}/events", headers=headers).json()
    return list(body["events"] if isinstance(body, dict) else body)


def _until(
    api: httpx.Client, job_id: str, headers: dict[str, str], text: str, timeout_s: float = 90.0
) -> None:
    deadline = time.time() + timeout_s
    while not any(text in e["reason"] for e in _events(api, job_id, headers)):
        assert time.time() < deadline, [e["reason"] for e in _events(api, job_id, headers)]
        time.sleep(0.3)


def test_an_elastic_job_is_shrunk_for_a_high_job_then_grown_back(tmp_path: Path) -> None:
    with running_plane(tmp_path) as (_, info):
        api = httpx.Client(base_url=info["api_url"], timeout=30)
        vision = info["teams"]["vision"]["headers"]
        # Given a long low elastic job on the On-Demand pool's 4 GPUs (it may run on 2 to 4)
        body = {
            **train_body("elastic", 4000, priority="low", spot="never"),
            "elastic": {"min_gpus": 2, "max_gpus": 4, "cooldown_s": 1},
        }
        job_id = api.post("/jobs", json=body, headers=vision).json()["id"]
        wait_for(api, job_id, vision, {"RUNNING"})
        time.sleep(6)  # past its protection period
        # When a high job asks for 2 On-Demand GPUs
        urgent_id = api.post(
            "/jobs",
            json={**train_body("urgent", 20, priority="high", spot="never"), "gpus": 2},
            headers=vision,
        ).json()["id"]
        # Then the elastic job is shrunk to 2 for it (not preempted whole) and runs again on 2
        _until(api, job_id, vision, f"shrunk from 4 to 2 GPUs for job {urgent_id}")
        deadline = time.time() + 90
        view = api.get(f"/jobs/{job_id}", headers=vision).json()
        while not (view["state"] == "RUNNING" and view["spec"]["gpus"] == 2):
            assert time.time() < deadline, view
            time.sleep(0.3)
            view = api.get(f"/jobs/{job_id}", headers=vision).json()
        assert view["preemptions"] == 0
        wait_for(api, urgent_id, vision, {"SUCCEEDED"}, timeout_s=120)
        # And once the urgent job is done, the idle GPUs grow it back to 4, from its checkpoint
        _until(api, job_id, vision, "grown to 4 GPUs (from 2)", timeout_s=120)
        deadline = time.time() + 90
        view = api.get(f"/jobs/{job_id}", headers=vision).json()
        while not (view["state"] == "RUNNING" and view["spec"]["gpus"] == 4 and view.get("restored")):
            assert time.time() < deadline, view
            time.sleep(0.3)
            view = api.get(f"/jobs/{job_id}", headers=vision).json()
        assert view["preemptions"] == 0 and view["restored"]["step"] > 0
        api.delete(f"/jobs/{job_id}", headers=vision)
