"""Encrypted CloudWatch log groups (one customer-managed key for all of them) and the dashboard."""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Aws, Duration, RemovalPolicy, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
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
