"""AWS Batch: one managed EC2 compute environment and one job queue per GPU pool, and the job
definition (with its least-privilege job role) that training containers run under.

Batch only scales instances; Spotline decides which job goes into which pool and when, so every
queue has the same priority and Batch's own retries are off (a reclaimed job is requeued by
Spotline, from its checkpoint, in priority order).
"""

from __future__ import annotations

from aws_cdk import Aws, Size
from aws_cdk import aws_batch as batch
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from spotline.aws import resources as r
from stacks.config import DeploymentConfig
from stacks.nag import acknowledge, finding_resource
from stacks.network import Network
from stacks.observability import EncryptedLogs
from stacks.storage import CHECKPOINT_PREFIX

# Root volume of a GPU instance: container images for training are large.
ROOT_VOLUME_GIB = 200
# What a training container may publish on the project bus.
AGENT_DETAIL_TYPES = (r.DETAIL_CHECKPOINT_COMPLETED, r.DETAIL_JOB_HEARTBEAT)


class TrainingCompute(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: DeploymentConfig,
        network: Network,
        logs: EncryptedLogs,
        jobs_table: dynamodb.ITableV2,
        bus: events.IEventBus,
        checkpoints: s3.IBucket,
    ) -> None:
        super().__init__(scope, construct_id)
        # On a Spot interruption warning ECS drains the instance, so Batch places no new job on
        # an instance that is about to be reclaimed (Batch needs MIME multi-part user data).
        user_data = ec2.MultipartUserData()
        ecs_config = ec2.UserData.for_linux()
        ecs_config.add_commands("echo ECS_ENABLE_SPOT_INSTANCE_DRAINING=true >> /etc/ecs/ecs.config")
        user_data.add_user_data_part(ecs_config, ec2.MultipartBody.SHELL_SCRIPT, True)
        # IMDSv2 only, with a hop limit of 2 so that the agent inside a (bridge-networked) container
        # can still read the Spot instance-action notice and its instance id.
        self.launch_template = ec2.LaunchTemplate(
            self,
            "LaunchTemplate",
            user_data=user_data,
            http_endpoint=True,
            http_tokens=ec2.LaunchTemplateHttpTokens.REQUIRED,
            http_put_response_hop_limit=2,
            block_devices=[
                ec2.BlockDevice(
                    device_name="/dev/xvda",
                    volume=ec2.BlockDeviceVolume.ebs(
                        ROOT_VOLUME_GIB, encrypted=True, volume_type=ec2.EbsDeviceVolumeType.GP3
                    ),
                )
            ],
        )
        self.compute_environments: dict[str, batch.ManagedEc2EcsComputeEnvironment] = {}
        self.job_queues: dict[str, batch.JobQueue] = {}
        for pool in config.pools:
            environment = batch.ManagedEc2EcsComputeEnvironment(
                self,
                f"{pool.name}-compute",
                vpc=network.vpc,
                vpc_subnets=network.subnets,
                security_groups=[network.training_security_group],
                instance_types=[ec2.InstanceType(t) for t in pool.instance_types],
                use_optimal_instance_classes=False,
                images=[batch.EcsMachineImage(image_type=batch.EcsMachineImageType.ECS_AL2023_NVIDIA)],
                spot=pool.is_spot,
                allocation_strategy=(
                    batch.AllocationStrategy.SPOT_PRICE_CAPACITY_OPTIMIZED
                    if pool.is_spot
                    else batch.AllocationStrategy.BEST_FIT_PROGRESSIVE
                ),
                minv_cpus=0,
                maxv_cpus=pool.max_vcpus,
                launch_template=self.launch_template,
                update_to_latest_image_version=True,
            )
            self.compute_environments[pool.name] = environment
            self.job_queues[pool.name] = batch.JobQueue(
                self,
                f"{pool.name}-queue",
                job_queue_name=f"spotline-{config.stage}-{pool.name}",
                priority=1,
                compute_environments=[
                    batch.OrderedComputeEnvironment(compute_environment=environment, order=1)
                ],
            )
            acknowledge(
                environment,
                "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
                "AmazonEC2ContainerServiceforEC2Role]",
                "The ECS agent on Batch-managed instances needs AWS's ECS instance policy (register "
                "the instance, pull images, ship logs); Batch documents this managed policy for it.",
            )

        self.job_role = iam.Role(
            self,
            "JobRole",
            assumed_by=iam.ServicePrincipal("ecs-tasks.amazonaws.com"),
            description="Spotline training container: its checkpoints, its job item, agent events",
        )
        # Checkpoints: objects under checkpoints/ only. IAM cannot tell one Batch job from another
        # (ECS task roles carry no per-job session tags), so per-job isolation is the agent writing
        # under checkpoints/<team>/<job_id>/; a team-level boundary would need one role per team.
        checkpoint_objects = checkpoints.arn_for_objects(f"{CHECKPOINT_PREFIX}*")
        checkpoint_objects_id = finding_resource(self, checkpoint_objects)
        self.job_role.add_to_policy(
            iam.PolicyStatement(
                # DeleteObject: the agent prunes its job's older checkpoints (in the versioned
                # bucket a delete marker; the lifecycle rule expires the old version).
                actions=["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload", "s3:DeleteObject"],
                resources=[checkpoint_objects],
            )
        )
        self.job_role.add_to_policy(
            iam.PolicyStatement(
                actions=["s3:ListBucket"],
                resources=[checkpoints.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [f"{CHECKPOINT_PREFIX}*"]}},
            )
        )
        self.job_role.add_to_policy(
            iam.PolicyStatement(
                actions=["events:PutEvents"],
                resources=[bus.event_bus_arn],
                conditions={
                    "StringEquals": {
                        "events:source": [r.SOURCE_AGENT],
                        "events:detail-type": list(AGENT_DETAIL_TYPES),
                    }
                },
            )
        )
        self.job_role.add_to_policy(
            iam.PolicyStatement(actions=["dynamodb:GetItem"], resources=[jobs_table.table_arn])
        )
        acknowledge(
            self.job_role,
            f"AwsSolutions-IAM5[Resource::{checkpoint_objects_id}]",
            "Checkpoint object keys contain the job id, unknown at deploy time; the role is limited "
            "to the checkpoints/ prefix of the one checkpoint bucket (see the comment in batch.py).",
        )

        log_group = logs.log_group(self, "TrainingLogs")
        self.container = batch.EcsEc2ContainerDefinition(
            self,
            "TrainingContainer",
            image=ecs.ContainerImage.from_registry(config.training_image),
            cpu=config.training_vcpus,
            memory=Size.gibibytes(config.training_memory_gib),
            # The launcher sets each job's GPUs, vCPUs and memory with resourceRequirements
            # overrides at SubmitJob; these are the smallest GPU job's defaults.
            gpu=1,
            job_role=self.job_role,
            environment={
                r.AGENT_ENV_JOBS_TABLE: jobs_table.table_name,
                r.AGENT_ENV_EVENT_BUS: bus.event_bus_name,
                r.AGENT_ENV_POLL_S: f"{config.agent_poll_s:g}",
                "AWS_DEFAULT_REGION": Aws.REGION,
            },
            logging=ecs.LogDriver.aws_logs(stream_prefix="training", log_group=log_group),
            linux_parameters=batch.LinuxParameters(
                self,
                "LinuxParameters",
                init_process_enabled=True,
                # PyTorch data loaders share tensors through /dev/shm (Docker's default is 64 MiB).
                shared_memory_size=Size.gibibytes(max(1, config.training_memory_gib // 2)),
            ),
        )
        self.job_definition_name = f"spotline-{config.stage}-training"
        self.job_definition = batch.EcsJobDefinition(
            self,
            "TrainingJob",
            job_definition_name=self.job_definition_name,
            container=self.container,
            retry_attempts=1,
            propagate_tags=True,
        )
        # The roles a job definition derived from this one carries (the launcher passes them).
        self.job_definition_roles: list[iam.IRole] = [self.job_role]
        if self.container.execution_role is not None:
            self.job_definition_roles.append(self.container.execution_role)
