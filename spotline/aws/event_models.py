"""Pydantic models of the events the functions receive (Powertools parser models).

AWS's events keep their documented shapes: the Spot warning's detail is
{"instance-id", "instance-action"}, the Batch Job State Change's detail resembles DescribeJobs'
JobDetail. Unknown fields are ignored (AWS adds fields over time).

Each event is parsed whole (an `EventBridgeModel` with a typed `detail`) rather than through
`EventBridgeEnvelope`: the envelope would drop the event's `time` and `id`, and the whole-event
model keeps the handlers' types precise.
"""

from __future__ import annotations

from datetime import datetime

from aws_lambda_powertools.utilities.parser.models import EventBridgeModel
from pydantic import BaseModel, ConfigDict, Field

from spotline.control.records import split_node_id


class _Detail(BaseModel):
    # Every number finite: a JSON number too large for a float parses as inf, and NaN passes
    # every range check, so neither may reach a stored record.
    model_config = ConfigDict(defer_build=True, extra="ignore", populate_by_name=True, allow_inf_nan=False)


class _Event(EventBridgeModel):
    # Built on first parse, not at import: a handler pays only for the events it parses.
    model_config = ConfigDict(defer_build=True)


# --- EC2 ------------------------------------------------------------------------------------


class SpotWarningDetail(_Detail):
    instance_id: str = Field(alias="instance-id", min_length=1)
    instance_action: str = Field(default="terminate", alias="instance-action")


class SpotWarningEvent(_Event):
    """The whole event, not only its detail: the notice's deadline counts from its `time`."""

    detail: SpotWarningDetail


class RebalanceDetail(_Detail):
    instance_id: str = Field(alias="instance-id", min_length=1)


class RebalanceEvent(_Event):
    detail: RebalanceDetail


class CapacityBlockDetail(_Detail):
    """A Capacity Block's `Capacity Block (Reservation) Delivered` or `... Expiration Warning`."""

    capacity_reservation_id: str | None = Field(default=None, alias="capacity-reservation-id")
    end_date: str | None = Field(default=None, alias="end-date")


class CapacityBlockEvent(_Event):
    detail: CapacityBlockDetail


class ReservationInterruptionDetail(_Detail):
    """An interruptible Capacity Reservation's instance interruption warning (2 minutes)."""

    instance_id: str = Field(alias="instance-id", min_length=1)
    instance_action: str = Field(default="terminate", alias="instance-action")
    termination_time: datetime | None = Field(default=None, alias="instance-termination-time")


class ReservationInterruptionEvent(_Event):
    detail: ReservationInterruptionDetail


# --- the agent ------------------------------------------------------------------------------


class CheckpointCompletedDetail(_Detail):
    job_id: str = Field(min_length=1)
    # The run that wrote it (RUN_IDENTITY: `spotline-<job_id>-r<run>`); an event without one is
    # parsed, then dropped by the handler, which counts it.
    run_id: str | None = None
    checkpoint_uri: str = Field(min_length=1)
    step: int = Field(ge=0)
    progress: float | None = Field(default=None, ge=0.0, le=1.0)
    # When the agent captured the state (epoch s), and the request it answers, if any.
    created_at: float | None = None
    requested_at: float | None = None
    # What the agent measured (optional): the checkpoint's size, its write (capture to durable
    # manifest) and the run's restore, in seconds. They size the job's grace period.
    size_bytes: int | None = Field(default=None, ge=0)
    write_s: float | None = Field(default=None, ge=0)
    restore_s: float | None = Field(default=None, ge=0)


class CheckpointCompletedEvent(_Event):
    detail: CheckpointCompletedDetail


class HeartbeatDetail(_Detail):
    job_id: str = Field(min_length=1)
    run_id: str | None = None
    step: int = Field(ge=0)
    instance_id: str | None = None
    progress: float | None = Field(default=None, ge=0.0, le=1.0)
    utilization: float | None = Field(default=None, ge=0.0, le=1.0)
    # The sending node of a gang (Batch multi-node job; every node heartbeats): None elsewhere.
    node_index: int | None = Field(default=None, ge=0, le=511)
    # The checkpoint this run restored (None: a fresh start, or an agent that does not say).
    restored_step: int | None = Field(default=None, ge=0)
    restored_checkpoint_uri: str | None = Field(default=None, min_length=1, max_length=2048)


class HeartbeatEvent(_Event):
    detail: HeartbeatDetail


# --- AWS Batch ------------------------------------------------------------------------------


class BatchContainer(_Detail):
    containerInstanceArn: str | None = None
    taskArn: str | None = None
    exitCode: int | None = None
    reason: str | None = None


class BatchAttempt(_Detail):
    container: BatchContainer | None = None
    startedAt: int | None = None
    stoppedAt: int | None = None
    statusReason: str | None = None


class BatchNodeDetails(_Detail):
    nodeIndex: int | None = None
    isMainNode: bool | None = None


class BatchJobStateDetail(_Detail):
    jobName: str
    jobId: str
    jobQueue: str | None = None
    status: str
    statusReason: str | None = None
    attempts: list[BatchAttempt] = Field(default_factory=list)
    startedAt: int | None = None
    stoppedAt: int | None = None
    container: BatchContainer | None = None
    # A node of a multi-node job (its jobId is `<parent>#<n>`).
    nodeDetails: BatchNodeDetails | None = None

    def node(self) -> tuple[str, int | None]:
        """(parent job id, node index) for a node of a multi-node job, else (jobId, None)."""
        parent, index = split_node_id(self.jobId)
        if index is None and self.nodeDetails is not None and self.nodeDetails.nodeIndex is not None:
            return self.jobId, self.nodeDetails.nodeIndex
        return parent, index

    def reasons(self) -> str:
        """Every reason Batch gave, most general first (job, last attempt, container)."""
        parts = [self.statusReason]
        if self.attempts:
            last = self.attempts[-1]
            parts.append(last.statusReason)
            if last.container is not None:
                parts.append(last.container.reason)
        if self.container is not None:
            parts.append(self.container.reason)
        seen: list[str] = []
        for part in parts:
            if part and part not in seen:
                seen.append(part)
        return "; ".join(seen)

    def container_instances(self) -> list[str]:
        found = []
        if self.container is not None and self.container.containerInstanceArn:
            found.append(self.container.containerInstanceArn)
        for attempt in self.attempts:
            if attempt.container is not None and attempt.container.containerInstanceArn:
                found.append(attempt.container.containerInstanceArn)
        # The last attempt is the current run; earlier attempts ran elsewhere.
        return found[:1] if self.container is not None and self.container.containerInstanceArn else found[-1:]

    def exit_code(self) -> int | None:
        if self.container is not None and self.container.exitCode is not None:
            return self.container.exitCode
        if self.attempts and self.attempts[-1].container is not None:
            return self.attempts[-1].container.exitCode
        return None


class BatchJobStateChangeEvent(_Event):
    detail: BatchJobStateDetail
