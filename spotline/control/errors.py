"""Errors of the application services, on top of the storage errors of `spotline.aws.errors`
(which the API maps to status codes in one place)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spotline.aws.errors import SpotlineError


class InvalidRequest(SpotlineError):
    """Bad input: `errors` name the fields (pydantic's shape: loc, msg, type)."""

    def __init__(self, errors: Sequence[dict[str, Any]]) -> None:
        self.errors = list(errors)
        super().__init__("; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in self.errors))

    @classmethod
    def field(cls, name: str, message: str, kind: str = "value_error") -> InvalidRequest:
        return cls([{"loc": ["body", name], "msg": message, "type": kind}])


class Unauthorized(SpotlineError):
    """The caller's identity maps to no team."""


class Conflict(SpotlineError):
    """The job's state does not allow the request (e.g. cancelling a finished job)."""
