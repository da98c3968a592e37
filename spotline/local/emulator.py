"""An emulated AWS on this machine: moto's server, with Spotline's tables, buses, rules and
queues created from `spotline.resources` (the same description the CDK stack builds from).

moto delivers rule matches only to SQS targets, so every rule gets a queue here (a rule whose
target is a queue on AWS too gets that queue); the router (`spotline.local.router`) drains them
and calls the rule's real target.
"""

from __future__ import annotations

import json
import logging
import os
import urllib.request
from dataclasses import dataclass, field
from typing import Any

import boto3

from spotline.local import provision
from spotline.local.moto_lambda_route import require_moto_version
from spotline.local.moto_server import SerializedMotoServer

# moto's configuration (its public `/moto-api/config`): Step Functions executes ASL; Lambda and
# Batch never need Docker here, because the local runtime dispatches Lambda tasks to the handlers
# (`moto_lambda_route`) and runs the fleet itself.
MOTO_CONFIG = {
    "stepfunctions": {"execute_state_machine": True},
    "lambda": {"use_docker": False},
    "batch": {"use_docker": False},
}


@dataclass
class LocalResources:
    """Names and URLs of what `create_resources` made."""

    prefix: str
    tables: dict[str, str] = field(default_factory=dict)  # logical id -> table name
    project_bus: str = ""
    rule_queues: dict[str, str] = field(default_factory=dict)  # rule name -> queue URL
    scheduler_queue_url: str = ""


class LocalAws:
    """moto's server on 127.0.0.1, one request at a time (`moto_server.SerializedMotoServer`),
    configured to execute state machines. Every SDK call, this process's (the handlers, the
    workflows' tasks, the router, the fleet) and other processes' (the agents, the CLI), goes to
    it over HTTP."""

    def __init__(self, region: str = "us-east-1", port: int = 0) -> None:
        self.region = region
        self._server = SerializedMotoServer(ip_address="127.0.0.1", port=port)
        self.endpoint_url = ""

    def start(self) -> None:
        require_moto_version()
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint_url = f"http://{host}:{port}"
        # moto's backends are process-wide: start from an empty account, as a fresh deployment.
        _post(f"{self.endpoint_url}/moto-api/reset", b"")
        _post(f"{self.endpoint_url}/moto-api/config", json.dumps(MOTO_CONFIG).encode())
        # Every SDK client in this process (handlers, agent, router) talks to the emulator.
        os.environ["AWS_ENDPOINT_URL"] = self.endpoint_url
        os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
        os.environ["AWS_DEFAULT_REGION"] = self.region
        os.environ["AWS_REGION"] = self.region

    def stop(self) -> None:
        self._server.stop()

    def client(self, service: str) -> Any:
        return boto3.client(service, endpoint_url=self.endpoint_url, region_name=self.region)  # type: ignore[call-overload]

    def create_resources(self, prefix: str = "spotline-local") -> LocalResources:
        """Tables, the project bus, a queue per rule and the scheduler's FIFO queue."""
        made = LocalResources(prefix=prefix)
        made.tables = provision.create_tables(self.client("dynamodb"), prefix)
        events = self.client("events")
        sqs = self.client("sqs")
        made.project_bus = f"{prefix}-bus"
        events.create_event_bus(Name=made.project_bus)
        made.scheduler_queue_url = sqs.create_queue(
            QueueName=f"{prefix}-scheduler.fifo",
            Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"},
        )["QueueUrl"]
        made.rule_queues = provision.create_rules(
            events,
            sqs,
            prefix=prefix,
            project_bus=made.project_bus,
            scheduler_queue_url=made.scheduler_queue_url,
        )
        return made


def _post(url: str, body: bytes) -> None:
    request = urllib.request.Request(
        url, data=body, method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request) as response:
        response.read()
