"""`--since` of the history commands: a span back from now, or an ISO date or time (UTC)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from spotline.cli.http import ClientError
from spotline.cli.since import since_iso

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("7d", "2026-11-28T12:00:00Z"),
        ("24h", "2026-12-04T12:00:00Z"),
        ("30m", "2026-12-05T11:30:00Z"),
        ("2w", "2026-11-21T12:00:00Z"),
        ("2026-12-01", "2026-12-01T00:00:00Z"),
        ("2026-12-01T06:30:00+02:00", "2026-12-01T04:30:00Z"),
    ],
)
def test_a_span_or_a_time_is_an_iso_utc_time(given: str, expected: str) -> None:
    assert since_iso(given, NOW) == expected


def test_anything_else_is_a_usage_error_naming_the_option() -> None:
    with pytest.raises(ClientError) as refused:
        since_iso("last week", NOW)
    assert refused.value.exit_code == 2 and "--since" in str(refused.value)
