"""What the stack builds instead of its AWS Batch part for `-c target=localstack`.

LocalStack's free edition runs no AWS Batch (nor ECR): CloudFormation "deploys" those resources
as fallbacks whose physical id is `unknown`, and the functions would be told `unknown` queue
ARNs. This target leaves Batch out, and the VPC that exists only for its instances: the job
queues (each pool's, or with `team_instances` each team's in each pool) are named as the AWS
target names them (a launch on LocalStack fails at SubmitJob, and the launch workflow requeues
the job), and the training containers' log group is kept (the API reads a run's logs from it).
"""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs_
from constructs import Construct

from stacks.config import DeploymentConfig, job_queue_name
from stacks.observability import EncryptedLogs


class BatchLeftOut(Construct):
    """The attributes of `stacks.batch.TrainingCompute` that the rest of the stack reads, with no
    Batch resource behind them: no compute environment, job queue, job definition, job role or
    image repository."""

    def __init__(
        self, scope: Construct, construct_id: str, *, config: DeploymentConfig, logs: EncryptedLogs
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.job_definition_name = f"spotline-{config.stage}-training"
        # Keyed as `TrainingCompute.job_queues` is: (pool, team), or (pool, None) for a pool's
        # queue that every team shares.
        self.job_queue_arns: dict[tuple[str, str | None], str] = {
            (pool.name, owner): stack.format_arn(
                service="batch",
                resource="job-queue",
                resource_name=job_queue_name(config.stage, pool.name, owner),
            )
            for pool in config.pools
            for owner in config.queue_owners
        }
        self.log_group: logs_.LogGroup = logs.log_group(self, "TrainingLogs")
        self.team_roles: dict[str, iam.Role] = {}
        self.job_definition_roles: list[iam.IRole] = []
        self.job_definitions: dict[str, object] = {}
        self.efa_job_definitions: dict[str, object] = {}
        self.training_repository = None
        self.image_repository_arns: list[str] = []
        self.training_image_uri = config.training_image or ""
        self.pool_zones: dict[str, str] = {}
