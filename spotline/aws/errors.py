"""The one mapping from AWS SDK errors onto Spotline's exception types (`spotline.control.errors`).

Adapters catch `botocore.exceptions.ClientError` only here (`storage_errors`,
`transaction_errors`), so the services and the API see domain words: a job that does not
exist, a write that lost a race, a pool that is full. The API maps these to HTTP status codes
in one place (`functions/api.py`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from botocore.exceptions import ClientError

from spotline.control.errors import (
    ConditionFailed,
    StaleJobError,
    StorageUnavailable,
    refused,
)

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
                raise refused(kind, name) from error
            if any(r.get("Code") in ("TransactionConflict", "ThrottlingError") for r in reasons):
                raise StorageUnavailable(str(error)) from error
            raise ConditionFailed(str(error)) from error
        if is_throttling(error):
            raise StorageUnavailable(str(error)) from error
        raise
