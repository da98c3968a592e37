"""The dashboard's web server: the standard library's threading HTTP server, Jinja2 pages.

Security (docs/dashboard.md):
- Every request must carry the session token: `?token=` in the URL the CLI prints (the first
  visit sets it as an HttpOnly, SameSite=Strict cookie and redirects to drop it from the URL), or
  that cookie. Anything else gets 403. The cookie's name carries the port (`cookie_name`):
  browsers key cookies by host, not port, so two dashboards on one machine would otherwise
  overwrite each other's.
- The Host header must name the address served (a DNS-rebinding page gets 403); on a wildcard
  address (`--host 0.0.0.0`), also this machine's names and the address a request came in on.
- A POST's body must have a Content-Length from 0 to 64 KiB (else 400, 411 or 413).
- Actions are POSTs carrying the page's CSRF token (a second random value, never in a URL), from
  the same origin. They call the API as the CLI does, so its refusals are shown as they are.
- The team's credentials stay in this process: pages carry job data, never a key or a signature.
"""

from __future__ import annotations

import hmac
import json
import re
import secrets
import socket
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from http import HTTPStatus
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import jinja2

from spotline.cli.client import PRIORITIES
from spotline.cli.dashboard import data, svg
from spotline.cli.http import ClientError, Endpoint

COOKIE_PREFIX = "spotline_dashboard"
# The most an action's form may take.
MAX_FORM_BYTES = 65536
WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", ""})


def cookie_name(port: int) -> str:
    """The session cookie of the dashboard on `port` (cookies ignore ports: one name each)."""
    return f"{COOKIE_PREFIX}_{port}"


def machine_names() -> set[str]:
    """This machine's own names and the addresses they resolve to (for a wildcard bind)."""
    names = {socket.gethostname(), socket.getfqdn()}
    for name in list(names):
        try:
            infos = socket.getaddrinfo(name, None)
        except OSError:
            continue
        names |= {str(info[4][0]) for info in infos}
    return {n for n in names if n}


def host_header(name: str, port: int) -> str:
    """The Host header a browser sends for `name` (an IPv6 address in brackets) and `port`."""
    return f"[{name}]:{port}" if ":" in name and not name.startswith("[") else f"{name}:{port}"


STATIC = {"dashboard.js": "text/javascript", "dashboard.css": "text/css"}
_JOB = r"(?P<job>[A-Za-z0-9._-]{1,64})"
_TEAM = r"/t/(?P<team>[A-Za-z0-9._-]{1,64})"


class Dashboard:
    """The teams the dashboard may show (each with its own endpoint), its tokens and its pages."""

    def __init__(self, endpoints: Mapping[str, Endpoint], *, refresh_s: float = 5.0) -> None:
        if not endpoints:
            raise ValueError("the dashboard needs at least one team")
        self.endpoints = dict(endpoints)
        self.token = secrets.token_urlsafe(32)
        self.csrf = secrets.token_urlsafe(32)
        self.refresh_s = refresh_s
        self.allowed_hosts: set[str] = set()
        self.cookie = COOKIE_PREFIX
        # Bound to a wildcard address: a request may also name the address it came in on.
        self.wildcard = False
        loader = jinja2.PackageLoader("spotline.cli.dashboard", "templates")
        # A field an older (or newer) API lacks renders as nothing, not as an error page.
        self.env = jinja2.Environment(loader=loader, autoescape=True)
        self.env.filters.update(ago=ago, duration=duration, when=when, pct=pct, usd=usd)
        self.env.globals.update(priorities=PRIORITIES, refresh_s=refresh_s)

    def render(self, template: str, **values: Any) -> str:
        values.setdefault("now", time.time())
        return self.env.get_template(template).render(teams=sorted(self.endpoints), csrf=self.csrf, **values)

    def serve(self, host: str, port: int) -> DashboardServer:
        server = DashboardServer((host, port), self)
        bound = server.server_address[1]
        names = {"127.0.0.1", "localhost", "::1", host}
        self.wildcard = host in WILDCARD_HOSTS
        if self.wildcard:
            names |= machine_names()
        self.allowed_hosts = {host_header(name, bound) for name in names if name}
        self.cookie = cookie_name(bound)
        return server

    # --- the pages -------------------------------------------------------------------------

    def page(
        self,
        team: str,
        view: str,
        job_id: str | None = None,
        page: str | None = None,
        query: Mapping[str, str] | None = None,
    ) -> tuple[str, dict[str, Any]]:
        """The template and values of one view of one team (`page`: the API's page token of the
        queue's or the history's page to show, None for its first; `query`: the history's
        filters, `state` and `since`)."""
        api = self.endpoints[team]
        if view == "history":
            filters = query or {}
            return "history.html", data.history(api, filters.get("state"), filters.get("since"), page)
        if view == "queue":
            return "queue.html", data.queue(api, page)
        if view == "running":
            return "running.html", {"jobs": data.running(api)}
        if view == "pools":
            return "pools.html", data.pools(api)
        if view == "team":
            month = data.team(api)
            usage = month["usage"]
            gpu_hours = float(usage.get("gpu_hours") or 0.0)
            price = float(usage.get("dollars") or 0.0) / gpu_hours if gpu_hours else None
            quota = usage.get("quota_gpu_hours")
            # The whole month on the axis: the GPU-hours so far, then dashed at their pace to its end.
            chart = svg.usage_chart(
                month["series"],
                month["start"],
                month["end"],
                quota_gpu_hours=float(quota) if isinstance(quota, int | float) else None,
                budget_usd=(usage.get("budget") or {}).get("budget_usd"),
                dollars_per_gpu_hour=price,
                projected_gpu_hours=data.projected(gpu_hours, month["start"], month["end"], month["now"]),
            )
            return "team.html", {**month, "chart": chart}
        assert job_id is not None
        found = data.job(api, job_id)
        job = found["job"]
        checkpoints = []
        if (job.get("last_checkpoint") or {}).get("at"):
            checkpoints.append((job["last_checkpoint"]["at"], job["last_checkpoint"].get("step")))
        deadline = _epoch(job.get("deadline"))
        chart = svg.timeline(found["events"], time.time(), deadline=deadline, checkpoints=checkpoints)
        kinds = [svg.kind_of(e) for e in found["events"]]
        suggested = suggested_deadline(deadline, time.time())
        return "job.html", {**found, "chart": chart, "kinds": kinds, "suggested_deadline": suggested}

    def act(self, team: str, job_id: str, action: str, form: Mapping[str, str]) -> dict[str, Any]:
        """Cancel, or change the priority or deadline, as the CLI's commands do."""
        api = self.endpoints[team]
        path = f"/jobs/{job_id}"
        if action == "cancel":
            result: dict[str, Any] = api.request("DELETE", path)
            return result
        if action == "priority":
            value = form.get("priority", "")
            if value not in PRIORITIES:
                raise ClientError(f"priority: {value!r} is not one of {', '.join(PRIORITIES)}", status=422)
            result = api.request("PATCH", path, body={"priority": value})
            return result
        if action == "deadline":
            value = form.get("deadline", "").strip()
            parsed = _parse_deadline(value)
            result = api.request("PATCH", path, body={"deadline": parsed})
            return result
        raise ClientError(f"no action {action!r}", status=404)


def suggested_deadline(current: float | None, now: float) -> str:
    """What the deadline field starts with: the job's deadline while it is ahead, else a day
    from now on the hour (never a time already past), ISO-8601 UTC."""
    at = current if current is not None and current > now else (now // 3600 + 25) * 3600
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_deadline(value: str) -> str:
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ClientError(f"deadline: {value!r} is not an ISO-8601 time", status=422) from None
    if parsed.tzinfo is None:
        raise ClientError(f"deadline: {value!r} has no zone (add Z or +HH:MM)", status=422)
    return parsed.isoformat()


def _epoch(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


# --- filters ---------------------------------------------------------------------------------


def duration(seconds: Any) -> str:
    if not isinstance(seconds, int | float):
        return "—"
    seconds = max(0.0, float(seconds))
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def ago(epoch: Any) -> str:
    return "—" if not isinstance(epoch, int | float) else duration(time.time() - epoch) + " ago"


def when(value: Any) -> str:
    """An ISO time or epoch seconds, as `HH:MM:SS UTC` (today) or `YYYY-MM-DD HH:MM UTC`."""
    epoch = value if isinstance(value, int | float) else _epoch(value)
    if epoch is None:
        return "—"
    moment = datetime.fromtimestamp(epoch, UTC)  # one zone everywhere: UTC, 24-hour
    today = datetime.now(UTC).date() == moment.date()
    return moment.strftime("%H:%M:%S UTC" if today else "%Y-%m-%d %H:%M UTC")


def pct(value: Any) -> str:
    return "—" if not isinstance(value, int | float) else f"{100 * value:.0f}%"


def usd(value: Any) -> str:
    return "—" if not isinstance(value, int | float) else f"${value:,.2f}"


# --- HTTP ------------------------------------------------------------------------------------

ROUTES: list[tuple[str, re.Pattern[str], str]] = [
    ("GET", re.compile(rf"^{_TEAM}/?$"), "queue"),
    ("GET", re.compile(rf"^{_TEAM}/(?P<view>queue|running|team|pools|history)$"), "view"),
    ("GET", re.compile(rf"^{_TEAM}/jobs/{_JOB}$"), "job"),
    ("GET", re.compile(rf"^{_TEAM}/jobs/{_JOB}/explain$"), "explain"),
    ("POST", re.compile(rf"^{_TEAM}/jobs/{_JOB}/(?P<action>cancel|priority|deadline)$"), "act"),
]


class DashboardServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], dashboard: Dashboard) -> None:
        self.dashboard = dashboard
        super().__init__(address, Handler)

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, name="spotline-dashboard", daemon=True)
        thread.start()
        return thread


class Handler(BaseHTTPRequestHandler):
    server: DashboardServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the CLI prints the URL only
        return

    @property
    def dash(self) -> Dashboard:
        return self.server.dashboard

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def _serve(self, method: str) -> None:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        if not self._host_allowed(self.headers.get("Host", "")):
            return self._send(HTTPStatus.FORBIDDEN, "forbidden: unexpected Host header\n", "text/plain")
        given = query.get("token")
        if given is not None and hmac.compare_digest(given.encode(), self.dash.token.encode()):
            # The first visit: keep the token in a cookie, and drop it from the address bar.
            rest = urlencode({k: v for k, v in query.items() if k != "token"})
            target = (url.path or "/") + (f"?{rest}" if rest else "")
            cookie = f"{self.dash.cookie}={self.dash.token}; HttpOnly; SameSite=Strict; Path=/"
            return self._send(
                HTTPStatus.SEE_OTHER, "", "text/plain", {"Location": target, "Set-Cookie": cookie}
            )
        if not self._has_cookie():
            return self._send(
                HTTPStatus.FORBIDDEN,
                "forbidden: open the URL `spotline dashboard` printed (it carries the session token)\n",
                "text/plain",
            )
        if method == "GET" and url.path.startswith("/static/"):
            return self._static(url.path.removeprefix("/static/"))
        if method == "GET" and url.path in ("", "/"):
            first = sorted(self.dash.endpoints)[0]
            return self._send(HTTPStatus.SEE_OTHER, "", "text/plain", {"Location": f"/t/{first}/queue"})
        for verb, pattern, name in ROUTES:
            match = pattern.match(url.path)
            if match and verb == method:
                params = match.groupdict()
                if params["team"] not in self.dash.endpoints:
                    return self._send(HTTPStatus.NOT_FOUND, "not found: no such team here\n", "text/plain")
                return self._route(name, params, query)
        return self._send(HTTPStatus.NOT_FOUND, "not found\n", "text/plain")

    def _host_allowed(self, host: str) -> bool:
        """The Host header names the address served: loopback, the one `--host` gave, and on a
        wildcard bind this machine's names and the address this connection came in on (a
        DNS-rebinding page names its own domain, which is none of these)."""
        if host in self.dash.allowed_hosts:
            return True
        if not self.dash.wildcard:
            return False
        arrived = str(self.connection.getsockname()[0]).removeprefix("::ffff:")
        return host == host_header(arrived, self.server.server_address[1])

    def _has_cookie(self) -> bool:
        jar = SimpleCookie()
        try:
            jar.load(self.headers.get("Cookie", ""))
        except Exception:  # a malformed Cookie header: no token
            return False
        morsel = jar.get(self.dash.cookie)
        return morsel is not None and hmac.compare_digest(morsel.value.encode(), self.dash.token.encode())

    def _route(self, name: str, params: dict[str, str], query: dict[str, str]) -> None:
        team = params["team"]
        fragment = query.get("fragment") == "1"
        try:
            if name == "act":
                return self._act(team, params["job"], params["action"])
            if name == "explain":
                found = data.explain(self.dash.endpoints[team], params["job"])
                html = self.dash.render("explain_cells.html", team=team, why=found)
                return self._send(HTTPStatus.OK, html, "text/html; charset=utf-8")
            view = params.get("view", "job" if name == "job" else "queue")
            # `?page=`: the API's own page token, passed back to it as is (it refuses a bad one).
            template, values = self.dash.page(team, view, params.get("job"), query.get("page") or None, query)
            html = self.dash.render(template, team=team, view=view, fragment=fragment, **values)
        except ClientError as error:
            status = (
                HTTPStatus(error.status) if error.status in (403, 404, 409, 422) else HTTPStatus.BAD_GATEWAY
            )
            html = self.dash.render(
                "error.html", team=team, view="error", message=str(error), fragment=fragment
            )
            return self._send(status, html, "text/html; charset=utf-8")
        except Exception as error:  # a page that cannot be drawn: say what, keep serving
            message = f"this page could not be drawn: {type(error).__name__}: {error}"
            html = self.dash.render("error.html", team=team, view="error", message=message, fragment=fragment)
            return self._send(HTTPStatus.INTERNAL_SERVER_ERROR, html, "text/html; charset=utf-8")
        self._send(HTTPStatus.OK, html, "text/html; charset=utf-8")

    def _act(self, team: str, job_id: str, action: str) -> None:
        length = self._body_length()
        if length is None:
            return None
        if length > MAX_FORM_BYTES:
            self.close_connection = True  # its body is left unread
            return self._send(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "body too large\n", "text/plain")
        form = {k: v[-1] for k, v in parse_qs(self.rfile.read(length).decode("utf-8", "replace")).items()}
        origin = self.headers.get("Origin")
        sent = form.get("csrf", self.headers.get("X-CSRF-Token", ""))
        if (origin is not None and not self._host_allowed(urlsplit(origin).netloc)) or not (
            hmac.compare_digest(sent.encode(), self.dash.csrf.encode())
        ):
            return self._json(HTTPStatus.FORBIDDEN, {"ok": False, "message": "forbidden: bad CSRF token"})
        try:
            job = self.dash.act(team, job_id, action, form)
        except ClientError as error:
            status = error.status if error.status and 400 <= error.status < 500 else 502
            return self._json(HTTPStatus(status), {"ok": False, "message": str(error)})
        return self._json(
            HTTPStatus.OK, {"ok": True, "message": f"{action}: done", "state": job.get("state")}
        )

    def _body_length(self) -> int | None:
        """The body's length from Content-Length, or None once a 400 or 411 is sent (the body is
        not read, and the connection closes: there is no telling where a next request starts).
        A negative length would make `rfile.read` wait for the client to close."""
        if self.headers.get("Transfer-Encoding") is not None:
            self.close_connection = True
            self._json(HTTPStatus.LENGTH_REQUIRED, {"ok": False, "message": "send a Content-Length"})
            return None
        given = (self.headers.get("Content-Length") or "0").strip()
        if not given.isdigit():
            self.close_connection = True
            self._json(HTTPStatus.BAD_REQUEST, {"ok": False, "message": f"bad Content-Length {given[:20]!r}"})
            return None
        return int(given)

    def _static(self, name: str) -> None:
        if name not in STATIC:
            return self._send(HTTPStatus.NOT_FOUND, "not found\n", "text/plain")
        body = resources.files("spotline.cli.dashboard").joinpath("static", name).read_text()
        self._send(HTTPStatus.OK, body, STATIC[name], {"Cache-Control": "max-age=3600"})

    def _json(self, status: HTTPStatus, body: dict[str, Any]) -> None:
        self._send(status, json.dumps(body), "application/json")

    def _send(
        self, status: HTTPStatus, body: str, content_type: str, headers: Mapping[str, str] | None = None
    ) -> None:
        payload = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("X-Frame-Options", "DENY")
        self.send_header(
            "Content-Security-Policy",
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self';"
            " frame-ancestors 'none'",
        )
        if "Cache-Control" not in (headers or {}):
            self.send_header("Cache-Control", "no-store")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        try:
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):  # the page moved on before the answer
            self.close_connection = True
