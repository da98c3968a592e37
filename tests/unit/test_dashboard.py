"""`spotline dashboard` without a browser or a control plane: its server in front of a fake API
(the session token, the Host check, CSRF, an API refusal shown as is), the views' data, the
charts, and the command's refusal of a non-local --host without --allow-remote."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from spotline.cli import app
from spotline.cli.dashboard import data, svg
from spotline.cli.dashboard.server import Dashboard
from spotline.cli.http import ClientError, Endpoint

NOW = time.time()


def job(job_id: str, priority: str, effective: float, state: str = "PENDING", **more: Any) -> dict[str, Any]:
    return {
        "id": job_id,
        "name": f"name-{job_id}",
        "team": "vision",
        "state": state,
        "state_reason": "submitted",
        "priority": priority,
        "effective_priority": effective,
        "gpus": 4,
        "nodes": 1,
        "wait_reason": f"waiting: {job_id} needs 4 GPUs",
        "waited_s": 30.0,
        "enqueued_at": NOW - 30,
        "started_at": None,
        "finished_at": None,
        "runtime_s": 0.0,
        "deadline": None,
        "last_checkpoint": None,
        "pool": None,
        "progress": None,
        "step": None,
        "preemptions": 0,
        "interruptions": 0,
        "lost_work_s": 0.0,
        **more,
    }


class FakeApi(Endpoint):
    """The API's answers for one team; records the requests it gets."""

    def __init__(self, jobs: list[dict[str, Any]]) -> None:
        super().__init__(base_url="http://fake", kind="local", team="vision")
        self.jobs = {j["id"]: j for j in jobs}
        self.sent: list[tuple[str, str, Any]] = []

    def request(
        self, method: str, path: str, *, params: Any = None, body: Any = None, headers: Any = None
    ) -> Any:
        self.sent.append((method, path, body))
        parts = path.strip("/").split("/")
        if path == "/jobs":
            # The API's paging, newest first: `next_token` here is the offset of the next page.
            state, limit = (params or {}).get("state"), int((params or {}).get("limit", 50))
            listed = [j for j in reversed(self.jobs.values()) if state in (None, j["state"])]
            start = int((params or {}).get("next_token") or 0)
            more = start + limit < len(listed)
            return {"jobs": listed[start : start + limit], "next_token": str(start + limit) if more else None}
        if path == "/usage":
            return {"team": "vision", "gpu_hours": 2.0, "dollars": 4.0, "budget": {"budget_usd": 100.0}}
        found = self.jobs.get(parts[1])
        if found is None:
            raise ClientError("refused (404): no such job", status=404)
        if method == "DELETE":
            if found["state"] == "SUCCEEDED":
                raise ClientError("refused (409): the job already finished", status=409)
            found["state"] = "CANCELLED"
            return found
        if len(parts) == 3 and parts[2] == "explain":
            return {
                "summary": "waiting",
                "position": {"overall": 1, "queued": 2, "class": "high", "in_class": 1, "class_size": 1},
            }
        if len(parts) == 3 and parts[2] == "events":
            return {"events": [{"t": NOW - 30, "from": "-", "to": "PENDING", "reason": "submitted"}]}
        if len(parts) == 3 and parts[2] == "logs":
            return {"lines": [{"message": "step 1"}], "run": None, "runs": []}
        return found


@pytest.fixture
def served() -> Iterator[tuple[Dashboard, FakeApi, str]]:
    api = FakeApi(
        [
            job("job-low", "low", 10.0),
            job("job-high", "high", 2000.0),
            job("job-done", "low", 0.0, "SUCCEEDED"),
        ]
    )
    board = Dashboard({"vision": api})
    server = board.serve("127.0.0.1", 0)
    server.start()
    try:
        yield board, api, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def test_without_the_token_every_request_is_refused(served: tuple[Dashboard, FakeApi, str]) -> None:
    board, api, base = served
    for path in ("/", "/t/vision/queue", "/static/dashboard.js", "/?token=nope"):
        assert httpx.get(base + path).status_code == 403, path
    assert httpx.get(base + "/t/vision/queue", cookies={board.cookie: "nope"}).status_code == 403
    assert not api.sent  # nothing reached the API


def test_the_token_url_sets_the_cookie_and_leaves_the_address_bar(
    served: tuple[Dashboard, FakeApi, str],
) -> None:
    board, _, base = served
    first = httpx.get(f"{base}/?token={board.token}")
    assert first.status_code == 303 and first.headers["location"] == "/"
    assert "HttpOnly" in first.headers["set-cookie"] and "SameSite=Strict" in first.headers["set-cookie"]
    with httpx.Client(base_url=base, cookies=first.cookies, follow_redirects=True) as client:
        page = client.get("/")
        assert page.status_code == 200 and page.url.path == "/t/vision/queue"
        assert board.token not in page.text  # the token never goes into a page
        assert page.text.index("job-high") < page.text.index("job-low")  # by effective priority
        assert "job-done" not in page.text
        fragment = client.get("/t/vision/queue?fragment=1").text
        assert "<html" not in fragment and "job-high" in fragment


def test_a_long_queue_is_one_api_request_a_page_with_a_link_to_the_next(
    served: tuple[Dashboard, FakeApi, str],
) -> None:
    # Given 250 pending jobs (the API gives at most 100 a page, newest first)
    board, api, base = served
    api.jobs.update({f"job-{n:03d}": job(f"job-{n:03d}", "normal", float(n)) for n in range(250)})
    with httpx.Client(base_url=base, cookies={board.cookie: board.token}) as client:
        # When the queue page is opened
        api.sent.clear()
        first = client.get("/t/vision/queue")

        # Then it asked the API for its first page only, shows those 100 by effective priority,
        # and links the next page with the API's token
        assert [path for _, path, _ in api.sent] == ["/jobs"]
        assert first.status_code == 200 and first.text.count('data-job="') == 100
        assert first.text.index('data-job="job-249"') < first.text.index('data-job="job-150"')
        assert 'data-job="job-149"' not in first.text and 'href="/t/vision/queue?page=100"' in first.text
        assert 'id="first-page"' not in first.text
        # and the next page is the API's next one, its last (no link further, one back to the first)
        second = client.get("/t/vision/queue?page=100&fragment=1").text
        assert second.count('data-job="') == 100 and 'data-job="job-149"' in second
        assert 'data-job="job-249"' not in second and 'href="/t/vision/queue?page=200"' in second
        third = client.get("/t/vision/queue?page=200").text
        assert 'data-job="job-high"' in third and 'data-job="job-low"' in third
        assert 'id="next-page"' not in third and 'href="/t/vision/queue" id="first-page"' in third


def test_a_foreign_host_header_is_refused(served: tuple[Dashboard, FakeApi, str]) -> None:
    board, _, base = served
    answer = httpx.get(
        base + "/t/vision/queue", cookies={board.cookie: board.token}, headers={"Host": "evil.example:80"}
    )
    assert answer.status_code == 403


def test_actions_need_the_csrf_token_and_show_the_apis_refusal(
    served: tuple[Dashboard, FakeApi, str],
) -> None:
    board, api, base = served
    cookies = {board.cookie: board.token}
    refused = httpx.post(f"{base}/t/vision/jobs/job-low/cancel", cookies=cookies, data={"csrf": "wrong"})
    assert refused.status_code == 403 and api.jobs["job-low"]["state"] == "PENDING"
    other_origin = httpx.post(
        f"{base}/t/vision/jobs/job-low/cancel",
        cookies=cookies,
        data={"csrf": board.csrf},
        headers={"Origin": "http://evil.example"},
    )
    assert other_origin.status_code == 403 and api.jobs["job-low"]["state"] == "PENDING"
    done = httpx.post(f"{base}/t/vision/jobs/job-low/cancel", cookies=cookies, data={"csrf": board.csrf})
    assert done.status_code == 200 and done.json()["state"] == "CANCELLED"
    assert ("DELETE", "/jobs/job-low", None) in api.sent
    conflict = httpx.post(f"{base}/t/vision/jobs/job-done/cancel", cookies=cookies, data={"csrf": board.csrf})
    assert conflict.status_code == 409 and "already finished" in conflict.json()["message"]
    bad = httpx.post(
        f"{base}/t/vision/jobs/job-high/deadline",
        cookies=cookies,
        data={"csrf": board.csrf, "deadline": "soon"},
    )
    assert bad.status_code == 422 and "deadline" in bad.json()["message"]
    patched = httpx.post(
        f"{base}/t/vision/jobs/job-high/priority",
        cookies=cookies,
        data={"csrf": board.csrf, "priority": "low"},
    )
    assert patched.status_code == 200 and ("PATCH", "/jobs/job-high", {"priority": "low"}) in api.sent


def test_an_unknown_team_is_not_found(served: tuple[Dashboard, FakeApi, str]) -> None:
    board, _, base = served
    assert httpx.get(base + "/t/nlp/queue", cookies={board.cookie: board.token}).status_code == 404


def test_the_job_page_without_cost_fields_says_so(served: tuple[Dashboard, FakeApi, str]) -> None:
    board, api, base = served
    page = httpx.get(base + "/t/vision/jobs/job-high", cookies={board.cookie: board.token})
    assert page.status_code == 200 and "not reported by this API" in page.text
    api.jobs["job-high"]["cost"] = {"dollars": 1.5, "spot_gpu_hours": 1.0, "on_demand_gpu_hours": 0.5}
    page = httpx.get(base + "/t/vision/jobs/job-high", cookies={board.cookie: board.token})
    assert "$1.50" in page.text


def test_each_dashboard_has_its_own_cookie_so_two_on_one_machine_do_not_collide(
    served: tuple[Dashboard, FakeApi, str],
) -> None:
    # Given a second dashboard on another port of the same machine (cookies ignore ports)
    board, _, base = served
    other = Dashboard({"vision": FakeApi([job("job-x", "low", 1.0)])})
    server = other.serve("127.0.0.1", 0)
    server.start()
    try:
        other_base = f"http://127.0.0.1:{server.server_address[1]}"
        # When a browser opens both URLs, it keeps both cookies (names differ by port)
        with httpx.Client() as browser:
            browser.get(f"{base}/?token={board.token}")
            browser.get(f"{other_base}/?token={other.token}")
            assert board.cookie == f"spotline_dashboard_{base.rsplit(':', 1)[1]}"
            assert other.cookie != board.cookie
            assert {c.name for c in browser.cookies.jar} == {board.cookie, other.cookie}
            # Then each dashboard still serves that browser
            assert browser.get(f"{base}/t/vision/queue").status_code == 200
            assert browser.get(f"{other_base}/t/vision/queue").status_code == 200
        # and neither takes the other's cookie, nor one without the port
        assert httpx.get(f"{base}/t/vision/queue", cookies={other.cookie: board.token}).status_code == 403
        assert (
            httpx.get(f"{base}/t/vision/queue", cookies={"spotline_dashboard": board.token}).status_code
            == 403
        )
    finally:
        server.shutdown()


def _own_address() -> str | None:
    """This machine's address on its default route (a UDP connect sends nothing), if not loopback."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.1", 9))
        address = str(probe.getsockname()[0])
    except OSError:
        return None
    finally:
        probe.close()
    return None if address.startswith("127.") else address


def test_on_every_address_it_accepts_the_machines_own_names_and_addresses() -> None:
    # Given `--allow-remote --host 0.0.0.0`
    board = Dashboard({"vision": FakeApi([job("job-a", "low", 1.0)])})
    server = board.serve("0.0.0.0", 0)
    server.start()
    port = server.server_address[1]
    cookies = {board.cookie: board.token}
    try:
        # A client naming the machine by its host name, or reaching it at one of its addresses, is
        # served; so is one on loopback
        hostname = socket.gethostname()
        named = httpx.get(
            f"http://127.0.0.1:{port}/t/vision/queue", cookies=cookies, headers={"Host": f"{hostname}:{port}"}
        )
        assert named.status_code == 200
        assert httpx.get(f"http://127.0.0.1:{port}/t/vision/queue", cookies=cookies).status_code == 200
        address = _own_address()
        if address is not None:
            assert httpx.get(f"http://{address}:{port}/t/vision/queue", cookies=cookies).status_code == 200
            # an action from a page served at that address passes the Origin check
            done = httpx.post(
                f"http://{address}:{port}/t/vision/jobs/job-a/cancel",
                cookies=cookies,
                data={"csrf": board.csrf},
                headers={"Origin": f"http://{address}:{port}"},
            )
            assert done.status_code == 200
        # A page on another domain that resolves here (DNS rebinding) is still refused
        rebound = httpx.get(
            f"http://127.0.0.1:{port}/t/vision/queue",
            cookies=cookies,
            headers={"Host": f"evil.example:{port}"},
        )
        assert rebound.status_code == 403
    finally:
        server.shutdown()


def _raw_post(base: str, cookie: str, headers: str, timeout_s: float = 5.0) -> bytes:
    """POST an action over a plain socket with these extra header lines, and read the answer until
    the server closes the connection (a hung handler thread makes this time out)."""
    host, port = base.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout_s) as connection:
        connection.sendall(
            (
                f"POST /t/vision/jobs/job-low/cancel HTTP/1.1\r\nHost: {host}:{port}\r\n"
                f"Cookie: {cookie}\r\n{headers}\r\n"
            ).encode()
        )
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    return answer


def test_a_bad_content_length_is_answered_400_without_holding_a_thread(
    served: tuple[Dashboard, FakeApi, str],
) -> None:
    board, api, base = served
    cookie = f"{board.cookie}={board.token}"
    # A negative length used to make the handler read until the client hung up: now 400 at once,
    # and the connection is closed (recv returns within the timeout)
    answer = _raw_post(base, cookie, "Content-Length: -1\r\n")
    assert answer.startswith(b"HTTP/1.1 400") and b"bad Content-Length '-1'" in answer
    assert _raw_post(base, cookie, "Content-Length: ten\r\n").startswith(b"HTTP/1.1 400")
    assert _raw_post(base, cookie, "Transfer-Encoding: chunked\r\n").startswith(b"HTTP/1.1 411")
    assert _raw_post(base, cookie, "Content-Length: 100000\r\n").startswith(b"HTTP/1.1 413")
    assert api.jobs["job-low"]["state"] == "PENDING" and not api.sent
    # The server goes on serving
    assert httpx.get(base + "/t/vision/queue", cookies={board.cookie: board.token}).status_code == 200


def test_a_remote_host_needs_allow_remote() -> None:
    result = CliRunner().invoke(app, ["dashboard", "--host", "0.0.0.0", "--endpoint", "local"])
    assert result.exit_code == 2 and "--allow-remote" in result.output


def test_timeline_marks_preemptions_requeues_and_the_deadline() -> None:
    events = [
        {"t": 0.0, "from": "-", "to": "PENDING", "reason": "submitted", "kind": "submitted"},
        {"t": 5.0, "from": "PENDING", "to": "ADMITTED", "reason": "admitted", "kind": "admitted"},
        {"t": 6.0, "from": "ADMITTED", "to": "RUNNING", "reason": "running", "kind": "started"},
        {
            "t": 20.0,
            "from": "RUNNING",
            "to": "CHECKPOINTING",
            "reason": "preempted for job-x",
            "kind": "preemption",
        },
        {"t": 22.0, "from": "CHECKPOINTING", "to": "PREEMPTED", "reason": "preempted", "kind": "preemption"},
        {"t": 22.5, "from": "PREEMPTED", "to": "PENDING", "reason": "requeued", "kind": "requeue"},
        {"t": 30.0, "from": "RUNNING", "to": "INTERRUPTED", "reason": "host lost", "kind": "host-loss"},
    ]
    chart = str(svg.timeline(events, 40.0, deadline=60.0, checkpoints=[(15.0, 7)]))
    assert chart.count('data-kind="preemption"') == 2 and chart.count('data-kind="requeue"') == 1
    assert 'data-kind="deadline"' in chart and "checkpoint at step 7" in chart
    # The marker is the kind the control plane stamped, never guessed from the target state
    assert chart.count('data-kind="host-loss"') == 1 and 'data-kind="spot-warning"' not in chart
    assert svg.kind_of({"from": "PENDING", "to": "ADMITTED", "kind": "admitted"}) == "state"


def test_the_forecast_runs_the_months_pace_to_its_end() -> None:
    start, end, month = data.month_bounds(0.0)
    assert month == "1970-01" and end - start == 31 * 86400
    halfway = start + (end - start) / 2
    assert data.forecast({"dollars": 10.0}, start, end, halfway)["usd"] == pytest.approx(20.0)
    assert data.forecast({"forecast_usd": 7.0}, start, end, halfway)["usd"] == 7.0


def test_usage_series_is_cumulative_and_ends_at_the_ledgers_total() -> None:
    jobs = [job("a", "low", 0.0, "SUCCEEDED", started_at=100.0, finished_at=3700.0, runtime_s=3600.0)]
    series = data.usage_series(jobs, 0.0, 7200.0)
    assert series[-1][1] == pytest.approx(4.0)  # 4 GPUs for an hour
    assert [v for _, v in series] == sorted(v for _, v in series)
    assert data.scaled(series, 2.0)[-1][1] == pytest.approx(2.0)


def test_against_a_url_each_request_is_signed_with_sigv4(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """The AWS path: the endpoint comes from the CLI's `resolve`, so every request carries a SigV4
    Authorization header, and the team is the one the API names for the caller."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from spotline.cli.dashboard import endpoints

    seen: list[tuple[str, str]] = []

    class Api(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            return

        def do_GET(self) -> None:
            seen.append((self.path, self.headers.get("Authorization", "")))
            body = (
                {"team": "vision"} if self.path.startswith("/usage") else {"jobs": [job("job-a", "low", 1.0)]}
            )
            payload = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Api)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setenv("SPOTLINE_STATE_DIR", str(tmp_path / "none"))
    try:
        found = endpoints(f"http://127.0.0.1:{server.server_address[1]}", [], False, [])
        assert list(found) == ["vision"] and found["vision"].kind == "aws"
        assert [j["id"] for j in data.queue(found["vision"])["jobs"]] == ["job-a"]
    finally:
        server.shutdown()
    assert seen and all(auth.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/") for _, auth in seen)
    assert all("/eu-west-1/execute-api/" in auth for _, auth in seen)


def test_tied_jobs_are_ranked_as_the_scheduler_places_them_with_their_gpus() -> None:
    # Given three pending jobs of the same effective priority: the one submitted first was
    # requeued last (its enqueue time is the latest), two were submitted at the same moment
    api = FakeApi(
        [
            job("job-b", "normal", 10.0, submitted_at=NOW - 300, enqueued_at=NOW - 10, gpus=8, nodes=2),
            job("job-c", "normal", 10.0, submitted_at=NOW - 200, enqueued_at=NOW - 200),
            job("job-a", "normal", 10.0, submitted_at=NOW - 200, enqueued_at=NOW - 100),
        ]
    )
    # When the queue is drawn
    shown = data.queue(api)["jobs"]
    # Then # follows the scheduler's order (the planner's and explain's Position): earliest
    # submission first, then the id
    assert [(j["rank"], j["id"]) for j in shown] == [(1, "job-b"), (2, "job-a"), (3, "job-c")]
    board = Dashboard({"vision": api})
    html = board.render("queue.html", team="vision", view="queue", fragment=True, **data.queue(api))
    assert '<td class="num gpus">16<br><small>2 nodes</small></td>' in html


def test_the_deadline_field_starts_in_the_future() -> None:
    from datetime import datetime

    from spotline.cli.dashboard.server import suggested_deadline

    def epoch(text: str) -> float:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()

    now = 1_796_400_000.0
    assert epoch(suggested_deadline(None, now)) > now + 23 * 3600
    assert epoch(suggested_deadline(now - 60, now)) > now  # a deadline already past is not offered
    assert epoch(suggested_deadline(now + 7200, now)) == now + 7200  # a deadline ahead is kept
    assert suggested_deadline(None, now).endswith(":00:00Z")


def test_a_sweeps_pending_elements_are_one_row_that_expands() -> None:
    reason = "waiting: array arr-9 has max_running=1 elements running"
    elements = [
        job(f"arr-9-{i}", "normal", 5.0, array_id="arr-9", array_params={"lr": str(i)}, wait_reason=reason)
        for i in range(5)
    ]
    api = FakeApi([job("job-top", "high", 50.0), *elements])
    found = data.queue(api)
    assert [r.get("array_id") or r["job"]["id"] for r in found["rows"]] == ["job-top", "arr-9"]
    board = Dashboard({"vision": api})
    html = board.render("queue.html", team="vision", view="queue", fragment=True, **found)
    assert html.count(reason) == 1 and html.count('data-array="arr-9"') == 1
    assert "5 pending element(s)" in html and all(f'data-element="arr-9-{i}"' in html for i in range(5))
    assert "lr=3" in html


def test_the_team_page_shows_the_whole_month_with_the_pace_to_its_end() -> None:
    import re

    # Given a team with 2 GPU-hours so far, from a job that started a minute ago
    api = FakeApi([job("job-r", "normal", 1.0, state="RUNNING", started_at=NOW - 60, runtime_s=60.0)])
    board = Dashboard({"vision": api})
    template, values = board.page("vision", "team")
    html = board.render(template, team="vision", view="team", fragment=True, **values)
    # (the page reads the clock itself: compare against the instant it used, not the module's NOW)
    start, end, now = values["start"], values["end"], values["now"]
    assert (start, end) == data.month_bounds(now)[:2]
    # Then the axis runs from the month's first day to its last, not over the last minute
    ticks = re.findall(r'class="tick">(\d\d \w\w\w)</text>', html)
    assert ticks[0] == time.strftime("%d %b", time.gmtime(start))
    assert ticks[-1] == time.strftime("%d %b", time.gmtime(end))
    # And the rest of the month is drawn at the pace so far
    projected = data.projected(2.0, start, end, now)
    assert 'class="line projected"' in html and f"{projected:.3g} GPU-hours by month end" in html


def test_times_on_the_pages_are_utc_and_24_hour(monkeypatch: pytest.MonkeyPatch) -> None:
    from spotline.cli.dashboard.server import when

    monkeypatch.setenv("TZ", "America/Los_Angeles")  # whatever the machine's zone
    time.tzset()
    try:
        assert when("2026-01-02T15:04:05Z") == "2026-01-02 15:04 UTC"
        assert when(time.time()).endswith(" UTC") and "M" not in when(time.time())  # no AM/PM
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
