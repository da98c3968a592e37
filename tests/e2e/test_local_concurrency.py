"""Concurrent clients on the local control plane: every acknowledged change holds.

moto's server, served from several threads, lost writes: a failed transaction restored a
snapshot of whole tables over other requests' writes, and about 1 in 100 acknowledged cancels
came back PENDING at version 0. The API handler, run from several threads at once, mixed up
requests (its resolver keeps the current request in module state)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from spotline.local.runtime import LocalConfig, LocalControlPlane

pytestmark = pytest.mark.slow

JOBS = 300
CLIENTS = 64


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    local = LocalControlPlane(LocalConfig(state_dir=tmp_path_factory.mktemp("spotline"), tick_s=1.0))
    info = local.start()
    try:
        yield info
    finally:
        local.stop()


def test_concurrent_submits_and_cancels_lose_no_acknowledged_cancel(plane: dict[str, Any]) -> None:
    # Given 64 clients of two teams submitting and at once cancelling 300 jobs, while the
    # scheduler passes every second and admits what fits (3 of these jobs at a time, which run
    # until cancelled)
    teams = sorted(plane["teams"])
    local = threading.local()

    def client() -> httpx.Client:
        if not hasattr(local, "http"):
            local.http = httpx.Client(base_url=plane["api_url"], timeout=300)
        http: httpx.Client = local.http
        return http

    def submit_and_cancel(i: int) -> tuple[str, str, int, int, dict[str, Any]]:
        team = teams[i % 2]
        headers = plane["teams"][team]["headers"]
        body = {
            "name": f"c{i}",
            "priority": "low",
            "gpus": 4,
            "image": "spotline/train:latest",
            "command": ["sleep", "600"],
        }
        created = client().post("/jobs", json=body, headers=headers)
        if created.status_code != 201:
            return team, "", created.status_code, 0, created.json()
        job_id = created.json()["id"]
        cancelled = client().delete(f"/jobs/{job_id}", headers=headers)
        return team, job_id, created.status_code, cancelled.status_code, cancelled.json()

    with ThreadPoolExecutor(CLIENTS) as pool:
        results = list(pool.map(submit_and_cancel, range(JOBS)))

    # Then every submit was created, and every cancel acknowledged
    assert [r for r in results if r[2] != 201] == []
    assert [r for r in results if r[3] != 200 or r[4]["state"] != "CANCELLED"] == []
    acknowledged = [(team, job_id) for team, job_id, *_ in results]

    # And every acknowledged cancel holds, each job under its own team
    http = httpx.Client(base_url=plane["api_url"], timeout=60)
    lost = []
    for team, job_id in acknowledged:
        view = http.get(f"/jobs/{job_id}", headers=plane["teams"][team]["headers"])
        if view.status_code != 200 or view.json()["state"] != "CANCELLED":
            lost.append((job_id, view.status_code, view.text))
    assert lost == []
