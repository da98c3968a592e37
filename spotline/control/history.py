"""`GET /history`: a team's finished jobs, the latest to end first, by state and end time.

Read through the `finished` index (one Query a page), never a scan, and never on the scheduling
path. The page token is signed and bound to the team and the filters, as `GET /jobs`' is."""

from __future__ import annotations

from datetime import datetime

from spotline.control.errors import InvalidRequest, Unauthorized
from spotline.control.items import FINAL_STATES
from spotline.control.jobs import _open_token
from spotline.control.plane import ControlPlane
from spotline.control.records import JobRecord
from spotline.domain import JobState


def parse_since(value: str | None) -> float | None:
    """An ISO-8601 time with a zone as epoch seconds; a 422 naming `since` otherwise."""
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise InvalidRequest(
            [
                {
                    "loc": ["query", "since"],
                    "msg": f"{value!r} is not an ISO-8601 time with a zone (e.g. 2026-12-01T00:00:00Z)",
                    "type": "value_error",
                }
            ]
        )
    return moment.timestamp()


def finished_jobs(
    cp: ControlPlane,
    caller: str,
    *,
    team: str | None = None,
    state: JobState | None = None,
    since: str | None = None,
    limit: int = 50,
    next_token: str | None = None,
) -> tuple[list[JobRecord], str | None]:
    """One page of the caller's team's finished jobs (`team`, if given, must be the caller's)."""
    if team is not None and team != caller:
        raise Unauthorized(f"team {caller} may read only its own history (ask as {team} to see {team}'s)")
    if state is not None and state not in FINAL_STATES:
        finals = ", ".join(sorted(s.value for s in FINAL_STATES))
        raise InvalidRequest(
            [
                {
                    "loc": ["query", "state"],
                    "msg": f"{state.value} is not a finished state (one of {finals})",
                    "type": "value_error",
                }
            ]
        )
    after = parse_since(since)
    binding = {
        "route": "history",
        "team": caller,
        "state": None if state is None else state.value,
        "since": after,
        "limit": limit,
    }
    now = cp.clock()
    position = _open_token(cp, next_token, binding, now)
    records, following = cp.jobs.list_finished(
        caller, since=after, state=state, limit=limit, next_token=position
    )
    return records, cp.pages.seal(following, binding, now=now)
