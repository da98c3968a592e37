"""Spotline's own exception types, and the one mapping from AWS SDK errors onto them.

Adapters catch `botocore.exceptions.ClientError` only here (`storage_errors`,
`transaction_errors`), so the services and the API see domain words: a job that does not
exist, a write that lost a race, a pool that is full. The API maps these to HTTP status codes
in one place (`functions/api.py`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from botocore.exceptions import ClientError


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
    """A job would not fit in one DynamoDB item (400 KB, with room kept for what its life adds)."""


class InvalidTransition(SpotlineError):
    """The lifecycle does not allow this change of state (see domain TRANSITIONS)."""


class StorageUnavailable(SpotlineError):
    """DynamoDB throttled or failed after the SDK's retries; safe to retry later."""


class PublishFailed(SpotlineError):
    """EventBridge did not accept an event."""


class BatchThrottled(SpotlineError):
    """AWS Batch refused a call for its rate limit (SubmitJob: 50 TPS per account).
    The launch workflow retries on this name with backoff."""


class LaunchFailed(SpotlineError):
    """AWS Batch refused the job for a reason a retry will not fix."""


_THROTTLING = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "InternalServerError",
        "ServiceUnavailable",
    }
)


def error_code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def is_throttling(error: ClientError) -> bool:
    code = error_code(error)
    status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    return code in _THROTTLING or code.endswith("Throttling") or status == 429


@contextmanager
def storage_errors(job_id: str | None = None) -> Iterator[None]:
    """Map a single-item DynamoDB call's errors: a failed condition on a job is a stale job,
    throttling is `StorageUnavailable`; anything else propagates unchanged."""
    try:
        yield
    except ClientError as error:
        code = error_code(error)
        if code == "ConditionalCheckFailedException":
            if job_id is not None:
                raise StaleJobError(job_id) from error
            raise ConditionFailed(str(error)) from error
        if is_throttling(error):
            raise StorageUnavailable(str(error)) from error
        raise


@contextmanager
def transaction_errors(roles: Sequence[tuple[str, str]]) -> Iterator[None]:
    """Map a TransactWriteItems call's cancellation onto the item that refused it.

    `roles[i]` describes item i as (kind, name): ("job", id), ("new-job", id), ("timeline",
    id), ("pool", name), ("team", name), ("lender", name), ("other", ...). DynamoDB reports one
    reason per item, in order; the first ConditionalCheckFailed names the culprit.
    """
    try:
        yield
    except ClientError as error:
        code = error_code(error)
        if code == "TransactionCanceledException":
            reasons = error.response.get("CancellationReasons", [])
            for (kind, name), reason in zip(roles, reasons, strict=False):
                if reason.get("Code") != "ConditionalCheckFailed":
                    continue
                if kind == "new-job":
                    raise JobAlreadyExists(name) from error
                if kind in ("job", "timeline"):
                    raise StaleJobError(name) from error
                if kind == "pool":
                    raise CapacityExhausted(f"pool {name} has no room for this job") from error
                if kind == "team":
                    raise CapacityExhausted(f"team {name} reached its hard quota") from error
                if kind == "lender":
                    raise CapacityExhausted(
                        f"team {name} uses more GPUs than when the borrowing was decided: it lends less now"
                    ) from error
                raise ConditionFailed(f"{kind} {name}: condition failed") from error
            if any(r.get("Code") in ("TransactionConflict", "ThrottlingError") for r in reasons):
                raise StorageUnavailable(str(error)) from error
            raise ConditionFailed(str(error)) from error
        if is_throttling(error):
            raise StorageUnavailable(str(error)) from error
        raise
