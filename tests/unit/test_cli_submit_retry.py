"""`spotline submit` sends an Idempotency-Key and resends it on a failure that may not be the
server's last word (no answer, a 5xx), never on a refusal (4xx)."""

from __future__ import annotations

from typing import Any

import pytest

from spotline.cli.client import post_idempotent
from spotline.cli.http import ClientError


class FlakyApi:
    def __init__(self, failures: list[ClientError]) -> None:
        self.failures = failures
        self.sent: list[dict[str, str]] = []

    def request(self, method: str, path: str, *, body: Any = None, headers: dict[str, str]) -> Any:
        self.sent.append(dict(headers))
        if self.failures:
            raise self.failures.pop(0)
        return {"id": "job-1"}


def test_a_timeout_and_a_503_are_retried_with_the_same_key() -> None:
    api = FlakyApi([ClientError("cannot reach"), ClientError("refused (503)", status=503)])
    assert post_idempotent(api, "/jobs", {"name": "x"}, "k-1", pause_s=0) == {"id": "job-1"}
    assert [h["Idempotency-Key"] for h in api.sent] == ["k-1", "k-1", "k-1"]


def test_a_refusal_is_not_retried() -> None:
    api = FlakyApi([ClientError("refused (422)", status=422)])
    with pytest.raises(ClientError):
        post_idempotent(api, "/jobs", {}, "k-2", pause_s=0)
    assert len(api.sent) == 1


def test_it_gives_up_after_the_attempts() -> None:
    api = FlakyApi([ClientError("refused (502)", status=502) for _ in range(5)])
    with pytest.raises(ClientError, match="502"):
        post_idempotent(api, "/jobs", {}, "k-3", attempts=3, pause_s=0)
    assert len(api.sent) == 3
