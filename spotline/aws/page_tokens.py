"""The `PageTokenStore` port on DynamoDB: pagination tokens sealed and opened as
`spotline.control.page_tokens` does, with the deployment's key kept in the Ledger table.

The signing key is 32 random bytes kept in the Ledger table under `PAGE_KEY_PK`. The first API
call of a deployment creates it with a conditional put (attribute_not_exists), so concurrent
first calls agree on one key; each process then caches it. The API function already reads and
writes the Ledger table, so no new grant is needed. The key protects the integrity of tokens,
not access: a page is always read with the caller's own team in the key condition, so even a
leaked key lets nobody read another team's jobs. Rotating it (delete the item) makes the tokens
in flight stale: their next page gets a 422 and the client starts again from the first page.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING

from spotline.aws.dynamo import serialize_item
from spotline.aws.errors import storage_errors
from spotline.control.errors import ConditionFailed
from spotline.control.page_tokens import TOKEN_TTL_S, SealedPages

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

PAGE_KEY_PK = "PAGE_TOKEN_KEY#v1"
__all__ = ["PAGE_KEY_PK", "TOKEN_TTL_S", "PageTokens"]


class PageTokens(SealedPages):
    """Pagination tokens sealed with the deployment's key, kept in the Ledger table (read once
    per process)."""

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
