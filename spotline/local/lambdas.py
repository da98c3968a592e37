"""Spotline's Lambda functions run in this process, as the Lambda runtime would run them: the
handler imported from `functions/`, a context with the attributes Powertools reads, one
invocation at a time per function."""

from __future__ import annotations

import importlib
import threading
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.metrics.functions import is_metrics_disabled

from spotline import resources

ACCOUNT_ID = "123456789012"  # moto's default account
DEFAULT_REGION = "us-east-1"

LambdaHandler = Callable[[dict[str, Any], Any], Any]


def function_arn(name: str, region: str = DEFAULT_REGION, account: str = ACCOUNT_ID) -> str:
    return f"arn:aws:lambda:{region}:{account}:function:{name}"


def function_name_of(name_or_arn: str) -> str:
    """`arn:aws:lambda:...:function:<name>[:qualifier]` or a bare name -> the name."""
    if name_or_arn.startswith("arn:"):
        parts = name_or_arn.split(":")
        return parts[6] if len(parts) > 6 else name_or_arn
    return name_or_arn


@dataclass
class LambdaContextStub:
    """The attributes of a Lambda context that Powertools reads."""

    function_name: str = "spotline-local"
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = f"arn:aws:lambda:{DEFAULT_REGION}:{ACCOUNT_ID}:function:spotline-local"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    function_version: str = "$LATEST"
    log_group_name: str = "/aws/lambda/spotline-local"
    log_stream_name: str = "local"
    timeout_ms: int = 60_000

    def get_remaining_time_in_millis(self) -> int:
        return self.timeout_ms

    @classmethod
    def for_function(cls, name: str, region: str = DEFAULT_REGION) -> LambdaContextStub:
        return cls(function_name=name, invoked_function_arn=function_arn(name, region))


# One lock per function module: the one Lambda instance each function runs on locally.
_INVOCATION_LOCKS: dict[str, threading.RLock] = {}
_LOCKS_LOCK = threading.Lock()


def invocation_lock(module: str) -> threading.RLock:
    """The lock one invocation of `functions.<module>` holds (the bench holds the scheduler's)."""
    with _LOCKS_LOCK:
        return _INVOCATION_LOCKS.setdefault(module, threading.RLock())


def import_handler(function: resources.Function) -> LambdaHandler:
    """`functions.<module>.handler`, as the Lambda runtime imports it (the repository root must
    be on sys.path), invoked one event at a time per function, as one Lambda instance runs:
    a handler may keep its invocation in module state (the API resolver keeps the current
    request), which concurrent threads would mix up (a job stored under another team)."""
    handler: LambdaHandler = importlib.import_module(f"functions.{function.module}").handler
    lock = invocation_lock(function.module)
    if is_metrics_disabled():
        quiet_empty_metrics()

    def invoke(event: dict[str, Any], context: Any) -> Any:
        with lock:
            try:
                return handler(event, context)
            finally:
                drop_unpublished_metrics()

    return invoke


def quiet_empty_metrics() -> None:
    """With metrics disabled, Powertools still warns when a handler flushes an empty set; here
    the functions share one set across threads (`drop_unpublished_metrics` empties it after each
    invocation), so a handler often flushes one another emptied, and the `UserWarning: No
    application metrics to publish` would reach the terminal of `spotline local up`."""
    warnings.filterwarnings("ignore", message="No application metrics to publish", category=UserWarning)


def drop_unpublished_metrics() -> None:
    """With `POWERTOOLS_METRICS_DISABLED` (the local runtime sets it: CloudWatch has no local
    counterpart), Powertools never clears the metrics it does not publish: they pile up in one
    set shared by every function of the process, and once a metric holds 100 values Powertools
    prints the whole set to stdout anyway (into the terminal of `spotline local up`). Dropped
    after each invocation instead; with metrics enabled (as on Lambda) this does nothing."""
    if is_metrics_disabled():
        Metrics().clear_metrics()
