"""`spotline doctor` on moto: each check reports what is wrong and how to fix it; a call
moto does not implement is reported as skipped with the reason, by doctor itself."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws
from typer.testing import CliRunner

from spotline.aws.doctor import DoctorPool, DoctorTarget, Finding, Status, run_checks, target_from_published
from spotline.aws.published import PublishedConfig, PublishedPool, parameter_name
from spotline.cli import app
from tests.infra.support import cdk_context

REGION = "us-east-1"
ACCOUNT = "123456789012"
EXISTING_ROLE = f"arn:aws:iam::{ACCOUNT}:role/aws-reserved/sso.amazonaws.com/AWSReservedSSO_ML_1"
MISSING_ROLE = f"arn:aws:iam::{ACCOUNT}:role/spotline-nobody"
OTHER_ACCOUNT = "arn:aws:iam::210987654321:role/spotline-partner"

TARGET = DoctorTarget(
    region=REGION,
    stage="dev",
    pools=(
        DoctorPool("a100-spot", "spot", ("p4d.24xlarge", "p4de.24xlarge"), 768),
        DoctorPool("a100-ondemand", "on-demand", ("p4d.24xlarge",), 384),
    ),
    identities={EXISTING_ROLE: "ml", MISSING_ROLE: "cv", OTHER_ACCOUNT: "partner"},
    powertools_layer_version=7,
    availability_zones=("us-east-1a", "us-east-1e"),
    teams=("ml", "cv"),
)


def _client(service: str) -> Any:
    return boto3.client(service, region_name=REGION)


def _deploy_one_pool() -> None:
    """What the stack makes for the Spot pool (not the On-Demand one), and its job definition."""
    iam = _client("iam")
    trust = json.dumps({"Version": "2012-10-17", "Statement": []})
    iam.create_role(
        RoleName="AWSReservedSSO_ML_1",
        Path="/aws-reserved/sso.amazonaws.com/",
        AssumeRolePolicyDocument=trust,
    )
    service_role = iam.create_role(RoleName="batch-service", AssumeRolePolicyDocument=trust)["Role"]["Arn"]
    execution_role = iam.create_role(RoleName="execution", AssumeRolePolicyDocument=trust)["Role"]["Arn"]
    iam.create_instance_profile(InstanceProfileName="ecs-instance")
    ec2 = _client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/24", AvailabilityZone="us-east-1a")["Subnet"][
        "SubnetId"
    ]
    group = ec2.create_security_group(GroupName="training", Description="t", VpcId=vpc)["GroupId"]
    batch = _client("batch")
    environment = batch.create_compute_environment(
        computeEnvironmentName="a100-spot-compute",
        type="MANAGED",
        state="ENABLED",
        computeResources={
            "type": "SPOT",
            "minvCpus": 0,
            "maxvCpus": 768,
            "instanceTypes": ["p4d.24xlarge"],
            "subnets": [subnet],
            "securityGroupIds": [group],
            "instanceRole": f"arn:aws:iam::{ACCOUNT}:instance-profile/ecs-instance",
        },
        serviceRole=service_role,
    )["computeEnvironmentArn"]
    batch.create_job_queue(
        jobQueueName="spotline-dev-a100-spot",
        state="ENABLED",
        priority=1,
        computeEnvironmentOrder=[{"order": 1, "computeEnvironment": environment}],
    )
    batch.register_job_definition(
        jobDefinitionName="spotline-dev-training-ml",
        type="container",
        containerProperties={
            "image": f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/spotline-dev-train:latest",
            "executionRoleArn": execution_role,
            "resourceRequirements": [{"type": "VCPU", "value": "4"}, {"type": "MEMORY", "value": "16384"}],
        },
    )


@pytest.fixture
def account(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        monkeypatch.setenv(name, value)
    with mock_aws(config={"batch": {"use_docker": False}}):  # type: ignore[arg-type]
        _deploy_one_pool()
        yield


def _by(findings: list[Finding], check: str) -> dict[str, Finding]:
    return {f.subject: f for f in findings if f.check == check}


def test_each_check_reports_with_a_fix(account: None) -> None:
    findings = run_checks(TARGET, _client)
    assert {f.check for f in findings} == {
        "quotas",
        "batch",
        "layer",
        "image",
        "azs",
        "identities",
        "lambda",
        "roles",
    }
    for finding in findings:
        assert finding.detail
        if finding.status in (Status.FAIL, Status.WARN):
            assert finding.fix, finding

    # quotas: moto has no EC2 quotas, so doctor says it could not read them (and how to raise them)
    quotas = _by(findings, "quotas")
    assert set(quotas) == {
        "All P Spot Instance Requests (L-7212CCBC)",
        "Running On-Demand P instances (L-417A185B)",
    }
    assert all(q.status is Status.SKIP and "request-service-quota-increase" in q.fix for q in quotas.values())

    # batch: the deployed pool is VALID and ENABLED; the other is not deployed yet
    batch = _by(findings, "batch")
    assert batch["job queue spotline-dev-a100-spot"].status is Status.OK
    assert batch["compute environment a100-spot-compute"].status is Status.OK
    assert batch["job queue spotline-dev-a100-ondemand"].status is Status.WARN

    # layer: moto cannot look up a public layer
    [layer] = _by(findings, "layer").values()
    assert layer.status is Status.SKIP and "does not implement" in layer.detail

    # image: none pushed; the pull permission cannot be simulated on moto
    image = _by(findings, "image")
    pushed = image[f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/spotline-dev-train:latest"]
    assert pushed.status is Status.FAIL and "docker push" in pushed.fix
    assert image["execution role may pull the image"].status is Status.SKIP

    # azs: p4de is not offered in us-east-1a or us-east-1e (moto's offerings); p4d only in 1a,
    # so the Spot pool launches p4d in 1a only: a warning, not a failure
    azs = _by(findings, "azs")
    pool = azs["pool a100-spot in us-east-1a, us-east-1e"]
    assert pool.status is Status.WARN and "launches in us-east-1a" in pool.detail
    assert "us-east-1e offers none" in pool.detail
    assert azs["p4de.24xlarge (a100-spot) in us-east-1a"].status is Status.WARN
    assert "us-east-1b" in azs["p4de.24xlarge (a100-spot) in us-east-1a"].fix
    assert azs["p4d.24xlarge (a100-spot) in us-east-1a"].status is Status.OK

    # identities: a role with a path exists; a missing one fails; another account's is skipped
    identities = _by(findings, "identities")
    assert identities[EXISTING_ROLE].status is Status.OK
    assert identities[MISSING_ROLE].status is Status.FAIL and "identities" in identities[MISSING_ROLE].fix
    assert identities[OTHER_ACCOUNT].status is Status.SKIP


def _push_image() -> None:
    ecr = _client("ecr")
    ecr.create_repository(repositoryName="spotline-dev-train")
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {},
        "layers": [],
    }
    ecr.put_image(repositoryName="spotline-dev-train", imageManifest=json.dumps(manifest), imageTag="latest")


def test_an_image_in_ecr_passes(account: None) -> None:
    _push_image()
    [found, _] = run_checks(TARGET, _client, ["image"])
    assert found.status is Status.OK


def test_the_command_reads_cdk_json_prints_every_check_and_fails_on_a_failure(
    account: None, tmp_path: Path
) -> None:
    context = {**cdk_context(), "identities": {MISSING_ROLE: "research"}}
    (tmp_path / "cdk.json").write_text(json.dumps({"context": context}))
    result = CliRunner().invoke(app, ["doctor", "--context", str(tmp_path / "cdk.json")])
    assert result.exit_code == 1, result.output
    for check in ("quotas", "batch", "layer", "image", "azs", "identities", "lambda", "roles"):
        assert check in result.output
    assert "spotline-nobody" in result.output and "fail" in result.output


def _publish(**changes: Any) -> PublishedConfig:
    """What a deployed stack named Spotline writes to /spotline/Spotline/config (the stack's
    document is checked against the same model in tests/infra/test_day_one.py)."""
    fields: dict[str, Any] = {
        "stack": "Spotline",
        "region": REGION,
        "stage": "dev",
        "api_url": "https://abc123.execute-api.us-east-1.amazonaws.com/dev/",
        "pools": [
            PublishedPool(
                name="a100-spot",
                purchase="spot",
                instance_types=("p4d.24xlarge",),
                max_vcpus=768,
                job_queue="spotline-dev-a100-spot",
            )
        ],
        "teams": ("ml",),
        "job_definitions": {"ml": "spotline-dev-training-ml"},
        "identities": {EXISTING_ROLE: "ml"},
        "powertools_layer_version": 7,
        "training_image": f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/spotline-dev-train:latest",
        "availability_zones": ("us-east-1a",),
    }
    fields.update(changes)
    published = PublishedConfig(**fields)
    _client("ssm").put_parameter(
        Name=parameter_name("Spotline"), Value=published.model_dump_json(), Type="String", Overwrite=True
    )
    return published


def test_doctor_checks_a_deployed_stack_from_the_configuration_it_published(
    account: None, tmp_path: Path
) -> None:
    # Given a deployed stack's published configuration and its image, and a cdk.json that says
    # something else
    _publish()
    _push_image()
    context = {**cdk_context(), "identities": {MISSING_ROLE: "research"}}
    (tmp_path / "cdk.json").write_text(json.dumps({"context": context}))

    # When doctor checks the stack
    result = CliRunner().invoke(
        app, ["doctor", "--stack", "Spotline", "--context", str(tmp_path / "cdk.json")]
    )

    # Then it checked what was deployed: the published pool, queue, AZ and caller, not cdk.json's
    assert result.exit_code == 0, result.output
    assert "checking stack Spotline as deployed (/spotline/Spotline/config, us-east-1)" in result.output
    for check in ("quotas", "batch", "layer", "image", "azs", "identities", "lambda", "roles"):
        assert check in result.output
    assert "spotline-dev-a100-spot" in result.output and "AWSReservedSSO_ML_1" in result.output
    assert "spotline-nobody" not in result.output and "a100-ondemand" not in result.output
    findings = run_checks(target_from_published(_publish()), _client)
    assert _by(findings, "batch")["job queue spotline-dev-a100-spot"].status is Status.OK
    assert _by(findings, "azs")["p4d.24xlarge (a100-spot) in us-east-1a"].status is Status.OK
    assert _by(findings, "azs")["pool a100-spot in us-east-1a"].status is Status.OK
    assert _by(findings, "identities")[EXISTING_ROLE].status is Status.OK


def _table_rows(output: str) -> list[list[str]]:
    """The cells of each row of the table the CLI prints (rich folds long cells over lines)."""
    rows: list[list[str]] = []
    current: list[list[str]] = []
    for line in output.splitlines():
        if line.startswith("│"):
            cells = [cell.strip() for cell in line.strip().strip("│").split("│")]
            current.append(cells)
        elif current:
            rows.append([" ".join(part for part in column if part) for column in zip(*current, strict=True)])
            current = []
    return rows


def _said(output: str) -> str:
    """The CLI's words, without rich's box and line breaks."""
    return " ".join(output.replace("│", " ").split())


def test_doctor_names_the_parameter_a_stack_did_not_publish(account: None) -> None:
    result = CliRunner().invoke(app, ["doctor", "--stack", "Elsewhere", "--region", REGION])
    assert result.exit_code == 2
    said = _said(result.output)
    assert "stack Elsewhere has published no configuration at /spotline/Elsewhere/config" in said
    assert "--region" in said


def test_doctor_refuses_a_configuration_it_cannot_read(account: None) -> None:
    _client("ssm").put_parameter(Name=parameter_name("Spotline"), Value='{"version": 1}', Type="String")
    result = CliRunner().invoke(app, ["doctor", "--stack", "Spotline", "--region", REGION])
    assert result.exit_code == 2
    said = _said(result.output)
    assert "not a Spotline configuration" in said and "stack: Field required" in said
    _client("ssm").put_parameter(
        Name=parameter_name("Spotline"),
        Value=_publish().model_copy(update={"version": 9}).model_dump_json(),
        Type="String",
        Overwrite=True,
    )
    result = CliRunner().invoke(app, ["doctor", "--stack", "Spotline", "--region", REGION])
    assert result.exit_code == 2 and "configuration version 9" in _said(result.output)


# --- the AZ of a placement group, Lambda's limit, linked roles ----


def test_a_pool_pinned_to_one_az_needs_its_types_offered_there(account: None) -> None:
    # moto offers p4d.24xlarge in us-east-1a, not in us-east-1e
    pinned = replace(
        TARGET,
        pools=(
            DoctorPool("a100-ondemand", "on-demand", ("p4d.24xlarge",), 384, availability_zone="us-east-1e"),
            DoctorPool(
                "a100-ondemand-a", "on-demand", ("p4d.24xlarge",), 384, availability_zone="us-east-1a"
            ),
        ),
    )
    azs = _by(run_checks(pinned, _client, only=["azs"]), "azs")
    assert azs["pool a100-ondemand in us-east-1e"].status is Status.FAIL
    assert "availability_zone" in azs["pool a100-ondemand in us-east-1e"].fix
    assert azs["pool a100-ondemand-a in us-east-1a"].status is Status.OK
    assert azs["p4d.24xlarge (a100-ondemand-a) in us-east-1a"].status is Status.OK


def _lambda_limit(limit: int) -> Any:
    """A Lambda client whose GetAccountSettings answers `limit` (botocore's Stubber)."""
    client = boto3.client("lambda", region_name=REGION)
    stubber = Stubber(client)
    stubber.add_response(
        "get_account_settings",
        {"AccountLimit": {"ConcurrentExecutions": limit, "UnreservedConcurrentExecutions": limit}},
    )
    stubber.activate()
    return client


@pytest.mark.parametrize(
    ("limit", "scheduler", "spot_warning", "status", "words"),
    [
        # A new account: no reservation can be granted (AWS keeps 100 unreserved)
        (10, 1, None, Status.FAIL, "reserving 1 for scheduler would leave 9 unreserved"),
        (10, None, 2, Status.FAIL, "reserving 2 for spot_interruption would leave 8 unreserved"),
        (101, 1, 1, Status.FAIL, "reserving 1 for scheduler, 1 for spot_interruption would leave 99"),
        # Unreserved, the Spot-warning handler needs 2 beside the bounded 4 (scheduler 1, heartbeat 2,
        # reconciler 1): 10 fits, with a warning; 5 does not
        (10, None, None, Status.WARN, "the Spot-warning path fits (4 for the bounded functions"),
        (5, None, None, Status.FAIL, "leaving 1 for the spot_interruption handler, which needs 2"),
        (6, None, None, Status.WARN, "throttle each other"),
        (1000, 1, 2, Status.OK, "1000, reserved: 1 for scheduler, 2 for spot_interruption"),
        (1000, None, None, Status.OK, "1000"),
    ],
)
def test_the_lambda_concurrency_limit_is_checked_against_the_reservations_and_the_spot_path(
    limit: int, scheduler: int | None, spot_warning: int | None, status: Status, words: str
) -> None:
    target = replace(
        TARGET, scheduler_reserved_concurrency=scheduler, spot_warning_reserved_concurrency=spot_warning
    )
    client = _lambda_limit(limit)
    [finding] = run_checks(target, lambda service: client, only=["lambda"])
    assert finding.status is status and words in finding.detail, finding.detail
    if status is not Status.OK:
        assert "L-B99A9384" in finding.fix


def test_without_spot_pools_there_is_no_spot_path_to_fit() -> None:
    on_demand = replace(TARGET, pools=TARGET.pools[1:])
    [finding] = run_checks(on_demand, lambda service: _lambda_limit(5), only=["lambda"])
    assert finding.status is Status.WARN and "Spot-warning" not in finding.detail


def test_missing_service_linked_roles_are_reported_with_the_command_that_makes_them(account: None) -> None:
    roles = _by(run_checks(TARGET, _client, only=["roles"]), "roles")
    assert set(roles) == {"AWSServiceRoleForBatch", "AWSServiceRoleForECS", "AWSServiceRoleForEC2Spot"}
    assert all(r.status is Status.WARN for r in roles.values())
    assert "--aws-service-name batch.amazonaws.com" in roles["AWSServiceRoleForBatch"].fix
    # Once created, it passes
    _client("iam").create_role(
        RoleName="AWSServiceRoleForBatch",
        Path="/aws-service-role/batch.amazonaws.com/",
        AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": []}),
    )
    roles = _by(run_checks(TARGET, _client, only=["roles"]), "roles")
    assert roles["AWSServiceRoleForBatch"].status is Status.OK
    # Without a Spot pool, EC2 Spot's role is not needed
    on_demand = replace(TARGET, pools=TARGET.pools[1:])
    assert "AWSServiceRoleForEC2Spot" not in _by(run_checks(on_demand, _client, only=["roles"]), "roles")


# --- quotas and offerings, as AWS answers them (botocore's Stubber: real call shapes) ----------


def _quota(code: str, value: float) -> dict[str, Any]:
    return {"Quota": {"ServiceCode": "ec2", "QuotaCode": code, "QuotaName": code, "Value": value}}


def _stubbed(service: str, calls: list[tuple[str, dict[str, Any], dict[str, Any] | None]]) -> Any:
    """A client of `service` that answers `calls` in order ((operation, response, expected
    params)), and fails the test on any other call."""
    client = boto3.client(service, region_name=REGION)  # type: ignore[call-overload]
    stubber = Stubber(client)
    for operation, response, expected in calls:
        stubber.add_response(operation, response, expected)
    stubber.activate()
    return client


QUOTA_TARGET = replace(
    TARGET,
    pools=(
        DoctorPool("a100-spot", "spot", ("p4d.24xlarge", "p4de.24xlarge"), 768),
        DoctorPool("a100-ondemand", "on-demand", ("p4d.24xlarge",), 384, one_zone=True),
        # g6.4xlarge is not in the sizing table: its vCPUs come from DescribeInstanceTypes
        DoctorPool("l4-ondemand", "on-demand", ("g6.4xlarge", "g6.xlarge"), 64),
    ),
)


def test_a_pool_whose_quota_cannot_hold_one_instance_blocks_naming_pool_code_and_numbers() -> None:
    # Given a new account: no On-Demand P vCPUs, 384 Spot P vCPUs, 8 On-Demand G vCPUs
    ec2 = _stubbed(
        "ec2",
        [
            (
                "describe_instance_types",
                {"InstanceTypes": [{"InstanceType": "g6.4xlarge", "VCpuInfo": {"DefaultVCpus": 16}}]},
                {"InstanceTypes": ["g6.4xlarge"]},
            )
        ],
    )
    quotas = _stubbed(
        "service-quotas",
        [
            (
                "get_service_quota",
                _quota("L-DB2E81BA", 8.0),
                {"ServiceCode": "ec2", "QuotaCode": "L-DB2E81BA"},
            ),
            (
                "get_service_quota",
                _quota("L-417A185B", 0.0),
                {"ServiceCode": "ec2", "QuotaCode": "L-417A185B"},
            ),
            (
                "get_service_quota",
                _quota("L-7212CCBC", 384.0),
                {"ServiceCode": "ec2", "QuotaCode": "L-7212CCBC"},
            ),
        ],
    )

    # When doctor checks the quotas
    findings = run_checks(QUOTA_TARGET, {"ec2": ec2, "service-quotas": quotas}.__getitem__, ["quotas"])
    quota = _by(findings, "quotas")

    # Then the On-Demand P pool cannot launch a single instance: a failure naming the pool, the
    # quota code and the numbers, with the command that asks for enough
    blocked = quota["pool a100-ondemand (on-demand)"]
    assert blocked.status is Status.FAIL
    assert blocked.detail == (
        "cannot launch a single instance: quota L-417A185B is 0 vCPUs, one p4d.24xlarge needs 96"
    )
    assert "--quota-code L-417A185B --desired-value 384" in blocked.fix
    assert quota["Running On-Demand P instances (L-417A185B)"].status is Status.WARN
    # A quota that holds one instance but not max_gpus' worth warns; its pool can launch
    assert quota["All P Spot Instance Requests (L-7212CCBC)"].status is Status.WARN
    assert "may grow to 768" in quota["All P Spot Instance Requests (L-7212CCBC)"].detail
    assert quota["pool a100-spot (spot)"].status is Status.OK
    # 8 G vCPUs hold no g6.4xlarge (16, from DescribeInstanceTypes) but a g6.xlarge (4): it launches
    assert quota["pool l4-ondemand (on-demand)"].status is Status.OK
    assert "one g6.xlarge takes 4" in quota["pool l4-ondemand (on-demand)"].detail


def test_a_quota_below_every_type_of_the_pool_lists_each() -> None:
    quotas = _stubbed(
        "service-quotas",
        [
            ("get_service_quota", _quota("L-DB2E81BA", 2.0), None),
        ],
    )
    target = replace(TARGET, pools=(DoctorPool("l4", "on-demand", ("g6.xlarge", "g5.2xlarge"), 64),))
    [_, pool] = run_checks(
        target, {"ec2": _stubbed("ec2", []), "service-quotas": quotas}.__getitem__, ["quotas"]
    )
    assert pool.status is Status.FAIL and pool.subject == "pool l4 (on-demand)"
    assert pool.detail == (
        "cannot launch a single instance: quota L-DB2E81BA is 2 vCPUs, one g6.xlarge needs 4; "
        "quota L-DB2E81BA is 2 vCPUs, one g5.2xlarge needs 8"
    )


def _offering(instance_type: str, zone: str) -> dict[str, str]:
    return {"InstanceType": instance_type, "LocationType": "availability-zone", "Location": zone}


def _zones_and_offerings() -> Any:
    """us-east-1a..f; p4d in 1b and 1c, p4de in 1a, p5 in 1d only (two pages of offerings)."""
    types = ["p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge"]
    filters = {
        "LocationType": "availability-zone",
        "Filters": [{"Name": "instance-type", "Values": types}],
    }
    return _stubbed(
        "ec2",
        [
            (
                "describe_availability_zones",
                {
                    "AvailabilityZones": [
                        {"ZoneName": f"us-east-1{z}", "State": "available", "ZoneType": "availability-zone"}
                        for z in "fedcba"
                    ]
                },
                {"Filters": [{"Name": "zone-type", "Values": ["availability-zone"]}]},
            ),
            (
                "describe_instance_type_offerings",
                {
                    "InstanceTypeOfferings": [
                        _offering("p4d.24xlarge", "us-east-1c"),
                        _offering("p4de.24xlarge", "us-east-1a"),
                    ],
                    "NextToken": "page-2",
                },
                filters,
            ),
            (
                "describe_instance_type_offerings",
                {
                    "InstanceTypeOfferings": [
                        _offering("p4d.24xlarge", "us-east-1b"),
                        _offering("p5.48xlarge", "us-east-1d"),
                    ]
                },
                {**filters, "NextToken": "page-2"},
            ),
        ],
    )


def test_offerings_choose_a_gang_pools_zone_and_block_a_pool_offered_in_none() -> None:
    # Given no `availability_zones` (a created VPC takes the region's first two: 1a and 1b)
    target = replace(
        TARGET,
        availability_zones=(),
        pools=(
            DoctorPool("a100-spot", "spot", ("p4d.24xlarge", "p4de.24xlarge"), 768),
            DoctorPool("a100-ondemand", "on-demand", ("p4d.24xlarge",), 384, one_zone=True),
            DoctorPool("h100-ondemand", "on-demand", ("p5.48xlarge",), 384, one_zone=True),
        ),
    )
    ec2 = _zones_and_offerings()

    azs = _by(run_checks(target, lambda service: ec2, ["azs"]), "azs")

    # Then the gang pool's one AZ is where p4d is offered (1b), not the VPC's first (1a)
    gang = azs["pool a100-ondemand in us-east-1a, us-east-1b"]
    assert gang.status is Status.OK and "the deploy chooses us-east-1b" in gang.detail
    assert azs["p4d.24xlarge (a100-ondemand) in us-east-1b"].status is Status.OK
    # a pool none of whose types is offered in its AZs blocks, saying where they are offered
    blocked = azs["pool h100-ondemand in us-east-1a, us-east-1b"]
    assert blocked.status is Status.FAIL
    assert blocked.detail == "cannot launch: none of p5.48xlarge is offered in us-east-1a, us-east-1b"
    assert "availability_zones" in blocked.fix and "p5.48xlarge: us-east-1d" in blocked.fix
    # the Spot pool launches in both AZs, each type in one of them
    spot = azs["pool a100-spot in us-east-1a, us-east-1b"]
    assert spot.status is Status.OK and "launches in us-east-1a, us-east-1b" in spot.detail
    assert azs["p4de.24xlarge (a100-spot) in us-east-1a, us-east-1b"].detail.startswith(
        "offered only in us-east-1a"
    )


def test_the_command_exits_1_when_a_pool_cannot_launch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given cdk.json's pools (a Spot and an On-Demand P pool) and an account with no On-Demand P vCPUs
    (tmp_path / "cdk.json").write_text(json.dumps({"context": cdk_context()}))
    quotas = _stubbed(
        "service-quotas",
        [
            ("get_service_quota", _quota("L-417A185B", 0.0), None),
            ("get_service_quota", _quota("L-7212CCBC", 768.0), None),
        ],
    )
    monkeypatch.setattr(boto3.session.Session, "client", lambda self, service, **_: quotas)

    # When doctor checks the quotas
    result = CliRunner().invoke(app, ["doctor", "--context", str(tmp_path / "cdk.json"), "--check", "quotas"])

    # Then it fails, and says which pool cannot launch, under which quota, by how much
    assert result.exit_code == 1, result.output
    [row] = [r for r in _table_rows(result.output) if r[1] == "pool a100-ondemand (on-demand)"]
    assert row[2] == "fail"
    assert row[3] == "cannot launch a single instance: quota L-417A185B is 0 vCPUs, one p4d.24xlarge needs 96"
    assert "--quota-code L-417A185B" in row[4]
    assert "0 ok" not in _said(result.output) and "1 fail" in _said(result.output)
