"""What the integration tests share: moto in-process, Spotline's tables created from
`spotline.resources`, a control plane wired to them (`make_deployment`) with the recording
adapters of `spotline.control.memory`, a clock, real-shaped events and the steps of a job's
life. The fixtures are `conftest.py`'s.

A deployment without real workflows records workflow starts instead of running them (the tests
that look at one decision stay synchronous); with them, the real ASL runs on moto's Step
Functions engine, with Lambda tasks dispatched to `functions.workflow_tasks.handler`.
"""

from __future__ import annotations

import copy
import json
import time
import urllib.request
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config
from moto import mock_aws

from functions.runtime import use_control_plane
from spotline.aws.clients import AwsClients
from spotline.aws.plane import build_control_plane
from spotline.aws.workflows import StepFunctionsStarter
from spotline.control.memory import RecordingLauncher, RecordingStarter, StaticInstanceResolver
from spotline.control.plane import ControlPlane
from spotline.control.records import JobRecord, run_id_for
from spotline.control.settings import Settings
from spotline.local.lambdas import LambdaContextStub
from spotline.local.moto_lambda_route import LambdaTaskDispatcher
from spotline.local.moto_server import SerializedMotoServer
from spotline.local.provision import create_state_machines, create_tables, environment

REGION = "us-east-1"
ACCOUNT = "123456789012"
EVENTS_DIR = Path(__file__).parent / "events"

VISION_ROLE = f"arn:aws:iam::{ACCOUNT}:role/vision-researchers"
NLP_ROLE = f"arn:aws:iam::{ACCOUNT}:role/nlp-researchers"
NLP_LOCAL_KEY = "AKIALOCALNLPTEAM0001"
# May read the whole deployment's history (`admins`); no team's.
ADMIN_ROLE = f"arn:aws:iam::{ACCOUNT}:role/spotline-admins"

CONFIG: dict[str, Any] = {
    "pools": [
        {
            "name": "a100-spot",
            "gpu_type": "a100",
            "purchase": "spot",
            "capacity_gpus": 16,
            "gpus_per_node": 8,
            "price": 0.35,
            "interruption_rate_per_hour": 0.05,
            "job_queue": f"arn:aws:batch:{REGION}:{ACCOUNT}:job-queue/spotline-a100-spot",
        },
        {
            "name": "a100-on-demand",
            "gpu_type": "a100",
            "purchase": "on-demand",
            "capacity_gpus": 8,
            "gpus_per_node": 8,
            "job_queue": f"arn:aws:batch:{REGION}:{ACCOUNT}:job-queue/spotline-a100-on-demand",
        },
    ],
    "job_definition": f"arn:aws:batch:{REGION}:{ACCOUNT}:job-definition/spotline-training:1",
    "teams": [
        {"team": "vision", "nominal_gpus": 12},
        {"team": "nlp", "nominal_gpus": 12, "max_priority": "high"},
    ],
    "identities": {VISION_ROLE: "vision", NLP_ROLE: "nlp", NLP_LOCAL_KEY: "nlp"},
    "admins": [ADMIN_ROLE],
    "scheduler": {"protection_period_s": 0, "preemption_delay_s": 0},
    "grace_period_s": 2,
    "spot_notice_s": 120,
}


class TestClock:
    """Real time unless frozen; workflows on moto wait in real seconds, so only the tests that
    run no workflow freeze it."""

    __test__ = False

    def __init__(self) -> None:
        self.frozen: float | None = None

    def __call__(self) -> float:
        return time.time() if self.frozen is None else self.frozen

    def freeze(self, at: float | None = None) -> float:
        self.frozen = time.time() if at is None else at
        return self.frozen

    def advance(self, seconds: float) -> float:
        assert self.frozen is not None, "freeze the clock first"
        self.frozen += seconds
        return self.frozen


@dataclass
class Deployment:
    plane: ControlPlane
    clients: AwsClients
    tables: dict[str, str]
    bus: str
    state_machines: dict[str, str]
    launcher: RecordingLauncher
    clock: TestClock
    resolver: StaticInstanceResolver
    starter: RecordingStarter | None = None
    dispatcher: LambdaTaskDispatcher | None = None

    @property
    def sfn(self) -> Any:
        return self.clients.client("stepfunctions")

    @property
    def dynamodb(self) -> Any:
        return self.clients.client("dynamodb")

    def executions(self, machine: str) -> list[dict[str, Any]]:
        return list(self.sfn.list_executions(stateMachineArn=self.state_machines[machine])["executions"])

    def wait_for_execution(self, machine: str, name: str, timeout_s: float = 20.0) -> dict[str, Any]:
        """The execution's description once it has stopped running."""
        arn = self.state_machines[machine].replace(":stateMachine:", ":execution:") + f":{name}"
        deadline = time.time() + timeout_s
        while True:
            try:
                described: dict[str, Any] = self.sfn.describe_execution(executionArn=arn)
            except self.sfn.exceptions.ExecutionDoesNotExist:
                described = {"status": "NOT_STARTED"}
            if described["status"] not in ("RUNNING", "NOT_STARTED"):
                return described
            if time.time() > deadline:
                raise AssertionError(f"execution {name} still {described['status']} after {timeout_s}s")
            time.sleep(0.05)

    def history(self, machine: str, name: str) -> list[dict[str, Any]]:
        arn = self.state_machines[machine].replace(":stateMachine:", ":execution:") + f":{name}"
        return list(self.sfn.get_execution_history(executionArn=arn, maxResults=1000)["events"])


@contextmanager
def make_deployment(real_workflows: bool) -> Iterator[Deployment]:
    """moto in-process with Spotline's tables, workflows and a control plane wired to them (installed
    for the handlers while the block runs)."""
    config = {
        "stepfunctions": {"execute_state_machine": True},
        "lambda": {"use_docker": False},
        "batch": {"use_docker": False},
    }
    with mock_aws(config=config):  # type: ignore[arg-type]
        clients = AwsClients(region=REGION)
        tables = create_tables(clients.client("dynamodb"), prefix="spotline-test")
        bus = "spotline-test"
        clients.client("events").create_event_bus(Name=bus)
        dispatcher = None
        if real_workflows:
            import functions.workflow_tasks

            dispatcher = LambdaTaskDispatcher({"workflow_tasks": functions.workflow_tasks.handler}).install()
        machines = create_state_machines(clients.client("stepfunctions"), prefix="spotline-test")
        settings = Settings.from_env(
            environment(tables, event_bus=bus, state_machines=machines, config=CONFIG)
        )
        launcher = RecordingLauncher()
        clock = TestClock()
        resolver = StaticInstanceResolver()
        starter = None if real_workflows else RecordingStarter()
        plane = build_control_plane(
            settings,
            clients,
            launcher=launcher,
            clock=clock,
            instance_resolver=resolver,
            workflows=starter or StepFunctionsStarter(clients.stepfunctions),
        )
        use_control_plane(plane)
        try:
            yield Deployment(
                plane, clients, tables, bus, machines, launcher, clock, resolver, starter, dispatcher
            )
        finally:
            use_control_plane(None)
            if dispatcher is not None:
                # Let workflows still waiting on a token finish before moto goes away.
                dispatcher.uninstall()


# --- events -----------------------------------------------------------------------------------


def load_event(name: str) -> dict[str, Any]:
    event: dict[str, Any] = json.loads((EVENTS_DIR / f"{name}.json").read_text())
    return event


def eventbridge(name: str, *, detail: Mapping[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    """A documented sample event with a fresh id (EventBridge gives every event its own) and
    the given detail fields replaced. An agent event given another `job_id` and no `run_id`
    names that job's first run."""
    event = copy.deepcopy(load_event(name))
    event["id"] = str(uuid.uuid4())
    event.update(fields)
    if detail:
        if "run_id" in event["detail"] and "job_id" in detail and "run_id" not in detail:
            detail = {**detail, "run_id": run_id_for(str(detail["job_id"]), 1)}
        event["detail"].update(detail)
    return event


def sqs_records(*events: Mapping[str, Any]) -> dict[str, Any]:
    """EventBridge events as Lambda hands them over from an SQS queue (a rule's SQS target puts
    each event whole in a message body): one batch, a record each."""
    return {
        "Records": [
            {
                "messageId": str(uuid.uuid4()),
                "receiptHandle": f"handle-{index}",
                "body": json.dumps(event),
                "attributes": {
                    "ApproximateReceiveCount": "1",
                    "SentTimestamp": "1764547200000",
                    "SenderId": "AIDAEVENTBRIDGE",
                    "ApproximateFirstReceiveTimestamp": "1764547200000",
                },
                "messageAttributes": {},
                "md5OfBody": "",
                "eventSource": "aws:sqs",
                "eventSourceARN": f"arn:aws:sqs:{REGION}:{ACCOUNT}:spotline-heartbeats",
                "awsRegion": REGION,
            }
            for index, event in enumerate(events)
        ]
    }


def heartbeats(*events: Mapping[str, Any]) -> dict[str, Any]:
    """The heartbeat function's answer to one batch of these Job Heartbeat events."""
    import functions.heartbeat

    answer: dict[str, Any] = functions.heartbeat.handler(sqs_records(*events), context("heartbeat"))
    return answer


def heartbeat_recorded(event: Mapping[str, Any]) -> bool:
    """Whether one Job Heartbeat, delivered alone, changed its job (it must not fail)."""
    answer = heartbeats(event)
    assert answer["batchItemFailures"] == [], answer
    return bool(answer["recorded"])


def batch_event(
    job_id: str,
    batch_job_id: str,
    status: str,
    *,
    reason: str | None = None,
    container_instance: str | None = None,
    started_at_ms: int | None = None,
    exit_code: int | None = None,
    run: int = 1,
    job_queue: str | None = None,
) -> dict[str, Any]:
    """AWS's documented Batch Job State Change, for run `run` of a Spotline job in `status`."""
    event = eventbridge("batch_job_state_change")
    detail = event["detail"]
    if job_queue is not None:
        detail["jobQueue"] = job_queue
    else:
        detail.pop("jobQueue", None)
    detail.update(
        {
            "jobName": run_id_for(job_id, run),
            "jobId": batch_job_id,
            "jobArn": f"arn:aws:batch:{REGION}:{ACCOUNT}:job/{batch_job_id}",
            "status": status,
        }
    )
    event["resources"] = [detail["jobArn"]]
    if container_instance:
        detail["container"]["containerInstanceArn"] = container_instance
        detail["container"]["taskArn"] = f"arn:aws:ecs:{REGION}:{ACCOUNT}:task/spotline/{uuid.uuid4().hex}"
    if started_at_ms is not None:
        detail["startedAt"] = started_at_ms
    if status in ("SUCCEEDED", "FAILED"):
        detail["statusReason"] = reason or (
            "Essential container in task exited" if status == "FAILED" else ""
        )
        detail["stoppedAt"] = int(time.time() * 1000)
        detail["attempts"] = [
            {
                "container": {
                    "containerInstanceArn": container_instance,
                    "exitCode": exit_code,
                    "logStreamName": "spotline/default/abc",
                },
                "startedAt": started_at_ms,
                "stoppedAt": detail["stoppedAt"],
                "statusReason": reason or "Essential container in task exited",
            }
        ]
        if exit_code is not None:
            detail["container"]["exitCode"] = exit_code
    return event


def api_event(
    method: str,
    path: str,
    *,
    identity: Mapping[str, Any] | None = None,
    body: Any = None,
    query: Mapping[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """AWS's REST API proxy event (IAM authorization), for `method path`."""
    event = copy.deepcopy(load_event("apigw_rest_proxy"))
    resource = path
    params: dict[str, str] | None = None
    parts = path.strip("/").split("/")
    if len(parts) >= 2 and parts[0] == "jobs" and parts[1] != "":
        params = {"job_id": parts[1]}
        resource = "/jobs/{job_id}" + ("/" + "/".join(parts[2:]) if len(parts) > 2 else "")
    event.update(
        {
            "resource": resource,
            "path": path,
            "httpMethod": method,
            "pathParameters": params,
            "queryStringParameters": dict(query) if query else None,
            "multiValueQueryStringParameters": {k: [v] for k, v in query.items()} if query else None,
            "body": None if body is None else (body if isinstance(body, str) else json.dumps(body)),
        }
    )
    event["headers"].update(headers or {})
    event["multiValueHeaders"] = {k: [v] for k, v in event["headers"].items()}
    if body is not None:
        event["headers"]["Content-Type"] = "application/json"
        event["multiValueHeaders"]["Content-Type"] = ["application/json"]
    event["requestContext"].update(
        {
            "resourcePath": resource,
            "httpMethod": method,
            "path": f"/prod{path}",
            "requestId": str(uuid.uuid4()),
        }
    )
    if identity is not None:
        event["requestContext"]["identity"] = {**event["requestContext"]["identity"], **identity}
    return event


def context(name: str = "spotline-test") -> LambdaContextStub:
    return LambdaContextStub.for_function(name)


# --- building jobs in a given state -----------------------------------------------------------

SPEC: dict[str, Any] = {
    "name": "train",
    "gpus": 8,
    "image": "spotline/train:latest",
    "command": ["python", "-m", "spotline.examples.train", "--steps", "100"],
    "checkpoint_interval_s": 60,
}


def submit(dep: Deployment, team: str = "vision", **spec: Any) -> JobRecord:
    from spotline.control.jobs import submit_job

    record, _ = submit_job(dep.plane, team, {**SPEC, **spec})
    return record


def start(
    dep: Deployment,
    record: JobRecord,
    *,
    pool: str = "a100-spot",
    instance_id: str = "i-0aaaaaaaaaaaaaaa1",
    launch_workflow_runs: bool = False,
) -> JobRecord:
    """PENDING -> ADMITTED (in `pool`) -> RUNNING on `instance_id`, through the admission and the
    Batch handler, as a RUNNING event from Batch would. With `launch_workflow_runs` (a deployment
    whose workflows execute), the launch workflow that the admission starts submits and records
    the Batch job; otherwise this helper does what its tasks do."""
    import functions.batch_state_change
    from spotline.control.scheduling import admit
    from spotline.control.workflow_tasks import record_batch_job, submit_batch_job

    admitted = admit(dep.plane, record, pool, "admitted by the test", now=dep.clock())
    if launch_workflow_runs:
        deadline = time.time() + 10
        while (batch_job_id := dep.plane.jobs.get(record.id).batch_job_id) is None:
            assert time.time() < deadline, "the launch workflow recorded no Batch job"
            time.sleep(0.05)
    else:
        batch_job_id = submit_batch_job(
            dep.plane, record.id, version=admitted.version, run=admitted.run, pool=pool
        )["batch_job_id"]
        record_batch_job(
            dep.plane, record.id, version=admitted.version, run=admitted.run, batch_job_id=batch_job_id
        )
    container = f"arn:aws:ecs:{REGION}:{ACCOUNT}:container-instance/spotline-{pool}/{uuid.uuid4().hex}"
    dep.resolver.mapping[container] = instance_id
    functions.batch_state_change.handler(
        batch_event(
            record.id,
            batch_job_id,
            "RUNNING",
            container_instance=container,
            started_at_ms=int(dep.clock() * 1000),
            run=admitted.run,
        ),
        context("batch_state_change"),
    )
    return dep.plane.jobs.get(record.id)


def preempt(
    plane: ControlPlane, record: JobRecord, grace_s: float, *, now: float, by: str = "job-preemptor"
) -> JobRecord:
    """Ask a running job to checkpoint within `grace_s` for the job `by`, as the scheduler's
    preemption does (RUNNING -> CHECKPOINTING, the preempt workflow started)."""
    from spotline.control.lifecycle import start_disruption
    from spotline.control.records import Disruption

    return start_disruption(
        plane,
        record,
        Disruption.PREEMPT,
        now=now,
        deadline_at=now + grace_s,
        draining_for=by,
        reason=f"preempted for {by}",
    )


# --- the serialized moto server (the local runtime's emulated AWS) ----------------------------


def started_moto_server() -> tuple[SerializedMotoServer, str]:
    """A started `SerializedMotoServer` with fresh state, and its URL (stop it when done)."""
    server = SerializedMotoServer()
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    urllib.request.urlopen(urllib.request.Request(f"{url}/moto-api/reset", method="POST"))
    return server, url


def moto_client(service: str, url: str, config: Config | None = None) -> Any:
    """An SDK client of `service` at `url` with fake credentials."""
    return boto3.client(  # type: ignore[call-overload]
        service,
        endpoint_url=url,
        region_name=REGION,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=config,
    )
