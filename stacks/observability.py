"""Encrypted CloudWatch log groups (one customer-managed key for all of them) and the dashboard."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from aws_cdk import Aws, CfnCondition, CfnParameter, Duration, Fn, RemovalPolicy, Stack
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as stepfunctions
from constructs import Construct

# CDK's enum only has the retention periods CloudWatch accepts; map days onto it.
_RETENTION = {
    1: logs.RetentionDays.ONE_DAY,
    3: logs.RetentionDays.THREE_DAYS,
    5: logs.RetentionDays.FIVE_DAYS,
    7: logs.RetentionDays.ONE_WEEK,
    14: logs.RetentionDays.TWO_WEEKS,
    30: logs.RetentionDays.ONE_MONTH,
    60: logs.RetentionDays.TWO_MONTHS,
    90: logs.RetentionDays.THREE_MONTHS,
    180: logs.RetentionDays.SIX_MONTHS,
    365: logs.RetentionDays.ONE_YEAR,
}


class EncryptedLogs(Construct):
    """A KMS key that CloudWatch Logs may use, and a factory for log groups encrypted with it."""

    def __init__(self, scope: Construct, construct_id: str, *, retention_days: int) -> None:
        super().__init__(scope, construct_id)
        if retention_days not in _RETENTION:
            raise ValueError(f"log retention {retention_days} days: use one of {sorted(_RETENTION)}")
        self.retention = _RETENTION[retention_days]
        self.key = kms.Key(
            self,
            "Key",
            description="Encrypts Spotline's CloudWatch log groups",
            enable_key_rotation=True,
            removal_policy=RemovalPolicy.RETAIN,
        )
        # CloudWatch Logs encrypts with the key on behalf of this account's log groups only.
        log_groups_of_account = f"arn:{Aws.PARTITION}:logs:{Aws.REGION}:{Aws.ACCOUNT_ID}:log-group:*"
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                principals=[iam.ServicePrincipal(f"logs.{Aws.REGION}.amazonaws.com")],
                actions=[
                    "kms:Encrypt",
                    "kms:Decrypt",
                    "kms:ReEncryptFrom",
                    "kms:ReEncryptTo",
                    "kms:GenerateDataKey",
                    "kms:GenerateDataKeyWithoutPlaintext",
                    "kms:DescribeKey",
                ],
                resources=["*"],  # in a key policy, "*" means this key
                conditions={"ArnLike": {"kms:EncryptionContext:aws:logs:arn": log_groups_of_account}},
            )
        )

    def log_group(self, scope: Construct, construct_id: str) -> logs.LogGroup:
        return logs.LogGroup(
            scope,
            construct_id,
            encryption_key=self.key,
            retention=self.retention,
            removal_policy=RemovalPolicy.DESTROY,
        )


class Dashboard(Construct):
    """Queue depth and age of the scheduling triggers, dead letters, and errors of every function."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        scheduler_queue: sqs.IQueue,
        dead_letter_queues: Mapping[str, sqs.IQueue],
        functions: Mapping[str, lambda_.IFunction],
    ) -> None:
        super().__init__(scope, construct_id)
        period = Duration.minutes(1)
        self.dashboard = cloudwatch.Dashboard(
            self, "Dashboard", dashboard_name=f"{Stack.of(self).stack_name}-spotline"
        )
        self.dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Scheduling triggers waiting",
                left=[scheduler_queue.metric_approximate_number_of_messages_visible(period=period)],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="Oldest scheduling trigger (s)",
                left=[scheduler_queue.metric_approximate_age_of_oldest_message(period=period)],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="Dead letters",
                left=[
                    queue.metric_approximate_number_of_messages_visible(period=period, label=name)
                    for name, queue in dead_letter_queues.items()
                ],
                width=8,
            ),
        )
        self.dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Function errors",
                left=[fn.metric_errors(period=period, label=name) for name, fn in functions.items()],
                width=12,
            ),
            cloudwatch.GraphWidget(
                title="Function duration p99 (ms)",
                left=[
                    fn.metric_duration(period=period, statistic="p99", label=name)
                    for name, fn in functions.items()
                ],
                width=12,
            ),
        )
        # Each budgeted team's spend this month (the scheduler's TeamSpend metric, one per team).
        self.dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Spend this month by team ($)",
                left=[
                    cloudwatch.MathExpression(
                        expression="SEARCH('{Spotline,Team} MetricName=\"TeamSpend\"', 'Maximum', 3600)",
                        label="",
                        period=Duration.hours(1),
                    )
                ],
                width=24,
            )
        )

    def show_alarms(self, alarms: list[cloudwatch.Alarm]) -> None:
        self.dashboard.add_widgets(cloudwatch.AlarmStatusWidget(title="Alarms", alarms=alarms, width=24))


# Metrics the functions emit (Powertools EMF: functions.runtime's namespace and service).
METRICS_NAMESPACE = "Spotline"
_SERVICE = {"service": "spotline"}
# A scheduling trigger older than this means passes are not keeping up (or are stuck).
SCHEDULER_QUEUE_MAX_AGE = Duration.minutes(5)
# A heartbeat older than this in its queue (or half the heartbeat timeout) is not being recorded.
HEARTBEAT_QUEUE_MAX_AGE = Duration.minutes(5)
# A dead letter older than this has been left unhandled for a day.
DEAD_LETTER_MAX_AGE = Duration.days(1)


# A pool's oldest job waiting to start alarms past this (or half the reconciler's start timeout,
# which requeues it, if that is shorter).
CAPACITY_MAX_WAIT = Duration.minutes(15)


def spotline_metric(name: str, period: Duration, statistic: str = "Sum") -> cloudwatch.Metric:
    return cloudwatch.Metric(
        namespace=METRICS_NAMESPACE,
        metric_name=name,
        dimensions_map=_SERVICE,
        statistic=statistic,
        period=period,
    )


@dataclass(frozen=True)
class AlarmSpec:
    """One alarm: its construct id, what it watches, when it fires (at or above `threshold` for
    `periods` periods; missing data is not breaching), and what the on-call reads."""

    construct_id: str
    metric: cloudwatch.IMetric
    threshold: float
    description: str
    periods: int = 1


def oldest_message_age(queue: sqs.IQueue, period: Duration) -> cloudwatch.IMetric:
    return queue.metric_approximate_age_of_oldest_message(period=period, statistic="Maximum")


def sum_of(label: str, period: Duration, metrics: Mapping[str, cloudwatch.IMetric]) -> cloudwatch.IMetric:
    """The sum of `metrics` (named by their keys in the expression), as one alarm's metric."""
    return cloudwatch.MathExpression(
        expression=" + ".join(metrics), using_metrics=dict(metrics), period=period, label=label
    )


def queue_alarms(
    scheduler_queue: sqs.IQueue, dead_letter_queues: Mapping[str, sqs.IQueue]
) -> list[AlarmSpec]:
    """Each dead-letter queue's depth and oldest message, and the scheduling triggers' age."""
    specs = [spec for name, queue in dead_letter_queues.items() for spec in _dead_letter_alarms(name, queue)]
    specs.append(
        AlarmSpec(
            "OldestSchedulingTrigger",
            oldest_message_age(scheduler_queue, Duration.minutes(1)),
            threshold=SCHEDULER_QUEUE_MAX_AGE.to_seconds(),
            periods=3,
            description="A scheduling trigger has waited over 5 minutes: passes fail, time out or "
            "cannot keep up. See the scheduler's logs and the PassErrors metric.",
        )
    )
    return specs


def heartbeat_queue_alarm(queue: sqs.IQueue, heartbeat_timeout_s: float) -> AlarmSpec:
    """Heartbeats waiting in their queue for half the heartbeat timeout: the heartbeat function
    fails or is throttled, and the reconciler will soon stop healthy jobs as lost."""
    wait_s = min(HEARTBEAT_QUEUE_MAX_AGE.to_seconds(), heartbeat_timeout_s / 2)
    return AlarmSpec(
        "OldestHeartbeat",
        oldest_message_age(queue, Duration.minutes(1)),
        threshold=wait_s,
        periods=3,
        description=f"A heartbeat has waited over {wait_s / 60:.0f} minutes in its queue: the heartbeat "
        "function fails or is throttled (LambdaThrottles; `spotline doctor --check lambda`). Past "
        "heartbeat_timeout_s the reconciler stops jobs whose heartbeats have not been recorded.",
    )


def _dead_letter_alarms(name: str, queue: sqs.IQueue) -> list[AlarmSpec]:
    five = Duration.minutes(5)
    return [
        AlarmSpec(
            f"DeadLetters-{name}",
            queue.metric_approximate_number_of_messages_visible(period=five, statistic="Maximum"),
            threshold=1,
            description=f"Messages in the {name} dead-letter queue: deliveries that failed for good. "
            "Read them (RULE_ARN / error attributes say which), fix, and redrive.",
        ),
        AlarmSpec(
            f"OldestDeadLetter-{name}",
            oldest_message_age(queue, five),
            threshold=DEAD_LETTER_MAX_AGE.to_seconds(),
            description=f"A message in the {name} dead-letter queue is over a day old: unhandled.",
        ),
    ]


def workflow_alarm(name: str, machine: stepfunctions.IStateMachine) -> AlarmSpec:
    five = Duration.minutes(5)
    return AlarmSpec(
        f"WorkflowFailures-{name}",
        sum_of(
            f"{name} executions failed, timed out or aborted",
            five,
            {
                "failed": machine.metric_failed(period=five),
                "timedOut": machine.metric_timed_out(period=five),
                "aborted": machine.metric_aborted(period=five),
            },
        ),
        threshold=1,
        description=f"A {name} workflow execution failed: the job it was for is left to the "
        "reconciler. Open the execution in the Step Functions console.",
    )


def pass_errors_alarm(scheduler_function: lambda_.IFunction) -> AlarmSpec:
    five = Duration.minutes(5)
    return AlarmSpec(
        "SchedulingPassErrors",
        sum_of(
            "scheduling passes that raised, and scheduler invocations that failed",
            five,
            {
                "passErrors": spotline_metric("PassErrors", five),
                "functionErrors": scheduler_function.metric_errors(period=five),
            },
        ),
        threshold=1,
        description="A scheduling pass failed (retried in seconds; its triggers go to the "
        "dead-letter queue after 5 failures). See the scheduler's logs.",
    )


def reconciler_alarms() -> list[AlarmSpec]:
    fifteen = Duration.minutes(15)
    return [
        AlarmSpec(
            "JobsStuckPastDeadline",
            spotline_metric("ReconcilerRequeued", fifteen),
            threshold=1,
            description="The reconciler moved on jobs stuck past a deadline (launch or start timed "
            "out, checkpoint overran, heartbeat lost): an event was lost or Batch has no capacity. The "
            "jobs' timelines say which.",
        ),
        AlarmSpec(
            "ReconcilerRepairs",
            spotline_metric("LedgerRepaired", fifteen),
            threshold=1,
            description="The reconciler repaired the GPU ledger (its counters disagreed with the "
            "active jobs twice in a row): look for a failed write in the functions' logs.",
        ),
    ]


def capacity_alarms(
    spot_pools: list[str], start_timeout_s: float, on_demand_pools: list[str] | None = None
) -> list[AlarmSpec]:
    """What the reconciler measures about capacity every run (`functions/reconciler.py`): a
    compute environment INVALID, a pool whose jobs wait to start (no Spot capacity; for an
    On-Demand pool, no capacity in its AZ or too small a vCPU quota), and gangs stopped because a
    node went silent."""
    five, fifteen = Duration.minutes(5), Duration.minutes(15)
    wait_s = min(CAPACITY_MAX_WAIT.to_seconds(), start_timeout_s / 2)
    specs = [
        AlarmSpec(
            "ComputeEnvironmentsInvalid",
            spotline_metric("ComputeEnvironmentsInvalid", five, statistic="Maximum"),
            threshold=1,
            description="A compute environment behind a Spotline job queue is INVALID: its jobs "
            "stay RUNNABLE. The reconciler's log names it and Batch's reason; `spotline doctor "
            "--check batch` says how to fix it.",
        ),
        AlarmSpec(
            "StalledGangs",
            spotline_metric("StalledGangs", fifteen),
            threshold=1,
            description="The reconciler stopped a gang (multi-node job) because one of its nodes "
            "sent no heartbeat for the heartbeat timeout (hung or lost while the others wait). "
            "It is requeued from its checkpoint; the job's timeline names the node. Repeated: "
            "look at that node's log (`spotline logs ID`) and the pool's network.",
        ),
    ]
    for pool in spot_pools:
        specs.append(
            _oldest_unstarted(
                f"SpotCapacity-{pool}",
                pool,
                wait_s,
                f"A job submitted to the Spot pool {pool} has waited over {wait_s / 60:.0f} minutes "
                "to start: no Spot capacity for its instance types in its AZs. The reconciler requeues "
                "it at the start timeout (a `spot: auto` job may then go On-Demand); widen the pool's "
                "instance types or AZs if it lasts.",
            )
        )
    for pool in on_demand_pools or []:
        specs.append(
            _oldest_unstarted(
                f"OnDemandCapacity-{pool}",
                pool,
                wait_s,
                f"A job submitted to the On-Demand pool {pool} has waited over {wait_s / 60:.0f} "
                "minutes to start: its vCPU quota is spent (`spotline doctor --check quotas`), or its "
                "AZ has no capacity for its instance types (InsufficientInstanceCapacity in the "
                "compute environment's Auto Scaling activity; a gang pool lives in one AZ). The "
                "reconciler requeues it at the start timeout.",
            )
        )
    return specs


def _oldest_unstarted(construct_id: str, pool: str, wait_s: float, description: str) -> AlarmSpec:
    """The pool's oldest job submitted to Batch and not yet started (the reconciler's
    `OldestUnstartedAge`, dimension `Pool`), past `wait_s` twice in a row."""
    return AlarmSpec(
        construct_id,
        cloudwatch.Metric(
            namespace=METRICS_NAMESPACE,
            metric_name="OldestUnstartedAge",
            dimensions_map={"Pool": pool},
            statistic="Maximum",
            period=Duration.minutes(5),
        ),
        threshold=wait_s,
        periods=2,
        description=description,
    )


def throttle_alarms(
    functions: Mapping[str, lambda_.IFunction], tables: Mapping[str, dynamodb.ITableV2]
) -> list[AlarmSpec]:
    """Lambda throttles (any function) and DynamoDB throttles (any table)."""
    five = Duration.minutes(5)
    lambda_metrics = {f"f{i}": fn.metric_throttles(period=five) for i, fn in enumerate(functions.values())}
    table_metrics = {
        f"t{i}": cloudwatch.Metric(
            namespace="AWS/DynamoDB",
            metric_name="ThrottledRequests",
            dimensions_map={"TableName": table.table_name},
            statistic="Sum",
            period=five,
        )
        for i, table in enumerate(tables.values())
    }
    return [
        AlarmSpec(
            "LambdaThrottles",
            sum_of("throttled invocations of the stack's functions", five, lambda_metrics),
            threshold=1,
            description="Lambda throttled a Spotline function: the account's concurrency is spent "
            "(`spotline doctor` reads the limit). Events wait and retry; the API answers 429.",
        ),
        AlarmSpec(
            "DynamoDbThrottles",
            sum_of("throttled requests on the stack's tables", five, table_metrics),
            threshold=1,
            description="DynamoDB throttled a request on a Spotline table (a hot partition: see "
            "docs/reliability.md, 'Scale'). Writes are retried; passes slow down.",
        ),
    ]


def api_alarm(api: apigw.RestApi) -> AlarmSpec:
    five = Duration.minutes(5)
    return AlarmSpec(
        "Api5xx",
        api.metric_server_error(period=five, statistic="Sum"),
        threshold=1,
        description="The API answered 5xx: read the api function's logs (request id in the answer).",
    )


def agent_events_alarm() -> AlarmSpec:
    fifteen = Duration.minutes(15)
    return AlarmSpec(
        "AgentEventsDropped",
        spotline_metric("AgentEventsWithoutRun", fifteen),
        threshold=1,
        description="An agent sent events naming no run (SPOTLINE_RUN_ID missing in its container): "
        "its job's heartbeats and checkpoints are dropped, and the job will be stopped as lost. "
        "Check the image's entrypoint keeps the environment.",
    )


class Alarms(Construct):
    """What pages someone: dead letters, old messages on each queue (scheduling triggers,
    heartbeats), failed workflow executions,
    scheduling passes that error, jobs stuck past a deadline (the reconciler moved them on), the
    reconciler's ledger repairs, compute environments INVALID, Spot and On-Demand pools without capacity
    (jobs waiting to start), stalled gangs, API 5xx, Lambda and DynamoDB throttles, and agents sending
    events without a run. Each alarm notifies an SNS topic: `topic_arn` (context `alarm_topic_arn`), else
    a topic of the stack's own, to which the deploy-time parameter `AlarmEmail` (optional)
    subscribes an address.

    The alarms are data (`AlarmSpec`, from the functions above, one per kind of thing watched);
    `_alarm` is the one place that turns a spec into a CloudWatch alarm."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        scheduler_queue: sqs.IQueue,
        dead_letter_queues: Mapping[str, sqs.IQueue],
        state_machines: Mapping[str, stepfunctions.IStateMachine],
        scheduler_function: lambda_.IFunction,
        functions: Mapping[str, lambda_.IFunction],
        tables: Mapping[str, dynamodb.ITableV2],
        api: apigw.RestApi,
        spot_pools: list[str] | None = None,
        on_demand_pools: list[str] | None = None,
        start_timeout_s: float = 1800.0,
        heartbeat_queue: sqs.IQueue | None = None,
        heartbeat_timeout_s: float = 600.0,
        topic_arn: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.topic = sns.Topic.from_topic_arn(self, "Topic", topic_arn) if topic_arn else self._own_topic()
        self.alarms: dict[str, cloudwatch.Alarm] = {}
        specs = [
            *queue_alarms(scheduler_queue, dead_letter_queues),
            *([heartbeat_queue_alarm(heartbeat_queue, heartbeat_timeout_s)] if heartbeat_queue else []),
            *(workflow_alarm(name, machine) for name, machine in state_machines.items()),
            pass_errors_alarm(scheduler_function),
            *reconciler_alarms(),
            *capacity_alarms(spot_pools or [], start_timeout_s, on_demand_pools),
            *throttle_alarms(functions, tables),
            api_alarm(api),
            agent_events_alarm(),
        ]
        for spec in specs:
            self._alarm(spec)

    def _own_topic(self) -> sns.ITopic:
        """The stack's alarm topic, encrypted, TLS only; `AlarmEmail` (a deploy parameter, empty
        by default) subscribes an address (it must confirm the subscription)."""
        # A key of its own: CloudWatch cannot publish to a topic under the AWS-managed SNS key,
        # whose policy it may not change.
        key = kms.Key(self, "AlarmTopicKey", description="Spotline alarm topic", enable_key_rotation=True)
        key.grant(iam.ServicePrincipal("cloudwatch.amazonaws.com"), "kms:Decrypt", "kms:GenerateDataKey*")
        topic = sns.Topic(
            self, "AlarmTopic", display_name="Spotline alarms", master_key=key, enforce_ssl=True
        )
        email = CfnParameter(
            Stack.of(self),
            "AlarmEmail",
            type="String",
            default="",
            description="An address the alarms email (optional; it must confirm the subscription)",
        )
        has_email = CfnCondition(
            self, "HasAlarmEmail", expression=Fn.condition_not(Fn.condition_equals(email.value_as_string, ""))
        )
        subscription = sns.CfnSubscription(
            self,
            "AlarmEmailSubscription",
            topic_arn=topic.topic_arn,
            protocol="email",
            endpoint=email.value_as_string,
        )
        subscription.cfn_options.condition = has_email
        return topic

    def _alarm(self, spec: AlarmSpec) -> cloudwatch.Alarm:
        alarm = cloudwatch.Alarm(
            self,
            spec.construct_id,
            metric=spec.metric,
            threshold=spec.threshold,
            evaluation_periods=spec.periods,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=spec.description,
        )
        if self.topic is not None:  # always, since the stack has a topic of its own
            alarm.add_alarm_action(cloudwatch_actions.SnsAction(self.topic))
        self.alarms[spec.construct_id] = alarm
        return alarm
