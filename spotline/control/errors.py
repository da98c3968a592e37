"""Spotline's own exception types: what the ports raise (a job that does not exist, a write that
lost a race, a pool that is full) and what the application services add on top (bad input, an
unknown caller, a conflict). The adapters map their SDK's errors onto these
(`spotline.aws.errors`); the API maps them to status codes in one place (`functions/api.py`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class SpotlineError(Exception):
    """Base of every error the control plane raises on purpose."""


class JobNotFound(SpotlineError):
    def __init__(self, job_id: str) -> None:
        super().__init__(f"job {job_id} not found")
        self.job_id = job_id


class ConditionFailed(SpotlineError):
    """A conditional write found the item not as expected (someone else wrote first)."""


class StaleJobError(ConditionFailed):
    """The job is no longer in the state and version the caller read: re-read and decide again."""

    def __init__(self, job_id: str, detail: str = "") -> None:
        super().__init__(f"job {job_id} changed concurrently{': ' + detail if detail else ''}")
        self.job_id = job_id


class JobAlreadyExists(ConditionFailed):
    def __init__(self, job_id: str) -> None:
        super().__init__(f"job {job_id} already exists")
        self.job_id = job_id


class CapacityExhausted(ConditionFailed):
    """The ledger refused a reservation: the pool (or the team's hard quota) is full."""


class UnreadableRecord(SpotlineError):
    """A stored job item holds no valid record (an older version wrote it, or a hand did)."""

    def __init__(self, job_id: str, why: str) -> None:
        super().__init__(f"job {job_id}: stored record unreadable: {why}")
        self.job_id = job_id
        self.why = why


class ItemTooLarge(SpotlineError):
    """A job would not fit in one storage item (400 KB, with room kept for what its life adds)."""


class InvalidTransition(SpotlineError):
    """The lifecycle does not allow this change of state (see domain TRANSITIONS)."""


class StorageUnavailable(SpotlineError):
    """The store throttled or failed after the SDK's retries; safe to retry later."""


class LogsUnavailable(StorageUnavailable):
    """The deployment has no log reader, or the log service failed (retry later)."""


class ImageLookupUnavailable(StorageUnavailable):
    """The image registry throttled or failed while a tag was resolved to a digest (retry later)."""


class ImageNotFound(SpotlineError):
    """The image's registry has no such repository or tag."""


class PublishFailed(SpotlineError):
    """The event bus did not accept an event."""


class BatchThrottled(SpotlineError):
    """AWS Batch refused a call for its rate limit (SubmitJob: 50 TPS per account).
    The launch workflow retries on this name with backoff."""


class LaunchFailed(SpotlineError):
    """AWS Batch refused the job for a reason a retry will not fix."""


class InvalidPageToken(ValueError):
    """A token this API did not issue for this query (or one that expired)."""


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


def refused(kind: str, name: str) -> ConditionFailed:
    """The error of a store transaction refused by its item of role (`kind`, `name`): ("job", id)
    and ("timeline", id) a stale job, ("new-job", id) a taken id, ("pool", name), ("team", name)
    and ("lender", name) a full ledger counter; any other role a plain ConditionFailed. Every
    store maps a refused transaction through this one function."""
    if kind == "new-job":
        return JobAlreadyExists(name)
    if kind in ("job", "timeline"):
        return StaleJobError(name)
    if kind == "pool":
        return CapacityExhausted(f"pool {name} has no room for this job")
    if kind == "team":
        return CapacityExhausted(f"team {name} reached its hard quota")
    if kind == "lender":
        return CapacityExhausted(
            f"team {name} uses more GPUs than when the borrowing was decided: it lends less now"
        )
    return ConditionFailed(f"{kind} {name}: condition failed")
