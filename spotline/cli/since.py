"""`--since`, as the history commands read it: a span back from now or an ISO date or time."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from spotline.cli.http import EXIT_USAGE, ClientError

_SPAN = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def since_iso(value: str, now: datetime | None = None) -> str:
    """`--since` as an ISO-8601 UTC time: a span back from now (30m, 24h, 7d, 2w) or an ISO date
    or time (a date is its midnight UTC; a time without a zone is UTC)."""
    now = now or datetime.now(UTC)
    text = value.strip()
    span = _SPAN.match(text)
    if span:
        moment = now - timedelta(seconds=float(span.group(1)) * _UNIT_S[span.group(2)])
    else:
        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise ClientError(
                f"--since: {value!r} is neither a span (30m, 24h, 7d, 2w) nor an ISO date or time", EXIT_USAGE
            ) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
