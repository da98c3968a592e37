"""`spotline pools` and `spotline history` against the local plane: a Spot warning drains the
job's node, the node is reclaimed and its replacement joins, as `pools` shows; the finished job
is in `history`, by state and time, and in the dashboard's Pools and History views."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from spotline.cli import app

from .conftest import put_spot_warning, running_plane, train_body, wait_for

pytestmark = pytest.mark.slow


def spotline(*args: str) -> Any:
    done = CliRunner().invoke(app, [*args, "-o", "json"])
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)


def spot_pool() -> dict[str, Any]:
    return next(p for p in spotline("pools", "--team", "nlp")["pools"] if p["purchase"] == "spot")


def states_of(pool: dict[str, Any], instance: str) -> list[str]:
    return [n["state"] for n in pool["nodes"] if n["instance_id"] == instance]


def until(check: Any, timeout_s: float, what: str) -> Any:
    deadline = time.time() + timeout_s
    while True:
        found = check()
        if found:
            return found
        assert time.time() < deadline, what
        time.sleep(0.3)


def test_pools_show_a_warned_node_drain_be_reclaimed_and_replaced_and_history_lists_the_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPOTLINE_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "200")
    with running_plane(tmp_path, spot_notice_s=3, capacity_return_s=3.0) as (_, info):
        api = httpx.Client(base_url=info["api_url"], timeout=30)
        nlp = info["teams"]["nlp"]["headers"]
        # Given a job running on a Spot node
        job_id = api.post("/jobs", json=train_body("pooled", 60, spot="required"), headers=nlp).json()["id"]
        node = wait_for(api, job_id, nlp, {"RUNNING"})["instance_ids"][0]
        pool = spot_pool()
        assert pool["capacity_gpus"] == 8 and pool["used_gpus"] == 4 and pool["free_gpus"] == 4
        assert job_id in pool["team_jobs"] and states_of(pool, node) == ["running"]
        assert pool["node_counts"]["running"] == 1 and pool["node_counts"]["idle"] == 1
        table = CliRunner().invoke(app, ["pools", "--team", "nlp"])
        assert table.exit_code == 0 and node in table.stdout and "1 running, 1 idle" in table.stdout

        # When EC2 warns that node
        put_spot_warning(info, node)

        # Then it drains, is reclaimed when the notice ends while a replacement joins, and the
        # replacement stands in the pool
        until(lambda: states_of(spot_pool(), node) == ["draining"], 15, "the warned node never drained")
        gone = until(
            lambda: next((p for p in [spot_pool()] if states_of(p, node) == ["reclaimed"]), None),
            15,
            "the warned node was never reclaimed",
        )
        assert gone["node_counts"]["joining"] == 1
        joined = until(
            lambda: next((p for p in [spot_pool()] if p["node_counts"]["joining"] == 0), None),
            15,
            "the replacement never joined",
        )
        standing = [n for n in joined["nodes"] if n["state"] in ("running", "idle")]
        assert len(standing) == 2 and node not in [n["instance_id"] for n in standing]

        # And once it finished, the job is in the team's history, by state and time
        wait_for(api, job_id, nlp, {"SUCCEEDED"}, timeout_s=120)
        assert [j["id"] for j in spotline("history", "--team", "nlp")] == [job_id]
        recent = spotline("history", "--team", "nlp", "--state", "succeeded", "--since", "1h")
        assert [j["id"] for j in recent] == [job_id]
        assert spotline("history", "--team", "nlp", "--state", "FAILED") == []
        assert spotline("history", "--team", "vision") == []
        table = CliRunner().invoke(app, ["history", "--team", "nlp"])
        assert table.exit_code == 0 and job_id in table.stdout and "SUCCEEDED" in table.stdout
        bad = CliRunner().invoke(app, ["history", "--since", "last week"])
        assert bad.exit_code == 2 and "--since" in bad.output

        # And its output is there run by run: the first run's, and the resumed second run's
        every = spotline("logs", job_id, "--team", "nlp", "--all")["runs"]
        assert [r["run"] for r in every] == [1, 2]
        assert "resumed_from_step" in every[1]["lines"][-1]["message"]
        first = spotline("logs", job_id, "--team", "nlp", "--run", "1")
        assert first["run"] == 1 and first["lines"] == every[0]["lines"]
        text = CliRunner().invoke(app, ["logs", job_id, "--team", "nlp", "--all"])
        assert text.exit_code == 0 and "== run 2 of 2" in text.stdout
        beyond = CliRunner().invoke(app, ["logs", job_id, "--team", "nlp", "--run", "3"])
        assert beyond.exit_code == 2 and "has run 2 time(s)" in beyond.output

        # And asking as another team says whose job it is and how to ask as that team
        theirs = CliRunner().invoke(app, ["explain", job_id, "--team", "vision"])
        assert theirs.exit_code == 1 and "--team nlp" in theirs.output

        # And the dashboard shows both views
        from spotline.cli.dashboard import endpoints
        from spotline.cli.dashboard.server import Dashboard

        board = Dashboard(endpoints(None, ["nlp"], False, []))
        template, values = board.page("nlp", "pools")
        html = board.render(template, team="nlp", view="pools", fragment=True, **values)
        assert template == "pools.html" and 'data-state="idle"' in html and "reclaimed" in html
        template, values = board.page("nlp", "history", query={"state": "SUCCEEDED", "since": "1h"})
        html = board.render(template, team="nlp", view="history", fragment=True, **values)
        assert f'data-job="{job_id}"' in html
