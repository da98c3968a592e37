"""The one place that builds boto3 clients.

Clients honour `AWS_ENDPOINT_URL` (the local runtime points every SDK at its moto server) and
take the region from `AWS_REGION` / `AWS_DEFAULT_REGION`. They are created on first use and
kept, because a Lambda container serves many invocations and client creation costs tens of
milliseconds. Tests and the local runtime inject their own with `AwsClients(overrides=...)`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

import boto3
from botocore.config import Config

if TYPE_CHECKING:
    from mypy_boto3_batch import BatchClient
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_events import EventBridgeClient
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_stepfunctions import SFNClient

DEFAULT_REGION = "us-east-1"

# Standard retry mode backs off on throttling (Batch SubmitJob allows 50 TPS per account).
_CONFIG = Config(retries={"mode": "standard", "max_attempts": 5}, connect_timeout=5, read_timeout=30)


def region_from_env(environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    return env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or DEFAULT_REGION


class AwsClients:
    """Lazily built, shared boto3 clients; `overrides` maps a service name to a ready client."""

    def __init__(
        self,
        *,
        region: str | None = None,
        endpoint_url: str | None = None,
        session: boto3.session.Session | None = None,
        overrides: Mapping[str, Any] | None = None,
    ) -> None:
        self.region = region or region_from_env()
        self.endpoint_url = endpoint_url if endpoint_url is not None else os.environ.get("AWS_ENDPOINT_URL")
        self._session = session
        self._clients: dict[str, Any] = dict(overrides or {})
        self._lock = threading.Lock()

    def client(self, service: str) -> Any:
        """The client for `service` (created once; boto3 clients are thread-safe)."""
        existing = self._clients.get(service)
        if existing is not None:
            return existing
        with self._lock:
            if service not in self._clients:
                # A session per AwsClients: boto3's default session is not thread-safe to create
                # clients from, and the workflow tasks may run in moto's worker threads.
                session = self._session or boto3.session.Session()
                self._clients[service] = session.client(
                    service,  # type: ignore[call-overload]
                    region_name=self.region,
                    endpoint_url=self.endpoint_url or None,
                    config=_CONFIG,
                )
            return self._clients[service]

    def client_in(self, service: str, region: str) -> Any:
        """The client for `service` in another region (this one's own in its region)."""
        if region == self.region:
            return self.client(service)
        key = f"{service}@{region}"
        with self._lock:
            if key not in self._clients:
                session = self._session or boto3.session.Session()
                self._clients[key] = session.client(
                    service,  # type: ignore[call-overload]
                    region_name=region,
                    endpoint_url=self.endpoint_url or None,
                    config=_CONFIG,
                )
            return self._clients[key]

    def lazy(self, service: str) -> Any:
        """A stand-in that builds the client on its first method call: a function that never
        touches Batch does not pay for creating a Batch client on a cold start."""
        return _LazyClient(self, service)

    # Typed, lazy handles for the services Spotline uses.
    @property
    def dynamodb(self) -> DynamoDBClient:
        return cast("DynamoDBClient", self.lazy("dynamodb"))

    @property
    def events(self) -> EventBridgeClient:
        return cast("EventBridgeClient", self.lazy("events"))

    @property
    def stepfunctions(self) -> SFNClient:
        return cast("SFNClient", self.lazy("stepfunctions"))

    @property
    def batch(self) -> BatchClient:
        return cast("BatchClient", self.lazy("batch"))

    @property
    def sqs(self) -> SQSClient:
        return cast("SQSClient", self.lazy("sqs"))

    @property
    def ecs(self) -> Any:
        return self.lazy("ecs")


class _LazyClient:
    def __init__(self, clients: AwsClients, service: str) -> None:
        self._clients = clients
        self._service = service

    def __getattr__(self, name: str) -> Any:
        return getattr(self._clients.client(self._service), name)


_default: AwsClients | None = None
_default_lock = threading.Lock()


def default_clients() -> AwsClients:
    """The process-wide clients (built from the environment on first use)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = AwsClients()
        return _default


def reset_default_clients() -> None:
    """Forget the process-wide clients (tests that change AWS_ENDPOINT_URL or the region)."""
    global _default
    with _default_lock:
        _default = None
