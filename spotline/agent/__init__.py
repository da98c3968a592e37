"""The in-container training agent: durable checkpoints, resume, checkpoint on request / Spot
notice / SIGTERM, heartbeats. Library: `Agent`; command wrapper: `python -m spotline.agent`."""

from spotline.agent.agent import EXIT_STOPPED, Agent, CheckpointReason, Restored, RestoredFiles
from spotline.agent.events import EventBridgePublisher, EventPublisher, LogPublisher, RecordingPublisher
from spotline.agent.settings import AgentSettings
from spotline.agent.signals import InstanceMetadata, JobRecordPoller, JobSignals, SpotInstanceAction
from spotline.agent.state import decode_state, encode_state
from spotline.agent.store import (
    CheckpointError,
    CheckpointFile,
    CheckpointRecord,
    CheckpointStore,
    LocalCheckpointStore,
    S3CheckpointStore,
    open_store,
)

__all__ = [
    "EXIT_STOPPED",
    "Agent",
    "AgentSettings",
    "CheckpointError",
    "CheckpointFile",
    "CheckpointReason",
    "CheckpointRecord",
    "CheckpointStore",
    "EventBridgePublisher",
    "EventPublisher",
    "InstanceMetadata",
    "JobRecordPoller",
    "JobSignals",
    "LocalCheckpointStore",
    "LogPublisher",
    "RecordingPublisher",
    "Restored",
    "RestoredFiles",
    "S3CheckpointStore",
    "SpotInstanceAction",
    "decode_state",
    "encode_state",
    "open_store",
]
