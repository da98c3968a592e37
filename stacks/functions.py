"""Lambda functions, one per `resources.FUNCTIONS` entry, each with its own least-privilege role.

Table access is granted exactly as `Function.reads` / `Function.writes` declare it, on the table
and its named indexes (no `index/*` wildcard, and no Scan: a pass reads through an index). Every
other AWS call a function makes is listed in `resources.FUNCTION_ACTIONS`; `ActionScopes` turns
each listed action into one statement on the narrowest resources IAM allows for it. An action
the stack does not know how to scope fails the synth rather than being granted on "*".
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aws_cdk import Duration, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from spotline import resources as r
from stacks.nag import acknowledge, finding_resource
from stacks.observability import EncryptedLogs

RUNTIME = lambda_.Runtime.PYTHON_3_12


def runtime_version() -> tuple[int, int]:
    """(major, minor) of the functions' Python runtime (`python3.12` -> (3, 12))."""
    major, minor = RUNTIME.name.removeprefix("python").split(".")
    return int(major), int(minor)


# Tag the launcher puts on every Batch job it submits (spotline.aws.batch).
BATCH_JOB_TAG = "spotline:job-id"

# Functions invoked asynchronously (EventBridge rules and schedules): failures that outlive
# Lambda's own retries land in the events dead-letter queue.
ASYNC_INVOKED = frozenset(
    {
        rule.target
        for rule in r.RULES
        if rule.target != r.SCHEDULER_QUEUE and r.event_queue(rule.target) is None
    }
    | {"reconciler"}
)

_READ_ACTIONS = (
    "dynamodb:GetItem",
    "dynamodb:BatchGetItem",
    "dynamodb:Query",
    "dynamodb:ConditionCheckItem",
    "dynamodb:DescribeTable",
)
_WRITE_ACTIONS = (
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:BatchWriteItem",
    "dynamodb:ConditionCheckItem",
)
# Powertools' DynamoDBPersistenceLayer reads back a record it could not claim (get_item), so
# "writes Idempotency" means exactly these four calls on that table.
_IDEMPOTENCY_ACTIONS = ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem")
# Added to every role by tracing=ACTIVE (cdk.json `tracing: true`).
_XRAY_ACTIONS = ("xray:PutTraceSegments", "xray:PutTelemetryRecords")


@dataclass(frozen=True)
class ActionScopes:
    """The resources of this deployment that FUNCTION_ACTIONS' actions apply to."""

    state_machine_arns: Mapping[str, str]
    scheduler_queue_arn: str
    job_queue_arns: Sequence[str]
    # arn:...:job-definition/<name>*: the base definition and the per-image definitions the
    # launcher derives from it (<name>-<hash of image>), every revision.
    job_definition_family_arn: str
    # The roles a job definition carries (a derived definition passes them on).
    job_definition_role_arns: Sequence[str]
    # The training containers' log group (arn:...:log-group:<name>:*): `GET /jobs/{id}/logs`.
    training_log_group_arn: str | None = None
    # The ECR repositories the teams' jobs pull from (each team's `<team>/*`, the shared one).
    image_repository_arns: Sequence[str] = ()
    # Reasons for the wildcard resources used below, keyed by the resource (for cdk-nag).
    wildcard_reasons: dict[str, str] = field(default_factory=dict)

    def statement(
        self, scope: Construct, function: str, action: str, hint: str
    ) -> iam.PolicyStatement | None:
        """One statement granting `action` as narrowly as IAM allows; None where the deployment
        has nothing it applies to (target localstack: no job definition role to pass, no image
        repository to describe)."""
        stack = Stack.of(scope)
        any_job = f"arn:{stack.partition}:batch:{stack.region}:{stack.account}:job/*"
        job_reason = (
            "Batch job ids are minted by SubmitJob, so a policy cannot name them at deploy time; the "
            f"statement is limited to jobs carrying the launcher's '{BATCH_JOB_TAG}' tag (or being "
            "created by SubmitJob) in this account and region."
        )
        conditions: dict[str, Any] | None = None
        if action in ("states:StartExecution", "states:SendTaskSuccess", "states:SendTaskFailure"):
            # Task responses are checked against the state machine whose execution issued the token.
            resources = self._machines_named_in(function, action, hint)
        elif action == "sqs:SendMessage":
            resources = [self.scheduler_queue_arn]
        elif action == "batch:SubmitJob":
            resources = [*self.job_queue_arns, self.job_definition_family_arn]
        elif action == "batch:RegisterJobDefinition":
            resources = [self.job_definition_family_arn]
        elif action == "batch:TerminateJob":
            resources = [any_job]
            conditions = {"Null": {f"aws:ResourceTag/{BATCH_JOB_TAG}": "false"}}
            self.wildcard_reasons[any_job] = job_reason
        elif action == "batch:TagResource":
            resources = [any_job]
            conditions = {"StringEquals": {"batch:CreateAction": "SubmitJob"}}
            self.wildcard_reasons[any_job] = job_reason
        elif action in (
            "batch:DescribeJobDefinitions",
            "batch:ListJobs",
            "batch:DescribeJobs",
            "batch:DescribeJobQueues",
            "batch:DescribeComputeEnvironments",
        ):
            resources = ["*"]
        elif action == "logs:GetLogEvents" and self.training_log_group_arn is not None:
            resources = [self.training_log_group_arn]
            self.wildcard_reasons[self.training_log_group_arn] = (
                "A run's log stream is named by ECS when the task starts; the statement is limited to "
                "the streams of the one training log group."
            )
        elif action == "ecr:DescribeImages":
            if not self.image_repository_arns:
                return None
            resources = list(self.image_repository_arns)
            for arn in resources:
                if arn.endswith("/*"):
                    self.wildcard_reasons[arn] = (
                        "A team's image repositories are named under its prefix (<team>/...), unknown "
                        "at deploy time; DescribeImages reads a tag's digest, nothing else."
                    )
        elif action == "iam:PassRole":
            if not self.job_definition_role_arns:
                return None
            resources = list(self.job_definition_role_arns)
        elif action == "ecs:ListContainerInstances":
            clusters = f"arn:{stack.partition}:ecs:{stack.region}:{stack.account}:cluster/*"
            resources = [clusters]
            self.wildcard_reasons[clusters] = (
                "Batch creates the ECS clusters behind its compute environments with generated names; "
                "ListContainerInstances is read-only and limited to this account and region."
            )
        elif action == "ecs:DescribeContainerInstances":
            instances = f"arn:{stack.partition}:ecs:{stack.region}:{stack.account}:container-instance/*"
            resources = [instances]
            self.wildcard_reasons[instances] = (
                "Batch creates the ECS clusters behind its compute environments with generated names; "
                "DescribeContainerInstances is read-only and limited to this account and region."
            )
        else:
            raise ValueError(
                f"resources.FUNCTION_ACTIONS['{function}'] lists {action}, which stacks/functions.py "
                "does not know how to scope: add it to ActionScopes.statement"
            )
        if self.job_definition_family_arn in resources:
            self.wildcard_reasons[self.job_definition_family_arn] = (
                "The launcher registers one job definition per training image, named after the base "
                "definition (<base>-<hash of image>); the wildcard covers that family and its revisions."
            )
        return iam.PolicyStatement(actions=[action], resources=resources, conditions=conditions)

    def _machines_named_in(self, function: str, action: str, hint: str) -> list[str]:
        named = [arn for name, arn in self.state_machine_arns.items() if re.search(rf"\b{name}\b", hint)]
        if not named:
            raise ValueError(
                f"resources.FUNCTION_ACTIONS['{function}']['{action}'] names none of the state machines "
                f"{sorted(self.state_machine_arns)}: {hint!r}"
            )
        return named


def table_statements(
    function: r.Function, tables: Mapping[str, dynamodb.ITableV2]
) -> list[iam.PolicyStatement]:
    """The DynamoDB statements of one function, from its declared reads and writes."""
    statements: list[iam.PolicyStatement] = []
    for logical_id in function.reads:
        table = tables[logical_id]
        spec = next(t for t in r.TABLES if t.logical_id == logical_id)
        resources = [table.table_arn] + [f"{table.table_arn}/index/{index.name}" for index in spec.indexes]
        statements.append(iam.PolicyStatement(actions=list(_READ_ACTIONS), resources=resources))
    for logical_id in function.writes:
        actions = _IDEMPOTENCY_ACTIONS if logical_id == r.IDEMPOTENCY.logical_id else _WRITE_ACTIONS
        statements.append(
            iam.PolicyStatement(actions=list(actions), resources=[tables[logical_id].table_arn])
        )
    return statements


class Functions(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        code_dir: Path,
        powertools_layer_arn: str | None,
        logs: EncryptedLogs,
        tables: Mapping[str, dynamodb.ITableV2],
        bus: events.IEventBus,
        scopes: ActionScopes,
        environment: Mapping[str, str],
        dead_letters: sqs.IQueue,
        scheduler_reserved_concurrency: int | None,
        spot_warning_reserved_concurrency: int | None = None,
        tracing: bool = False,
    ) -> None:
        super().__init__(scope, construct_id)
        unknown = set(r.FUNCTION_ACTIONS) - {f.name for f in r.FUNCTIONS}
        if unknown:
            raise ValueError(
                f"resources.FUNCTION_ACTIONS names functions not in FUNCTIONS: {sorted(unknown)}"
            )
        code = lambda_.Code.from_asset(str(code_dir))
        # No layer: the code asset carries Powertools and its dependencies itself (target localstack).
        layers = (
            [lambda_.LayerVersion.from_layer_version_arn(self, "Powertools", powertools_layer_arn)]
            if powertools_layer_arn is not None
            else []
        )
        self.functions: dict[str, lambda_.Function] = {}
        self.roles: dict[str, iam.Role] = {}
        for spec in r.FUNCTIONS:
            role = iam.Role(
                self,
                f"{spec.name}-role",
                assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
                description=f"Spotline {spec.name} function",
            )
            for statement in table_statements(spec, tables):
                role.add_to_policy(statement)
            role.add_to_policy(
                iam.PolicyStatement(actions=["events:PutEvents"], resources=[bus.event_bus_arn])
            )
            scopes.wildcard_reasons.clear()
            unscoped = list(_XRAY_ACTIONS) if tracing else []
            for action, hint in sorted(r.FUNCTION_ACTIONS.get(spec.name, {}).items()):
                scoped = scopes.statement(role, spec.name, action, hint)
                if scoped is None:
                    continue
                role.add_to_policy(scoped)
                if "*" in scoped.resources:
                    unscoped.append(action)
            for resource, reason in sorted(scopes.wildcard_reasons.items()):
                acknowledge(role, f"AwsSolutions-IAM5[Resource::{finding_resource(role, resource)}]", reason)
            if unscoped:
                acknowledge(
                    role,
                    "AwsSolutions-IAM5[Resource::*]",
                    f"{', '.join(sorted(unscoped))} support no resource-level permissions, so '*' is the "
                    "only possible resource for them; every other statement names its resources.",
                )
            log_group = logs.log_group(self, f"{spec.name}-logs")
            log_group.grant_write(role)
            function = lambda_.Function(
                self,
                spec.name,
                runtime=RUNTIME,
                architecture=lambda_.Architecture.X86_64,
                handler=f"functions.{spec.module}.handler",
                code=code,
                layers=layers,
                role=role,
                timeout=Duration.seconds(spec.timeout_s),
                memory_size=spec.memory_mb,
                # X-Ray costs the handlers its SDK's import on every cold start (100-140 ms) and
                # a charge per trace: on only where cdk.json asks for it (`tracing`).
                tracing=lambda_.Tracing.ACTIVE if tracing else lambda_.Tracing.DISABLED,
                log_group=log_group,
                environment={**environment, **r.function_environment(tracing)},
                reserved_concurrent_executions={
                    "scheduler": scheduler_reserved_concurrency,
                    r.SPOT_WARNING_FUNCTION: spot_warning_reserved_concurrency,
                }.get(spec.name),
                dead_letter_queue=dead_letters if spec.name in ASYNC_INVOKED else None,
                retry_attempts=2 if spec.name in ASYNC_INVOKED else None,
            )
            acknowledge(
                function,
                "AwsSolutions-L1",
                "Python 3.12 is pinned: it is the runtime the project tests and the Powertools layer "
                "(AWSLambdaPowertoolsPythonV3-python312) is built for; moving up is a deliberate change.",
            )
            self.functions[spec.name] = function
            self.roles[spec.name] = role

    def __getitem__(self, name: str) -> lambda_.Function:
        return self.functions[name]
