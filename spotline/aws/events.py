"""Spotline's events onto its EventBridge bus: the `EventSink` port (`spotline.control.ports`)
over PutEvents. What is published, and when, is `spotline.control.publisher`'s."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from spotline.control.errors import PublishFailed

if TYPE_CHECKING:
    from mypy_boto3_events import EventBridgeClient

# PutEvents takes at most 10 entries per call.
_MAX_ENTRIES = 10


class EventBridgeSink:
    def __init__(self, client: EventBridgeClient, bus_name: str) -> None:
        self.client = client
        self.bus_name = bus_name

    def put(self, source: str, detail_type: str, details: Sequence[Mapping[str, Any]]) -> None:
        for start in range(0, len(details), _MAX_ENTRIES):
            entries: Any = [
                {
                    "Source": source,
                    "DetailType": detail_type,
                    "Detail": json.dumps(dict(detail), sort_keys=True, default=str),
                    "EventBusName": self.bus_name,
                }
                for detail in details[start : start + _MAX_ENTRIES]
            ]
            try:
                response = self.client.put_events(Entries=entries)
            except ClientError as error:
                raise PublishFailed(str(error)) from error
            if response.get("FailedEntryCount", 0):
                failed = [e for e in response.get("Entries", []) if e.get("ErrorCode")]
                raise PublishFailed(f"{len(failed)} event(s) refused: {failed[:3]}")
