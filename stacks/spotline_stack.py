"""The Spotline stack: everything in `spotline.resources`, plus the GPU pools of the context."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aws_cdk import Annotations, ArnFormat, CfnOutput, Duration, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_ssm as ssm
from constructs import Construct
from pydantic import ValidationError

from spotline import resources as r
from spotline.aws.published import STANDARD_PARAMETER_BYTES, PublishedConfig, PublishedPool, parameter_name
from spotline.control.settings import SpotlineConfig
from stacks.api import HttpApi
from stacks.batch import TrainingCompute
from stacks.config import ConfigError, DeploymentConfig, job_queue_name
from stacks.data import Tables
from stacks.functions import RUNTIME, ActionScopes, Functions, runtime_version
from stacks.localstack import BatchLeftOut
from stacks.messaging import Messaging
from stacks.network import Network
from stacks.observability import Alarms, Dashboard, EncryptedLogs
from stacks.packaging import (
    bundle_dependencies,
    bundled_requirements,
    bytecode_compiler,
    powertools_layer_arn,
    stage_lambda_code,
)
from stacks.routing import EventRouting
from stacks.storage import CheckpointStorage
from stacks.workflows import Workflows
from stacks.zones import GangZones

REPO_ROOT = Path(__file__).resolve().parent.parent


class SpotlineStack(Stack):
    """`functions_dir` / `statemachines_dir` default to the repository's; tests point them elsewhere.
    `build_dir` receives the staged Lambda code (see `stacks.packaging`)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: DeploymentConfig,
        functions_dir: Path | None = None,
        statemachines_dir: Path | None = None,
        library_dir: Path | None = None,
        build_dir: Path | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.config = config
        functions_dir = functions_dir or REPO_ROOT / "functions"
        statemachines_dir = statemachines_dir or REPO_ROOT / "statemachines"
        library_dir = library_dir or REPO_ROOT / "spotline"
        build_dir = build_dir or REPO_ROOT / "build"
        self.functions_dir = functions_dir
        self.statemachines_dir = statemachines_dir
        missing = [
            f"{functions_dir}/{f.module}.py"
            for f in r.FUNCTIONS
            if not (functions_dir / f"{f.module}.py").is_file()
        ]
        if missing:
            raise FileNotFoundError(f"Lambda entry points missing: {missing}")

        self.logs = EncryptedLogs(self, "Logs", retention_days=config.log_retention_days)
        self.tables = Tables(self, "Data")
        self.storage = CheckpointStorage(
            self,
            "Storage",
            noncurrent_version_days=config.checkpoint_noncurrent_version_days,
            access_log_expiration_days=config.access_log_expiration_days,
        )
        # Target localstack: no Batch, so neither its VPC (stacks/localstack.py).
        self.network: Network | None = (
            None
            if config.localstack
            else Network(
                self,
                "Network",
                logs=self.logs,
                nat_gateways=config.nat_gateways,
                interface_endpoints=config.vpc_endpoints,
                vpc_id=config.vpc_id,
                subnet_ids=config.vpc_subnet_ids,
                availability_zones=config.vpc_availability_zones,
                created_availability_zones=config.availability_zones,
            )
        )
        scheduler_spec = next(f for f in r.FUNCTIONS if f.name == "scheduler")
        self.messaging = Messaging(
            self,
            "Messaging",
            stage=config.stage,
            scheduler_timeout=Duration.seconds(scheduler_spec.timeout_s),
            function_timeouts={f.name: Duration.seconds(f.timeout_s) for f in r.FUNCTIONS},
        )
        jobs_table = self.tables[r.JOBS.logical_id]
        code_dir = self._stage_code(library_dir, functions_dir, build_dir)
        # Target localstack: no layer, the code asset carries Powertools (`_stage_code`).
        layer_arn = None if config.localstack else powertools_layer_arn(config.powertools_layer_version)
        self.gang_zones: GangZones | None = None
        if self.network is not None and any(
            pool.placement_group and not pool.availability_zone for pool in config.pools
        ):
            self.gang_zones = GangZones(
                self,
                "GangZones",
                code=lambda_.Code.from_asset(str(code_dir)),
                layers=(
                    [lambda_.LayerVersion.from_layer_version_arn(self, "PowertoolsForLookups", layer_arn)]
                    if layer_arn is not None
                    else []
                ),
                runtime=RUNTIME,
                logs=self.logs,
                subnets=self.network.vpc.private_subnets,
            )
        self.compute: TrainingCompute | BatchLeftOut
        # Each job queue's ARN, keyed as `TrainingCompute.job_queues` is: (pool, team or None).
        self.job_queue_arns: dict[tuple[str, str | None], str]
        if self.network is None:
            self.compute = BatchLeftOut(self, "Batch", config=config, logs=self.logs)
            self.job_queue_arns = dict(self.compute.job_queue_arns)
        else:
            self.compute = TrainingCompute(
                self,
                "Batch",
                config=config,
                network=self.network,
                logs=self.logs,
                jobs_table=jobs_table,
                bus=self.messaging.bus,
                checkpoints=self.storage.checkpoints,
                gang_zones=self.gang_zones,
            )
            self.job_queue_arns = {key: q.job_queue_arn for key, q in self.compute.job_queues.items()}

        # The workflows' names are fixed, so their ARNs are known before they exist.
        self.state_machine_names = {m.name: f"spotline-{config.stage}-{m.name}" for m in r.STATE_MACHINES}
        state_machine_arns = {
            name: self.format_arn(
                service="states",
                resource="stateMachine",
                resource_name=physical,
                arn_format=ArnFormat.COLON_RESOURCE_NAME,
            )
            for name, physical in self.state_machine_names.items()
        }
        environment = {
            **{table.env: self.tables[table.logical_id].table_name for table in r.TABLES},
            r.ENV_EVENT_BUS: self.messaging.bus.event_bus_name,
            r.ENV_SCHEDULER_QUEUE_URL: self.messaging.scheduler_queue.queue_url,
            r.ENV_CHECKPOINT_BUCKET: self.storage.checkpoints.bucket_name,
            r.ENV_TRAINING_LOG_GROUP: self.compute.log_group.log_group_name,
            **{m.env: state_machine_arns[m.name] for m in r.STATE_MACHINES},
            r.ENV_CONFIG: self.to_json_string(self.spotline_config()),
        }
        _check_environment_size(self, environment)
        self.functions = Functions(
            self,
            "Functions",
            code_dir=code_dir,
            powertools_layer_arn=layer_arn,
            logs=self.logs,
            tables=self.tables.by_logical_id,
            bus=self.messaging.bus,
            scopes=ActionScopes(
                state_machine_arns=state_machine_arns,
                scheduler_queue_arn=self.messaging.scheduler_queue.queue_arn,
                job_queue_arns=list(self.job_queue_arns.values()),
                job_definition_family_arn=self.format_arn(
                    service="batch",
                    resource="job-definition",
                    resource_name=f"{self.compute.job_definition_name}*",
                ),
                job_definition_role_arns=[role.role_arn for role in self.compute.job_definition_roles],
                training_log_group_arn=self.compute.log_group.log_group_arn,
                image_repository_arns=self.compute.image_repository_arns,
            ),
            environment=environment,
            dead_letters=self.messaging.events_dead_letters,
            scheduler_reserved_concurrency=config.scheduler_reserved_concurrency,
            spot_warning_reserved_concurrency=config.spot_warning_reserved_concurrency,
            tracing=config.tracing,
        )
        self.functions["scheduler"].add_event_source(
            # One batch at a time comes from the FIFO queue's single message group (Lambda never
            # hands one group to two invocations at once), so passes never overlap without any
            # reserved concurrency, which a new account (limit 10) cannot grant: AWS keeps 100
            # unreserved. `scheduler_reserved_concurrency` adds a hard cap where the account allows
            # it (`spotline doctor` checks).
            sources.SqsEventSource(
                self.messaging.scheduler_queue, batch_size=10, report_batch_item_failures=True
            )
        )
        for spec in r.EVENT_QUEUES:
            # N events, far fewer than N invocations: a batch each, at most `max_concurrency` at
            # once, whatever the number of nodes heartbeating (resources.EventQueue).
            self.functions[spec.function].add_event_source(
                sources.SqsEventSource(
                    self.messaging.event_queues[spec.logical_id],
                    batch_size=spec.batch_size,
                    max_batching_window=Duration.seconds(spec.max_batching_window_s),
                    max_concurrency=spec.max_concurrency,
                    report_batch_item_failures=True,
                )
            )
        self.workflows = Workflows(
            self,
            "Workflows",
            statemachines_dir=statemachines_dir,
            functions=self.functions.functions,
            names=self.state_machine_names,
            logs=self.logs,
        )
        self._restrict_bus_publishers()
        self.routing = EventRouting(
            self,
            "Events",
            project_bus=self.messaging.bus,
            default_bus=self.messaging.default_bus,
            scheduler_queue=self.messaging.scheduler_queue,
            event_queues=self.messaging.event_queues,
            functions=self.functions.functions,
            dead_letters=self.messaging.events_dead_letters,
        )
        self.api = HttpApi(
            self,
            "Api",
            handler=self.functions["api"],
            logs=self.logs,
            stage=config.stage,
            rate_limit=config.api_rate_limit,
            burst_limit=config.api_burst_limit,
        )
        self.dashboard = Dashboard(
            self,
            "Dashboard",
            scheduler_queue=self.messaging.scheduler_queue,
            dead_letter_queues={
                "events": self.messaging.events_dead_letters,
                "scheduler": self.messaging.scheduler_dead_letters,
            },
            functions=self.functions.functions,
        )
        control = SpotlineConfig.model_validate(self.spotline_config())
        self.alarms = Alarms(
            self,
            "Alarms",
            scheduler_queue=self.messaging.scheduler_queue,
            dead_letter_queues={
                "events": self.messaging.events_dead_letters,
                "scheduler": self.messaging.scheduler_dead_letters,
            },
            state_machines=self.workflows.state_machines,
            scheduler_function=self.functions["scheduler"],
            functions=self.functions.functions,
            tables=self.tables.by_logical_id,
            api=self.api.rest_api,
            spot_pools=[pool.name for pool in config.pools if pool.is_spot],
            on_demand_pools=[pool.name for pool in config.pools if not pool.is_spot],
            start_timeout_s=control.start_timeout_s,
            heartbeat_queue=self.messaging.event_queues[r.HEARTBEAT_QUEUE.logical_id],
            heartbeat_timeout_s=control.heartbeat_timeout_s,
            topic_arn=config.alarm_topic_arn,
        )
        self.dashboard.show_alarms(list(self.alarms.alarms.values()))
        # The effective configuration, where `spotline doctor --stack` and `spotline configure
        # --stack` read it with one ssm:GetParameter (spotline.aws.published).
        published = self.to_json_string(self.published_config().model_dump(mode="json"))
        self.published_parameter = ssm.StringParameter(
            self,
            "PublishedConfig",
            parameter_name=parameter_name(self.stack_name),
            string_value=published,
            description="Spotline's deployed configuration (spotline doctor --stack, configure --stack)",
            tier=(
                ssm.ParameterTier.ADVANCED
                if _resolved_size(self, published) > STANDARD_PARAMETER_BYTES
                else ssm.ParameterTier.STANDARD
            ),
        )
        CfnOutput(self, "ApiUrl", value=self.api.rest_api.url)
        CfnOutput(self, "ConfigParameterName", value=self.published_parameter.parameter_name)
        CfnOutput(self, "EventBusName", value=self.messaging.bus.event_bus_name)
        CfnOutput(self, "CheckpointBucketName", value=self.storage.checkpoints.bucket_name)
        if self.compute.training_repository is not None:
            CfnOutput(
                self, "TrainingImageRepositoryUri", value=self.compute.training_repository.repository_uri
            )

    def _stage_code(self, library_dir: Path, functions_dir: Path, build_dir: Path) -> Path:
        """The Lambda code asset: `spotline/` and `functions/`, with bytecode where this machine
        has the runtime's Python (stacks.packaging)."""
        version = runtime_version()
        compiler = bytecode_compiler(version)
        if compiler is None:
            # An info, not a warning: the stack works the same, and `make synth` fails on any
            # warning it has not acknowledged.
            Annotations.of(self).add_info(
                f"spotline:lambda-bytecode: no Python {version[0]}.{version[1]} here (the functions' "
                "runtime): the Lambda code ships as source only, and each cold start compiles it (about "
                f"35-50 ms more). Deploy from a machine with python{version[0]}.{version[1]} on the PATH "
                "to ship its bytecode.",
            )
        # Target localstack: LocalStack's free edition cannot fetch AWS's public layers, so the
        # asset carries Powertools and its dependencies (wheels for the runtime, by pip).
        dependencies = (
            bundle_dependencies(bundled_requirements(version), build_dir, version)
            if self.config.localstack
            else None
        )
        return stage_lambda_code(
            {"spotline": library_dir, "functions": functions_dir},
            build_dir,
            compile_with=compiler,
            dependencies=dependencies,
        )

    def _restrict_bus_publishers(self) -> None:
        """The project bus takes events only from the teams' job roles and the control plane's
        function roles: any other principal of the account, even one with a broad
        `events:PutEvents`, is denied by the bus's own policy, so it cannot forge a checkpoint or
        a heartbeat. (Which source each of those roles may use is its identity policy's part.)"""
        publishers = [*self.compute.team_roles.values(), *self.functions.roles.values()]
        self.messaging.bus.add_to_resource_policy(
            iam.PolicyStatement(
                sid="OnlySpotlineRolesPublish",
                effect=iam.Effect.DENY,
                principals=[iam.AnyPrincipal()],
                actions=["events:PutEvents"],
                resources=[self.messaging.bus.event_bus_arn],
                conditions={"ArnNotEquals": {"aws:PrincipalArn": [role.role_arn for role in publishers]}},
            )
        )

    def published_config(self) -> PublishedConfig:
        """What the stack publishes about itself (CloudFormation references where the values
        exist only once deployed)."""
        config = self.config
        base = self.compute.job_definition_name
        return PublishedConfig(
            stack=self.stack_name,
            region=self.region,
            stage=config.stage,
            api_url=self.api.rest_api.url,
            pools=tuple(
                PublishedPool(
                    name=pool.name,
                    purchase=pool.purchase,
                    instance_types=pool.instance_types,
                    max_vcpus=pool.max_vcpus,
                    **self._pool_queues(pool.name, arn=False),
                    efa=pool.efa,
                    availability_zone=self.compute.pool_zones.get(pool.name),
                )
                for pool in config.pools
            ),
            teams=config.team_names,
            job_definitions={t: f"{base}-{t}" for t in self.compute.job_definitions},
            efa_job_definitions={t: f"{base}-{t}-efa" for t in self.compute.efa_job_definitions},
            identities={str(k): str(v) for k, v in config.identities.items()},
            powertools_layer_version=config.powertools_layer_version,
            training_image=self.compute.training_image_uri,
            availability_zones=tuple(self.network.vpc.availability_zones) if self.network else (),
            alarm_topic_arn=config.alarm_topic_arn,
            scheduler_reserved_concurrency=config.scheduler_reserved_concurrency,
            spot_warning_reserved_concurrency=config.spot_warning_reserved_concurrency,
        )

    def _pool_queues(self, pool: str, *, arn: bool = True) -> dict[str, Any]:
        """A pool's queue: its ARN (or name), or with `team_instances` each team's queue by name
        (short: SPOTLINE_CONFIG lives in a 4 KB environment)."""
        owners = self.config.queue_owners
        if owners == (None,):
            queue = self.job_queue_arns[pool, None]
            return {"job_queue": queue if arn else job_queue_name(self.config.stage, pool)}
        return {"team_job_queues": {t: job_queue_name(self.config.stage, pool, t) for t in owners if t}}

    def spotline_config(self) -> dict[str, Any]:
        """SPOTLINE_CONFIG: the pools (with their Batch job queues), the job definition, teams,
        identities and scheduler overrides, checked here against the model the functions parse
        it with (spotline.control.settings), so a bad context fails the synth, not the first call."""
        pools = []
        for pool in self.config.pools:
            entry: dict[str, Any] = {
                "name": pool.name,
                "gpu_type": pool.gpu_type,
                "purchase": pool.purchase,
                "capacity_gpus": pool.max_gpus,
                "gpus_per_node": pool.gpus_per_node,
                **self._pool_queues(pool.name),
                "instance_types": list(pool.instance_types),
            }
            if pool.price is not None:
                entry["price"] = pool.price
            if pool.interruption_rate_per_hour is not None:
                entry["interruption_rate_per_hour"] = pool.interruption_rate_per_hour
            if pool.efa:
                entry["efa"] = True
            if pool.reservation is not None:
                # Prepaid: nothing at the margin; the scheduler plans for the window.
                entry["price"] = 0.0
                entry["reservation"] = {
                    "start": pool.reservation.start,
                    "end": pool.reservation.end,
                    "reservation_id": pool.reservation.reservation_id,
                }
            pools.append(entry)
        document: dict[str, Any] = {
            **self.config.control_plane,
            "pools": pools,
            # Names (the launcher uses the latest revision): short enough for Lambda's environment.
            "job_definitions": {
                team: f"{self.compute.job_definition_name}-{team}" for team in self.config.team_names
            },
            **(
                {
                    "efa_job_definitions": {
                        team: f"{self.compute.job_definition_name}-{team}-efa"
                        for team in self.compute.efa_job_definitions
                    }
                }
                if self.compute.efa_job_definitions
                else {}
            ),
            "teams": list(self.config.teams),
            "identities": dict(self.config.identities),
            "scheduler": dict(self.config.scheduler),
            "agent_poll_s": self.config.agent_poll_s,
        }
        try:
            SpotlineConfig.model_validate(document)
        except ValidationError as error:
            raise ConfigError(f"the context does not make a valid {r.ENV_CONFIG}: {error}") from error
        return document


# Lambda's limit on a function's environment variables (names and values), and what a reference
# (an ARN, a name) is assumed to resolve to at most.
LAMBDA_ENVIRONMENT_LIMIT = 4096
_REFERENCE_SIZE = 128


def _resolved_size(stack: Stack, value: str) -> int:
    """About how many bytes `value` takes once CloudFormation resolves its references."""

    def size(resolved: Any) -> int:
        if isinstance(resolved, str):
            return len(resolved.encode())
        if isinstance(resolved, dict) and "Fn::Join" in resolved:
            return sum(size(part) for part in resolved["Fn::Join"][1])
        return _REFERENCE_SIZE

    return size(stack.resolve(value))


def _check_environment_size(stack: Stack, environment: dict[str, str]) -> None:
    """Fail the synth, not the deployment, when the context makes the environment (mostly
    SPOTLINE_CONFIG: pools, teams, identities) too large for Lambda."""
    total = sum(len(name) + _resolved_size(stack, value) for name, value in environment.items()) + 200
    if total > LAMBDA_ENVIRONMENT_LIMIT:
        raise ConfigError(
            f"the functions' environment would take about {total} bytes, over Lambda's "
            f"{LAMBDA_ENVIRONMENT_LIMIT}; shorten the context's identities, teams or pools"
        )
