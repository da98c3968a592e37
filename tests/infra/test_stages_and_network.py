"""Day two on the template: a stage's own stack, the VPC options (interface endpoints, a NAT per
zone), an EFA gang pool, all synthesized with the AwsSolutions checks and linted by cfn-lint the
way `make synth` does (app.build_app), and state machine logs without execution data."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App

import app as cdk_app
from stacks.config import ConfigError, parse_context
from stacks.network import INTERFACE_ENDPOINTS
from stacks.spotline_stack import SpotlineStack
from tests.infra.support import Synthesized, cdk_context, source_dirs
from tests.infra.test_host_isolation import _user_data_text


@dataclass
class Variant:
    stack: SpotlineStack
    json: dict[str, Any]
    synth_error: Exception | None
    report: dict[str, Any] | None

    def resources(self, kind: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.json["Resources"].items() if v["Type"] == kind}


@pytest.fixture(scope="module")
def prod(tmp_path_factory: pytest.TempPathFactory) -> Variant:
    """`cdk synth -c stage=prod -c vpc_endpoints=true -c nat_per_zone=true`, with the On-Demand
    pool's `efa: true`."""
    tmp = tmp_path_factory.mktemp("prod")
    functions_dir, statemachines_dir, _ = source_dirs(tmp / "sources")
    context = cdk_context()
    context["pools"] = [context["pools"][0], {**context["pools"][1], "efa": True}]
    context.update({"stage": "prod", "vpc_endpoints": True, "nat_per_zone": True})
    outdir = tmp / "cdk.out"
    application = App(context=context, outdir=str(outdir))
    stack = cdk_app.build_app(
        application, functions_dir=functions_dir, statemachines_dir=statemachines_dir, build_dir=tmp / "build"
    )
    error: Exception | None = None
    try:
        application.synth()
    except RuntimeError as raised:
        error = raised
    report_path = outdir / "validation-report.json"
    return Variant(
        stack=stack,
        json=json.loads((outdir / f"{stack.stack_name}.template.json").read_text()),
        synth_error=error,
        report=json.loads(report_path.read_text()) if report_path.is_file() else None,
    )


# The properties that give a resource a name unique in the account and region.
_UNIQUE_NAMES = {
    "AWS::Batch::JobQueue": "JobQueueName",
    "AWS::Batch::JobDefinition": "JobDefinitionName",
    "AWS::Batch::ComputeEnvironment": "ComputeEnvironmentName",
    "AWS::Events::EventBus": "Name",
    "AWS::ECR::Repository": "RepositoryName",
    "AWS::StepFunctions::StateMachine": "StateMachineName",
    "AWS::DynamoDB::Table": "TableName",
    "AWS::DynamoDB::GlobalTable": "TableName",
    "AWS::Lambda::Function": "FunctionName",
    "AWS::SQS::Queue": "QueueName",
    "AWS::SNS::Topic": "TopicName",
    "AWS::Logs::LogGroup": "LogGroupName",
    "AWS::S3::Bucket": "BucketName",
    "AWS::CloudWatch::Dashboard": "DashboardName",
    "AWS::CloudWatch::Alarm": "AlarmName",
    "AWS::IAM::Role": "RoleName",
    "AWS::SSM::Parameter": "Name",
}


def _named(template: dict[str, Any]) -> set[str]:
    """Every name the template gives a resource that must be unique in the account (as text,
    references included: a name made from the stack's name differs between stacks)."""
    names = set()
    for resource in template["Resources"].values():
        key = _UNIQUE_NAMES.get(resource["Type"])
        if key and key in resource.get("Properties", {}):
            names.add(f"{resource['Type']} {json.dumps(resource['Properties'][key])}")
    return names


def test_each_stage_is_its_own_stack_with_its_own_names(synthesized: Synthesized, prod: Variant) -> None:
    assert synthesized.stack.stack_name == "Spotline-dev"
    assert prod.stack.stack_name == "Spotline-prod"
    assert (synthesized.outdir / "Spotline-dev.template.json").is_file()
    # Deploying prod into dev's account touches none of dev's named resources
    dev_names, prod_names = _named(synthesized.json), _named(prod.json)
    assert {n.split()[0] for n in dev_names} >= {
        "AWS::Batch::JobQueue",
        "AWS::Batch::JobDefinition",
        "AWS::Events::EventBus",
        "AWS::StepFunctions::StateMachine",
        "AWS::SSM::Parameter",
    }
    assert dev_names.isdisjoint(prod_names), dev_names & prod_names


def test_the_prod_variant_passes_the_awssolutions_checks_and_cfn_lint(prod: Variant) -> None:
    from cfnlint.api import ManualArgs, lint

    assert prod.synth_error is None, prod.synth_error
    violations = [v for p in (prod.report or {}).get("pluginReports", []) for v in p.get("violations", [])]
    assert violations == []
    matches = lint(json.dumps(prod.json), config=ManualArgs(regions=["us-east-1"]))
    assert [
        f"{m.rule.id} {'/'.join(map(str, m.path))}: {m.message}" for m in matches if m.rule.id.startswith("E")
    ] == []


def test_vpc_endpoints_keep_the_instances_aws_calls_in_their_zone(
    prod: Variant, synthesized: Synthesized
) -> None:
    endpoints = prod.resources("AWS::EC2::VPCEndpoint")
    interfaces = [
        e["Properties"] for e in endpoints.values() if e["Properties"].get("VpcEndpointType") == "Interface"
    ]
    services = {json.dumps(e["ServiceName"]) for e in interfaces}
    for suffix in ("ecr.api", "ecr.dkr", ".ecs", "ecs-agent", "ecs-telemetry", ".logs", ".sts", ".events"):
        assert any(suffix in s for s in services), (suffix, services)
    assert len(interfaces) == len(INTERFACE_ENDPOINTS)
    private = {
        k
        for k, v in prod.resources("AWS::EC2::Subnet").items()
        if not v["Properties"].get("MapPublicIpOnLaunch", False)
    }
    for endpoint in interfaces:
        assert endpoint["PrivateDnsEnabled"] is True
        assert {s["Ref"] for s in endpoint["SubnetIds"]} == private
    # S3 and DynamoDB stay gateway endpoints (free), in both variants
    for template in (prod.json, synthesized.json):
        gateways = [
            r["Properties"]
            for r in template["Resources"].values()
            if r["Type"] == "AWS::EC2::VPCEndpoint" and r["Properties"].get("VpcEndpointType") == "Gateway"
        ]
        assert len(gateways) == 2
    # Off by default (interface endpoints cost per hour and AZ)
    assert not [
        r
        for r in synthesized.json["Resources"].values()
        if r["Type"] == "AWS::EC2::VPCEndpoint" and r["Properties"].get("VpcEndpointType") == "Interface"
    ]


def test_nat_per_zone_puts_a_nat_gateway_in_each_zone(prod: Variant, synthesized: Synthesized) -> None:
    def nat_zones(template: dict[str, Any]) -> list[str]:
        subnets = template["Resources"]
        return sorted(
            json.dumps(subnets[r["Properties"]["SubnetId"]["Ref"]]["Properties"]["AvailabilityZone"])
            for r in template["Resources"].values()
            if r["Type"] == "AWS::EC2::NatGateway"
        )

    # The region's first two AZs, as the deploying account names them (Fn::GetAZs at deploy time)
    assert nat_zones(prod.json) == [json.dumps({"Fn::Select": [i, {"Fn::GetAZs": ""}]}) for i in (0, 1)]
    # The default: one, which the other zone's private subnet routes through
    assert len(nat_zones(synthesized.json)) == 1


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"nat_per_zone": True, "nat_gateways": 2}, "not both"),
        ({"vpc_endpoints": "yes"}, "must be true or false"),
        (
            {
                "vpc_endpoints": True,
                "vpc_id": "vpc-1",
                "vpc_subnet_ids": ["s"],
                "vpc_availability_zones": ["a"],
            },
            "imported one",
        ),
    ],
)
def test_network_options_are_checked(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_context({**cdk_context(), **change})


def test_state_machine_logs_carry_no_execution_data(synthesized: Synthesized, prod: Variant) -> None:
    for template in (synthesized.json, prod.json):
        machines = [
            r for r in template["Resources"].values() if r["Type"] == "AWS::StepFunctions::StateMachine"
        ]
        assert len(machines) == 2
        for machine in machines:
            logging = machine["Properties"]["LoggingConfiguration"]
            # Every event, but no state input or output: the preempt workflow's carry task tokens
            assert logging == {**logging, "Level": "ALL", "IncludeExecutionData": False}


def test_the_efa_pool_launches_with_the_boot_script_and_a_group_open_to_itself(prod: Variant) -> None:
    from stacks.batch import HOST_ISOLATION_SCRIPT

    stack = prod.stack
    efa = stack.compute.efa_launch_template
    assert efa is not None
    data = prod.json["Resources"][stack.get_logical_id(efa.node.default_child)]["Properties"][
        "LaunchTemplateData"
    ]
    assert all(i["InterfaceType"] == "efa" for i in data["NetworkInterfaces"])
    assert HOST_ISOLATION_SCRIPT.read_text() in _user_data_text(data)
    gang = stack.get_logical_id(stack.network.gang_security_group.node.default_child)
    group = {"Fn::GetAtt": [gang, "GroupId"]}
    ingress = [r["Properties"] for r in prod.resources("AWS::EC2::SecurityGroupIngress").values()]
    egress = [r["Properties"] for r in prod.resources("AWS::EC2::SecurityGroupEgress").values()]
    assert {"GroupId": group, "IpProtocol": "-1", "SourceSecurityGroupId": group} in [
        {k: r[k] for k in ("GroupId", "IpProtocol", "SourceSecurityGroupId") if k in r} for r in ingress
    ]
    assert {"GroupId": group, "IpProtocol": "-1", "DestinationSecurityGroupId": group} in [
        {k: r[k] for k in ("GroupId", "IpProtocol", "DestinationSecurityGroupId") if k in r} for r in egress
    ]


def test_the_training_image_has_an_efa_target() -> None:
    # Not built here (no Docker). `docker build` without --target builds the last stage: it must
    # stay the plain image, with `--target efa` the one with the EFA software.
    dockerfile = (Path(__file__).resolve().parents[2] / "images" / "training" / "Dockerfile").read_text()
    stages = [
        line.split()[-1] for line in dockerfile.splitlines() if line.startswith("FROM ") and " AS " in line
    ]
    assert stages[-1] == "training" and "efa" in stages


def test_team_instances_can_be_turned_off_for_teams_that_trust_each_other(tmp_path: Path) -> None:
    from aws_cdk import Environment

    functions_dir, statemachines_dir, _ = source_dirs(tmp_path / "sources")
    raw = {**cdk_context(), "team_instances": False}
    config = parse_context(raw)
    assert config.queue_owners == (None,)
    stack = SpotlineStack(
        App(context=raw),
        "Shared",
        config=config,
        env=Environment(account="123456789012", region="us-east-1"),
        functions_dir=functions_dir,
        statemachines_dir=statemachines_dir,
        build_dir=tmp_path / "build",
    )
    template = stack.resolve(stack.spotline_config())
    # One queue per pool, shared by every team, as before team_instances
    assert [p["job_queue"] for p in template["pools"]] == [
        {
            "Fn::GetAtt": [
                stack.get_logical_id(stack.compute.job_queues[p.name, None].node.default_child),
                "JobQueueArn",
            ]
        }
        for p in config.pools
    ]
    assert all("team_job_queues" not in p for p in template["pools"])
    assert sorted(stack.compute.job_queues) == sorted((p.name, None) for p in config.pools)


def test_team_instances_stay_within_batchs_quota() -> None:
    context = cdk_context()
    pool = context["pools"][0]
    many = [{**pool, "name": f"p{i}"} for i in range(26)]  # 26 pools x 2 teams = 52 > 50
    with pytest.raises(ConfigError, match="over AWS Batch's default quota of 50"):
        parse_context({**context, "pools": many})
    assert parse_context({**context, "pools": many, "team_instances": False}).queue_owners == (None,)
    # Names that would make the same queue are refused
    clash = [{**pool, "name": "a"}, {**pool, "name": "a-research"}]
    teams = [{"team": "research"}, {"team": "research-x"}, {"team": "x"}]
    with pytest.raises(ConfigError, match="same job queues"):
        parse_context({**context, "pools": clash, "teams": teams, "identities": {}})
