"""The dashboard's pages with many pending jobs: time to first render and page
weight, in Debian's chromium driven by Playwright, against the local control plane.

It starts the local plane in this process (or, with `--state-dir`, uses the one `spotline local up
--state-dir DIR` runs in its own process: the live local API as a user has it), submits `--jobs`
jobs of one team through the API (On-Demand only, so one runs and the rest wait), serves the
dashboard for that team, and loads each `--view` (the queue page by default) `--runs` times,
each in a fresh browser context (nothing cached). Reported, median of the runs:
- the server's answer: time to the first byte and the HTML's size;
- time to first contentful paint and to the load event (the browser's own timings);
- the page weight: every byte the page transferred by its load event (HTML, CSS, script), and
  what the explanations of the rows in view add (fetched as they come into view; counted up to
  a second after the load event).

    .venv/bin/python -m bench.dashboard_bench [--jobs 1000] [--runs 5]
    .venv/bin/spotline local up --state-dir /tmp/plane &      # then, once local.json is there:
    .venv/bin/python -m bench.dashboard_bench --state-dir /tmp/plane --jobs 1000 --runs 3 \
        --view queue --view running --view team --live-only   # --jobs 0 on the next runs

The explanations are counted on the queue page only (the other views fetch none).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from spotline.cli.client import pages
from spotline.cli.dashboard.server import Dashboard
from spotline.cli.http import LOCAL, Endpoint
from spotline.local.runtime import LocalConfig, LocalControlPlane

TEAM = "vision"


class Cached(Endpoint):
    """The endpoint, each GET answered from memory after its first answer: the dashboard's own
    time, without the API's."""

    def __init__(self, live: Endpoint) -> None:
        super().__init__(base_url=live.base_url, kind=live.kind, team=live.team, headers=live.headers)
        self.live = live
        self.answers: dict[str, str] = {}

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        key = json.dumps([method, path, kwargs.get("params")], sort_keys=True, default=str)
        if method != "GET":
            return self.live.request(method, path, **kwargs)
        if key not in self.answers:
            self.answers[key] = json.dumps(self.live.request(method, path, **kwargs))
        return json.loads(self.answers[key])


_PERF = """() => {
  const nav = performance.getEntriesByType('navigation')[0];
  const paint = performance.getEntriesByType('paint').find(p => p.name === 'first-contentful-paint');
  const resources = performance.getEntriesByType('resource');
  return {
    ttfb: nav.responseStart, fcp: paint ? paint.startTime : null, load: nav.loadEventEnd,
    html: nav.transferSize, resources: resources.map(r => [r.name, r.transferSize, r.startTime]),
  };
}"""


def _body(n: int) -> dict[str, Any]:
    return {
        "name": f"bench-{n}",
        "priority": ("low", "normal", "high")[n % 3],
        "gpus": 4,
        "image": "spotline/train:latest",
        "command": [sys.executable, "-c", "import time; time.sleep(600)"],
        "spot": "never",
        "expected_runtime_s": 600 + n,
    }


def _measure(
    browser: Any, endpoint: Endpoint, runs: int, view: str = "queue", explain: bool = True
) -> list[dict[str, Any]]:
    """Load the page of `view` `runs` times, each in a fresh context; the browser's timings.
    Without `explain`, the page's explain requests are stopped in the browser: each one replays
    the queue in the API, and those a run starts are still being answered when the next begins."""
    board = Dashboard({TEAM: endpoint}, refresh_s=3600)  # no refresh during a run
    server = board.serve("127.0.0.1", 0)
    server.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    rows: list[dict[str, Any]] = []
    try:
        for _ in range(runs):
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            context.add_cookies([{"name": "spotline_dashboard", "value": board.token, "url": base}])
            page = context.new_page()
            if not explain:
                page.route("**/explain", lambda route: route.abort())
            page.goto(f"{base}/t/{TEAM}/{view}", wait_until="load", timeout=600_000)
            pending = page.locator("#queue tbody tr").count()
            failed = page.locator("main#content[data-refresh=off]").count()  # the error page
            page.wait_for_timeout(1000)
            perf = page.evaluate(_PERF)
            later = [r for r in perf["resources"] if "/explain" in r[0]]
            by_load = [r for r in perf["resources"] if "/explain" not in r[0] and r[2] <= perf["load"]]
            rows.append(
                {
                    "pending": pending,
                    "error_pages": failed,
                    "ttfb_ms": perf["ttfb"],
                    "fcp_ms": perf["fcp"],
                    "load_ms": perf["load"],
                    "html_kb": perf["html"] / 1024,
                    "weight_kb": (perf["html"] + sum(r[1] for r in by_load)) / 1024,
                    "explain_kb": sum(r[1] for r in later) / 1024,
                    "explains": len(later),
                }
            )
            context.close()
    finally:
        server.shutdown()
    return rows


def _report(view: str, mode: str, rows: list[dict[str, Any]], runs: int, pending: int) -> None:
    def median(key: str) -> float:
        return statistics.median(float(r[key]) for r in rows)

    shown = f", {rows[0]['pending']} rows shown" if view == "queue" else ""
    errors = sum(r["error_pages"] for r in rows)
    print(f"{view} page, {pending} pending jobs{shown}, {mode}, {runs} runs (median):")
    if errors:
        print(f"  error pages               {errors} of {runs} runs (an API answer too slow or refused)")
    print(f"  time to first byte        {median('ttfb_ms'):8.0f} ms")
    print(f"  first contentful paint    {median('fcp_ms'):8.0f} ms")
    print(f"  load event                {median('load_ms'):8.0f} ms")
    print(f"  HTML transferred          {median('html_kb'):8.1f} KiB")
    print(f"  page weight at load       {median('weight_kb'):8.1f} KiB (HTML, CSS, script)")
    print(
        f"  explanations in view      {median('explain_kb'):8.1f} KiB"
        f" ({median('explains'):.0f} requests, by a second after load)"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--state-dir",
        type=Path,
        help="use the local plane `spotline local up --state-dir DIR` runs (its local.json), not one"
        " started here",
    )
    parser.add_argument(
        "--view", action="append", choices=("queue", "running", "team"), help="repeatable (default: queue)"
    )
    parser.add_argument(
        "--live-only", action="store_true", help="skip the runs with the API's answers cached"
    )
    parser.add_argument(
        "--no-explain",
        action="store_true",
        help="stop the queue page's explain requests (so a run leaves no work in the API for the next)",
    )
    args = parser.parse_args(argv)
    if args.jobs < (0 if args.state_dir else 1) or args.runs < 1:
        parser.error("--jobs (0 allowed with --state-dir) and --runs must be at least 1")
    if args.state_dir is not None and not (args.state_dir / "local.json").is_file():
        parser.error(f"--state-dir: no local.json in {args.state_dir} (is `spotline local up` running?)")
    views = args.view or ["queue"]
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("no system chromium: apt-get install chromium")
    from playwright.sync_api import sync_playwright

    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    with contextlib.ExitStack() as stack:
        if args.state_dir is not None:
            info = json.loads((args.state_dir / "local.json").read_text())
        else:
            plane = LocalControlPlane(
                LocalConfig(state_dir=Path(stack.enter_context(tempfile.TemporaryDirectory())))
            )
            info = plane.start()
            stack.callback(plane.stop)
        headers = info["teams"][TEAM]["headers"]
        api = httpx.Client(base_url=info["api_url"], timeout=60)
        jobs = args.jobs + (0 if args.state_dir else 1)  # one more runs (started here)
        began = time.perf_counter()
        with ThreadPoolExecutor(max_workers=4) as pool:
            codes = list(
                pool.map(lambda n: api.post("/jobs", json=_body(n), headers=headers).status_code, range(jobs))
            )
        assert all(c == 201 for c in codes), sorted(set(codes))
        print(f"submitted {len(codes)} jobs in {time.perf_counter() - began:.0f} s")
        endpoint = Endpoint(base_url=info["api_url"], kind=LOCAL, team=TEAM, headers=headers)
        endpoint.timeout_s = 60.0  # the dashboard's default --api-timeout
        pending = len(list(pages(endpoint, "/jobs", "jobs", {"state": "PENDING", "limit": 100})))
        with sync_playwright() as driver:
            browser = driver.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            for view in views:
                explain = not args.no_explain
                results[(view, "live API")] = _measure(browser, endpoint, args.runs, view, explain)
                if not args.live_only:
                    cached = Cached(endpoint)
                    _measure(browser, cached, 1, view, explain)  # fills the cache
                    results[(view, "API answers cached")] = _measure(
                        browser, cached, args.runs, view, explain
                    )
            browser.close()

    for (view, mode), rows in results.items():
        _report(view, mode, rows, args.runs, pending)


if __name__ == "__main__":
    main()
