"""Both ASL files on LocalStack's Step Functions interpreter: the integration tier's workflow
scenarios (tests/integration/test_workflows.py, run there on moto's interpreter) run here
unchanged, with the Lambda tasks answered by the real handler through harness.TaskWorker and
the jobs on moto's DynamoDB server."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

import functions.workflow_tasks
from functions.runtime import use_control_plane
from spotline import resources
from spotline.aws.clients import AwsClients
from spotline.aws.plane import build_control_plane
from spotline.aws.workflows import StepFunctionsStarter
from spotline.control.errors import BatchThrottled
from spotline.control.ports import execution_name
from spotline.control.scheduling import scheduling_pass
from spotline.control.settings import Settings
from spotline.local.lambdas import function_arn
from spotline.local.provision import create_tables, environment, render_definition
from tests.integration.helpers import (
    CONFIG,
    REGION,
    Deployment,
    RecordingLauncher,
    StaticInstanceResolver,
    TestClock,
    submit,
)

# The scenarios themselves, collected here with this module's `sfn_deployment`.
from tests.integration.test_workflows import (
    failed_errors,
    test_a_failed_launch_is_caught_and_the_job_requeued,
    test_a_spot_warning_runs_the_same_workflow_and_ends_interrupted,
    test_launch_submits_to_the_pools_job_queue_and_records_the_batch_job,
    test_preemption_after_an_early_checkpoint_does_not_wait,
    test_preemption_waits_for_the_agents_checkpoint_then_stops_and_requeues,
    test_preemption_without_a_checkpoint_times_out_and_still_stops_the_job,
)

from .harness import (
    LAMBDA_CALLBACK,
    LAMBDA_INVOKE,
    SQS_CALLBACK,
    LocalStack,
    TaskWorker,
    localstack_definition,
)

__all__ = [
    "test_a_failed_launch_is_caught_and_the_job_requeued",
    "test_a_spot_warning_runs_the_same_workflow_and_ends_interrupted",
    "test_launch_submits_to_the_pools_job_queue_and_records_the_batch_job",
    "test_preemption_after_an_early_checkpoint_does_not_wait",
    "test_preemption_waits_for_the_agents_checkpoint_then_stops_and_requeues",
    "test_preemption_without_a_checkpoint_times_out_and_still_stops_the_job",
]

ROLE = "arn:aws:iam::000000000000:role/spotline-workflows"
FUNCTION_ARNS = {f.name: function_arn(f.name, REGION) for f in resources.FUNCTIONS}


@pytest.fixture
def sfn_deployment(localstack: LocalStack, moto_dynamodb: str, unique: str) -> Iterator[Deployment]:
    """Spotline's tables on moto's server; its bus, workflows and the tasks' queue on LocalStack;
    a control plane wired to both, installed for the handlers; the task worker running."""
    dynamodb = boto3.client("dynamodb", endpoint_url=moto_dynamodb, region_name=REGION)
    clients = AwsClients(
        region=REGION,
        overrides={
            "dynamodb": dynamodb,
            **{s: localstack.client(s) for s in ("stepfunctions", "events", "sqs", "s3")},
        },
    )
    prefix = f"spotline-{unique}"
    tables = create_tables(dynamodb, prefix=prefix)
    bus = prefix
    clients.client("events").create_event_bus(Name=bus)
    tasks = clients.client("sqs").create_queue(QueueName=f"{prefix}-lambda-tasks")["QueueUrl"]
    sfn = clients.client("stepfunctions")
    machines = {
        machine.name: sfn.create_state_machine(
            name=f"{prefix}-{machine.name}",
            definition=localstack_definition(machine, FUNCTION_ARNS, tasks),
            roleArn=ROLE,
            # Standard even for the Express launch: an Express workflow cannot wait for a task
            # token, which is how the worker answers (test_..._valid_for_their_type holds the
            # launch's real definition to Express's rules on LocalStack).
            type="STANDARD",
        )["stateMachineArn"]
        for machine in resources.STATE_MACHINES
    }
    settings = Settings.from_env(environment(tables, event_bus=bus, state_machines=machines, config=CONFIG))
    launcher, clock, resolver = RecordingLauncher(), TestClock(), StaticInstanceResolver()
    plane = build_control_plane(
        settings,
        clients,
        launcher=launcher,
        clock=clock,
        instance_resolver=resolver,
        workflows=StepFunctionsStarter(clients.stepfunctions),
    )
    use_control_plane(plane)
    worker = TaskWorker(
        clients.client("sqs"), sfn, tasks, {"workflow_tasks": functions.workflow_tasks.handler}
    ).start()
    try:
        yield Deployment(plane, clients, tables, bus, machines, launcher, clock, resolver)
    finally:
        worker.stop()
        use_control_plane(None)
        assert worker.errors == []


def states_of(text: str) -> dict[str, Any]:
    states: dict[str, Any] = json.loads(text)["States"]
    return states


@pytest.mark.parametrize("machine", resources.STATE_MACHINES, ids=lambda m: m.name)
def test_only_the_lambda_tasks_resource_and_wrapping_change(machine: resources.StateMachine) -> None:
    original = states_of(render_definition(machine, FUNCTION_ARNS))
    rewritten = states_of(localstack_definition(machine, FUNCTION_ARNS, "http://queue"))
    assert original.keys() == rewritten.keys()
    for name, state in original.items():
        changed = rewritten[name]
        if state.get("Resource") in (LAMBDA_INVOKE, LAMBDA_CALLBACK):
            assert changed["Resource"] == SQS_CALLBACK
            assert changed["Parameters"]["MessageBody"]["Payload"] == state["Parameters"]["Payload"]
            rest = {k: v for k, v in state.items() if k not in ("Resource", "Parameters")}
            assert {k: v for k, v in changed.items() if k not in ("Resource", "Parameters")} == rest
        else:
            assert changed == state


def test_the_workflows_as_rendered_are_valid_for_their_type(localstack: LocalStack, unique: str) -> None:
    sfn = localstack.client("stepfunctions")
    for machine in resources.STATE_MACHINES:
        created = sfn.create_state_machine(
            name=f"rendered-{unique}-{machine.name}",
            definition=render_definition(machine, FUNCTION_ARNS),
            roleArn=ROLE,
            type="EXPRESS" if machine.express else "STANDARD",
        )
        assert created["stateMachineArn"].endswith(f"rendered-{unique}-{machine.name}")
    # LocalStack holds Express workflows to their rules: the harness's callback form is refused.
    [launch] = [m for m in resources.STATE_MACHINES if m.express]
    with pytest.raises(sfn.exceptions.InvalidDefinition, match="Express state machine does not support"):
        sfn.create_state_machine(
            name=f"callback-{unique}-{launch.name}",
            definition=localstack_definition(launch, FUNCTION_ARNS, "http://queue"),
            roleArn=ROLE,
            type="EXPRESS",
        )


def test_launch_backs_off_when_batch_throttles(sfn_deployment: Deployment) -> None:
    """tests/integration's scenario, but for the count of failed attempts: LocalStack answers a
    retry of a callback task with its first attempt's failure (see the test below), so one
    throttled SubmitJob shows as one or more BatchThrottled failures; Batch still gets one job."""
    dep = sfn_deployment
    dep.launcher.failures.append(BatchThrottled("Too Many Requests"))
    record = submit(dep)

    scheduling_pass(dep.plane)
    name = execution_name("launch", record.id, 1)
    described = dep.wait_for_execution("launch", name, timeout_s=60)

    assert described["status"] == "SUCCEEDED"
    errors = failed_errors(dep, "launch", name)
    assert errors and set(errors) == {"BatchThrottled"}
    assert len(dep.launcher.submitted) == 1
    assert dep.plane.jobs.get(record.id).batch_job_id is not None


def test_localstack_keeps_a_callback_tasks_token_and_failure_across_retries(
    localstack: LocalStack, unique: str
) -> None:
    """A difference from AWS (and moto) in LocalStack 2026.3.0: the retry of a .waitForTaskToken
    task gets its first attempt's task token, and that token's SendTaskFailure fails the retry
    at once. On AWS every attempt has a token of its own. Should LocalStack fix it, this fails:
    then the throttling scenario above can assert exactly one failure again."""
    sqs, sfn = localstack.client("sqs"), localstack.client("stepfunctions")
    queue = sqs.create_queue(QueueName=f"retry-{unique}")["QueueUrl"]
    definition = {
        "StartAt": "Wait",
        "States": {
            "Wait": {
                "Type": "Task",
                "Resource": SQS_CALLBACK,
                "Parameters": {
                    "QueueUrl": queue,
                    "MessageBody": {"token.$": "$$.Task.Token", "attempt.$": "$$.State.RetryCount"},
                },
                "Retry": [{"ErrorEquals": ["Flaky"], "IntervalSeconds": 1, "MaxAttempts": 2}],
                "End": True,
            }
        },
    }
    machine = sfn.create_state_machine(
        name=f"retry-{unique}", definition=json.dumps(definition), roleArn=ROLE
    )
    execution = sfn.start_execution(stateMachineArn=machine["stateMachineArn"], input="{}")["executionArn"]

    def next_body() -> dict[str, Any]:
        [message] = sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=10)["Messages"]
        sqs.delete_message(QueueUrl=queue, ReceiptHandle=message["ReceiptHandle"])
        body: dict[str, Any] = json.loads(message["Body"])
        return body

    first = next_body()
    sfn.send_task_failure(taskToken=first["token"], error="Flaky", cause="one failure")
    retry = next_body()
    assert retry["attempt"] >= 1 and retry["token"] == first["token"]
    sfn.send_task_success(taskToken=retry["token"], output="{}")
    deadline = time.monotonic() + 30
    while (described := sfn.describe_execution(executionArn=execution))["status"] == "RUNNING":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert described["status"] == "SUCCEEDED"
    events = sfn.get_execution_history(executionArn=execution)["events"]
    assert [e["type"] for e in events].count("TaskFailed") == 2  # one SendTaskFailure, two failed attempts


def test_moto_accepts_the_express_callback_form_that_localstack_refuses() -> None:
    """The difference the test above relies on: moto 5.2.5 creates an Express state machine with
    a .waitForTaskToken task, so only LocalStack (and AWS) catch one added to the launch."""
    from moto import mock_aws

    [launch] = [m for m in resources.STATE_MACHINES if m.express]
    with mock_aws():
        sfn = boto3.client("stepfunctions", region_name=REGION)
        created = sfn.create_state_machine(
            name="callback-launch",
            definition=localstack_definition(launch, FUNCTION_ARNS, "http://queue"),
            roleArn=ROLE,
            type="EXPRESS",
        )
    assert created["stateMachineArn"].endswith(":callback-launch")
