"""`GET /pools` (capacity, free GPUs, nodes, Spot state) and `GET /history` (a team's finished
jobs, by state and time), through the API's resolver with API Gateway's proxy events."""

from __future__ import annotations

from typing import Any

from spotline.control.ports import NodeView

from .helpers import Deployment, start, submit
from .test_api import NLP, call


class FakeNodes:
    """A fleet's report: one node of each state in the Spot pool."""

    def nodes(self, now: float) -> list[NodeView]:
        return [
            NodeView("a100-spot", "running", 8, 8, "i-run", since=now - 60),
            NodeView("a100-spot", "draining", 8, 0, "i-warned", since=now - 5, until=now + 115),
            NodeView("a100-spot", "reclaimed", 8, 0, "i-gone", since=now - 30),
            NodeView("a100-spot", "joining", 8, since=now - 30, until=now + 5),
        ]


def _pool(body: dict[str, Any], name: str) -> dict[str, Any]:
    return next(p for p in body["pools"] if p["name"] == name)


def test_pools_show_capacity_and_free_gpus_as_the_scheduler_counts_them(deployment: Deployment) -> None:
    record = start(deployment, submit(deployment, gpus=8), pool="a100-spot")
    deployment.plane.nodes = None  # a deployment that cannot see its instances

    status, body = call("GET", "/pools")

    assert status == 200
    spot = _pool(body, "a100-spot")
    assert (spot["capacity_gpus"], spot["used_gpus"], spot["free_gpus"]) == (16, 8, 8)
    assert spot["ledger_used_gpus"] == 8
    assert spot["team_jobs"] == [record.id]
    assert spot["spot"]["state"] == "there"
    on_demand = _pool(body, "a100-on-demand")
    assert (on_demand["used_gpus"], on_demand["free_gpus"], on_demand["spot"]) == (0, 8, None)
    assert on_demand["reservation"] is None
    assert body["nodes_reported"] is False and spot["nodes"] is None


def test_pools_name_only_the_callers_own_jobs(deployment: Deployment) -> None:
    start(deployment, submit(deployment, gpus=8), pool="a100-spot")

    status, body = call("GET", "/pools", NLP)

    assert status == 200
    spot = _pool(body, "a100-spot")
    assert spot["used_gpus"] == 8 and spot["team_jobs"] == []


def test_pools_count_the_fleets_nodes_by_state(deployment: Deployment) -> None:
    deployment.plane.nodes = FakeNodes()
    status, body = call("GET", "/pools")

    assert status == 200 and body["nodes_reported"] is True
    spot = _pool(body, "a100-spot")
    assert spot["node_counts"] == {"running": 1, "idle": 0, "draining": 1, "reclaimed": 1, "joining": 1}
    draining = next(n for n in spot["nodes"] if n["state"] == "draining")
    assert draining["instance_id"] == "i-warned" and draining["until"].endswith("Z")
    assert _pool(body, "a100-on-demand")["node_counts"]["running"] == 0


def _finish(deployment: Deployment, pool: str = "a100-on-demand") -> str:
    import functions.batch_state_change

    from .helpers import batch_event, context

    running = start(deployment, submit(deployment, gpus=8), pool=pool)
    assert running.batch_job_id is not None
    functions.batch_state_change.handler(
        batch_event(running.id, running.batch_job_id, "SUCCEEDED"), context("batch_state_change")
    )
    return running.id


def test_history_lists_finished_jobs_latest_end_first_by_state_and_time(deployment: Deployment) -> None:
    t0 = deployment.clock.freeze()
    cancelled_early = submit(deployment).id
    assert call("DELETE", f"/jobs/{cancelled_early}")[0] == 200
    deployment.clock.advance(3600)
    succeeded = _finish(deployment)
    deployment.clock.advance(60)
    cancelled_late = submit(deployment).id
    assert call("DELETE", f"/jobs/{cancelled_late}")[0] == 200
    waiting = submit(deployment).id  # not finished: never in the history

    status, body = call("GET", "/history")
    assert status == 200
    ids = [j["id"] for j in body["jobs"]]
    assert ids == [cancelled_late, succeeded, cancelled_early] and waiting not in ids

    _, only = call("GET", "/history", query={"state": "SUCCEEDED"})
    assert [j["id"] for j in only["jobs"]] == [succeeded]

    since = f"{t0 + 1800:.0f}"
    from datetime import UTC, datetime

    iso = datetime.fromtimestamp(float(since), UTC).isoformat()
    _, recent = call("GET", "/history", query={"since": iso})
    assert [j["id"] for j in recent["jobs"]] == [cancelled_late, succeeded]

    _, first = call("GET", "/history", query={"limit": "2"})
    assert [j["id"] for j in first["jobs"]] == [cancelled_late, succeeded] and first["next_token"]
    _, rest = call("GET", "/history", query={"limit": "2", "next_token": first["next_token"]})
    assert [j["id"] for j in rest["jobs"]] == [cancelled_early] and not rest["next_token"]


def test_history_is_the_callers_team_only_and_refuses_bad_filters(deployment: Deployment) -> None:
    job = submit(deployment).id
    call("DELETE", f"/jobs/{job}")

    assert call("GET", "/history", NLP)[1]["jobs"] == []
    status, body = call("GET", "/history", NLP, query={"team": "vision"})
    assert status == 403 and "--team" not in body["message"] and "vision" in body["message"]
    status, body = call("GET", "/history", query={"state": "RUNNING"})
    assert status == 422 and "not a finished state" in body["message"]
    status, body = call("GET", "/history", query={"since": "yesterday"})
    assert status == 422 and "since" in body["message"]


def test_a_reserved_pools_window_is_shown_with_where_now_is_in_it() -> None:
    from spotline.control.pools import reservation_state
    from spotline.domain.models import ReservedWindow

    window = ReservedWindow(start=1000.0, end=4600.0, reservation_id="cr-1")
    assert reservation_state(window, 500.0)["state"] == "before"  # type: ignore[index]
    active = reservation_state(window, 1600.0)
    assert active is not None and active["state"] == "active" and active["ends_in_s"] == 3000.0
    assert active["reservation_id"] == "cr-1" and active["end"] == "1970-01-01T01:16:40Z"
    assert reservation_state(window, 5000.0)["state"] == "ended"  # type: ignore[index]
    assert reservation_state(None, 0.0) is None


class BrokenNodes:
    def nodes(self, now: float) -> list[NodeView]:
        raise ConnectionError("ECS unreachable")


def test_pools_answer_without_nodes_when_the_fleet_cannot_be_read(deployment: Deployment) -> None:
    deployment.plane.nodes = BrokenNodes()
    status, body = call("GET", "/pools")
    assert status == 200 and body["nodes_reported"] is False
    assert body["nodes_error"] == "the nodes could not be read: ConnectionError"
    assert _pool(body, "a100-spot")["capacity_gpus"] == 16


def test_a_spot_pools_state_is_said_in_words_from_its_signal() -> None:
    from spotline.control.pools import spot_state
    from spotline.domain.models import SpotPoolSignal

    assert spot_state(None)["state"] == "there"
    missing = spot_state(SpotPoolSignal(available=False, outage_s=42.0, observed_s=100.0, available_s=58.0))
    assert (missing["state"], missing["missing_for_s"], missing["availability"]) == ("missing", 42.0, 0.58)
    assert spot_state(SpotPoolSignal(at_risk=True))["state"] == "at risk"
