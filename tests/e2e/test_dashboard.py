"""`spotline dashboard` in a real browser (Playwright with Debian's chromium) against the local
control plane, with jobs of two teams: the queue's order and reasons, its pages, a preemption on
the victim's timeline, a cancel from the page, one team's pages never showing the other's jobs,
and a request without the session token refused. Screenshots go to $SPOTLINE_DASHBOARD_SHOTS when it is set
(docs/images/dashboard holds the ones the docs show)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from spotline.cli.dashboard import data
from spotline.cli.dashboard.server import Dashboard, DashboardServer
from spotline.cli.http import LOCAL, Endpoint

from .conftest import running_plane, train_body, wait_for

pytestmark = pytest.mark.slow
playwright = pytest.importorskip("playwright.sync_api", reason="playwright is in the dev extras")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None:
    pytest.skip(
        "no system chromium (`apt-get install chromium`; .ci/run installs it)", allow_module_level=True
    )


class Plane:
    def __init__(self, info: dict[str, Any]) -> None:
        self.info = info
        self.api = httpx.Client(base_url=info["api_url"], timeout=30)

    def headers(self, team: str) -> dict[str, str]:
        return dict(self.info["teams"][team]["headers"])

    def submit(self, team: str, name: str, steps: int, priority: str, spot: str = "auto") -> str:
        body = train_body(name, steps, priority=priority, spot=spot)
        response = self.api.post("/jobs", json=body, headers=self.headers(team))
        assert response.status_code == 201, response.text
        return str(response.json()["id"])

    def job(self, team: str, job_id: str) -> dict[str, Any]:
        found: dict[str, Any] = self.api.get(f"/jobs/{job_id}", headers=self.headers(team)).json()
        return found

    def events(self, team: str, job_id: str) -> list[dict[str, Any]]:
        return list(self.api.get(f"/jobs/{job_id}/events", headers=self.headers(team)).json()["events"])


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Vision fills the cluster with three low jobs; an nlp critical job (On-Demand only) preempts
    the one on the On-Demand node; three nlp jobs of other classes then wait behind it (it runs
    five minutes, longer than the tests take)."""
    with running_plane(tmp_path_factory.mktemp("spotline")) as (_, info):
        plane = Plane(info)
        vision = [plane.submit("vision", f"vision-low-{i}", 700, "low") for i in range(3)]
        for job_id in vision:
            wait_for(plane.api, job_id, plane.headers("vision"), {"RUNNING"}, timeout_s=120)
        critical = plane.submit("nlp", "nlp-critical", 2000, "critical", spot="never")
        wait_for(plane.api, critical, plane.headers("nlp"), {"RUNNING"}, timeout_s=120)
        victim = next(j for j in vision if any(e["to"] == "PREEMPTED" for e in plane.events("vision", j)))
        # Behind the critical job, each On-Demand only: they wait (nothing below them to preempt).
        queued = {p: plane.submit("nlp", f"nlp-{p}", 50, p, spot="never") for p in ("low", "high", "normal")}
        endpoints = {
            team: Endpoint(base_url=info["api_url"], kind=LOCAL, team=team, headers=plane.headers(team))
            for team in ("vision", "nlp")
        }
        board = Dashboard(endpoints, refresh_s=1.0)
        server: DashboardServer = board.serve("127.0.0.1", 0)
        server.start()
        base = f"http://127.0.0.1:{server.server_address[1]}"
        try:
            yield {
                "plane": plane,
                "board": board,
                "base": base,
                "vision": vision,
                "victim": victim,
                "critical": critical,
                "queued": queued,
            }
        finally:
            server.shutdown()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright.sync_playwright() as driver:
        launched = driver.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Any, world: dict[str, Any]) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    # The URL the CLI prints: the token sets the cookie and is dropped from the address bar.
    tab.goto(f"{world['base']}/?token={world['board'].token}")
    assert "token=" not in tab.url
    try:
        yield tab
    finally:
        context.close()


def shot(tab: Any, name: str) -> None:
    folder = os.environ.get("SPOTLINE_DASHBOARD_SHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        tab.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)


def test_the_queue_shows_the_order_and_the_reasons(page: Any, world: dict[str, Any]) -> None:
    page.goto(f"{world['base']}/t/nlp/queue")
    rows = page.locator("#queue tbody tr")
    queued = world["queued"]
    ids = [rows.nth(i).get_attribute("data-job") for i in range(rows.count())]
    assert ids == [queued["high"], queued["normal"], queued["low"]]
    # Each row's one reason, dated by the pass that decided it, and the explanation filled in as
    # the row comes into view.
    for i in range(3):
        row = rows.nth(i)
        why = row.locator("td.why").inner_text()
        assert "waiting" in why and "as of the pass at" in why
        playwright.expect(row.locator("td.position")).to_contain_text(" of ", timeout=15000)
        playwright.expect(row.locator("td.start")).not_to_have_text("…", timeout=15000)
    positions = [int(rows.nth(i).locator("td.position").inner_text().split(" of ")[0]) for i in range(3)]
    assert positions == sorted(positions)  # the scheduler's order agrees with the page's
    shot(page, "queue")


def test_a_long_queue_shows_its_first_page_and_links_the_next(
    page: Any, world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given pages of two jobs (the API's largest is 100: three queued jobs make two pages here)
    monkeypatch.setattr(data, "PAGE", 2)
    queued = world["queued"]

    # When the queue opens: the API's first page, the two newest, by effective priority
    page.goto(f"{world['base']}/t/nlp/queue")
    rows = page.locator("#queue tbody tr")
    assert [rows.nth(i).get_attribute("data-job") for i in range(rows.count())] == [
        queued["high"],
        queued["normal"],
    ]
    assert page.locator("#first-page").count() == 0

    # Then its link opens the next page (the API's token in the URL): the older job, and a link back
    page.click("#next-page")
    page.wait_for_url("**/t/nlp/queue?page=*")
    playwright.expect(rows).to_have_count(1)
    assert rows.first.get_attribute("data-job") == queued["low"]
    assert page.locator("#next-page").count() == 0
    page.wait_for_timeout(2500)  # a refresh or two (every second here) keeps this page
    assert [rows.nth(i).get_attribute("data-job") for i in range(rows.count())] == [queued["low"]]
    page.click("#first-page")
    playwright.expect(rows).to_have_count(2)


def test_a_preemption_appears_on_the_victims_timeline(page: Any, world: dict[str, Any]) -> None:
    page.goto(f"{world['base']}/t/vision/jobs/{world['victim']}")
    marker = page.locator("svg.timeline .marker.preemption")
    assert marker.count() >= 1
    assert world["critical"] in marker.first.locator("title").text_content()
    assert page.locator("#events tr[data-kind=preemption]").count() >= 1
    shot(page, "job")


def test_a_cancel_from_the_page_cancels_the_job(page: Any, world: dict[str, Any]) -> None:
    job_id = world["queued"]["low"]
    page.goto(f"{world['base']}/t/nlp/jobs/{job_id}")
    dialogs: list[str] = []

    def accept(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.accept()

    page.on("dialog", accept)
    page.click("#cancel")
    playwright.expect(page.locator("#flash")).to_contain_text("cancel: done", timeout=15000)
    assert dialogs and job_id in dialogs[0]  # it asked first
    assert world["plane"].job("nlp", job_id)["state"] == "CANCELLED"
    playwright.expect(page.locator("h1 .state")).to_have_text("CANCELLED", timeout=15000)


def test_a_team_never_sees_the_other_teams_jobs(page: Any, world: dict[str, Any]) -> None:
    nlp_ids = [world["critical"], *world["queued"].values()]
    for view in ("queue", "running", "team"):
        page.goto(f"{world['base']}/t/vision/{view}")
        page.wait_for_timeout(1500)  # let the lazy explanations and a refresh land
        html = page.content()
        assert not [j for j in nlp_ids if j in html], view
        assert "nlp-" not in page.locator("main").inner_text()
        if view != "queue":
            shot(page, view)
    # Another team's job through this team's pages is the API's 404, not the job.
    response = page.goto(f"{world['base']}/t/vision/jobs/{world['critical']}")
    assert (
        response.status == 404
        and world["critical"] not in page.locator("main").inner_text().split("refused")[0]
    )
    # A dashboard for nlp alone has no vision pages at all.
    single = Dashboard({"nlp": world["board"].endpoints["nlp"]})
    server = single.serve("127.0.0.1", 0)
    server.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        page.goto(f"{base}/?token={single.token}")
        assert page.goto(f"{base}/t/vision/queue").status == 404
        page.goto(f"{base}/t/nlp/running")
        assert not [j for j in world["vision"] if j in page.content()]
    finally:
        server.shutdown()


def test_a_request_without_the_token_is_refused(browser: Any, world: dict[str, Any]) -> None:
    context = browser.new_context()
    try:
        tab = context.new_page()
        for path in ("/", "/t/nlp/queue", f"/t/nlp/jobs/{world['critical']}", "/static/dashboard.js"):
            assert tab.goto(world["base"] + path).status == 403, path
        assert tab.goto(world["base"] + "/?token=wrong").status == 403
    finally:
        context.close()
    # With the cookie but without the CSRF token, an action is refused and nothing changes.
    cookies = {world["board"].cookie: world["board"].token}
    job_id = world["queued"]["high"]
    answer = httpx.post(f"{world['base']}/t/nlp/jobs/{job_id}/cancel", cookies=cookies, data={})
    assert answer.status_code == 403
    assert world["plane"].job("nlp", job_id)["state"] != "CANCELLED"
