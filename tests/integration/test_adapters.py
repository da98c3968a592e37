"""Adapters at their edges: the Batch launcher and the ECS lookup (against botocore's Stubber,
which checks each call against the service model), the workflow starter and the pass trigger on
moto, settings and clients from the environment, and cheap imports of the functions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber

from spotline import resources
from spotline.aws.batch import AwsBatchLauncher, EcsInstanceResolver
from spotline.aws.clients import AwsClients
from spotline.aws.workflows import SqsPassTrigger, StepFunctionsStarter
from spotline.control.errors import BatchThrottled, LaunchFailed
from spotline.control.ports import BatchJobRequest
from spotline.control.settings import Settings, SettingsError, SpotlineConfig
from spotline.local.moto_lambda_route import LambdaTaskDispatcher
from spotline.local.provision import environment

from .helpers import CONFIG, REGION, Deployment

DEFINITION = "arn:aws:batch:us-east-1:123456789012:job-definition/spotline-training:3"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/spotline-train:latest"


def request(**changes: Any) -> BatchJobRequest:
    fields: dict[str, Any] = {
        "job_id": "job-1",
        "run": 2,
        "team": "vision",
        "job_queue": "arn:aws:batch:us-east-1:123456789012:job-queue/spotline-a100-spot",
        "image": IMAGE,
        "command": ("python", "train.py"),
        "gpus_per_node": 8,
        "nodes": 1,
        "environment": {resources.AGENT_ENV_JOB_ID: "job-1", resources.AGENT_ENV_EVENT_BUS: "bus"},
        "timeout_s": 3600,
    }
    fields.update(changes)
    return BatchJobRequest(**fields)


def described(image: str = IMAGE) -> dict[str, Any]:
    return {
        "jobDefinitions": [
            {
                "jobDefinitionName": "spotline-training",
                "jobDefinitionArn": DEFINITION,
                "revision": 3,
                "status": "ACTIVE",
                "type": "container",
                "containerProperties": {"image": image, "command": ["true"]},
            }
        ]
    }


def test_submit_sends_the_job_to_the_pools_queue_with_the_agents_environment() -> None:
    batch = boto3.client("batch", region_name=REGION)
    with Stubber(batch) as stub:
        stub.add_response("describe_job_definitions", described(), {"jobDefinitions": [DEFINITION]})
        stub.add_response(
            "submit_job",
            {"jobName": "spotline-job-1-r2", "jobId": "b-1"},
            {
                "jobName": "spotline-job-1-r2",
                "jobQueue": request().job_queue,
                "jobDefinition": DEFINITION,
                "containerOverrides": {
                    "command": ["python", "train.py"],
                    "environment": [
                        {"name": resources.AGENT_ENV_EVENT_BUS, "value": "bus"},
                        {"name": resources.AGENT_ENV_JOB_ID, "value": "job-1"},
                    ],
                    "resourceRequirements": [{"type": "GPU", "value": "8"}],
                },
                "tags": {"spotline:job-id": "job-1", "spotline:team": "vision"},
                "propagateTags": True,
                "timeout": {"attemptDurationSeconds": 3600},
            },
        )
        assert AwsBatchLauncher(batch, DEFINITION).submit(request()) == "b-1"
        stub.assert_no_pending_responses()


def test_a_job_with_another_image_runs_under_a_derived_definition() -> None:
    batch = boto3.client("batch", region_name=REGION)
    launcher = AwsBatchLauncher(batch, DEFINITION)
    with Stubber(batch) as stub:
        stub.add_response("describe_job_definitions", described())
        stub.add_response("describe_job_definitions", {"jobDefinitions": []})
        stub.add_response(
            "register_job_definition",
            {"jobDefinitionName": "d", "jobDefinitionArn": "arn:derived", "revision": 1},
        )
        stub.add_response("submit_job", {"jobName": "spotline-job-1-r2", "jobId": "b-2"})
        stub.add_response("submit_job", {"jobName": "spotline-job-1-r2", "jobId": "b-3"})
        assert launcher.submit(request(image="pytorch/pytorch:2.5")) == "b-2"
        # The derived definition is reused without asking Batch again.
        assert launcher.submit(request(image="pytorch/pytorch:2.5")) == "b-3"
        stub.assert_no_pending_responses()


def test_batch_throttling_and_refusals_map_to_named_errors() -> None:
    batch = boto3.client("batch", region_name=REGION)
    launcher = AwsBatchLauncher(batch, DEFINITION)
    with Stubber(batch) as stub:
        stub.add_response("describe_job_definitions", described())
        stub.add_client_error("submit_job", "TooManyRequestsException", http_status_code=429)
        stub.add_client_error("submit_job", "ClientException", "job queue not found", http_status_code=400)
        with pytest.raises(BatchThrottled):
            launcher.submit(request())
        with pytest.raises(LaunchFailed, match="job queue not found"):
            launcher.submit(request())


def test_a_gang_job_runs_under_a_multi_node_definition_derived_from_the_base() -> None:
    batch = boto3.client("batch", region_name=REGION)
    launcher = AwsBatchLauncher(batch, DEFINITION)
    name = ANY  # spotline-training-mnp-<digest of all it carries>: tested below
    container = {
        "command": ["python", "train.py"],
        "environment": [
            {"name": resources.AGENT_ENV_EVENT_BUS, "value": "bus"},
            {"name": resources.AGENT_ENV_JOB_ID, "value": "job-1"},
        ],
        "resourceRequirements": [{"type": "GPU", "value": "8"}],
    }

    def submitted(job_id: str, nodes: int) -> tuple[dict[str, Any], dict[str, Any]]:
        return {"jobName": "spotline-job-1-r2", "jobId": job_id}, {
            "jobName": "spotline-job-1-r2",
            "jobQueue": request().job_queue,
            "jobDefinition": "arn:mnp",
            # The definition's node range is open-ended, so the gang size is set here.
            "nodeOverrides": {
                "numNodes": nodes,
                "nodePropertyOverrides": [{"targetNodes": "0:", "containerOverrides": container}],
            },
            "tags": {"spotline:job-id": "job-1", "spotline:team": "vision"},
            "propagateTags": True,
            "timeout": {"attemptDurationSeconds": 3600},
        }

    with Stubber(batch) as stub:
        stub.add_response("describe_job_definitions", described(), {"jobDefinitions": [DEFINITION]})
        stub.add_response(
            "describe_job_definitions",
            {"jobDefinitions": []},
            {"jobDefinitionName": name, "status": "ACTIVE"},
        )
        stub.add_response(
            "register_job_definition",
            {"jobDefinitionName": "spotline-training-mnp", "jobDefinitionArn": "arn:mnp", "revision": 1},
            {
                "jobDefinitionName": name,
                "type": "multinode",
                "nodeProperties": {
                    "numNodes": 2,
                    "mainNode": 0,
                    "nodeRangeProperties": [
                        {"targetNodes": "0:", "container": {"image": IMAGE, "command": ["true"]}}
                    ],
                },
            },
        )
        stub.add_response("submit_job", *submitted("b-4", 2))
        # The derived definition is reused for a gang of any size without asking Batch again.
        stub.add_response("submit_job", *submitted("b-5", 4))
        assert launcher.submit(request(nodes=2)) == "b-4"
        assert launcher.submit(request(nodes=4)) == "b-5"
        stub.assert_no_pending_responses()


def test_a_derived_definition_is_named_by_everything_it_carries() -> None:
    # A deploy that changes the base definition's role or environment
    # (say, a per-team KMS key) must not reuse a derived copy of the old one.
    names: list[str] = []

    def derive(base: dict[str, Any]) -> None:
        batch = boto3.client("batch", region_name=REGION)
        launcher = AwsBatchLauncher(batch, DEFINITION)

        def remember(params: dict[str, Any], **_: Any) -> None:
            names.append(params["jobDefinitionName"])

        batch.meta.events.register("provide-client-params.batch.RegisterJobDefinition", remember)
        with Stubber(batch) as stub:
            stub.add_response("describe_job_definitions", {"jobDefinitions": [base]})
            stub.add_response("describe_job_definitions", {"jobDefinitions": []})
            stub.add_response(
                "register_job_definition",
                {"jobDefinitionName": "d", "jobDefinitionArn": "arn:d", "revision": 1},
            )
            stub.add_response("submit_job", {"jobName": "spotline-job-1-r2", "jobId": "b"})
            launcher.submit(request(image="pytorch/pytorch:2.5"))

    old = described()["jobDefinitions"][0]
    derive(old)
    derive(old)
    new_role = {
        **old,
        "revision": 4,
        "containerProperties": {**old["containerProperties"], "jobRoleArn": "arn:r2"},
    }
    derive(new_role)
    new_environment = {
        **old,
        "containerProperties": {**old["containerProperties"], "environment": [{"name": "K", "value": "v"}]},
    }
    derive(new_environment)
    assert names[0] == names[1] and names[0].startswith("spotline-training-")
    assert len({names[0], names[2], names[3]}) == 3


def test_a_job_definition_a_deploy_deregistered_is_resolved_again() -> None:
    # A warm launcher cached the definition's ARN; a deploy replaced it.
    batch = boto3.client("batch", region_name=REGION)
    launcher = AwsBatchLauncher(batch, DEFINITION)
    with Stubber(batch) as stub:
        stub.add_response("describe_job_definitions", described())
        stub.add_response("submit_job", {"jobName": "spotline-job-1-r2", "jobId": "b-1"})
        assert launcher.submit(request()) == "b-1"
        # The cached revision is gone: SubmitJob refuses it, the launcher resolves the name again
        stub.add_client_error(
            "submit_job",
            "ClientException",
            f"Job definition {DEFINITION} is INACTIVE",
            http_status_code=400,
        )
        fresh = described()
        fresh["jobDefinitions"][0]["revision"] = 4
        stub.add_response("describe_job_definitions", fresh)
        stub.add_response("submit_job", {"jobName": "spotline-job-1-r2", "jobId": "b-2"})
        assert launcher.submit(request()) == "b-2"
        stub.assert_no_pending_responses()
        # A refusal for another reason is not retried
        stub.add_client_error("submit_job", "ClientException", "job queue not found", http_status_code=400)
        with pytest.raises(LaunchFailed, match="job queue not found"):
            launcher.submit(request())


def test_a_base_definition_that_is_not_a_container_one_cannot_start_a_gang() -> None:
    batch = boto3.client("batch", region_name=REGION)
    eks = described()
    eks["jobDefinitions"][0]["type"] = "eks"
    with Stubber(batch) as stub:
        stub.add_response("describe_job_definitions", eks)
        with pytest.raises(LaunchFailed, match="type eks"):
            AwsBatchLauncher(batch, DEFINITION).submit(request(nodes=2))


def test_ecs_container_instances_resolve_to_ec2_instance_ids() -> None:
    ecs = boto3.client("ecs", region_name=REGION)
    arn = "arn:aws:ecs:us-east-1:123456789012:container-instance/spotline-a100-spot/0f1e2d3c"
    with Stubber(ecs) as stub:
        stub.add_response(
            "describe_container_instances",
            {"containerInstances": [{"containerInstanceArn": arn, "ec2InstanceId": "i-0abc"}]},
            {"cluster": "spotline-a100-spot", "containerInstances": [arn]},
        )
        assert EcsInstanceResolver(ecs).resolve([arn, "i-0def"]) == ["i-0abc", "i-0def"]


def test_starting_a_workflow_twice_by_name_is_not_an_error(deployment: Deployment) -> None:
    starter = StepFunctionsStarter(deployment.clients.stepfunctions)
    arn = deployment.state_machines["launch"]
    first = starter.start(arn, "launch-job-1-v1", {"job_id": "job-1", "version": 1, "pool": "p"})
    # A redelivered event may carry a different input for the same decision.
    second = starter.start(arn, "launch-job-1-v1", {"job_id": "job-1", "version": 1, "pool": "other"})
    assert first == second
    assert len(deployment.executions("launch")) == 1


def test_the_pass_trigger_sends_to_the_scheduler_fifo_queue(deployment: Deployment) -> None:
    sqs = deployment.clients.client("sqs")
    url = sqs.create_queue(QueueName="triggers.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    trigger = SqsPassTrigger(deployment.clients.sqs, url)
    trigger.request("freed", "freed-job-1-v5")
    trigger.request("freed", "freed-job-1-v5")  # deduplicated
    messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"])["Messages"]
    assert len(messages) == 1
    assert messages[0]["Attributes"]["MessageGroupId"] == resources.SCHEDULER_MESSAGE_GROUP


def test_settings_parse_the_environment_and_name_what_is_missing() -> None:
    tables = {t.logical_id: f"t-{t.logical_id}" for t in resources.TABLES}
    env = environment(tables, event_bus="bus", state_machines={"preempt": "arn:p"}, config=CONFIG)
    settings = Settings.from_env(env)
    assert settings.jobs_table == "t-Jobs" and settings.state_machine_arn("preempt") == "arn:p"
    assert settings.config.pools_by_name["a100-spot"].job_queue.endswith("spotline-a100-spot")
    assert settings.config.scheduler.protection_period_s == 0
    with pytest.raises(SettingsError, match=resources.ENV_LAUNCH_STATE_MACHINE_ARN):
        settings.state_machine_arn("launch")
    with pytest.raises(SettingsError, match=resources.ENV_JOBS_TABLE):
        Settings.from_env({k: v for k, v in env.items() if k != resources.ENV_JOBS_TABLE})
    with pytest.raises(SettingsError, match="identities"):
        Settings.from_env(
            {**env, resources.ENV_CONFIG: json.dumps({**CONFIG, "identities": {"x": "ghosts"}})}
        )
    # A scheduler setting an earlier version had (or a typo) is refused with its name, not dropped.
    removed = {**CONFIG, "scheduler": {**CONFIG["scheduler"], "fresh_checkpoint_s": 60}}
    with pytest.raises(SettingsError, match="not a setting of this version: fresh_checkpoint_s"):
        Settings.from_env({**env, resources.ENV_CONFIG: json.dumps(removed)})
    with pytest.raises(SettingsError, match="heartbeat_timeout"):
        Settings.from_env({**env, resources.ENV_CONFIG: json.dumps({**CONFIG, "heartbeat_timeout": 60})})


def test_clients_honour_the_endpoint_and_region_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:5999")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    clients = AwsClients()
    assert clients.client("dynamodb").meta.endpoint_url == "http://127.0.0.1:5999"
    assert clients.client("dynamodb").meta.region_name == "eu-west-1"
    assert clients.client("dynamodb") is clients.client("dynamodb")


def test_the_dispatcher_answers_like_lambda() -> None:
    def fails(event: dict[str, Any], context: Any) -> Any:
        raise BatchThrottled("slow down")

    dispatcher = LambdaTaskDispatcher({"arn:aws:lambda:us-east-1:123456789012:function:tasks": fails})
    failed = dispatcher.invoke("tasks", b'{"task": "x"}')
    assert failed["FunctionError"] == "Unhandled" and failed["Payload"]["errorType"] == "BatchThrottled"
    missing = dispatcher.invoke("nothing", b"{}")
    assert missing["Payload"]["errorType"] == "Lambda.ResourceNotFoundException"


def test_function_modules_import_without_settings_or_aws() -> None:
    # Lambda imports the module on a cold start; it must not need the environment yet.
    root = Path(__file__).resolve().parents[2]
    modules = ", ".join(f"functions.{f.module}" for f in resources.FUNCTIONS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTLINE_")}
    code = f"import time; t = time.perf_counter(); import {modules}; print(time.perf_counter() - t)"
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert float(result.stdout.strip()) < 10.0


def test_find_live_lists_the_runs_jobs_by_name_and_leaves_out_the_ended_ones() -> None:
    batch = boto3.client("batch", region_name=REGION)
    launcher = AwsBatchLauncher(batch, DEFINITION)
    queue = request().job_queue
    summary = {"jobArn": "arn", "jobName": "spotline-job-1-r2", "createdAt": 0}
    with Stubber(batch) as stub:
        stub.add_response(
            "list_jobs",
            {
                "jobSummaryList": [
                    {**summary, "jobId": "b-2", "status": "RUNNING", "createdAt": 20},
                    {**summary, "jobId": "b-0", "status": "FAILED", "createdAt": 5},
                ],
                "nextToken": "t",
            },
            {"jobQueue": queue, "filters": [{"name": "JOB_NAME", "values": ["spotline-job-1-r2"]}]},
        )
        stub.add_response(
            "list_jobs",
            {"jobSummaryList": [{**summary, "jobId": "b-1", "status": "RUNNABLE", "createdAt": 10}]},
            {
                "jobQueue": queue,
                "filters": [{"name": "JOB_NAME", "values": ["spotline-job-1-r2"]}],
                "nextToken": "t",
            },
        )
        assert launcher.find_live(queue, "spotline-job-1-r2") == ["b-1", "b-2"]
        stub.add_client_error("list_jobs", "TooManyRequestsException", http_status_code=429)
        with pytest.raises(BatchThrottled):
            launcher.find_live(queue, "spotline-job-1-r2")
        stub.assert_no_pending_responses()


def test_stopped_names_the_ended_jobs_and_those_batch_no_longer_knows() -> None:
    batch = boto3.client("batch", region_name=REGION)
    launcher = AwsBatchLauncher(batch, DEFINITION)
    job = {
        "jobArn": "arn",
        "jobName": "spotline-job-1-r2",
        "jobQueue": "q",
        "startedAt": 1,
        "jobDefinition": "d",
    }
    with Stubber(batch) as stub:
        stub.add_response(
            "describe_jobs",
            {
                "jobs": [
                    {**job, "jobId": "b-1", "status": "RUNNING"},
                    {**job, "jobId": "b-2", "status": "FAILED"},
                ]
            },
            {"jobs": ["b-1", "b-2", "b-3"]},
        )
        assert launcher.stopped(["b-1", "b-2", "b-3"]) == {"b-2", "b-3"}
        stub.add_client_error("describe_jobs", "TooManyRequestsException", http_status_code=429)
        with pytest.raises(BatchThrottled):
            launcher.stopped(["b-1"])
        stub.assert_no_pending_responses()


def test_a_job_in_an_efa_pool_runs_under_its_teams_efa_definition() -> None:
    batch = boto3.client("batch", region_name=REGION)
    launcher = AwsBatchLauncher(
        batch,
        None,
        team_definitions={"vision": "spotline-dev-training-vision", "nlp": "spotline-dev-training-nlp"},
        efa_team_definitions={"vision": "spotline-dev-training-vision-efa"},
    )
    efa = described()
    efa["jobDefinitions"][0]["jobDefinitionArn"] = "arn:efa"
    plain = described()
    plain["jobDefinitions"][0]["jobDefinitionArn"] = "arn:plain"
    with Stubber(batch) as stub:
        # In an EFA pool: the team's EFA definition (it maps the EFA device)
        stub.add_response(
            "describe_job_definitions",
            efa,
            {"jobDefinitionName": "spotline-dev-training-vision-efa", "status": "ACTIVE"},
        )
        stub.add_response("submit_job", {"jobName": "spotline-job-1-r2", "jobId": "b-efa"})
        # Elsewhere: the plain one
        stub.add_response(
            "describe_job_definitions",
            plain,
            {"jobDefinitionName": "spotline-dev-training-vision", "status": "ACTIVE"},
        )
        stub.add_response("submit_job", {"jobName": "spotline-job-1-r2", "jobId": "b-plain"})
        assert launcher.submit(request(efa=True)) == "b-efa"
        assert launcher.submit(request()) == "b-plain"
        stub.assert_no_pending_responses()
    # A team without an EFA definition cannot launch into an EFA pool (never without the device).
    with pytest.raises(LaunchFailed, match="efa_job_definitions"):
        launcher.submit(request(team="nlp", efa=True))


def test_an_efa_pool_needs_every_teams_efa_definition() -> None:
    pools = [{**CONFIG["pools"][0], "efa": True}, CONFIG["pools"][1]]
    definitions = {"vision": "d-vision", "nlp": "d-nlp"}
    with pytest.raises(ValueError, match=r"efa_job_definitions: .*\['nlp'\]"):
        SpotlineConfig.model_validate(
            {**CONFIG, "pools": pools, "job_definitions": definitions, "efa_job_definitions": {"vision": "e"}}
        )
    config = SpotlineConfig.model_validate(
        {
            **CONFIG,
            "pools": pools,
            "job_definitions": definitions,
            "efa_job_definitions": {t: f"{d}-efa" for t, d in definitions.items()},
        }
    )
    assert config.pools_by_name["a100-spot"].efa and not config.pools_by_name["a100-on-demand"].efa


def test_a_jobs_env_reaches_its_container_through_the_batch_overrides(deployment: Deployment) -> None:
    from .helpers import start, submit

    # Given a job with an env of its own, admitted and launched
    record = start(deployment, submit(deployment, env={"LR": "3e-4", "TOKENIZERS_PARALLELISM": "false"}))
    (launched,) = [r for r in deployment.launcher.submitted if r.job_id == record.id]
    # Then the launch carries it beside the agent's environment
    assert (
        launched.environment["LR"] == "3e-4" and launched.environment[resources.AGENT_ENV_JOB_ID] == record.id
    )
    # And AWS Batch receives it in the container overrides
    batch = boto3.client("batch", region_name=REGION)
    sent: list[dict[str, Any]] = []
    batch.meta.events.register(
        "provide-client-params.batch.SubmitJob", lambda params, **_: sent.append(params)
    )
    with Stubber(batch) as stub:
        stub.add_response(
            "describe_job_definitions", described(launched.image), {"jobDefinitions": [DEFINITION]}
        )
        stub.add_response("submit_job", {"jobName": launched.job_name, "jobId": "b-9"})
        assert AwsBatchLauncher(batch, DEFINITION).submit(launched) == "b-9"
        stub.assert_no_pending_responses()
    environment = {e["name"]: e["value"] for e in sent[0]["containerOverrides"]["environment"]}
    assert environment["LR"] == "3e-4" and environment["TOKENIZERS_PARALLELISM"] == "false"
    assert environment[resources.AGENT_ENV_JOB_ID] == record.id
