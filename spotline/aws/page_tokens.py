"""Pagination tokens that the API alone can mint: opaque, signed, and bound to the query.

A token carries the DynamoDB position of the next page (the repository's own token) and when it
was issued, signed with HMAC-SHA256 over the payload *and* the query it continues: the team, the
route and its parameters (state filter, limit, job id). A token that was altered, forged, issued
for another team or another query, or older than `TOKEN_TTL_S`, is refused (`InvalidPageToken`,
which the API answers with 422 naming `next_token`), and never reaches DynamoDB as an
ExclusiveStartKey.

The signing key is 32 random bytes kept in the Ledger table under `PAGE_KEY_PK`. The first API
call of a deployment creates it with a conditional put (attribute_not_exists), so concurrent
first calls agree on one key; each process then caches it. The API function already reads and
writes the Ledger table, so no new grant is needed. The key protects the integrity of tokens,
not access: a page is always read with the caller's own team in the key condition, so even a
leaked key lets nobody read another team's jobs. Rotating it (delete the item) makes the tokens
in flight stale: their next page gets a 422 and the client starts again from the first page.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from spotline.aws.dynamo import serialize_item
from spotline.aws.errors import storage_errors
from spotline.control.errors import ConditionFailed, InvalidPageToken

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

PAGE_KEY_PK = "PAGE_TOKEN_KEY#v1"
# A token older than this is stale (a listing is paged through in minutes, not days).
TOKEN_TTL_S = 24 * 3600.0


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class PageTokens:
    """Seals and opens pagination tokens with the deployment's key (read once per process)."""

    def __init__(self, client: DynamoDBClient, table_name: str) -> None:
        self.client = client
        self.table_name = table_name
        self._key: bytes | None = None

    def key(self) -> bytes:
        if self._key is None:
            self._key = self._read_key() or self._create_key()
        return self._key

    def _read_key(self) -> bytes | None:
        with storage_errors():
            item = self.client.get_item(
                TableName=self.table_name, Key=serialize_item({"pk": PAGE_KEY_PK}), ConsistentRead=True
            ).get("Item")
        return None if item is None else bytes(item["key"]["B"])

    def _create_key(self) -> bytes:
        key = secrets.token_bytes(32)
        try:
            with storage_errors():
                self.client.put_item(
                    TableName=self.table_name,
                    Item={"pk": {"S": PAGE_KEY_PK}, "key": {"B": key}},
                    ConditionExpression="attribute_not_exists(pk)",
                )
        except ConditionFailed:
            found = self._read_key()  # another process created it first: use theirs
            if found is None:
                raise
            return found
        return key

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
