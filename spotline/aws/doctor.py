"""`spotline doctor`: what would otherwise fail at 3 a.m., checked against an account.

It reads the deployment's settings, either those a deployed stack published (`--stack NAME`:
the SSM parameter `/spotline/<stack>/config`, `spotline.aws.published`) or, before the first
deploy, the CDK context (pools, identities, stage, AZs, image, layer version), and asks AWS,
read-only:

- **quotas**: the On-Demand and Spot vCPU quotas of the P and G/VT families the pools use: a pool
  whose quotas cannot hold one instance of any of its types fails (it can never launch); a quota
  below what the pools may grow to warns;
- **batch**: each pool's job queue VALID and ENABLED, its compute environment VALID and ENABLED
  (before the first deploy: not deployed yet);
- **layer**: the Powertools layer version exists in the region;
- **image**: the training image exists in ECR, and the job definition's execution role may pull it;
- **azs**: where EC2 offers each pool's instance types (DescribeInstanceTypeOfferings by AZ): a
  pool none of whose types is offered in its AZs fails; a gang pool's one AZ is the one the
  deploy will choose (`spotline.aws.zones.gang_zone`);
- **identities**: each IAM role or user in `identities` exists (this account's);
- **lambda**: the account's Lambda concurrency (new accounts often have 10, which leaves nothing
  to reserve: AWS keeps 100 unreserved): reservations it cannot grant fail, and so does a limit
  the Spot-warning handler does not fit in beside the functions whose concurrency the stack
  bounds;
- **roles**: the service-linked roles Batch, ECS and EC2 Spot need exist (a fresh account may
  lack them, and the first compute environment then goes INVALID).

Each finding says what is wrong and how to fix it. A call the endpoint does not implement (an
emulator such as moto) or refuses is reported as skipped, with the reason.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from spotline import resources as r
from spotline.aws.published import PublishedConfig
from spotline.aws.zones import gang_zone, offerings, where_offered
from spotline.control.sizing import INSTANCE_SHAPES
from spotline.resources import POWERTOOLS_LAYER_ACCOUNT, POWERTOOLS_LAYER_NAME


class Status(StrEnum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"


@dataclass(frozen=True)
class Finding:
    check: str
    subject: str
    status: Status
    detail: str
    fix: str = ""


@dataclass(frozen=True)
class DoctorPool:
    name: str
    purchase: str  # "spot" | "on-demand"
    instance_types: tuple[str, ...]
    max_vcpus: int
    # The one AZ a pool lives in: a pinned pool's (`availability_zone` in cdk.json), or the one a
    # deployed gang pool's lookup chose (stacks.batch). None: the deployment's AZs.
    availability_zone: str | None = None
    # It lives in one AZ (a cluster placement group): without `availability_zone` the deploy
    # chooses the first of the VPC's AZs offering its types (spotline.aws.zones.gang_zone).
    one_zone: bool = False


@dataclass(frozen=True)
class DoctorTarget:
    """What the checks need of a deployment (from the CDK context, `stacks.config`)."""

    region: str
    stage: str
    pools: tuple[DoctorPool, ...]
    identities: Mapping[str, str]
    powertools_layer_version: int
    training_image: str | None = None
    availability_zones: tuple[str, ...] = ()
    teams: tuple[str, ...] = ()
    # As deployed (a published configuration); empty: the names the stack gives them.
    job_queues: Mapping[str, str] = field(default_factory=dict)
    # Pool -> team -> its job queue, for a stack with `team_instances` (teams' own instances).
    team_job_queues: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    job_definitions: Mapping[str, str] = field(default_factory=dict)
    # The scheduler function's reserved concurrency (None: none reserved).
    scheduler_reserved_concurrency: int | None = None
    # The Spot-warning handler's reserved concurrency (None: none reserved).
    spot_warning_reserved_concurrency: int | None = None

    @property
    def job_definition_name(self) -> str:
        """A team's training job definition (they all pull with one execution role)."""
        if self.job_definitions:
            return self.job_definitions[min(self.job_definitions)]
        base = f"spotline-{self.stage}-training"
        return f"{base}-{self.teams[0]}" if self.teams else base

    def job_queue_name(self, pool: str) -> str:
        return self.job_queues.get(pool) or f"spotline-{self.stage}-{pool}"

    def job_queue_names(self, pool: str) -> list[str]:
        """Every job queue of the pool: each team's with `team_instances`, else the pool's."""
        teams = self.team_job_queues.get(pool)
        return list(teams.values()) if teams else [self.job_queue_name(pool)]

    @property
    def training_repository(self) -> str:
        return f"spotline-{self.stage}-train"


def target_from_published(config: PublishedConfig, region: str | None = None) -> DoctorTarget:
    """What a deployed stack published (`spotline.aws.published`), as doctor's target."""
    return DoctorTarget(
        region=region or config.region,
        stage=config.stage,
        pools=tuple(
            DoctorPool(
                p.name,
                p.purchase,
                p.instance_types,
                p.max_vcpus,
                p.availability_zone,
                one_zone=p.availability_zone is not None,
            )
            for p in config.pools
        ),
        identities=dict(config.identities),
        powertools_layer_version=config.powertools_layer_version,
        training_image=config.training_image,
        availability_zones=config.availability_zones,
        teams=config.teams,
        job_queues={p.name: p.job_queue for p in config.pools if p.job_queue},
        team_job_queues={p.name: dict(p.team_job_queues) for p in config.pools if p.team_job_queues},
        job_definitions=dict(config.job_definitions),
        scheduler_reserved_concurrency=config.scheduler_reserved_concurrency,
        spot_warning_reserved_concurrency=config.spot_warning_reserved_concurrency,
    )


# EC2's vCPU quotas by instance family letter and purchase option.
QUOTAS: Mapping[tuple[str, str], tuple[str, str]] = {
    ("p", "on-demand"): ("L-417A185B", "Running On-Demand P instances"),
    ("g", "on-demand"): ("L-DB2E81BA", "Running On-Demand G and VT instances"),
    ("p", "spot"): ("L-7212CCBC", "All P Spot Instance Requests"),
    ("g", "spot"): ("L-3819A6DF", "All G and VT Spot Instance Requests"),
}

_ECR_IMAGE = re.compile(
    r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(?:\.cn)?/"
    r"(?P<repository>[^:@]+)(?::(?P<tag>[^@]+))?(?:@(?P<digest>.+))?$"
)
_IAM_PRINCIPAL = re.compile(
    r"^arn:aws[a-z-]*:iam::(?P<account>\d{12}):(?P<kind>role|user)/(?P<path_name>.+)$"
)

Clients = Callable[[str], Any]  # service name -> boto3 client


def _why(error: Exception) -> str:
    if isinstance(error, ClientError):
        info = error.response.get("Error", {})
        return f"{info.get('Code', 'error')}: {info.get('Message', '')}".strip()
    if isinstance(error, NotImplementedError):
        return f"the endpoint does not implement this call ({error})"
    return str(error)


_SKIPPABLE = (ClientError, BotoCoreError, NotImplementedError)


def quota_family(instance_type: str) -> str | None:
    """The letter of the EC2 vCPU quota an instance type counts against: "p" (P instances), "g"
    (G and VT instances: g4dn, g5, g6, gr6, vt1), or None (a family these quotas do not cover)."""
    matched = re.match(r"^([a-z]+)\d", instance_type)
    letters = matched.group(1) if matched else ""
    if letters == "p":
        return "p"
    if letters in ("g", "gr", "vt"):
        return "g"
    return None


def _instance_vcpus(types: Sequence[str], client: Clients) -> tuple[dict[str, int], str | None]:
    """vCPUs of one instance of each type: the sizing table's, else EC2 DescribeInstanceTypes
    (the reason it could not be read, if not)."""
    vcpus = {t: INSTANCE_SHAPES[t].vcpus for t in types if t in INSTANCE_SHAPES}
    unknown = sorted(set(types) - set(vcpus))
    if not unknown:
        return vcpus, None
    try:
        described = client("ec2").describe_instance_types(InstanceTypes=unknown)["InstanceTypes"]
    except _SKIPPABLE as error:
        return vcpus, f"vCPUs of {', '.join(unknown)} not readable: {_why(error)}"
    for described_type in described:
        vcpus[described_type["InstanceType"]] = int(described_type["VCpuInfo"]["DefaultVCpus"])
    return vcpus, None


def check_quotas(target: DoctorTarget, client: Clients) -> Iterator[Finding]:
    """Per quota: its value against the vCPUs the pools using it may grow to (short: a warning).
    Per pool: it fails when no quota it counts against holds one instance of any of its types
    (the pool can never launch), naming the pool, the quota and the numbers."""
    types = sorted({t for p in target.pools for t in p.instance_types})
    vcpus, unreadable = _instance_vcpus(types, client)
    needed: dict[tuple[str, str], int] = {}
    for pool in target.pools:
        for family in sorted({f for t in pool.instance_types if (f := quota_family(t))}):
            key = (family, pool.purchase)
            needed[key] = needed.get(key, 0) + pool.max_vcpus
    quotas = client("service-quotas")
    values: dict[tuple[str, str], float] = {}
    for key, grow_to in sorted(needed.items()):
        code, name = QUOTAS[key]
        subject = f"{name} ({code})"
        fix = _quota_fix(code, grow_to, target.region)
        try:
            value = float(quotas.get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"])
        except _SKIPPABLE as error:
            yield Finding("quotas", subject, Status.SKIP, f"quota not readable: {_why(error)}", fix)
            continue
        values[key] = value
        if value < grow_to:
            detail = f"{value:g} vCPUs, but the pools may grow to {grow_to}: they stop short of max_gpus"
            yield Finding("quotas", subject, Status.WARN, detail, fix)
        else:
            yield Finding("quotas", subject, Status.OK, f"{value:g} vCPUs for the pools' {grow_to}")
    for pool in target.pools:
        yield from _pool_quota(pool, vcpus, values, unreadable, target.region)


def _quota_fix(code: str, vcpus: int, region: str) -> str:
    return (
        f"aws service-quotas request-service-quota-increase --service-code ec2 --quota-code {code} "
        f"--desired-value {vcpus} --region {region}"
    )


def _pool_quota(
    pool: DoctorPool,
    vcpus: Mapping[str, int],
    values: Mapping[tuple[str, str], float],
    unreadable: str | None,
    region: str,
) -> Iterator[Finding]:
    """Whether the pool can launch one instance: some type whose quota holds its vCPUs."""
    subject = f"pool {pool.name} ({pool.purchase})"
    uncovered = [t for t in pool.instance_types if quota_family(t) is None]
    if uncovered:
        yield Finding(
            "quotas",
            subject,
            Status.SKIP,
            f"{', '.join(uncovered)}: not a P, G or VT type, whose vCPU quotas doctor reads; check that "
            "family's quota in the Service Quotas console",
        )
    shortfalls: list[tuple[str, str, float, int]] = []  # (type, quota code, quota value, one instance)
    for instance_type in pool.instance_types:
        family = quota_family(instance_type)
        if family is None:
            continue
        key = (family, pool.purchase)
        if key not in values:
            return  # that quota is skipped above, with the reason
        if instance_type not in vcpus:
            yield Finding("quotas", subject, Status.SKIP, unreadable or f"vCPUs of {instance_type} unknown")
            return
        one = vcpus[instance_type]
        if values[key] >= one:
            code, name = QUOTAS[key]
            yield Finding(
                "quotas",
                subject,
                Status.OK,
                f"can launch: {name} ({code}) is {values[key]:g} vCPUs, one {instance_type} takes {one}",
            )
            return
        shortfalls.append((instance_type, QUOTAS[key][0], values[key], one))
    if not shortfalls:
        return
    smallest = min(shortfalls, key=lambda s: s[3])
    said = "; ".join(
        f"quota {code} is {value:g} vCPUs, one {t} needs {one}" for t, code, value, one in shortfalls
    )
    yield Finding(
        "quotas",
        subject,
        Status.FAIL,
        f"cannot launch a single instance: {said}",
        _quota_fix(smallest[1], max(pool.max_vcpus, smallest[3]), region),
    )


def check_batch(target: DoctorTarget, client: Clients) -> Iterator[Finding]:
    batch = client("batch")
    names = [name for p in target.pools for name in target.job_queue_names(p.name)]
    try:
        queues = {q["jobQueueName"]: q for q in batch.describe_job_queues(jobQueues=names)["jobQueues"]}
    except _SKIPPABLE as error:
        yield Finding("batch", "job queues", Status.SKIP, f"cannot describe job queues: {_why(error)}")
        return
    for name in names:
        queue = queues.get(name)
        if queue is None:
            yield Finding(
                "batch",
                f"job queue {name}",
                Status.WARN,
                "not found: the stack is not deployed (in this region) yet",
                "npx cdk deploy (docs/deploy.md)",
            )
            continue
        if queue.get("status") != "VALID" or queue.get("state") != "ENABLED":
            yield Finding(
                "batch",
                f"job queue {name}",
                Status.FAIL,
                f"{queue.get('status')}/{queue.get('state')}: {queue.get('statusReason', '')}",
                f"aws batch update-job-queue --job-queue {name} --state ENABLED (after fixing the reason)",
            )
        else:
            yield Finding("batch", f"job queue {name}", Status.OK, "VALID and ENABLED")
        arns = [c["computeEnvironment"] for c in queue.get("computeEnvironmentOrder", [])]
        try:
            environments = batch.describe_compute_environments(computeEnvironments=arns)[
                "computeEnvironments"
            ]
        except _SKIPPABLE as error:
            yield Finding("batch", f"compute environments of {name}", Status.SKIP, _why(error))
            continue
        for environment in environments:
            subject = f"compute environment {environment['computeEnvironmentName']}"
            if environment.get("status") == "VALID" and environment.get("state") == "ENABLED":
                yield Finding("batch", subject, Status.OK, "VALID and ENABLED")
                continue
            yield Finding(
                "batch",
                subject,
                Status.FAIL,
                "{}/{}: {}".format(
                    environment.get("status"), environment.get("state"), environment.get("statusReason", "")
                ),
                "INVALID usually names a role, subnet, security group or launch template at fault; fix it "
                "and redeploy, then `aws batch update-compute-environment --compute-environment "
                f"{environment['computeEnvironmentName']} --state ENABLED`",
            )


def check_layer(target: DoctorTarget, client: Clients) -> Iterator[Finding]:
    arn = (
        f"arn:aws:lambda:{target.region}:{POWERTOOLS_LAYER_ACCOUNT}:layer:{POWERTOOLS_LAYER_NAME}:"
        f"{target.powertools_layer_version}"
    )
    fix = (
        "set `powertools_layer_version` in cdk.json to a version published in "
        f"{target.region} (docs.powertools.aws.dev/lambda/python/latest/#lambda-layer)"
    )
    try:
        client("lambda").get_layer_version_by_arn(Arn=arn)
    except NotImplementedError as error:
        yield Finding("layer", arn, Status.SKIP, _why(error), fix)
        return
    except ClientError as error:
        yield Finding("layer", arn, Status.FAIL, f"not usable: {_why(error)}", fix)
        return
    except BotoCoreError as error:
        yield Finding("layer", arn, Status.SKIP, _why(error), fix)
        return
    yield Finding("layer", arn, Status.OK, "exists")


def _account(client: Clients) -> str | None:
    try:
        return str(client("sts").get_caller_identity()["Account"])
    except _SKIPPABLE:
        return None


def check_image(target: DoctorTarget, client: Clients, account: str | None) -> Iterator[Finding]:
    image = target.training_image or (
        f"{account}.dkr.ecr.{target.region}.amazonaws.com/{target.training_repository}:latest"
        if account
        else None
    )
    if image is None:
        yield Finding("image", "training image", Status.SKIP, "no account known to name the default image")
        return
    parts = _ECR_IMAGE.match(image)
    if parts is None:
        yield Finding(
            "image",
            image,
            Status.SKIP,
            "not an ECR image: a public registry needs no credentials (a private non-ECR one needs "
            "the job definition's repositoryCredentials)",
        )
        return
    repository, registry = parts["repository"], parts["account"]
    image_id = {"imageDigest": parts["digest"]} if parts["digest"] else {"imageTag": parts["tag"] or "latest"}
    push = (
        f"build and push it: docker build -f images/training/Dockerfile -t {image} . && docker push {image} "
        "(docs/deploy.md, step 5)"
    )
    try:
        client("ecr").describe_images(registryId=registry, repositoryName=repository, imageIds=[image_id])
    except ClientError as error:
        yield Finding("image", image, Status.FAIL, f"not found: {_why(error)}", push)
    except (BotoCoreError, NotImplementedError) as error:
        yield Finding("image", image, Status.SKIP, _why(error), push)
    else:
        yield Finding("image", image, Status.OK, "in ECR")
    yield from _check_pull_permission(target, client, parts)


def _check_pull_permission(target: DoctorTarget, client: Clients, parts: re.Match[str]) -> Iterator[Finding]:
    subject = "execution role may pull the image"
    try:
        described = client("batch").describe_job_definitions(
            jobDefinitionName=target.job_definition_name, status="ACTIVE"
        )["jobDefinitions"]
    except _SKIPPABLE as error:
        yield Finding("image", subject, Status.SKIP, _why(error))
        return
    if not described:
        yield Finding(
            "image", subject, Status.WARN, f"job definition {target.job_definition_name} not deployed yet"
        )
        return
    latest = max(described, key=lambda d: int(d.get("revision", 0)))
    role = (latest.get("containerProperties") or {}).get("executionRoleArn")
    if not role:
        yield Finding(
            "image",
            subject,
            Status.FAIL,
            "the job definition has no execution role: ECS cannot authenticate to ECR",
            "redeploy the stack (its job definition has one)",
        )
        return
    repository_arn = f"arn:aws:ecr:{parts['region']}:{parts['account']}:repository/{parts['repository']}"
    iam = client("iam")
    try:
        results = iam.simulate_principal_policy(
            PolicySourceArn=role,
            ActionNames=["ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"],
            ResourceArns=[repository_arn],
        )["EvaluationResults"]
        results += iam.simulate_principal_policy(
            PolicySourceArn=role, ActionNames=["ecr:GetAuthorizationToken"], ResourceArns=["*"]
        )["EvaluationResults"]
    except _SKIPPABLE as error:
        yield Finding("image", subject, Status.SKIP, f"cannot simulate {role}'s policy: {_why(error)}")
        return
    denied = sorted(r["EvalActionName"] for r in results if r.get("EvalDecision") != "allowed")
    if denied:
        yield Finding(
            "image",
            subject,
            Status.FAIL,
            f"{role} is denied {denied} on {repository_arn}",
            "redeploy the stack (its execution role reads this account's repositories); for another "
            "account's repository, allow this role in that repository's policy",
        )
    else:
        yield Finding("image", subject, Status.OK, f"{role} may pull from {repository_arn}")


def check_azs(target: DoctorTarget, client: Clients) -> Iterator[Finding]:
    """Per pool: it fails when none of its instance types is offered in any of its AZs (the
    configured ones, a pinned pool's one, or for a gang pool the one the deploy will choose);
    per type: a warning when it is offered in only some of them."""
    ec2 = client("ec2")
    try:
        region_azs = sorted(
            z["ZoneName"]
            for z in ec2.describe_availability_zones(
                Filters=[{"Name": "zone-type", "Values": ["availability-zone"]}]
            )["AvailabilityZones"]
            if z.get("State") == "available"
        )
        offered = offerings(ec2, {t for p in target.pools for t in p.instance_types})
    except _SKIPPABLE as error:
        yield Finding("azs", "instance type offerings", Status.SKIP, _why(error))
        return
    # Without `availability_zones`, a created VPC takes the region's first two (Fn::GetAZs).
    azs = list(target.availability_zones) or region_azs[:2]
    for pool in target.pools:
        yield from _pool_zones(pool, azs, {t: offered.get(t, set()) for t in pool.instance_types})


def _pool_zones(pool: DoctorPool, azs: list[str], offered: Mapping[str, set[str]]) -> Iterator[Finding]:
    pinned = pool.availability_zone
    pool_azs = [pinned] if pinned else azs
    subject = f"pool {pool.name} in {', '.join(pool_azs)}"
    if pinned:
        fix = "set the pool's `availability_zone` in cdk.json to an AZ of the VPC offering them"
    else:
        fix = "set `availability_zones` (or an imported VPC's subnets) in cdk.json to AZs offering them"
    fix += f" ({where_offered(offered)})"
    zone = gang_zone(pool_azs, offered)
    if zone is None:
        detail = (
            f"cannot launch: none of {', '.join(pool.instance_types)} is offered in {', '.join(pool_azs)}"
        )
        yield Finding("azs", subject, Status.FAIL, detail, fix)
        return
    if pool.one_zone and not pinned:
        launches = [zone]
        lead = f"lives in one AZ (a cluster placement group): the deploy chooses {zone}"
    else:
        launches = [z for z in pool_azs if any(z in where for where in offered.values())]
        lead = f"launches in {', '.join(launches)}"
    there = [t for t in pool.instance_types if offered[t] & set(launches)]
    detail = f"{lead}, offering {', '.join(there)}"
    if len(launches) < len(pool_azs) and not pool.one_zone:
        unused = [z for z in pool_azs if z not in launches]
        detail += f"; {', '.join(unused)} offers none of its types (less capacity to draw on)"
        yield Finding("azs", subject, Status.WARN, detail, fix)
    else:
        yield Finding("azs", subject, Status.OK, detail)
    for instance_type in pool.instance_types:
        inside = sorted(offered[instance_type] & set(launches))
        type_subject = f"{instance_type} ({pool.name}) in {', '.join(launches)}"
        if len(inside) == len(launches):
            yield Finding("azs", type_subject, Status.OK, "offered in every one")
        else:
            said = f"offered only in {', '.join(inside)}" if inside else "offered in none of them"
            yield Finding(
                "azs", type_subject, Status.WARN, f"{said}: the pool launches other types there", fix
            )


def check_identities(target: DoctorTarget, client: Clients, account: str | None) -> Iterator[Finding]:
    iam = client("iam")
    for arn, team in sorted(target.identities.items()):
        parts = _IAM_PRINCIPAL.match(arn)
        if parts is None:
            yield Finding("identities", arn, Status.SKIP, f"not an IAM role or user ARN (team {team})")
            continue
        if account is not None and parts["account"] != account:
            yield Finding("identities", arn, Status.SKIP, f"in account {parts['account']}, not {account}")
            continue
        name = parts["path_name"].rsplit("/", 1)[-1]
        try:
            if parts["kind"] == "role":
                iam.get_role(RoleName=name)
            else:
                iam.get_user(UserName=name)
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code")
            status = Status.FAIL if code == "NoSuchEntity" else Status.SKIP
            yield Finding(
                "identities",
                arn,
                status,
                f"{parts['kind']} {name}: {_why(error)}",
                f"create it, or correct its ARN in cdk.json `identities` (team {team}); it also needs "
                "execute-api:Invoke on the API (docs/deploy.md, step 6)",
            )
            continue
        except (BotoCoreError, NotImplementedError) as error:
            yield Finding("identities", arn, Status.SKIP, _why(error))
            continue
        yield Finding("identities", arn, Status.OK, f"{parts['kind']} exists (team {team})")


# AWS keeps this much of an account's Lambda concurrency unreserved: reserving more is refused.
UNRESERVED_MINIMUM = 100
# Below this, the stack's functions (API, handlers, scheduler, workflow tasks) throttle each other.
LAMBDA_CONCURRENCY_WANTED = 100


def check_lambda(target: DoctorTarget, client: Clients) -> Iterator[Finding]:
    """The account's Lambda concurrency against what the stack reserves and what it must fit:
    reservations that would leave under AWS's unreserved minimum fail (CloudFormation refuses
    them); without a reservation for the Spot-warning handler, the functions whose concurrency
    the stack bounds (resources.BOUNDED_CONCURRENCY) plus what that handler needs must fit in the
    limit, or it fails; a limit under LAMBDA_CONCURRENCY_WANTED warns."""
    subject = "Lambda concurrent executions"
    fix = (
        "aws service-quotas request-service-quota-increase --service-code lambda --quota-code L-B99A9384 "
        f"--desired-value 1000 --region {target.region}"
    )
    try:
        limit = int(client("lambda").get_account_settings()["AccountLimit"]["ConcurrentExecutions"])
    except _SKIPPABLE as error:
        yield Finding("lambda", subject, Status.SKIP, f"account settings not readable: {_why(error)}", fix)
        return
    reservations = {
        name: amount
        for name, amount in (
            ("scheduler", target.scheduler_reserved_concurrency),
            (r.SPOT_WARNING_FUNCTION, target.spot_warning_reserved_concurrency),
        )
        if amount
    }
    reserved = sum(reservations.values())
    said = ", ".join(f"{amount} for {name}" for name, amount in reservations.items())
    bounded = sum(r.BOUNDED_CONCURRENCY.values())
    bounds = ", ".join(f"{name} {n}" for name, n in r.BOUNDED_CONCURRENCY.items())
    spot = any(p.purchase == "spot" for p in target.pools)
    spot_reserved = r.SPOT_WARNING_FUNCTION in reservations
    if reserved and limit - reserved < UNRESERVED_MINIMUM:
        yield Finding(
            "lambda",
            subject,
            Status.FAIL,
            f"{limit}: reserving {said} would leave {limit - reserved} unreserved, under AWS's minimum "
            f"of {UNRESERVED_MINIMUM}; CloudFormation refuses the stack",
            f"{fix}; or deploy without `scheduler_reserved_concurrency` and "
            "`spot_warning_reserved_concurrency` (the defaults)",
        )
    elif spot and not spot_reserved and limit < bounded + r.SPOT_WARNING_CONCURRENCY:
        yield Finding(
            "lambda",
            subject,
            Status.FAIL,
            f"{limit}: the Spot-warning path does not fit: the functions the stack bounds may take "
            f"{bounded} ({bounds}), leaving {limit - bounded} for the {r.SPOT_WARNING_FUNCTION} "
            f"handler, which needs {r.SPOT_WARNING_CONCURRENCY} to act within a Spot notice",
            fix,
        )
    elif limit < LAMBDA_CONCURRENCY_WANTED:
        path = (
            f"; the Spot-warning path fits ({bounded} for the bounded functions: {bounds}; "
            f"{r.SPOT_WARNING_CONCURRENCY} for {r.SPOT_WARNING_FUNCTION}) only while the API and the "
            "other event handlers leave it room: raise the limit, then set "
            "`spot_warning_reserved_concurrency`"
            if spot and not spot_reserved
            else ""
        )
        yield Finding(
            "lambda",
            subject,
            Status.WARN,
            f"{limit}: the stack deploys, but its functions share {limit} concurrent executions and "
            f"throttle each other under load (API 429s, delayed events){path}",
            fix,
        )
    else:
        yield Finding("lambda", subject, Status.OK, f"{limit}" + (f", reserved: {said}" if said else ""))


# The service-linked roles the stack's services need (a fresh account may lack them).
SERVICE_LINKED_ROLES: Mapping[str, str] = {
    "AWSServiceRoleForBatch": "batch.amazonaws.com",
    "AWSServiceRoleForECS": "ecs.amazonaws.com",
    "AWSServiceRoleForEC2Spot": "spot.amazonaws.com",
}


def check_service_linked_roles(target: DoctorTarget, client: Clients) -> Iterator[Finding]:
    iam = client("iam")
    spot = any(p.purchase == "spot" for p in target.pools)
    for name, service in SERVICE_LINKED_ROLES.items():
        if service == "spot.amazonaws.com" and not spot:
            continue
        fix = f"aws iam create-service-linked-role --aws-service-name {service}"
        try:
            iam.get_role(RoleName=name)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "NoSuchEntity":
                yield Finding("roles", name, Status.SKIP, _why(error), fix)
                continue
            yield Finding(
                "roles",
                name,
                Status.WARN,
                f"missing: created on first use only if the deployer may iam:CreateServiceLinkedRole; "
                f"otherwise {service} fails (a compute environment INVALID, Spot requests refused)",
                fix,
            )
            continue
        except (BotoCoreError, NotImplementedError) as error:
            yield Finding("roles", name, Status.SKIP, _why(error), fix)
            continue
        yield Finding("roles", name, Status.OK, "exists")


CHECKS: Sequence[str] = ("quotas", "batch", "layer", "image", "azs", "identities", "lambda", "roles")


def run_checks(target: DoctorTarget, client: Clients, only: Sequence[str] = CHECKS) -> list[Finding]:
    """Every finding of the checks named in `only`, in their order."""
    unknown = sorted(set(only) - set(CHECKS))
    if unknown:
        raise ValueError(f"unknown checks {unknown}; choose from {list(CHECKS)}")
    account = _account(client) if {"image", "identities"} & set(only) else None
    runs: dict[str, Callable[[], Iterator[Finding]]] = {
        "quotas": lambda: check_quotas(target, client),
        "batch": lambda: check_batch(target, client),
        "layer": lambda: check_layer(target, client),
        "image": lambda: check_image(target, client, account),
        "azs": lambda: check_azs(target, client),
        "identities": lambda: check_identities(target, client, account),
        "lambda": lambda: check_lambda(target, client),
        "roles": lambda: check_service_linked_roles(target, client),
    }
    findings: list[Finding] = []
    for name in CHECKS:
        if name in only:
            findings.extend(runs[name]())
    return findings
