"""What the stack creates, created on an emulated AWS (moto, in-process or behind the local
runtime's server) from the same description: `spotline.resources` and the ASL files."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from spotline import resources
from spotline.local.lambdas import ACCOUNT_ID, function_arn

STATEMACHINES_DIR = Path(__file__).resolve().parents[2] / "statemachines"


def table_definition(table: resources.Table, name: str) -> dict[str, Any]:
    """CreateTable arguments for `table` (on-demand billing, indexes projecting all)."""
    keys = {table.partition_key, *(k for k in [table.sort_key] if k)}
    for index in table.indexes:
        keys |= {index.partition_key, *(k for k in [index.sort_key] if k)}

    def schema(partition: str, sort: str | None) -> list[dict[str, str]]:
        return [{"AttributeName": partition, "KeyType": "HASH"}] + (
            [{"AttributeName": sort, "KeyType": "RANGE"}] if sort else []
        )

    definition: dict[str, Any] = {
        "TableName": name,
        "BillingMode": "PAY_PER_REQUEST",
        "KeySchema": schema(table.partition_key, table.sort_key),
        "AttributeDefinitions": [
            {"AttributeName": k, "AttributeType": "N" if k in table.number_keys else "S"}
            for k in sorted(keys)
        ],
    }
    if table.indexes:
        definition["GlobalSecondaryIndexes"] = [
            {
                "IndexName": index.name,
                "KeySchema": schema(index.partition_key, index.sort_key),
                "Projection": {"ProjectionType": "ALL"}
                if index.projection is None
                else {"ProjectionType": "INCLUDE", "NonKeyAttributes": list(index.projection)},
            }
            for index in table.indexes
        ]
    return definition


def create_tables(dynamodb: Any, prefix: str = "spotline") -> dict[str, str]:
    """Every table of resources.TABLES, named `<prefix>-<logical id>`; returns logical id -> name."""
    names: dict[str, str] = {}
    for table in resources.TABLES:
        name = f"{prefix}-{table.logical_id.lower()}"
        dynamodb.create_table(**table_definition(table, name))
        names[table.logical_id] = name
    return names


def render_definition(
    machine: resources.StateMachine, function_arns: Mapping[str, str], directory: Path = STATEMACHINES_DIR
) -> str:
    """The ASL of `machine` with each ${Substitution} replaced by its function's ARN."""
    text = (directory / machine.file).read_text()
    for placeholder, function in machine.substitutions.items():
        text = text.replace("${" + placeholder + "}", function_arns[function])
    return text


def create_state_machines(
    stepfunctions: Any,
    function_arns: Mapping[str, str] | None = None,
    *,
    prefix: str = "spotline",
    role_arn: str = f"arn:aws:iam::{ACCOUNT_ID}:role/spotline-workflows",
    directory: Path = STATEMACHINES_DIR,
) -> dict[str, str]:
    """Every workflow of resources.STATE_MACHINES (of its type); returns name -> ARN. Function
    ARNs default to `function_arn(<function name>)` in the client's region."""
    region = stepfunctions.meta.region_name
    arns = dict(function_arns or {f.name: function_arn(f.name, region) for f in resources.FUNCTIONS})
    created: dict[str, str] = {}
    for machine in resources.STATE_MACHINES:
        response = stepfunctions.create_state_machine(
            name=f"{prefix}-{machine.name}",
            definition=render_definition(machine, arns, directory),
            roleArn=role_arn,
            type="EXPRESS" if machine.express else "STANDARD",
        )
        created[machine.name] = response["stateMachineArn"]
    return created


def environment(
    table_names: Mapping[str, str],
    *,
    event_bus: str,
    state_machines: Mapping[str, str],
    config: Mapping[str, Any],
    scheduler_queue_url: str | None = None,
    checkpoint_bucket: str | None = None,
) -> dict[str, str]:
    """The functions' environment variables, as the stack sets them."""
    env = {table.env: table_names[table.logical_id] for table in resources.TABLES}
    env[resources.ENV_EVENT_BUS] = event_bus
    for machine in resources.STATE_MACHINES:
        if machine.name in state_machines:
            env[machine.env] = state_machines[machine.name]
    env[resources.ENV_CONFIG] = json.dumps(dict(config))
    if scheduler_queue_url:
        env[resources.ENV_SCHEDULER_QUEUE_URL] = scheduler_queue_url
    if checkpoint_bucket:
        env[resources.ENV_CHECKPOINT_BUCKET] = checkpoint_bucket
    return env


def create_rules(
    events: Any, sqs: Any, *, prefix: str, project_bus: str, scheduler_queue_url: str
) -> dict[str, str]:
    """Every rule of `resources.RULES`, each delivering to a queue (moto delivers to SQS only):
    the scheduler's FIFO queue, the event queue the stack has too, or a queue of the rule's own
    that the router drains into the rule's function. Returns rule name -> queue URL."""
    rule_queues: dict[str, str] = {}
    for rule in resources.RULES:
        bus = project_bus if rule.bus == resources.PROJECT_BUS else "default"
        events.put_rule(Name=f"{prefix}-{rule.name}", EventBusName=bus, EventPattern=json.dumps(rule.pattern))
        target: dict[str, Any] = {}
        if rule.target == resources.SCHEDULER_QUEUE:
            url = scheduler_queue_url
            target = {"SqsParameters": {"MessageGroupId": resources.SCHEDULER_MESSAGE_GROUP}}
        elif (queue := resources.event_queue(rule.target)) is not None:
            # The router hands its function a batch, as Lambda's event source mapping does.
            url = sqs.create_queue(QueueName=f"{prefix}-{queue.logical_id}")["QueueUrl"]
        else:
            url = sqs.create_queue(QueueName=f"{prefix}-{rule.name}")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        events.put_targets(
            Rule=f"{prefix}-{rule.name}", EventBusName=bus, Targets=[{"Id": "local", "Arn": arn, **target}]
        )
        rule_queues[rule.name] = url
    return rule_queues
