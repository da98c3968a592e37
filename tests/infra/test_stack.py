"""The synthesized Spotline stack, checked against `spotline.resources` and the context.

Given the stack synthesized once (conftest.synthesized) with the AwsSolutions checks, each test
reads the CloudFormation template and checks one promise of the issue: tables, rules, functions,
least privilege, workflows, Batch, buckets, network, API, and a clean cdk-nag report.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

import pytest
from aws_cdk import Validations

from spotline import resources as r
from spotline.control.settings import Settings, SpotlineConfig
from stacks.functions import ASYNC_INVOKED
from stacks.messaging import TARGET_MAX_EVENT_AGE, TARGET_RETRY_ATTEMPTS
from tests.infra.support import Synthesized, cdk_context

CONTEXT = cdk_context()
# The committed context names no account (the stack is account-agnostic): ARNs hold AWS::AccountId.
ACCOUNT = CONTEXT.get("account", "<AWS::AccountId>")
FUNCTION_NAMES = [f.name for f in r.FUNCTIONS]


# --- helpers ---------------------------------------------------------------------------------


def flatten(value: Any) -> str:
    """An intrinsic as readable text: Ref -> <Id>, GetAtt -> <Id.Attr>, Join -> joined parts."""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, dict) and len(value) == 1:
        ((function, argument),) = value.items()
        if function == "Ref":
            return f"<{argument}>"
        if function == "Fn::GetAtt":
            return f"<{argument[0]}.{argument[1]}>"
        if function == "Fn::Join":
            return str(argument[0]).join(flatten(part) for part in argument[1])
    raise AssertionError(f"unexpected intrinsic {value!r}")


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def statements_of_role(syn: Synthesized, role_id: str) -> list[dict[str, Any]]:
    """Every Allow/Deny statement that applies to a role: its inline policies and the
    AWS::IAM::Policy resources attached to it, with actions and resources as lists of text."""
    raw: list[dict[str, Any]] = []
    role = syn.json["Resources"][role_id]["Properties"]
    for policy in role.get("Policies", []):
        raw += policy["PolicyDocument"]["Statement"]
    for policy in syn.resources("AWS::IAM::Policy").values():
        if {"Ref": role_id} in policy["Properties"].get("Roles", []):
            raw += policy["Properties"]["PolicyDocument"]["Statement"]
    return [
        {
            "Effect": s["Effect"],
            "Action": [str(a) for a in as_list(s["Action"])],
            "Resource": [flatten(x) for x in as_list(s.get("Resource", []))],
            "Condition": s.get("Condition"),
        }
        for s in raw
    ]


def actions_of(statements: Iterable[dict[str, Any]]) -> set[str]:
    return {a for s in statements for a in s["Action"]}


def function_role_id(syn: Synthesized, name: str) -> str:
    return syn.logical_id(syn.stack.functions.roles[name])


def getatt_arn(syn: Synthesized, construct: Any, attribute: str = "Arn") -> dict[str, Any]:
    return {"Fn::GetAtt": [syn.logical_id(construct), attribute]}


# --- DynamoDB --------------------------------------------------------------------------------


@pytest.mark.parametrize("table", r.TABLES, ids=lambda t: t.logical_id)
def test_table_keys_indexes_ttl_pitr_and_encryption(synthesized: Synthesized, table: r.Table) -> None:
    resource = synthesized.json["Resources"][
        synthesized.logical_id(synthesized.stack.tables[table.logical_id])
    ]
    props = resource["Properties"]
    expected_keys = [{"AttributeName": table.partition_key, "KeyType": "HASH"}]
    if table.sort_key:
        expected_keys.append({"AttributeName": table.sort_key, "KeyType": "RANGE"})
    assert props["KeySchema"] == expected_keys
    types = {a["AttributeName"]: a["AttributeType"] for a in props["AttributeDefinitions"]}
    for name, kind in types.items():
        assert kind == ("N" if name in table.number_keys else "S"), name
    indexes = {i["IndexName"]: i for i in props.get("GlobalSecondaryIndexes", [])}
    assert set(indexes) == {i.name for i in table.indexes}
    for index in table.indexes:
        keys = [{"AttributeName": index.partition_key, "KeyType": "HASH"}]
        if index.sort_key:
            keys.append({"AttributeName": index.sort_key, "KeyType": "RANGE"})
        assert indexes[index.name]["KeySchema"] == keys
        if index.projection is None:
            assert indexes[index.name]["Projection"] == {"ProjectionType": "ALL"}
        else:
            assert indexes[index.name]["Projection"] == {
                "ProjectionType": "INCLUDE",
                "NonKeyAttributes": list(index.projection),
            }
    if table.ttl_attribute:
        assert props["TimeToLiveSpecification"] == {"AttributeName": table.ttl_attribute, "Enabled": True}
    else:
        assert "TimeToLiveSpecification" not in props
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["SSESpecification"] == {"SSEEnabled": True, "SSEType": "KMS"}
    (replica,) = props["Replicas"]
    assert replica["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert resource["DeletionPolicy"] == "Retain"


# --- events ----------------------------------------------------------------------------------


@pytest.mark.parametrize("rule", r.RULES, ids=lambda rule: rule.name)
def test_rule_pattern_bus_target_retry_and_dead_letters(synthesized: Synthesized, rule: r.Rule) -> None:
    stack = synthesized.stack
    props = synthesized.json["Resources"][synthesized.logical_id(stack.routing.rules[rule.name])][
        "Properties"
    ]
    assert props["EventPattern"] == rule.pattern
    if rule.bus == r.PROJECT_BUS:
        assert props["EventBusName"] == {"Ref": synthesized.logical_id(stack.messaging.bus)}
    else:
        assert props.get("EventBusName", "default") == "default"
    (target,) = props["Targets"]
    assert target["RetryPolicy"] == {
        "MaximumRetryAttempts": TARGET_RETRY_ATTEMPTS,
        "MaximumEventAgeInSeconds": TARGET_MAX_EVENT_AGE.to_seconds(),
    }
    assert target["DeadLetterConfig"] == {"Arn": getatt_arn(synthesized, stack.messaging.events_dead_letters)}
    if rule.target == r.SCHEDULER_QUEUE:
        assert target["Arn"] == getatt_arn(synthesized, stack.messaging.scheduler_queue)
        assert target["SqsParameters"] == {"MessageGroupId": r.SCHEDULER_MESSAGE_GROUP}
    elif r.event_queue(rule.target) is not None:
        assert target["Arn"] == getatt_arn(synthesized, stack.messaging.event_queues[rule.target])
        assert "SqsParameters" not in target
    else:
        assert target["Arn"] == getatt_arn(synthesized, stack.functions[rule.target])


def test_schedules_tick_the_scheduler_queue_and_run_the_reconciler(synthesized: Synthesized) -> None:
    stack = synthesized.stack
    rules = stack.routing.rules
    tick = synthesized.json["Resources"][synthesized.logical_id(rules["SchedulerTick"])]["Properties"]
    assert tick["ScheduleExpression"] == f"rate({r.SCHEDULER_TICK_RATE_MINUTES} minute)"
    (target,) = tick["Targets"]
    assert target["Arn"] == getatt_arn(synthesized, stack.messaging.scheduler_queue)
    assert target["SqsParameters"] == {"MessageGroupId": r.SCHEDULER_MESSAGE_GROUP}
    # Each tick's body differs (its time), or content-based deduplication would drop ticks.
    assert target["InputTransformer"]["InputPathsMap"]["time"] == "$.time"
    assert "DeadLetterConfig" in target and "RetryPolicy" in target
    reconcile = synthesized.json["Resources"][synthesized.logical_id(rules["ReconcilerSchedule"])][
        "Properties"
    ]
    assert reconcile["ScheduleExpression"] == f"rate({r.RECONCILER_RATE_MINUTES} minutes)"
    (target,) = reconcile["Targets"]
    assert target["Arn"] == getatt_arn(synthesized, stack.functions["reconciler"])
    assert "DeadLetterConfig" in target and "RetryPolicy" in target


def test_scheduler_queue_is_fifo_and_feeds_one_pass_at_a_time(synthesized: Synthesized) -> None:
    stack = synthesized.stack
    queue = synthesized.json["Resources"][synthesized.logical_id(stack.messaging.scheduler_queue)][
        "Properties"
    ]
    assert queue["FifoQueue"] is True
    assert queue["ContentBasedDeduplication"] is True
    assert queue["RedrivePolicy"]["deadLetterTargetArn"] == getatt_arn(
        synthesized, stack.messaging.scheduler_dead_letters
    )
    scheduler = next(f for f in r.FUNCTIONS if f.name == "scheduler")
    # Long enough for Lambda (at least the timeout), short enough that a pass that dies without
    # answering holds the one message group for seconds past its timeout, not 6 minutes.
    assert scheduler.timeout_s <= queue["VisibilityTimeout"] <= scheduler.timeout_s + 30
    synthesized.template.has_resource_properties(
        "AWS::Lambda::EventSourceMapping",
        {
            "BatchSize": 10,
            "EventSourceArn": getatt_arn(synthesized, stack.messaging.scheduler_queue),
            "FunctionName": {"Ref": synthesized.logical_id(stack.functions["scheduler"])},
            "FunctionResponseTypes": ["ReportBatchItemFailures"],
        },
    )
    # One message group serializes the passes; no reserved concurrency (a limit-10 account has
    # none to give)
    function = synthesized.json["Resources"][synthesized.logical_id(stack.functions["scheduler"])]
    assert "ReservedConcurrentExecutions" not in function["Properties"]


def test_heartbeats_reach_their_function_in_batches_not_one_invocation_each(
    synthesized: Synthesized,
) -> None:
    # The Job Heartbeat rule puts each heartbeat on a standard queue...
    stack = synthesized.stack
    spec = r.HEARTBEAT_QUEUE
    [rule] = [rule for rule in r.RULES if rule.pattern["detail-type"] == [r.DETAIL_JOB_HEARTBEAT]]
    assert rule.target == spec.logical_id and spec.function == "heartbeat"
    queue_id = synthesized.logical_id(stack.messaging.event_queues[spec.logical_id])
    queue = synthesized.json["Resources"][queue_id]["Properties"]
    assert "FifoQueue" not in queue
    assert queue["RedrivePolicy"] == {
        "deadLetterTargetArn": getatt_arn(synthesized, stack.messaging.events_dead_letters),
        "maxReceiveCount": spec.max_receives,
    }
    # (AWS: at least six times the function's timeout with a batching window)
    assert queue["VisibilityTimeout"] >= 6 * next(f for f in r.FUNCTIONS if f.name == "heartbeat").timeout_s
    # ...and Lambda hands the function up to 100 of them at once, waiting up to 5 s to fill a
    # batch, with at most two invocations at a time however many nodes heartbeat
    [mapping] = [
        m["Properties"]
        for m in synthesized.resources("AWS::Lambda::EventSourceMapping").values()
        if m["Properties"]["EventSourceArn"] == {"Fn::GetAtt": [queue_id, "Arn"]}
    ]
    assert mapping["FunctionName"] == {"Ref": synthesized.logical_id(stack.functions["heartbeat"])}
    assert (mapping["BatchSize"], mapping["MaximumBatchingWindowInSeconds"]) == (100, 5)
    assert mapping["ScalingConfig"] == {"MaximumConcurrency": 2}
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    # The function is no longer invoked asynchronously by EventBridge: no invoke config of its own
    heartbeat = synthesized.json["Resources"][synthesized.logical_id(stack.functions["heartbeat"])]
    assert "DeadLetterConfig" not in heartbeat["Properties"]
    rules_invoking_it = [
        rule_id
        for rule_id, resource in synthesized.resources("AWS::Events::Rule").items()
        for target in resource["Properties"].get("Targets", [])
        if target["Arn"] == getatt_arn(synthesized, stack.functions["heartbeat"])
    ]
    assert rules_invoking_it == []
    # Heartbeats left in the queue for half the heartbeat timeout (10 min by default) page someone
    alarm = synthesized.json["Resources"][synthesized.logical_id(stack.alarms.alarms["OldestHeartbeat"])]
    assert alarm["Properties"]["Dimensions"] == [
        {
            "Name": "QueueName",
            "Value": getatt_arn(synthesized, stack.messaging.event_queues[spec.logical_id], "QueueName"),
        }
    ]
    assert alarm["Properties"]["Threshold"] == 300


def test_every_queue_is_encrypted_and_refuses_plain_http(synthesized: Synthesized) -> None:
    queues = synthesized.resources("AWS::SQS::Queue")
    assert len(queues) == 3 + len(r.EVENT_QUEUES)
    policies = synthesized.resources("AWS::SQS::QueuePolicy").values()
    for queue_id, queue in queues.items():
        assert queue["Properties"].get("SqsManagedSseEnabled") is True, queue_id
        denies = [
            s
            for p in policies
            if {"Ref": queue_id} in p["Properties"]["Queues"]
            for s in p["Properties"]["PolicyDocument"]["Statement"]
            if s["Effect"] == "Deny" and s.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}}
        ]
        assert denies, f"{queue_id} accepts requests without TLS"


# --- functions -------------------------------------------------------------------------------


@pytest.mark.parametrize("function", r.FUNCTIONS, ids=lambda f: f.name)
def test_function_runtime_handler_tracing_and_environment(
    synthesized: Synthesized, function: r.Function
) -> None:
    props = synthesized.json["Resources"][synthesized.logical_id(synthesized.stack.functions[function.name])][
        "Properties"
    ]
    assert props["Runtime"] == "python3.12"
    assert props["Handler"] == f"functions.{function.module}.handler"
    # cdk.json leaves `tracing` off: no X-Ray on the functions, and Powertools told so.
    assert "TracingConfig" not in props
    assert props["Environment"]["Variables"]["POWERTOOLS_TRACE_DISABLED"] == "true"
    assert props["Timeout"] == function.timeout_s
    assert props["MemorySize"] == function.memory_mb
    assert props["Architectures"] == ["x86_64"]
    env = props["Environment"]["Variables"]
    expected = {t.env for t in r.TABLES} | {m.env for m in r.STATE_MACHINES}
    expected |= {r.ENV_EVENT_BUS, r.ENV_SCHEDULER_QUEUE_URL, r.ENV_CHECKPOINT_BUCKET, r.ENV_CONFIG}
    assert expected <= set(env)
    assert env["POWERTOOLS_SERVICE_NAME"] == "spotline"
    assert env["POWERTOOLS_METRICS_NAMESPACE"] == "Spotline"
    assert env["PYDANTIC_DISABLE_PLUGINS"] == "__all__"
    (layer,) = props["Layers"]
    assert flatten(layer).endswith(
        f":017000801446:layer:AWSLambdaPowertoolsPythonV3-python312-x86_64:{CONTEXT['powertools_layer_version']}"
    )
    assert props["Role"] == getatt_arn(synthesized, synthesized.stack.functions.roles[function.name])
    if function.name in ASYNC_INVOKED:
        assert props["DeadLetterConfig"] == {
            "TargetArn": getatt_arn(synthesized, synthesized.stack.messaging.events_dead_letters)
        }


@pytest.mark.parametrize("function", r.FUNCTIONS, ids=lambda f: f.name)
def test_each_function_environment_parses_as_settings(synthesized: Synthesized, function: r.Function) -> None:
    """What the handlers do on their first call: Settings.from_env (references shown as <Id>)."""
    props = synthesized.json["Resources"][synthesized.logical_id(synthesized.stack.functions[function.name])]
    env = {name: flatten(value) for name, value in props["Properties"]["Environment"]["Variables"].items()}
    settings = Settings.from_env(env)
    assert settings.jobs_table == f"<{synthesized.logical_id(synthesized.stack.tables[r.JOBS.logical_id])}>"
    assert settings.config.agent_poll_s == CONTEXT.get("agent_poll_s", 5.0)


def test_every_function_has_its_own_role(synthesized: Synthesized) -> None:
    handlers = {f"functions.{f.module}.handler" for f in r.FUNCTIONS}
    roles = [
        props["Properties"]["Role"]["Fn::GetAtt"][0]
        for props in synthesized.resources("AWS::Lambda::Function").values()
        if props["Properties"].get("Handler") in handlers
    ]
    assert len(roles) == len(r.FUNCTIONS) == len(set(roles))


def test_state_machine_arns_in_the_environment_name_the_state_machines(synthesized: Synthesized) -> None:
    machines = {
        props["Properties"]["StateMachineName"]: lid
        for lid, props in synthesized.resources("AWS::StepFunctions::StateMachine").items()
    }
    stack = synthesized.stack
    for machine in r.STATE_MACHINES:
        name = stack.state_machine_names[machine.name]
        assert machines[name] == synthesized.logical_id(stack.workflows[machine.name])
        for function in r.FUNCTIONS:
            env = synthesized.json["Resources"][synthesized.logical_id(stack.functions[function.name])][
                "Properties"
            ]["Environment"]["Variables"]
            assert flatten(env[machine.env]) == (
                f"arn:aws:states:{CONTEXT['region']}:{ACCOUNT}:stateMachine:{name}"
            )


def test_spotline_config_is_what_the_functions_parse(synthesized: Synthesized) -> None:
    stack = synthesized.stack
    env = synthesized.json["Resources"][synthesized.logical_id(stack.functions["api"])]["Properties"][
        "Environment"
    ]
    text = flatten(env["Variables"][r.ENV_CONFIG])
    config = SpotlineConfig.model_validate(json.loads(text))
    pools = {pool["name"]: pool for pool in CONTEXT["pools"]}
    assert [p.name for p in config.pools] == list(pools)
    for pool in config.pools:
        assert pool.capacity_gpus == pools[pool.name]["max_gpus"]
        assert pool.gpu_type == pools[pool.name]["gpu_type"]
        assert pool.purchase.value == pools[pool.name]["purchase"]
        # Each team's jobs run in its own queue, on its own instances (team_instances, the default)
        assert pool.job_queue is None
        teams = [t["team"] for t in CONTEXT["teams"]]
        assert pool.team_job_queues == {t: f"spotline-dev-{pool.name}-{t}" for t in teams}
        for team, name in pool.team_job_queues.items():
            queue = stack.compute.job_queues[pool.name, team]
            assert _properties_of(synthesized, queue)["JobQueueName"] == name
    assert config.job_definition is None
    assert config.job_definitions == {
        t["team"]: f"{stack.compute.job_definition_name}-{t['team']}" for t in CONTEXT["teams"]
    }
    assert [t.team for t in config.teams] == [t["team"] for t in CONTEXT["teams"]]
    assert config.identities == CONTEXT["identities"]


# --- least privilege -------------------------------------------------------------------------


def test_no_identity_policy_grants_a_wildcard_action(synthesized: Synthesized) -> None:
    for role_id in synthesized.resources("AWS::IAM::Role"):
        for statement in statements_of_role(synthesized, role_id):
            for action in statement["Action"]:
                assert "*" not in action, f"{role_id} is granted {action}"


@pytest.mark.parametrize("function", r.FUNCTIONS, ids=lambda f: f.name)
def test_table_access_is_exactly_the_declared_reads_and_writes(
    synthesized: Synthesized, function: r.Function
) -> None:
    stack = synthesized.stack
    table_ids = {t.logical_id: synthesized.logical_id(stack.tables[t.logical_id]) for t in r.TABLES}
    statements = [
        s
        for s in statements_of_role(synthesized, function_role_id(synthesized, function.name))
        if any(a.startswith("dynamodb:") for a in s["Action"])
    ]
    touched: dict[str, set[str]] = {}
    for statement in statements:
        for resource in statement["Resource"]:
            match = re.fullmatch(r"<(\w+)\.Arn>(/index/\w+)?", resource)
            assert match, f"{function.name}: dynamodb on {resource}"
            logical = next(k for k, v in table_ids.items() if v == match.group(1))
            touched.setdefault(logical, set()).update(statement["Action"])
            if match.group(2):
                assert logical in function.reads, f"{function.name} queries an index of {logical}"
    assert set(touched) == set(function.reads) | set(function.writes)
    writes = {"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem"}
    for logical, actions in touched.items():
        assert "dynamodb:Scan" not in actions
        if logical not in function.writes:
            assert not actions & writes, f"{function.name} may write {logical}"
        if logical in function.reads:
            assert {"dynamodb:GetItem", "dynamodb:Query"} <= actions


@pytest.mark.parametrize("function", r.FUNCTIONS, ids=lambda f: f.name)
def test_other_actions_are_exactly_resources_function_actions(
    synthesized: Synthesized, function: r.Function
) -> None:
    stack = synthesized.stack
    statements = statements_of_role(synthesized, function_role_id(synthesized, function.name))
    dead_letters = f"<{synthesized.logical_id(stack.messaging.events_dead_letters)}.Arn>"
    scheduler_queue = f"<{synthesized.logical_id(stack.messaging.scheduler_queue)}.Arn>"
    own_logs = f"<{synthesized.logical_id(stack.functions.functions[function.name].log_group)}.Arn>"
    event_queues = {
        spec.function: [[f"<{synthesized.logical_id(stack.messaging.event_queues[spec.logical_id])}.Arn>"]]
        for spec in r.EVENT_QUEUES
    }
    granted: set[str] = set()
    for statement in statements:
        actions = set(statement["Action"])
        if all(a.startswith("dynamodb:") for a in actions):
            continue
        if actions <= {"xray:PutTraceSegments", "xray:PutTelemetryRecords", "batch:DescribeJobDefinitions"}:
            assert statement["Resource"] == ["*"]
        if statement["Resource"] == [own_logs]:
            assert actions == {"logs:CreateLogStream", "logs:PutLogEvents"}
            continue
        if statement["Resource"] == [dead_letters]:  # Lambda's own async dead-letter queue
            assert function.name in ASYNC_INVOKED
            continue
        if (
            function.name == "scheduler"
            and statement["Resource"] == [scheduler_queue]
            and "sqs:ReceiveMessage" in actions
        ):
            continue  # the event source mapping consumes the queue
        if statement["Resource"] in event_queues.get(function.name, []) and "sqs:ReceiveMessage" in actions:
            continue  # the same, for its event queue (the heartbeats')
        granted |= actions - {"xray:PutTraceSegments", "xray:PutTelemetryRecords"}
    expected = set(r.FUNCTION_ACTIONS.get(function.name, {})) | {"events:PutEvents"}
    assert granted == expected


def test_events_are_put_on_the_project_bus_only(synthesized: Synthesized) -> None:
    bus = f"<{synthesized.logical_id(synthesized.stack.messaging.bus)}.Arn>"
    for name in FUNCTION_NAMES:
        puts = [
            s
            for s in statements_of_role(synthesized, function_role_id(synthesized, name))
            if "events:PutEvents" in s["Action"]
        ]
        assert [s["Resource"] for s in puts] == [[bus]], name


def test_workflow_and_batch_actions_are_scoped(synthesized: Synthesized) -> None:
    stack = synthesized.stack
    prefix = f"arn:aws:states:{CONTEXT['region']}:{ACCOUNT}:stateMachine:"
    machines = {m.name: prefix + stack.state_machine_names[m.name] for m in r.STATE_MACHINES}
    queues = {f"<{synthesized.logical_id(q)}.JobQueueArn>" for q in stack.compute.job_queues.values()}
    batch = f"arn:aws:batch:{CONTEXT['region']}:{ACCOUNT}"
    family = f"{batch}:job-definition/{stack.compute.job_definition_name}*"
    scheduler_queue = f"<{synthesized.logical_id(stack.messaging.scheduler_queue)}.Arn>"
    dead_letters = f"<{synthesized.logical_id(stack.messaging.events_dead_letters)}.Arn>"
    for name, actions in r.FUNCTION_ACTIONS.items():
        statements = statements_of_role(synthesized, function_role_id(synthesized, name))
        for action, hint in actions.items():
            (statement,) = [s for s in statements if action in s["Action"]]
            if action.startswith("states:"):
                assert set(statement["Resource"]) == {arn for m, arn in machines.items() if m in hint}
            elif action == "batch:SubmitJob":
                assert set(statement["Resource"]) == queues | {family}
            elif action == "batch:TerminateJob":
                assert statement["Condition"] == {"Null": {"aws:ResourceTag/spotline:job-id": "false"}}
            elif action == "batch:TagResource":
                assert statement["Condition"] == {"StringEquals": {"batch:CreateAction": "SubmitJob"}}
            elif action == "iam:PassRole":
                assert sorted(statement["Resource"]) == sorted(
                    f"<{synthesized.logical_id(role)}.Arn>" for role in stack.compute.job_definition_roles
                )
            elif action == "sqs:SendMessage":
                # (merged with Lambda's own grant on its async dead-letter queue, if any)
                assert scheduler_queue in statement["Resource"]
                assert set(statement["Resource"]) <= {scheduler_queue, dead_letters}


def test_the_api_cannot_launch_jobs_or_start_workflows(synthesized: Synthesized) -> None:
    granted = actions_of(statements_of_role(synthesized, function_role_id(synthesized, "api")))
    assert not granted & {
        "batch:SubmitJob",
        "batch:RegisterJobDefinition",
        "iam:PassRole",
        "states:StartExecution",
    }


@pytest.mark.parametrize("machine", r.STATE_MACHINES, ids=lambda m: m.name)
def test_state_machine_role_invokes_only_its_task_functions(
    synthesized: Synthesized, machine: r.StateMachine
) -> None:
    stack = synthesized.stack
    role = stack.workflows[machine.name].role
    statements = statements_of_role(synthesized, synthesized.logical_id(role))
    invokes = [s for s in statements if "lambda:InvokeFunction" in s["Action"]]
    # Any published version of its task functions (an execution keeps the versions it started with)
    expected = {
        f"<{synthesized.logical_id(stack.functions[fn])}.Arn>:*" for fn in machine.substitutions.values()
    }
    assert {flatten(res) for s in invokes for res in as_list(s["Resource"])} == expected
    others = actions_of(statements) - {"lambda:InvokeFunction"}
    assert all(a.startswith(("logs:", "xray:")) for a in others), others


# --- workflows -------------------------------------------------------------------------------


@pytest.mark.parametrize("machine", r.STATE_MACHINES, ids=lambda m: m.name)
def test_state_machine_definition_logging_and_tracing(
    synthesized: Synthesized, machine: r.StateMachine
) -> None:
    stack = synthesized.stack
    props = synthesized.json["Resources"][synthesized.logical_id(stack.workflows[machine.name])]["Properties"]
    # The launch is Express (idempotent steps, billed per execution); the preempt workflow waits
    # for a task token, which only Standard offers.
    assert props["StateMachineType"] == ("EXPRESS" if machine.express else "STANDARD")
    assert machine.express == (machine.name == "launch")
    # The version of each task function this deploy published
    # (read from the template: a version's logical id is a hash that CDK computes lazily, and a
    # later resolve in the same process may see another stack's provider framework)
    substitutions = props["DefinitionSubstitutions"]
    assert set(substitutions) == set(machine.substitutions)
    for name, fn in machine.substitutions.items():
        version = synthesized.json["Resources"][substitutions[name]["Ref"]]
        assert version["Type"] == "AWS::Lambda::Version"
        assert version["Properties"]["FunctionName"] == {"Ref": synthesized.logical_id(stack.functions[fn])}
    definition = props["DefinitionString"]
    json.loads(definition)
    for name in machine.substitutions:
        assert f"${{{name}}}" in definition
    if synthesized.real_sources:
        assert json.loads(definition) == json.loads((stack.statemachines_dir / machine.file).read_text())
    logging = props["LoggingConfiguration"]
    assert logging["Level"] == "ALL"
    # No input or output in the logs: task tokens stay out of them
    assert logging["IncludeExecutionData"] is False
    (destination,) = logging["Destinations"]
    group_id = destination["CloudWatchLogsLogGroup"]["LogGroupArn"]["Fn::GetAtt"][0]
    assert "KmsKeyId" in synthesized.json["Resources"][group_id]["Properties"]
    assert props["TracingConfiguration"] == {"Enabled": True}


# --- Batch -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pool", "team"),
    [(p, t["team"]) for p in CONTEXT["pools"] for t in CONTEXT["teams"]],
    ids=lambda v: v["name"] if isinstance(v, dict) else v,
)
def test_compute_environment_and_job_queue_per_pool_and_team(
    synthesized: Synthesized, pool: dict[str, Any], team: str
) -> None:
    stack = synthesized.stack
    environment = stack.compute.compute_environments[pool["name"], team]
    props = synthesized.json["Resources"][synthesized.logical_id(environment)]["Properties"]
    resources = props["ComputeResources"]
    assert props["Type"] == "managed"
    if pool["purchase"] == "spot":
        assert resources["Type"] == "SPOT"
        assert resources["AllocationStrategy"] == "SPOT_PRICE_CAPACITY_OPTIMIZED"
    else:
        assert resources["Type"] == "EC2"
    assert resources["MinvCpus"] == 0
    assert resources["MaxvCpus"] == stack.config.pool(pool["name"]).max_vcpus
    assert resources["InstanceTypes"] == pool["instance_types"]
    assert resources["Ec2Configuration"] == [{"ImageType": "ECS_AL2023_NVIDIA"}]
    private = {flatten(stack.resolve(subnet.subnet_id)) for subnet in stack.network.vpc.private_subnets}
    if stack.config.pool(pool["name"]).placement_group:
        # A cluster placement group lives in one AZ: one private subnet, the one the deploy-time
        # lookup chose where the pool's types are offered (stacks.zones), given every private
        # subnet of the VPC with its AZ to choose from
        assert stack.gang_zones is not None and not stack.config.pool(pool["name"]).availability_zone
        [subnet] = resources["Subnets"]
        lookup_id = subnet["Fn::GetAtt"][0]
        assert subnet == {"Fn::GetAtt": [lookup_id, "SubnetId"]}
        lookup = synthesized.json["Resources"][lookup_id]
        assert lookup["Type"] == "Custom::SpotlineGangZone"
        assert lookup["Properties"]["Pool"] == pool["name"]
        assert lookup["Properties"]["InstanceTypes"] == pool["instance_types"]
        assert {flatten(s["SubnetId"]) for s in lookup["Properties"]["Subnets"]} == private
        assert (
            flatten(stack.resolve(stack.compute.pool_zones[pool["name"]]))
            == f"<{lookup_id}.AvailabilityZone>"
        )
    else:
        assert {flatten(s) for s in resources["Subnets"]} == private
    queue = _properties_of(synthesized, stack.compute.job_queues[pool["name"], team])
    assert queue["JobQueueName"] == f"spotline-dev-{pool['name']}-{team}"
    assert queue["ComputeEnvironmentOrder"] == [
        {"ComputeEnvironment": getatt_arn(synthesized, environment, "ComputeEnvironmentArn"), "Order": 1}
    ]


def _properties_of(synthesized: Synthesized, construct: Any) -> dict[str, Any]:
    props: dict[str, Any] = synthesized.json["Resources"][synthesized.logical_id(construct)]["Properties"]
    return props


def test_p4d_pool_is_sized_in_vcpus_from_its_gpus(synthesized: Synthesized) -> None:
    # p4d.24xlarge: 96 vCPUs for 8 GPUs, so 12 vCPUs per GPU.
    pool = synthesized.stack.config.pool(CONTEXT["pools"][0]["name"])
    assert pool.instance_types == ("p4d.24xlarge", "p4de.24xlarge")  # both 96 vCPUs, 8 GPUs
    assert pool.max_vcpus == pool.max_gpus * 12


def test_instances_require_imdsv2_with_no_room_for_a_container_hop(synthesized: Synthesized) -> None:
    template = synthesized.stack.compute.launch_template
    data = synthesized.json["Resources"][synthesized.logical_id(template)]["Properties"]["LaunchTemplateData"]
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    assert data["MetadataOptions"]["HttpPutResponseHopLimit"] == 1
    assert data["BlockDeviceMappings"][0]["Ebs"]["Encrypted"] is True


def test_instances_drain_on_a_spot_warning(synthesized: Synthesized) -> None:
    template = synthesized.stack.compute.launch_template
    data = synthesized.json["Resources"][synthesized.logical_id(template)]["Properties"]["LaunchTemplateData"]
    assert "ECS_ENABLE_SPOT_INSTANCE_DRAINING=true" in json.dumps(data["UserData"])


def test_job_definition_requests_a_gpu_and_gives_the_agent_its_environment(synthesized: Synthesized) -> None:
    stack = synthesized.stack
    assert set(stack.compute.job_definitions) == {t["team"] for t in CONTEXT["teams"]}
    for team, definition in stack.compute.job_definitions.items():
        props = synthesized.json["Resources"][synthesized.logical_id(definition)]["Properties"]
        container = props["ContainerProperties"]
        requirements = {req["Type"]: req["Value"] for req in container["ResourceRequirements"]}
        assert int(requirements["GPU"]) >= 1
        env = {e["Name"]: e["Value"] for e in container["Environment"]}
        assert env[r.AGENT_ENV_JOBS_TABLE] == {"Ref": synthesized.logical_id(stack.tables[r.JOBS.logical_id])}
        assert env[r.AGENT_ENV_EVENT_BUS] == {"Ref": synthesized.logical_id(stack.messaging.bus)}
        assert env[r.AGENT_ENV_TEAM] == team
        assert r.AGENT_ENV_POLL_S in env
        assert container["JobRoleArn"] == getatt_arn(synthesized, stack.compute.team_roles[team])
        assert props["PlatformCapabilities"] == ["EC2"]
        # Spotline, not Batch, decides when a reclaimed job runs again.
        assert props["RetryStrategy"] == {"Attempts": 1}


def test_job_role_writes_checkpoints_emits_agent_events_and_reads_its_signals(
    synthesized: Synthesized,
) -> None:
    stack = synthesized.stack
    for team, role in stack.compute.team_roles.items():
        statements = statements_of_role(synthesized, synthesized.logical_id(role))
        bucket = f"<{synthesized.logical_id(stack.storage.checkpoints)}.Arn>"
        by_action = {a: s for s in statements for a in s["Action"]}
        assert set(by_action) == {
            "s3:GetObject",
            "s3:PutObject",
            "s3:AbortMultipartUpload",
            "s3:DeleteObject",
            "s3:ListBucket",
            "events:PutEvents",
            "dynamodb:GetItem",
        }
        assert by_action["s3:PutObject"]["Resource"] == [f"{bucket}/checkpoints/{team}/*"]
        assert by_action["s3:DeleteObject"]["Resource"] == [f"{bucket}/checkpoints/{team}/*"]
        assert by_action["s3:ListBucket"]["Condition"] == {
            "StringLike": {"s3:prefix": [f"checkpoints/{team}/*"]}
        }
        put = by_action["events:PutEvents"]
        assert put["Resource"] == [f"<{synthesized.logical_id(stack.messaging.bus)}.Arn>"]
        assert put["Condition"]["StringEquals"]["events:source"] == [f"spotline.agent.{team}"]
        get = by_action["dynamodb:GetItem"]
        assert get["Resource"] == [f"<{synthesized.logical_id(stack.tables[r.JOBS.logical_id])}.Arn>"]
        assert get["Condition"] == {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"signal#{team}#*"]}}


# --- storage, network, logs ------------------------------------------------------------------


def _ssl_enforced(synthesized: Synthesized, bucket_id: str) -> bool:
    for policy in synthesized.resources("AWS::S3::BucketPolicy").values():
        if policy["Properties"]["Bucket"] == {"Ref": bucket_id}:
            return any(
                s["Effect"] == "Deny" and s.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}}
                for s in policy["Properties"]["PolicyDocument"]["Statement"]
            )
    return False


def test_checkpoint_bucket(synthesized: Synthesized) -> None:
    storage = synthesized.stack.storage
    bucket_id = synthesized.logical_id(storage.checkpoints)
    props = synthesized.json["Resources"][bucket_id]["Properties"]
    assert props["VersioningConfiguration"] == {"Status": "Enabled"}
    (encryption,) = props["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert encryption["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    rules = props["LifecycleConfiguration"]["Rules"]
    assert any("NoncurrentVersionExpiration" in rule for rule in rules)
    assert any("AbortIncompleteMultipartUpload" in rule for rule in rules)
    assert props["LoggingConfiguration"]["DestinationBucketName"] == {
        "Ref": synthesized.logical_id(storage.access_logs)
    }
    assert _ssl_enforced(synthesized, bucket_id)
    logs_props = synthesized.json["Resources"][synthesized.logical_id(storage.access_logs)]["Properties"]
    assert "BucketEncryption" in logs_props and "PublicAccessBlockConfiguration" in logs_props
    assert _ssl_enforced(synthesized, synthesized.logical_id(storage.access_logs))


def test_vpc_has_flow_logs_and_private_subnets(synthesized: Synthesized) -> None:
    network = synthesized.stack.network
    (flow_log,) = synthesized.resources("AWS::EC2::FlowLog").values()
    assert flow_log["Properties"]["ResourceId"] == {"Ref": synthesized.logical_id(network.vpc)}
    assert flow_log["Properties"]["ResourceType"] == "VPC"
    assert flow_log["Properties"]["TrafficType"] == "ALL"
    assert len(network.vpc.private_subnets) == 2
    endpoints = synthesized.resources("AWS::EC2::VPCEndpoint").values()
    services = {flatten(e["Properties"]["ServiceName"]) for e in endpoints}
    assert any(s.endswith(".s3") for s in services) and any(s.endswith(".dynamodb") for s in services)


def test_every_log_group_is_encrypted_and_expires(synthesized: Synthesized) -> None:
    groups = synthesized.resources("AWS::Logs::LogGroup")
    key = {"Fn::GetAtt": [synthesized.logical_id(synthesized.stack.logs.key), "Arn"]}
    assert groups
    for group_id, group in groups.items():
        assert group["Properties"].get("KmsKeyId") == key, group_id
        assert group["Properties"]["RetentionInDays"] == CONTEXT["log_retention_days"], group_id


# --- API -------------------------------------------------------------------------------------


def test_every_api_method_requires_iam(synthesized: Synthesized) -> None:
    methods = synthesized.resources("AWS::ApiGateway::Method")
    assert len(methods) == 2  # ANY on / and on /{proxy+}
    validators = synthesized.resources("AWS::ApiGateway::RequestValidator")
    ((validator_id, validator),) = validators.items()
    assert validator["Properties"]["ValidateRequestBody"] is True
    assert validator["Properties"]["ValidateRequestParameters"] is True
    api_function = getatt_arn(synthesized, synthesized.stack.functions["api"])
    for method in methods.values():
        props = method["Properties"]
        assert props["AuthorizationType"] == "AWS_IAM"
        assert props["HttpMethod"] == "ANY"
        assert props["RequestValidatorId"] == {"Ref": validator_id}
        assert props["Integration"]["Type"] == "AWS_PROXY"
        assert api_function in props["Integration"]["Uri"]["Fn::Join"][1]


def test_api_stage_logs_traces_and_throttles(synthesized: Synthesized) -> None:
    (stage,) = synthesized.resources("AWS::ApiGateway::Stage").values()
    props = stage["Properties"]
    assert props["StageName"] == CONTEXT["stage"]
    assert props["TracingEnabled"] is True
    assert "DestinationArn" in props["AccessLogSetting"]
    (settings,) = props["MethodSettings"]
    assert settings["ThrottlingRateLimit"] == CONTEXT["api_rate_limit"]
    assert settings["ThrottlingBurstLimit"] == CONTEXT["api_burst_limit"]
    assert settings["LoggingLevel"] == "ERROR"


def test_dashboard_shows_queues_and_function_errors(synthesized: Synthesized) -> None:
    (dashboard,) = synthesized.resources("AWS::CloudWatch::Dashboard").values()
    body = flatten(dashboard["Properties"]["DashboardBody"])
    assert "ApproximateAgeOfOldestMessage" in body
    assert body.count('"Errors"') >= len(r.FUNCTIONS)


# --- cdk-nag ---------------------------------------------------------------------------------


def test_cdk_nag_reports_no_unacknowledged_finding(synthesized: Synthesized) -> None:
    report = synthesized.validation_report or {"pluginReports": []}
    findings = [
        f"{plugin['pluginName']} {violation['ruleName']} ({violation['severity']}) at "
        + ", ".join(c["constructPath"] for c in violation["violatingConstructs"])
        for plugin in report["pluginReports"]
        for violation in plugin.get("violations", [])
    ]
    assert findings == []
    assert synthesized.synth_error is None


def test_every_acknowledgement_names_one_rule_and_gives_a_reason(synthesized: Synthesized) -> None:
    acknowledged: list[tuple[str, str, str]] = []
    for construct in synthesized.stack.node.find_all():
        for entry in construct.node.metadata:
            if entry.type == Validations.ACKNOWLEDGED_RULES_METADATA_KEY:
                acknowledged += [(construct.node.path, rule, reason) for rule, reason in entry.data.items()]
    ours = [a for a in acknowledged if a[1].startswith("AwsSolutions::")]
    assert len(ours) >= 10
    for path, rule, reason in ours:
        assert re.fullmatch(r"AwsSolutions::AwsSolutions-[A-Z0-9]+(\[[^\]]+\])?", rule), (path, rule)
        assert len(reason.strip()) >= 40, (path, rule, reason)
