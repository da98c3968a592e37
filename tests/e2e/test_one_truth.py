"""Every screen tells the same facts about a job: a job preempted (`spotline local preempt`) and
then warned off its Spot node (`spotline local spot-warning`) in the local plane, held still,
reads the same step, state and restored checkpoint in `status`, `list`, `explain`, the dashboard
page and its timeline; a waiting job's reason reads the same, dated by the same pass, in each;
and both timelines are monotonic, with the preemption and the Spot warning named as such.

The dashboard is read in chromium (Playwright) where one is installed, else as the HTML its
server renders (the same template)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from spotline.cli.dashboard.server import Dashboard, DashboardServer
from spotline.cli.http import LOCAL, Endpoint
from spotline.local.runtime import LocalControlPlane

from .conftest import cli, ok, running_plane, train_body, wait_for

pytestmark = pytest.mark.slow
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def until(check: Any, what: str, timeout_s: float = 45.0) -> Any:
    deadline = time.time() + timeout_s
    while True:
        found = check()
        if found:
            return found
        assert time.time() < deadline, f"never: {what}"
        time.sleep(0.2)


def checkpointed(api: httpx.Client, job_id: str, headers: dict[str, str], run: int) -> bool:
    """The job runs its `run`-th run, has reported what it restored (from run 2), and has a
    checkpoint of that run."""
    view = api.get(f"/jobs/{job_id}", headers=headers).json()
    restored = view.get("restored") or {}
    return bool(
        view["state"] == "RUNNING"
        and view["run"] == run
        and (run == 1 or restored.get("run") == run)
        and (view.get("step") or 0) > (restored.get("step") or 0) + 5
        and (view.get("last_checkpoint") or {}).get("at", 0) > (view.get("started_at") or 0)
    )


def facts(view: dict[str, Any]) -> tuple[Any, ...]:
    """What the job's run reports in its view (the rest, its cost and priority, moves with time)."""
    return tuple(view.get(k) for k in ("state", "run", "step", "progress", "last_checkpoint", "restored"))


@contextmanager
def held_still(local: LocalControlPlane, job_id: str) -> Iterator[None]:
    """The job's run stopped (SIGSTOP to its process group) while the screens are read: no
    heartbeat or checkpoint moves its step meanwhile; resumed after."""
    assert local.fleet is not None
    runs = [j for j in local.fleet.jobs.values() if f"{job_id}-r" in j.name and j.process is not None]
    process = runs[-1].process
    assert process is not None
    os.killpg(process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.killpg(process.pid, signal.SIGCONT)


def dashboard_texts(base: str, token: str, *paths: str) -> list[str]:
    """Dashboard pages' text, as chromium shows them (or as the server renders them)."""
    if CHROMIUM is not None:
        playwright = pytest.importorskip("playwright.sync_api")
        with playwright.sync_playwright() as driver:
            browser = driver.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            try:
                tab = browser.new_page()
                tab.goto(f"{base}/?token={token}")
                texts = []
                for path in paths:
                    tab.goto(f"{base}{path}")
                    texts.append(str(tab.locator("#content").inner_text()))
                return texts
            finally:
                browser.close()
    with httpx.Client(base_url=base, follow_redirects=True, timeout=30) as web:
        web.get(f"/?token={token}")
        return [re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", web.get(path).text)) for path in paths]


def test_every_screen_tells_the_same_facts_after_a_preemption_and_a_spot_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPOTLINE_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "200")
    with running_plane(tmp_path) as (local, info):
        api = httpx.Client(base_url=info["api_url"], timeout=30)
        nlp = info["teams"]["nlp"]["headers"]
        # Given a job running on Spot, and one that waits for the On-Demand node another holds
        job_id = api.post("/jobs", json=train_body("truth", 600, spot="required"), headers=nlp).json()["id"]
        holder = api.post("/jobs", json=train_body("holds", 3000, spot="never"), headers=nlp).json()["id"]
        wait_for(api, holder, nlp, {"RUNNING"})
        body = train_body("waits", 10, priority="low", spot="never")
        waiting = api.post("/jobs", json=body, headers=nlp).json()["id"]
        wait_for(api, job_id, nlp, {"RUNNING"})
        until(lambda: checkpointed(api, job_id, nlp, 1), "a checkpoint of run 1")

        # When it is preempted, resumes, is warned off its Spot node and resumes again
        preempted = cli("local", "preempt", "--job", job_id)
        assert preempted.exit_code == 0, preempted.output
        until(lambda: checkpointed(api, job_id, nlp, 2), "run 2 resumed and checkpointed")
        warned = cli("local", "spot-warning", "--job", job_id)
        assert warned.exit_code == 0, warned.output
        until(lambda: checkpointed(api, job_id, nlp, 3), "run 3 resumed and checkpointed")

        board = Dashboard({"nlp": Endpoint(base_url=info["api_url"], kind=LOCAL, team="nlp", headers=nlp)})
        server: DashboardServer = board.serve("127.0.0.1", 0)
        server.start()
        base = f"http://127.0.0.1:{server.server_address[1]}"
        try:
            with held_still(local, job_id):
                # (what its run sent before it stopped has landed: two reads agree)
                until(
                    lambda: (
                        facts(ok("status", job_id, "--team", "nlp"))
                        == facts(ok("status", job_id, "--team", "nlp"))
                    ),
                    "the job's view settles",
                )
                status = ok("status", job_id, "--team", "nlp")
                listed = {j["id"]: j for j in ok("list", "--team", "nlp")}
                explained = ok("explain", job_id, "--team", "nlp")
                why = ok("explain", waiting, "--team", "nlp")
                events = ok("events", job_id, "--team", "nlp")["events"]
                page, queue = dashboard_texts(base, board.token, f"/t/nlp/jobs/{job_id}", "/t/nlp/queue")
        finally:
            server.shutdown()

        # Then status, list, explain and the dashboard agree on the state and the step
        step, restored = status["step"], status["restored"]
        assert status["state"] == listed[job_id]["state"] == explained["state"] == "RUNNING"
        assert step == listed[job_id]["step"] == explained["progress"]["step"]
        assert status["progress"] == listed[job_id]["progress"] == explained["progress"]["fraction"]
        assert f"step {step}" in page and "RUNNING" in page
        # And the step is never behind the last checkpoint, nor the checkpoint it restored
        assert step >= status["last_checkpoint"]["step"] >= restored["step"] and restored["run"] == 3
        # And the timeline names the checkpoint each run restored, as status does for the last
        resumed = [e["reason"] for e in events if e["reason"].startswith("run 3 resumed from checkpoint")]
        assert resumed and resumed[-1].startswith(f"run 3 resumed from checkpoint step {restored['step']}:")
        assert f"run 3 resumed from checkpoint step {restored['step']}" in page
        # And it names the preemption and the Spot warning as such, and no host loss
        kinds = [e["kind"] for e in events]
        assert "preemption" in kinds and "spot-warning" in kinds and "host-loss" not in kinds
        # And it never runs back in time
        stamps = [e["t"] for e in events]
        assert stamps == sorted(stamps), events

        # And the waiting job's reason is one answer, dated by the pass that decided it
        reason, at = listed[waiting]["wait_reason"], listed[waiting]["wait_reason_at"]
        assert reason.startswith("waiting") and "a100-on-demand" in reason and at is not None
        shown = ok("status", waiting, "--team", "nlp")
        assert (shown["wait_reason"], shown["wait_reason_at"]) == (reason, at)
        assert (why["summary"], why["wait_reason_at_s"]) == (reason, at)
        assert reason in queue and "as of the pass at" in queue
