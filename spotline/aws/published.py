"""What a deployed stack publishes about itself: its effective configuration, as JSON in the SSM
parameter `/spotline/<stack name>/config` (a String parameter the stack writes at deploy time).

`spotline doctor --stack NAME` checks the deployment that exists, not the `cdk.json` beside the
reader, and `spotline configure --stack NAME` takes the API's URL from it. Reading it takes one
permission, `ssm:GetParameter` on that parameter's ARN (README, "Deploying to AWS"), instead of
CloudFormation's DescribeStacks on the stack.

The stack fills `PublishedConfig` with CloudFormation references (names and ARNs resolved at
deploy time); the readers parse it back with the same model, so a field one side drops or
renames fails here, by name.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

# Bumped when a field changes meaning; readers refuse a version they do not know.
PUBLISHED_VERSION = 1
# SSM's standard tier holds up to 4 KB in a parameter; above that the stack uses the advanced tier.
STANDARD_PARAMETER_BYTES = 4096


def parameter_name(stack_name: str) -> str:
    """The SSM parameter a stack publishes its configuration in."""
    if not stack_name or "/" in stack_name:
        raise ValueError(f"stack name {stack_name!r}: expected a CloudFormation stack name")
    return f"/spotline/{stack_name}/config"


class PublishedPool(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    purchase: str  # "spot" | "on-demand"
    instance_types: tuple[str, ...]
    # The compute environment's maxvCpus.
    max_vcpus: int
    # The pool's job queue (name), or with `team_instances` each team's own (team -> name).
    job_queue: str | None = None
    team_job_queues: dict[str, str] = Field(default_factory=dict)
    efa: bool = False
    # The one AZ of a pool with a cluster placement group.
    availability_zone: str | None = None


class PublishedConfig(BaseModel):
    """The deployed stack's effective configuration (what `cdk deploy` built from its context)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: int = PUBLISHED_VERSION
    stack: str
    region: str
    stage: str
    api_url: str
    pools: tuple[PublishedPool, ...] = Field(min_length=1)
    teams: tuple[str, ...] = ()
    # Team -> its training job definition (name), and in EFA pools its EFA variant.
    job_definitions: dict[str, str] = Field(default_factory=dict)
    efa_job_definitions: dict[str, str] = Field(default_factory=dict)
    # IAM principal ARN -> team, as configured.
    identities: dict[str, str] = Field(default_factory=dict)
    powertools_layer_version: int
    # The job definitions' image (the stack's repository's `latest` unless `training_image`).
    training_image: str
    # The AZs the training instances launch in.
    availability_zones: tuple[str, ...] = ()
    alarm_topic_arn: str | None = None
    # The scheduler function's reserved concurrency (None: none; `spotline doctor` checks it
    # against the account's Lambda limit).
    scheduler_reserved_concurrency: int | None = None
    # The Spot-warning handler's reserved concurrency (None: none; it shares the account's).
    spot_warning_reserved_concurrency: int | None = None


class PublishedConfigError(LookupError):
    """The stack's published configuration is missing, unreadable, or of an unknown version."""


class ConfigNotPublished(PublishedConfigError):
    """The stack published no configuration (not deployed here, or by an earlier version)."""


def parse_published(text: str, *, where: str) -> PublishedConfig:
    try:
        config = PublishedConfig.model_validate_json(text)
    except ValidationError as error:
        wrong = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'document'}: {e['msg']}" for e in error.errors()
        )
        raise PublishedConfigError(f"{where}: not a Spotline configuration ({wrong})") from error
    if config.version != PUBLISHED_VERSION:
        raise PublishedConfigError(
            f"{where}: configuration version {config.version}, this spotline reads {PUBLISHED_VERSION}; "
            "use the spotline of the deployed version"
        )
    return config


def read_published(ssm: Any, stack_name: str) -> PublishedConfig:
    """The configuration `stack_name` published (SSM GetParameter). Raises PublishedConfigError
    naming the parameter when it is missing (a stack of an earlier version, another region or
    account) or not a configuration; other AWS errors (credentials, throttling) pass through."""
    from botocore.exceptions import ClientError

    name = parameter_name(stack_name)
    try:
        value = ssm.get_parameter(Name=name)["Parameter"]["Value"]
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") == "ParameterNotFound":
            raise ConfigNotPublished(
                f"stack {stack_name} has published no configuration at {name} in this region: "
                "is it deployed here (check --region), by a Spotline version that publishes it? "
                "Redeploy it, or check cdk.json instead (--context)"
            ) from error
        raise
    return parse_published(str(value), where=name)
