"""What every Lambda entry point in `functions/` shares: the Powertools objects, this process's
`ControlPlane`, and idempotency on the Idempotency table.

Importing this module is cheap: settings, clients and the control plane are built on the first
invocation, not at import (a cold start that only imports pays nothing for AWS clients). The
X-Ray SDK is imported only when tracing is on (Powertools' Tracer imports it even to disable it,
100-140 ms), and the idempotency utility on the first invocation of a handler that uses it.
The local runtime and the tests install their own control plane with `use_control_plane`.
"""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.metrics import MetricUnit

from spotline.aws.clients import default_clients
from spotline.aws.plane import build_control_plane
from spotline.control.plane import ControlPlane
from spotline.control.settings import get_settings

METRICS_NAMESPACE = "Spotline"

Handler = Callable[[dict[str, Any], Any], Any]
F = TypeVar("F", bound=Handler)


def tracing_enabled() -> bool:
    """Tracing is on where Powertools' Tracer would trace: in Lambda, unless the stack set
    POWERTOOLS_TRACE_DISABLED (cdk.json `tracing: false`, the default)."""
    flag = os.environ.get("POWERTOOLS_TRACE_DISABLED", "false").strip().lower()
    disabled = flag in ("1", "true", "yes", "on")
    return bool(os.environ.get("LAMBDA_TASK_ROOT")) and not disabled


class UntracedHandlers:
    """Stands in for Powertools' Tracer when tracing is off: handlers run undecorated, and the
    X-Ray SDK is never imported."""

    def capture_lambda_handler(self, handler: F) -> F:
        return handler


def _tracer() -> Any:
    if not tracing_enabled():
        return UntracedHandlers()
    from aws_lambda_powertools import Tracer

    return Tracer(service="spotline")


def loaded() -> None:
    """The last statement of every handler module: freeze the objects loaded so far (later
    collections skip them) and turn the garbage collector back on (`functions/__init__.py`
    turned it off for the cold start's imports). Outside Lambda, nothing."""
    if os.environ.get("LAMBDA_TASK_ROOT"):
        gc.freeze()
        gc.enable()


logger = Logger(service="spotline")
tracer = _tracer()
metrics = Metrics(namespace=METRICS_NAMESPACE, service="spotline")

_plane: ControlPlane | None = None
_plane_lock = threading.Lock()


def control_plane() -> ControlPlane:
    """This process's control plane (built from the environment on first use)."""
    global _plane
    with _plane_lock:
        if _plane is None:
            _plane = build_control_plane(get_settings(), default_clients())
        return _plane


def use_control_plane(plane: ControlPlane | None) -> None:
    """Install `plane` for every handler of this process (None: build from the environment
    again on next use). Also forgets the idempotency layers, which hold a client."""
    global _plane
    with _plane_lock:
        _plane = plane
    with _idempotency_lock:
        _idempotent_handlers.clear()


_idempotent_handlers: dict[str, Handler] = {}
_idempotency_lock = threading.Lock()

# EventBridge redelivers the same event with the same id; a day covers its retry window (24 h).
IDEMPOTENCY_TTL_S = 24 * 3600


def idempotent_on_event_id(key_prefix: str) -> Callable[[Handler], Handler]:
    """Make an EventBridge-invoked handler run once per event id (Powertools idempotency on the
    Idempotency table; a duplicate gets the first run's result). The persistence layer is built
    on first use, with the control plane's DynamoDB client."""

    def decorate(function: Handler) -> Handler:
        def handler(event: dict[str, Any], context: Any) -> Any:
            with _idempotency_lock:
                wrapped = _idempotent_handlers.get(key_prefix)
                if wrapped is None:
                    from aws_lambda_powertools.utilities.idempotency import (
                        DynamoDBPersistenceLayer,
                        IdempotencyConfig,
                        idempotent,
                    )

                    from spotline.aws.jobs import JobRepository

                    plane = control_plane()
                    persistence = plane.idempotency
                    if persistence is None:
                        jobs = plane.jobs
                        if not isinstance(jobs, JobRepository):
                            raise TypeError("idempotency needs a persistence layer or the jobs on DynamoDB")
                        persistence = DynamoDBPersistenceLayer(
                            table_name=plane.settings.idempotency_table,
                            boto3_client=jobs.table.client,
                        )
                    config = IdempotencyConfig(
                        event_key_jmespath="id",
                        raise_on_no_idempotency_key=True,
                        expires_after_seconds=IDEMPOTENCY_TTL_S,
                    )
                    wrapped = idempotent(persistence_store=persistence, config=config, key_prefix=key_prefix)(
                        function
                    )
                    _idempotent_handlers[key_prefix] = wrapped
            return wrapped(event, context)

        handler.__name__ = getattr(function, "__name__", "handler")
        handler.__doc__ = function.__doc__
        return handler

    return decorate


def event_bridge_handler(handle: Handler) -> Handler:
    """The Lambda entry point of an EventBridge-invoked handler: Powertools' logger (with the
    event's id as correlation id), tracer and metrics around `handle`, and one `EventsReceived`
    per delivery, duplicates included (an idempotent `handle` returns the first run's result)."""

    def handler(event: dict[str, Any], context: Any) -> Any:
        metrics.add_metric(name="EventsReceived", unit=MetricUnit.Count, value=1)
        return handle(event, context)

    handler.__doc__ = handle.__doc__
    entry: Handler = metrics.log_metrics(tracer.capture_lambda_handler(handler))
    entry = logger.inject_lambda_context(
        correlation_id_path=correlation_paths.EVENT_BRIDGE, clear_state=True
    )(entry)
    return entry


def count_agent_event(kind: str, recorded: bool) -> None:
    """Count an agent event (`HeartbeatsRecorded`, `CheckpointsRecorded`): 1 when it changed the
    job, else 0 and one `AgentEventsDropped` (a duplicate, a late event, another run's or another
    team's, or a source that names no team)."""
    metrics.add_metric(name=f"{kind}Recorded", unit=MetricUnit.Count, value=1 if recorded else 0)
    if not recorded:
        metrics.add_metric(name="AgentEventsDropped", unit=MetricUnit.Count, value=1)


def count_agent_event_without_run() -> None:
    """An agent event that names no run (its agent has no SPOTLINE_RUN_ID): counted on its own,
    `AgentEventsWithoutRun`, besides AgentEventsDropped, so a misconfigured image shows."""
    metrics.add_metric(name="AgentEventsWithoutRun", unit=MetricUnit.Count, value=1)
