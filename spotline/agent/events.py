"""The agent's two events on the project bus (architecture.md, Events: MUST)."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any, Protocol

from spotline.resources import (
    DETAIL_CHECKPOINT_COMPLETED,
    DETAIL_JOB_HEARTBEAT,
    SOURCE_AGENT,
    agent_source,
)

if TYPE_CHECKING:
    from mypy_boto3_events import EventBridgeClient
    from mypy_boto3_events.type_defs import PutEventsRequestEntryTypeDef

    from spotline.agent.store import CheckpointRecord

log = logging.getLogger(__name__)


class EventPublisher(Protocol):
    def publish(self, detail_type: str, detail: dict[str, Any]) -> bool:
        """Send one event; True if it was accepted. Must not raise: training goes on regardless."""
        ...


class EventBridgePublisher:
    """PutEvents to the project bus with source `spotline.agent.<team>` (the only source the
    team's job role may put; without a team, a standalone run, `spotline.agent`, which no rule
    routes)."""

    def __init__(
        self, client: EventBridgeClient, bus_name: str, *, attempts: int = 3, team: str | None = None
    ) -> None:
        self.client = client
        self.bus_name = bus_name
        self.attempts = attempts
        self.source = agent_source(team) if team else SOURCE_AGENT

    def publish(self, detail_type: str, detail: dict[str, Any]) -> bool:
        entry: PutEventsRequestEntryTypeDef = {
            "Source": self.source,
            "DetailType": detail_type,
            "Detail": json.dumps(detail),
            "EventBusName": self.bus_name,
        }
        # botocore retries throttling and 5xx; PutEvents can also fail per entry (FailedEntryCount)
        # with a 200, which only we can retry.
        for attempt in range(1, self.attempts + 1):
            try:
                response = self.client.put_events(Entries=[entry])
            except Exception as exc:  # a lost event must never stop training
                log.warning("%s not sent (attempt %d): %s", detail_type, attempt, exc)
                continue
            if response.get("FailedEntryCount", 0) == 0:
                return True
            log.warning("%s rejected (attempt %d): %s", detail_type, attempt, response.get("Entries"))
        return False


class LogPublisher:
    """Used when no bus is configured (a standalone run): the events go to the log."""

    def publish(self, detail_type: str, detail: dict[str, Any]) -> bool:
        log.info("%s %s", detail_type, json.dumps(detail, sort_keys=True))
        return True


class RecordingPublisher:
    """Keeps what it is given; for tests and for callers that forward events themselves."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def publish(self, detail_type: str, detail: dict[str, Any]) -> bool:
        self.events.append((detail_type, detail))
        return True


def checkpoint_completed_detail(
    record: CheckpointRecord,
    *,
    instance_id: str | None,
    requested_at: float | None,
    run_id: str | None = None,
    write_s: float | None = None,
    restore_s: float | None = None,
) -> dict[str, Any]:
    """job_id, run_id, checkpoint_uri, step, progress (the contract), plus what the control plane
    can use to match the event to its request, to measure lost work and to size the job's grace
    period: the checkpoint's size, how long its write took (capture to durable manifest) and how
    long this run's restore took (None for a fresh start)."""
    detail: dict[str, Any] = {
        "job_id": record.job_id,
        # The run that wrote it: the control plane credits it to that run only (RUN_IDENTITY).
        "run_id": run_id,
        "checkpoint_uri": record.uri,
        "step": record.step,
        "progress": record.progress,
        "reason": record.reason,
        "final": record.final,
        "instance_id": instance_id,
        "created_at": record.created_at,
        # The request this checkpoint answers (None for periodic ones): a checkpoint whose state
        # was captured at or after `checkpoint_requested_at` satisfies that request.
        "requested_at": requested_at,
        "size_bytes": record.size,
    }
    if write_s is not None:
        detail["write_s"] = round(write_s, 3)
    if restore_s is not None:
        detail["restore_s"] = round(restore_s, 3)
    return detail


def heartbeat_detail(
    *,
    job_id: str,
    run_id: str | None = None,
    instance_id: str | None,
    step: int,
    progress: float | None,
    utilization: float | None,
    last_checkpoint_step: int | None,
    restored: CheckpointRecord | None = None,
) -> dict[str, Any]:
    """What a heartbeat says: where training is, and the checkpoint this run restored (None for a
    fresh start), so that the control plane names the checkpoint the run actually resumed from."""
    return {
        "job_id": job_id,
        "run_id": run_id,
        "instance_id": instance_id,
        "step": step,
        "progress": progress,
        "utilization": utilization,
        "last_checkpoint_step": last_checkpoint_step,
        "restored_step": None if restored is None else restored.step,
        "restored_checkpoint_uri": None if restored is None else restored.uri,
    }


__all__ = [
    "DETAIL_CHECKPOINT_COMPLETED",
    "DETAIL_JOB_HEARTBEAT",
    "EventBridgePublisher",
    "EventPublisher",
    "LogPublisher",
    "RecordingPublisher",
    "checkpoint_completed_detail",
    "heartbeat_detail",
]
