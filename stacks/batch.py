"""AWS Batch: one managed EC2 compute environment and one job queue per GPU pool, and per team
the job definition (with that team's least-privilege job role) its training containers run under.

Batch only scales instances; Spotline decides which job goes into which pool and when, so every
queue has the same priority and Batch's own retries are off (a reclaimed job is requeued by
Spotline, from its checkpoint, in priority order).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from aws_cdk import Aws, Duration, RemovalPolicy, Size, Stack, Token
from aws_cdk import aws_batch as batch
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from spotline import resources as r
from spotline.control.sizing import efa_interfaces
from stacks.config import DeploymentConfig, PoolConfig, job_queue_name
from stacks.nag import acknowledge, finding_resource
from stacks.network import Network
from stacks.observability import EncryptedLogs
from stacks.zones import GangZones

# How long an infrastructure update waits for running jobs (Batch's maximum, 360 minutes).
JOB_EXECUTION_UPDATE_TIMEOUT = Duration.minutes(360)
# Root volume of a GPU instance: container images for training are large.
ROOT_VOLUME_GIB = 200
# The tag of the stack's training repository that the job definition runs by default.
TRAINING_IMAGE_TAG = "latest"
# What a training container may publish on the project bus.
AGENT_DETAIL_TYPES = (r.DETAIL_CHECKPOINT_COMPLETED, r.DETAIL_JOB_HEARTBEAT)
# The EFAs' devices (the launch template attaches every EFA interface the instance type has:
# uverbs0 .. uverbs<n-1>), and what the container's libfabric and NCCL need to use them in EFA
# pools: the EFA provider (not TCP sockets), and fork-safety for PyTorch's data loader workers.
# The image must carry libfabric with the EFA provider and the aws-ofi-nccl plugin (the training
# Dockerfile's `efa` target, docs/deploy.md "EFA"): without them NCCL runs over TCP sockets.
EFA_DEVICE_PATTERN = "/dev/infiniband/uverbs{}"
EFA_ENVIRONMENT = {"FI_PROVIDER": "efa", "FI_EFA_FORK_SAFE": "1"}
# Instance metadata (IMDS) is closed to training containers (docs/security.md, "Host
# isolation"): with the instance role a container could impersonate the ECS agent and take the
# job-role credentials of every other container on the instance (AWS's ECS guidance, the 2025
# "ECScape" research). The boot script closes IMDS and the ECS agent's API to every ECS task
# (host network mode: by cgroup; bridge mode: DOCKER-USER; awsvpc: ECS_AWSVPC_BLOCK_IMDS) and
# fails closed; tests/infra/test_host_isolation_netns.py runs it. The hop limit of 1 also keeps an
# IMDSv2 token off any bridge. The agent learns of a Spot notice from the control plane instead
# (the EventBridge warning asks the job for a checkpoint through its signal item), and its
# instance id from Batch's events; the job's environment turns the SDK's IMDS lookups off.
IMDS_HOP_LIMIT = 1
HOST_ISOLATION_SCRIPT = Path(__file__).parent / "userdata" / "host-isolation.sh"
CONTAINER_IMDS_ENVIRONMENT = {"AWS_EC2_METADATA_DISABLED": "true"}
# A team's checkpoint key (checkpoint_kms_per_team): what the team's role does with it through
# S3, and what the account may do (administration, no use).
KEY_USE_ACTIONS = ("kms:Decrypt", "kms:GenerateDataKey")
KEY_ADMIN_ACTIONS = (
    "kms:Create*",
    "kms:Describe*",
    "kms:Enable*",
    "kms:List*",
    "kms:Put*",
    "kms:Update*",
    "kms:Revoke*",
    "kms:Disable*",
    "kms:Get*",
    "kms:Delete*",
    "kms:TagResource",
    "kms:UntagResource",
    "kms:ScheduleKeyDeletion",
    "kms:CancelKeyDeletion",
)

_ECR_IMAGE = re.compile(
    r"^(?P<account>[0-9]{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(?:\.cn)?/(?P<repo>[^:@]+)"
)


def host_isolation_user_data() -> str:
    """The instances' boot script, as the launch template carries it (the file, unchanged)."""
    return HOST_ISOLATION_SCRIPT.read_text()


def team_repository_pattern(team: str) -> str:
    """The ECR repositories of a team (names under `<team>/`): the only ones, besides the shared
    training image's, that its execution role pulls from."""
    return f"{team}/*"


def ecr_repository_arn(image: str) -> str | None:
    """The ARN of the ECR repository an image URI names (None: not an ECR image)."""
    matched = _ECR_IMAGE.match(image)
    if matched is None:
        return None
    partition = "aws-cn" if ".amazonaws.com.cn/" in image else "aws"
    return f"arn:{partition}:ecr:{matched['region']}:{matched['account']}:repository/{matched['repo']}"


def efa_interfaces_of(network: Network, interfaces: int) -> list[dict[str, Any]]:
    """One EFA interface on each network card: the first the primary (device index 0)."""
    return [
        {
            "DeviceIndex": 0 if card == 0 else 1,
            "NetworkCardIndex": card,
            "InterfaceType": "efa",
            "Groups": [network.gang_security_group.security_group_id],
            "DeleteOnTermination": True,
        }
        for card in range(interfaces)
    ]


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
        gang_zones: GangZones | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        # On a Spot interruption warning ECS drains the instance, so Batch places no new job on
        # an instance that is about to be reclaimed (Batch needs MIME multi-part user data).
        # (The boot script also sets the ECS agent's options: Spot draining among them.)
        user_data = ec2.MultipartUserData()
        user_data.add_user_data_part(
            ec2.UserData.custom(host_isolation_user_data()), ec2.MultipartBody.SHELL_SCRIPT, True
        )
        self.launch_template = self._launch_template("LaunchTemplate", user_data)
        self.efa_launch_template: ec2.LaunchTemplate | None = None
        # Each reserved pool's launch template, aimed at its reservation (by pool name).
        self.reserved_launch_templates: dict[str, ec2.LaunchTemplate] = {}
        self.placement_groups: dict[str, ec2.PlacementGroup] = {}
        # Keyed by (pool, team): the team's own instances of the pool with `team_instances`, else
        # (pool, None), the pool's instances that every team shares.
        self.compute_environments: dict[tuple[str, str | None], batch.ManagedEc2EcsComputeEnvironment] = {}
        self.job_queues: dict[tuple[str, str | None], batch.JobQueue] = {}
        self.pool_zones: dict[str, str] = {}
        self._user_data = user_data
        self._gang_zones = gang_zones
        self._looked_up_subnets: dict[str, str] = {}
        for pool in config.pools:
            for owner in config.queue_owners:
                self._pool_compute(config, network, pool, owner)

        # One job role and one job definition per team (Batch cannot override a job's role at
        # SubmitJob, so the definition carries it): a team's code reaches its own checkpoints,
        # its own jobs' signal items and its own event source, nothing of another team's
        # (docs/security.md). The launcher picks the job's team's definition.
        log_group = logs.log_group(self, "TrainingLogs")
        self.log_group = log_group
        self.job_definition_name = f"spotline-{config.stage}-training"
        self.team_roles: dict[str, iam.Role] = {}
        self.team_keys: dict[str, kms.Key] = {}
        self.job_definitions: dict[str, batch.EcsJobDefinition] = {}
        self.efa_job_definitions: dict[str, batch.EcsJobDefinition] = {}
        # One execution role per team (image pull and log delivery, used by the ECS agent): a
        # team pulls only its own repositories and the shared training image.
        self.execution_roles: dict[str, iam.Role] = {}
        # Every repository an execution role pulls from (the control plane pins tags from them).
        self.image_repository_arns: list[str] = []
        image = self._training_image(config)
        efa_counts = {efa_interfaces(pool.instance_types) for pool in config.pools if pool.efa}
        self.efa_interfaces = max(efa_counts, default=0)
        for team in config.team_names:
            role = self._team_role(team, checkpoints=checkpoints, jobs_table=jobs_table, bus=bus)
            key = self._team_key(team, role, checkpoints) if config.checkpoint_kms_per_team else None
            if key is not None:
                self.team_keys[team] = key
            environment = {
                r.AGENT_ENV_JOBS_TABLE: jobs_table.table_name,
                r.AGENT_ENV_EVENT_BUS: bus.event_bus_name,
                r.AGENT_ENV_POLL_S: f"{config.agent_poll_s:g}",
                r.AGENT_ENV_TEAM: team,
                "AWS_DEFAULT_REGION": Aws.REGION,
                **CONTAINER_IMDS_ENVIRONMENT,
            }
            if key is not None:
                environment[r.AGENT_ENV_CHECKPOINT_KMS_KEY] = key.key_arn
            self.team_roles[team] = role
            execution_role = self._execution_role(team, config)
            self.execution_roles[team] = execution_role
            self.job_definitions[team] = self._job_definition(
                team, config, image=image, role=role, execution_role=execution_role, environment=environment
            )
            if any(pool.efa for pool in config.pools):
                # EFA pools only: a container mapping a device its host lacks does not start.
                self.efa_job_definitions[team] = self._job_definition(
                    team,
                    config,
                    image=image,
                    role=role,
                    execution_role=execution_role,
                    environment={**environment, **EFA_ENVIRONMENT},
                    efa=True,
                )
        # The roles a job definition derived from these carries (the launcher passes them).
        self.job_definition_roles: list[iam.IRole] = [
            *self.team_roles.values(),
            *self.execution_roles.values(),
        ]

    def _pool_compute(
        self, config: DeploymentConfig, network: Network, pool: PoolConfig, owner: str | None
    ) -> None:
        """The compute environment and job queue of `pool`'s instances: `owner`'s own (a team),
        or the pool's shared ones (None)."""
        suffix = f"-{owner}" if owner else ""
        user_data = self._user_data
        gang_pool = pool.placement_group
        subnets = network.subnets
        looked_up_subnet: str | None = None
        if gang_pool:
            # A cluster placement group lives in one AZ: the pool's instances launch in that
            # AZ's subnet only (a CE spanning two AZs leaves gangs RUNNABLE for ever). The AZ is
            # the pool's own, else the first of the VPC's that offers its instance types, looked
            # up during the deploy (stacks.zones), once per pool.
            if pool.availability_zone:
                zone = self._gang_zone(pool.name, pool.availability_zone, network)
                subnets = ec2.SubnetSelection(
                    subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, availability_zones=[zone]
                )
            else:
                if self._gang_zones is None:
                    raise ValueError(f"pool '{pool.name}': a gang pool without an AZ needs the zone lookup")
                if pool.name not in self._looked_up_subnets:
                    zone, subnet = self._gang_zones.zone_of(pool.name, pool.instance_types)
                    self.pool_zones[pool.name] = zone
                    self._looked_up_subnets[pool.name] = subnet
                looked_up_subnet = self._looked_up_subnets[pool.name]
        environment = batch.ManagedEc2EcsComputeEnvironment(
            self,
            f"{pool.name}{suffix}-compute",
            vpc=network.vpc,
            vpc_subnets=subnets,
            security_groups=[network.gang_security_group if gang_pool else network.training_security_group],
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
            launch_template=self._pool_launch_template(pool, user_data, network),
            placement_group=self._placement_group(pool.name) if pool.placement_group else None,
            update_to_latest_image_version=True,
            # A deploy that changes the instances leaves running jobs alone for as long as
            # Batch allows (6 hours), instead of terminating them after 30 minutes; a job
            # still running then is stopped and requeued from its checkpoint (host lost).
            terminate_on_update=False,
            update_timeout=JOB_EXECUTION_UPDATE_TIMEOUT,
        )
        cfn_environment = environment.node.default_child
        assert isinstance(cfn_environment, batch.CfnComputeEnvironment)
        # The launch template's version as deployed, not $Default: a user-data change makes a
        # new version, which updates the compute environment, so new instances get it.
        template = self._pool_launch_template(pool, user_data, network)
        cfn_environment.add_property_override(
            "ComputeResources.LaunchTemplate.Version", template.latest_version_number
        )
        if looked_up_subnet is not None:
            cfn_environment.add_property_override("ComputeResources.Subnets", [looked_up_subnet])
        if pool.efa:
            # The launch template's EFA interface carries the security group; EC2 refuses
            # security groups given both there and for the instance.
            cfn_environment.add_property_deletion_override("ComputeResources.SecurityGroupIds")
        self.compute_environments[pool.name, owner] = environment
        self.job_queues[pool.name, owner] = batch.JobQueue(
            self,
            f"{pool.name}{suffix}-queue",
            job_queue_name=job_queue_name(config.stage, pool.name, owner),
            priority=1,
            compute_environments=[batch.OrderedComputeEnvironment(compute_environment=environment, order=1)],
        )
        acknowledge(
            environment,
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
            "AmazonEC2ContainerServiceforEC2Role]",
            "The ECS agent on Batch-managed instances needs AWS's ECS instance policy (register "
            "the instance, pull images, ship logs); Batch documents this managed policy for it.",
        )

    def _job_definition(
        self,
        team: str,
        config: DeploymentConfig,
        *,
        image: ecs.ContainerImage,
        role: iam.IRole,
        execution_role: iam.IRole,
        environment: dict[str, str],
        efa: bool = False,
    ) -> batch.EcsJobDefinition:
        """The team's training job definition (`<stage>-training-<team>`), or with `efa` its EFA
        variant (`...-efa`), which maps the EFAs' devices into the container: libfabric (and NCCL's
        aws-ofi-nccl plugin over it) reaches an adapter only through its /dev/infiniband/uverbs<i>
        (docs.aws.amazon.com/batch/latest/userguide/efa.html). The launch template attaches every
        EFA interface of the pools' instance type, hence one device each."""
        suffix = "-efa" if efa else ""
        linux_parameters = batch.LinuxParameters(
            self,
            f"LinuxParameters-{team}{suffix}",
            init_process_enabled=True,
            # PyTorch data loaders share tensors through /dev/shm (Docker's default is 64 MiB).
            shared_memory_size=Size.gibibytes(max(1, config.training_memory_gib // 2)),
        )
        if efa:
            linux_parameters.add_devices(
                *(
                    batch.Device(
                        host_path=EFA_DEVICE_PATTERN.format(index),
                        container_path=EFA_DEVICE_PATTERN.format(index),
                        permissions=[
                            batch.DevicePermission.READ,
                            batch.DevicePermission.WRITE,
                            batch.DevicePermission.MKNOD,
                        ],
                    )
                    for index in range(self.efa_interfaces)
                )
            )
        container = batch.EcsEc2ContainerDefinition(
            self,
            f"TrainingContainer-{team}{suffix}",
            image=image,
            cpu=config.training_vcpus,
            memory=Size.gibibytes(config.training_memory_gib),
            # The launcher sets each job's GPUs, vCPUs and memory with resourceRequirements
            # overrides at SubmitJob; these are the smallest GPU job's defaults.
            gpu=1,
            job_role=role,
            # The team's execution role (image pull, log delivery: the ECS agent's, not the job's).
            execution_role=execution_role,
            environment=environment,
            logging=ecs.LogDriver.aws_logs(stream_prefix="training", log_group=self.log_group),
            linux_parameters=linux_parameters,
        )
        return batch.EcsJobDefinition(
            self,
            f"TrainingJob-{team}{suffix}",
            job_definition_name=f"{self.job_definition_name}-{team}{suffix}",
            container=container,
            retry_attempts=1,
            propagate_tags=True,
        )

    def _team_role(
        self,
        team: str,
        *,
        checkpoints: s3.IBucket,
        jobs_table: dynamodb.ITableV2,
        bus: events.IEventBus,
    ) -> iam.Role:
        role = iam.Role(
            self,
            f"JobRole-{team}",
            assumed_by=iam.ServicePrincipal("ecs-tasks.amazonaws.com"),
            description=f"Spotline training container of team {team}: its checkpoints, signals, events",
        )
        prefix = r.checkpoint_prefix(team)
        checkpoint_objects = checkpoints.arn_for_objects(f"{prefix}*")
        role.add_to_policy(
            iam.PolicyStatement(
                # DeleteObject: the agent prunes its job's older checkpoints (in the versioned
                # bucket a delete marker; the lifecycle rule expires the old version).
                actions=["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload", "s3:DeleteObject"],
                resources=[checkpoint_objects],
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["s3:ListBucket"],
                resources=[checkpoints.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [f"{prefix}*"]}},
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["events:PutEvents"],
                resources=[bus.event_bus_arn],
                conditions={
                    "StringEquals": {
                        "events:source": [r.agent_source(team)],
                        "events:detail-type": list(AGENT_DETAIL_TYPES),
                    }
                },
            )
        )
        # Its jobs' signal items only (never a job's own item, never another team's).
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["dynamodb:GetItem"],
                resources=[jobs_table.table_arn],
                conditions={
                    "ForAllValues:StringLike": {"dynamodb:LeadingKeys": [r.signal_key_pattern(team)]}
                },
            )
        )
        acknowledge(
            role,
            f"AwsSolutions-IAM5[Resource::{finding_resource(self, checkpoint_objects)}]",
            "Checkpoint object keys contain the job id, unknown at deploy time; the role is limited "
            f"to its team's prefix {prefix} of the one checkpoint bucket.",
        )
        return role

    def _team_key(self, team: str, role: iam.Role, checkpoints: s3.IBucket) -> kms.Key:
        """The team's checkpoint key (cdk.json `checkpoint_kms_per_team`). Its policy lets the
        account administer it but use it for nothing, and lets only the team's role encrypt and
        decrypt with it, through S3; the role must write its checkpoints with it."""
        key = kms.Key(
            self,
            f"CheckpointKey-{team}",
            description=f"Spotline checkpoints of team {team}",
            enable_key_rotation=True,
            policy=iam.PolicyDocument(
                statements=[
                    iam.PolicyStatement(
                        sid="AccountAdministersTheKeyOnly",
                        principals=[iam.AccountRootPrincipal()],
                        actions=list(KEY_ADMIN_ACTIONS),
                        resources=["*"],
                    ),
                    iam.PolicyStatement(
                        sid="TeamJobRoleUsesTheKeyThroughS3",
                        principals=[iam.ArnPrincipal(role.role_arn)],
                        actions=list(KEY_USE_ACTIONS),
                        resources=["*"],
                        conditions={"StringEquals": {"kms:ViaService": f"s3.{Aws.REGION}.amazonaws.com"}},
                    ),
                ]
            ),
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=list(KEY_USE_ACTIONS),
                resources=[key.key_arn],
                conditions={"StringEquals": {"kms:ViaService": f"s3.{Aws.REGION}.amazonaws.com"}},
            )
        )
        # No other key for the role's writes. (IfExists: the parts of a multipart upload carry no
        # encryption header, they inherit the upload's; the agent names the key on every upload.)
        role.add_to_policy(
            iam.PolicyStatement(
                effect=iam.Effect.DENY,
                actions=["s3:PutObject"],
                resources=[checkpoints.arn_for_objects(f"{r.checkpoint_prefix(team)}*")],
                conditions={
                    "StringNotEqualsIfExists": {"s3:x-amz-server-side-encryption-aws-kms-key-id": key.key_arn}
                },
            )
        )
        return key

    def _launch_template(self, construct_id: str, user_data: ec2.UserData) -> ec2.LaunchTemplate:
        # IMDSv2 only, with a hop limit of 1: a token cannot leave the host's own network stack
        # (containers are also cut off by the boot script's rules: HOST_ISOLATION_SCRIPT).
        return ec2.LaunchTemplate(
            self,
            construct_id,
            user_data=user_data,
            http_endpoint=True,
            http_tokens=ec2.LaunchTemplateHttpTokens.REQUIRED,
            http_put_response_hop_limit=IMDS_HOP_LIMIT,
            block_devices=[
                ec2.BlockDevice(
                    device_name="/dev/xvda",
                    volume=ec2.BlockDeviceVolume.ebs(
                        ROOT_VOLUME_GIB, encrypted=True, volume_type=ec2.EbsDeviceVolumeType.GP3
                    ),
                )
            ],
        )

    def _pool_launch_template(
        self, pool: PoolConfig, user_data: ec2.UserData, network: Network
    ) -> ec2.LaunchTemplate:
        """The launch template of `pool`'s instances: a reserved pool's own, the EFA one, or the
        shared one."""
        if pool.reservation is not None:
            return self._reserved_launch_template(pool, user_data, network)
        if pool.efa:
            return self._efa_launch_template(user_data, network, efa_interfaces(pool.instance_types))
        return self.launch_template

    def _reserved_launch_template(
        self, pool: PoolConfig, user_data: ec2.UserData, network: Network
    ) -> ec2.LaunchTemplate:
        """A reserved pool's launch template (one per pool, made once): the shared one's settings,
        aimed at its reservation. A Capacity Block: market type `capacity-block` and the
        reservation's id; an ODCR group: the group's ARN, only there (the pool's instance types
        are pinned in its compute environment)."""
        reservation = pool.reservation
        assert reservation is not None
        existing = self.reserved_launch_templates.get(pool.name)
        if existing is not None:
            return existing
        template = self._launch_template(f"{pool.name}-reserved-launch-template", user_data)
        cfn = template.node.default_child
        assert isinstance(cfn, ec2.CfnLaunchTemplate)
        if reservation.is_capacity_block:
            cfn.add_property_override(
                "LaunchTemplateData.InstanceMarketOptions", {"MarketType": "capacity-block"}
            )
            target = {"CapacityReservationId": reservation.capacity_reservation_id}
        else:
            target = {"CapacityReservationResourceGroupArn": reservation.resource_group_arn}
        cfn.add_property_override(
            "LaunchTemplateData.CapacityReservationSpecification", {"CapacityReservationTarget": target}
        )
        if pool.efa:
            cfn.add_property_override(
                "LaunchTemplateData.NetworkInterfaces",
                efa_interfaces_of(network, efa_interfaces(pool.instance_types)),
            )
        self.reserved_launch_templates[pool.name] = template
        return template

    def _efa_launch_template(
        self, user_data: ec2.UserData, network: Network, interfaces: int
    ) -> ec2.LaunchTemplate:
        """The launch template of EFA pools: the same, with one EFA interface on each network card
        of the instance type (4 on a p4d, 32 on a p5; AWS's layout: the first the primary
        interface, device index 0, the others device index 1 on their own card). One EFA would
        leave the other cards' bandwidth unused."""
        if self.efa_launch_template is None:
            template = self._launch_template("EfaLaunchTemplate", user_data)
            cfn = template.node.default_child
            assert isinstance(cfn, ec2.CfnLaunchTemplate)
            cfn.add_property_override(
                "LaunchTemplateData.NetworkInterfaces", efa_interfaces_of(network, interfaces)
            )
            self.efa_launch_template = template
        return self.efa_launch_template

    def _gang_zone(self, pool_name: str, zone: str, network: Network) -> str:
        """The AZ a pool with a placement group names (`availability_zone`), one of the VPC's."""
        zones = network.vpc.availability_zones
        if any(Token.is_unresolved(z) for z in zones):
            raise ValueError(
                f"pool '{pool_name}': availability_zone {zone!r} needs the VPC's AZs named in cdk.json "
                "(`availability_zones` of a created VPC); without them they are the region's first two, "
                "known only at deploy time (leave `availability_zone` out: the deploy then picks the "
                "first that offers the pool's instance types)"
            )
        if zone not in zones:
            raise ValueError(
                f"pool '{pool_name}': availability_zone {zone!r} is not one of the VPC's {zones}"
            )
        self.pool_zones[pool_name] = zone
        return zone

    def _placement_group(self, pool_name: str) -> ec2.PlacementGroup:
        # A gang job's nodes close together (one AZ, low latency); On-Demand pools only. One per
        # pool, whichever team's instances launch in it.
        if pool_name in self.placement_groups:
            return self.placement_groups[pool_name]
        group = ec2.PlacementGroup(
            self, f"{pool_name}-placement", strategy=ec2.PlacementGroupStrategy.CLUSTER
        )
        self.placement_groups[pool_name] = group
        return group

    def _execution_role(self, team: str, config: DeploymentConfig) -> iam.Role:
        """The team's execution role: with it ECS pulls the job's image and ships its logs. It
        reads the team's own ECR repositories (`<team>/...`, `r.team_repository_pattern`) and the
        shared training image's repository, nothing else: a job naming another team's private
        image fails to pull (CannotPullContainerError, a clear final reason), never runs it."""
        role = iam.Role(
            self,
            f"ExecutionRole-{team}",
            assumed_by=iam.ServicePrincipal("ecs-tasks.amazonaws.com"),
            description=f"Spotline training containers of team {team}: image pull and logs (the ECS agent's)",
        )
        repositories = [
            Stack.of(self).format_arn(
                service="ecr", resource="repository", resource_name=team_repository_pattern(team)
            )
        ]
        if self.training_repository is not None:
            repositories.append(self.training_repository.repository_arn)
        elif (shared := ecr_repository_arn(config.training_image or "")) is not None:
            repositories.append(shared)
        self.image_repository_arns.extend(r for r in repositories if r not in self.image_repository_arns)
        role.add_to_policy(
            iam.PolicyStatement(
                actions=[
                    "ecr:BatchGetImage",
                    "ecr:GetDownloadUrlForLayer",
                    "ecr:BatchCheckLayerAvailability",
                ],
                resources=repositories,
            )
        )
        # GetAuthorizationToken has no resource: the token is for the registry as a whole.
        role.add_to_policy(iam.PolicyStatement(actions=["ecr:GetAuthorizationToken"], resources=["*"]))
        acknowledge(
            role,
            f"AwsSolutions-IAM5[Resource::{finding_resource(self, repositories[0])}]",
            f"Team {team}'s own image repositories (names under {team_repository_pattern(team)}), "
            "unknown at deploy time; the role may only read images, which ECS pulls with it at task start.",
        )
        acknowledge(
            role,
            "AwsSolutions-IAM5[Resource::*]",
            "ecr:GetAuthorizationToken supports no resource-level permission; ECS needs it to pull "
            "a private image.",
        )
        return role

    def _training_image(self, config: DeploymentConfig) -> ecs.ContainerImage:
        """The configured image, else `latest` in the stack's own repository (created here and
        kept when the stack is deleted: it holds the teams' images)."""
        if config.training_image:
            self.training_repository: ecr.IRepository | None = None
            self.training_image_uri = config.training_image
            return ecs.ContainerImage.from_registry(config.training_image)
        name = f"spotline-{config.stage}-train"
        if config.adopt_training_repository:
            self.training_repository = ecr.Repository.from_repository_name(self, "TrainingImages", name)
            self.training_image_uri = f"{self.training_repository.repository_uri}:{TRAINING_IMAGE_TAG}"
            return ecs.ContainerImage.from_ecr_repository(self.training_repository, tag=TRAINING_IMAGE_TAG)
        self.training_repository = ecr.Repository(
            self,
            "TrainingImages",
            repository_name=name,
            image_scan_on_push=True,
            removal_policy=RemovalPolicy.RETAIN,
        )
        self.training_image_uri = f"{self.training_repository.repository_uri}:{TRAINING_IMAGE_TAG}"
        return ecs.ContainerImage.from_ecr_repository(self.training_repository, tag=TRAINING_IMAGE_TAG)
