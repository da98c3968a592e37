"""Pagination tokens that the API alone can mint: opaque, signed, and bound to the query.

A token carries the store's position of the next page (the repository's own token) and when it
was issued, signed with HMAC-SHA256 over the payload *and* the query it continues: the team, the
route and its parameters (state filter, limit, job id). A token that was altered, forged, issued
for another team or another query, or older than `TOKEN_TTL_S`, is refused (`InvalidPageToken`,
which the API answers with 422 naming `next_token`), and never reaches the store as a position.

`SealedPages` does the sealing; a `PageTokenStore` adds where the deployment's key is kept
(`spotline.aws.page_tokens` on DynamoDB, `spotline.control.memory` in memory).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

from spotline.control.errors import InvalidPageToken

# A token older than this is stale (a listing is paged through in minutes, not days).
TOKEN_TTL_S = 24 * 3600.0


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class SealedPages(ABC):
    """Seals and opens pagination tokens with the deployment's key (`key`)."""

    @abstractmethod
    def key(self) -> bytes:
        """The deployment's signing key (32 random bytes, the same for every process)."""

    def _mac(self, payload: str, binding: Mapping[str, Any]) -> str:
        bound = json.dumps(dict(binding), sort_keys=True, separators=(",", ":"))
        return _b64(hmac.new(self.key(), f"{payload}\n{bound}".encode(), hashlib.sha256).digest())

    def seal(self, position: str | None, binding: Mapping[str, Any], *, now: float) -> str | None:
        """The token for the page after `position` (None: there is no next page)."""
        if position is None:
            return None
        payload = _b64(json.dumps({"p": position, "t": round(now, 3)}, separators=(",", ":")).encode())
        return f"{payload}.{self._mac(payload, binding)}"

    def open(self, token: str | None, binding: Mapping[str, Any], *, now: float) -> str | None:
        """The position a token sealed for this `binding` (InvalidPageToken otherwise)."""
        if not token:
            return None
        payload, dot, mac = token.partition(".")
        if not dot or not payload or not mac:
            raise InvalidPageToken("not a token this API issued")
        if not hmac.compare_digest(mac.encode(), self._mac(payload, binding).encode()):
            raise InvalidPageToken(
                "not a token this API issued for this query (it was altered, or it belongs to another"
                " team, filter or limit)"
            )
        try:
            data = json.loads(_unb64(payload))
            position, issued = data["p"], float(data["t"])
        except (ValueError, KeyError, TypeError, binascii.Error) as error:
            raise InvalidPageToken("not a token this API issued") from error
        if not isinstance(position, str):
            raise InvalidPageToken("not a token this API issued")
        if now - issued > TOKEN_TTL_S:
            raise InvalidPageToken("expired: list again from the first page")
        return position
