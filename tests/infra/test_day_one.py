"""Day one on the synthesized template: images pull, gang nodes talk, Spot pools are
diverse, AZs are configurable, and alarms page someone."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import App, Environment
from aws_cdk.assertions import Template

from spotline.aws.published import parse_published
from stacks.config import ConfigError, parse_context
from stacks.spotline_stack import SpotlineStack
from tests.infra.support import Synthesized, cdk_context, source_dirs
from tests.infra.test_stack import CONTEXT, actions_of, as_list, flatten, getatt_arn, statements_of_role

TOPIC = "arn:aws:sns:us-east-1:123456789012:spotline-oncall"


def _properties(syn: Synthesized, construct: Any) -> dict[str, Any]:
    props: dict[str, Any] = syn.json["Resources"][syn.logical_id(construct)]["Properties"]
    return props


# --- finding 1: private images -----------------------------------------------------------------


def test_each_teams_execution_role_pulls_its_own_repositories_and_the_shared_image(
    synthesized: Synthesized,
) -> None:
    stack = synthesized.stack
    repository = stack.compute.training_repository
    assert repository is not None
    own = flatten(stack.resolve(repository.repository_arn))
    roles = {synthesized.logical_id(role) for role in stack.compute.execution_roles.values()}
    assert len(roles) == len(stack.config.team_names) >= 2  # one per team, none shared
    for team, definition in stack.compute.job_definitions.items():
        role = stack.compute.execution_roles[team]
        container = _properties(synthesized, definition)["ContainerProperties"]
        assert container["ExecutionRoleArn"] == getatt_arn(synthesized, role)
        statements = statements_of_role(synthesized, synthesized.logical_id(role))
        assert {"ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer", "ecr:GetAuthorizationToken"} <= actions_of(
            statements
        )
        pulls = [s for s in statements if "ecr:BatchGetImage" in as_list(s["Action"])]
        resources = {flatten(r) for s in pulls for r in as_list(s["Resource"])}
        # The team's namespace and the stack's training repository; never every repository.
        assert resources == {f"arn:aws:ecr:us-east-1:<AWS::AccountId>:repository/{team}/*", own}


# --- finding 3: gang jobs ----------------------------------------------------------------------


def test_only_gang_pools_instances_reach_each_other(synthesized: Synthesized) -> None:
    stack = synthesized.stack
    gang = synthesized.logical_id(stack.network.gang_security_group)
    single = synthesized.logical_id(stack.network.training_security_group)
    ingress = [r["Properties"] for r in synthesized.resources("AWS::EC2::SecurityGroupIngress").values()]
    # The gang group lets in its own members on every port (rendezvous, NCCL, EFA); nothing else.
    assert [(r["GroupId"], r["IpProtocol"], r["SourceSecurityGroupId"]) for r in ingress] == [
        ({"Fn::GetAtt": [gang, "GroupId"]}, "-1", {"Fn::GetAtt": [gang, "GroupId"]})
    ]
    for group in (stack.network.gang_security_group, stack.network.training_security_group):
        assert "SecurityGroupIngress" not in _properties(synthesized, group)
    # Gang pools (a placement group) are in the gang group; every other pool (Spot: single-node
    # jobs only) in the group that lets nothing in.
    for (pool_name, _), environment in stack.compute.compute_environments.items():
        expected = gang if stack.config.pool(pool_name).placement_group else single
        assert _properties(synthesized, environment)["ComputeResources"]["SecurityGroupIds"] == [
            {"Fn::GetAtt": [expected, "GroupId"]}
        ]
    assert any(p.placement_group for p in stack.config.pools)
    assert any(not p.placement_group for p in stack.config.pools)


def test_on_demand_pools_get_a_cluster_placement_group_and_spot_pools_none(synthesized: Synthesized) -> None:
    stack = synthesized.stack
    for (pool_name, _), environment in stack.compute.compute_environments.items():
        pool = stack.config.pool(pool_name)
        resources = _properties(synthesized, environment)["ComputeResources"]
        if pool.is_spot:
            assert "PlacementGroup" not in resources
            continue
        group = stack.compute.placement_groups[pool.name]
        assert _properties(synthesized, group)["Strategy"] == "cluster"
        assert resources["PlacementGroup"] == {"Fn::GetAtt": [synthesized.logical_id(group), "GroupName"]}


def test_a_gang_job_derives_its_definition_from_the_training_container(synthesized: Synthesized) -> None:
    # The launcher derives the multi-node definition from this one (same container on every node,
    # tests/integration/test_adapters.py); it must be an EC2 container definition for that.
    for definition in synthesized.stack.compute.job_definitions.values():
        props = _properties(synthesized, definition)
        assert props["Type"] == "container" and props["PlatformCapabilities"] == ["EC2"]
        assert "NetworkConfiguration" not in props["ContainerProperties"]


# --- finding 8: Spot diversity -----------------------------------------------------------------


def test_the_spot_pool_has_several_instance_types(synthesized: Synthesized) -> None:
    spot = [p for p in CONTEXT["pools"] if p["purchase"] == "spot"]
    assert spot and all(len(p["instance_types"]) >= 2 for p in spot)
    config = json.loads(
        json.dumps(synthesized.stack.spotline_config())  # the pools' types reach the launcher
    )
    for pool in config["pools"]:
        assert (
            pool["instance_types"]
            == next(p for p in CONTEXT["pools"] if p["name"] == pool["name"])["instance_types"]
        )


# --- finding 7: alarms -------------------------------------------------------------------------


def test_alarms_cover_queues_workflows_passes_stuck_jobs_and_repairs(synthesized: Synthesized) -> None:
    stack = synthesized.stack
    alarms = stack.alarms.alarms
    assert set(alarms) == {
        "DeadLetters-events",
        "DeadLetters-scheduler",
        "OldestDeadLetter-events",
        "OldestDeadLetter-scheduler",
        "OldestSchedulingTrigger",
        "WorkflowFailures-preempt",
        "WorkflowFailures-launch",
        "SchedulingPassErrors",
        "JobsStuckPastDeadline",
        "ReconcilerRepairs",
        "LambdaThrottles",
        "DynamoDbThrottles",
        "Api5xx",
        "AgentEventsDropped",
        "ComputeEnvironmentsInvalid",
        "StalledGangs",
        "SpotCapacity-a100-spot",
        "OnDemandCapacity-a100-ondemand",
        "OldestHeartbeat",
    }
    text = json.dumps({name: _properties(synthesized, alarm) for name, alarm in alarms.items()})
    for metric in ("PassErrors", "ReconcilerRequeued", "LedgerRepaired", "ExecutionsFailed"):
        assert metric in text
    for alarm in alarms.values():
        props = _properties(synthesized, alarm)
        assert props["TreatMissingData"] == "notBreaching"
        assert props["AlarmDescription"]
        # No topic in cdk.json: the stack's own topic
        assert props["AlarmActions"] == [{"Ref": synthesized.logical_id(stack.alarms.topic)}]


# --- a variant: EFA, chosen AZs, an alarm topic ------------------------------------------------


@pytest.fixture(scope="module")
def variant(tmp_path_factory: pytest.TempPathFactory) -> tuple[SpotlineStack, Template]:
    tmp = tmp_path_factory.mktemp("variant")
    functions_dir, statemachines_dir, _ = source_dirs(tmp / "sources")
    raw = cdk_context()
    raw["pools"] = [
        {**raw["pools"][0], "instance_types": ["p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge"]},
        {**raw["pools"][1], "efa": True},
    ]
    raw.update({"availability_zones": ["us-east-1b", "us-east-1d"], "alarm_topic_arn": TOPIC})
    config = parse_context(raw)
    stack = SpotlineStack(
        App(context=raw),
        "Variant",
        config=config,
        env=Environment(account="123456789012", region="us-east-1"),
        functions_dir=functions_dir,
        statemachines_dir=statemachines_dir,
        build_dir=tmp / "build",
    )
    return stack, Template.from_stack(stack)


def test_the_created_vpc_uses_the_configured_azs(variant: tuple[SpotlineStack, Template]) -> None:
    _, template = variant
    subnets = template.find_resources("AWS::EC2::Subnet")
    assert {s["Properties"]["AvailabilityZone"] for s in subnets.values()} == {"us-east-1b", "us-east-1d"}


def test_an_efa_pool_launches_with_every_efa_of_its_type_in_the_gang_group(
    variant: tuple[SpotlineStack, Template],
) -> None:
    stack, template = variant
    resolved = template.to_json()["Resources"]
    efa = stack.compute.efa_launch_template
    assert efa is not None
    data = resolved[stack.get_logical_id(efa.node.default_child)]["Properties"]["LaunchTemplateData"]
    interfaces = data["NetworkInterfaces"]
    # p4d.24xlarge: four network cards, one EFA on each (p5: 32); the first is the primary.
    assert [(i["NetworkCardIndex"], i["DeviceIndex"]) for i in interfaces] == [(0, 0), (1, 1), (2, 1), (3, 1)]
    group_id = stack.get_logical_id(stack.network.gang_security_group.node.default_child)
    for interface in interfaces:
        assert interface["InterfaceType"] == "efa"
        assert interface["Groups"] == [{"Fn::GetAtt": [group_id, "GroupId"]}]
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    team = stack.config.team_names[0]
    on_demand = stack.compute.compute_environments[stack.config.pools[1].name, team]
    resources = resolved[stack.get_logical_id(on_demand.node.default_child)]["Properties"]["ComputeResources"]
    # The group is on the interface; EC2 refuses it in both places.
    assert "SecurityGroupIds" not in resources
    assert resources["LaunchTemplate"]["LaunchTemplateId"] == {
        "Ref": stack.get_logical_id(efa.node.default_child)
    }
    # The Spot pool keeps the plain template, with its three 8-GPU types.
    spot = stack.compute.compute_environments[stack.config.pools[0].name, team]
    spot_resources = resolved[stack.get_logical_id(spot.node.default_child)]["Properties"]["ComputeResources"]
    assert spot_resources["InstanceTypes"] == ["p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge"]
    assert "SecurityGroupIds" in spot_resources


def test_an_efa_pool_runs_under_definitions_that_map_the_efa_device(
    variant: tuple[SpotlineStack, Template],
) -> None:
    stack, template = variant
    definitions = {
        d["Properties"]["JobDefinitionName"]: d["Properties"]["ContainerProperties"]
        for d in template.find_resources("AWS::Batch::JobDefinition").values()
    }
    teams = stack.config.team_names
    assert teams
    for team in teams:
        # The EFA variant of each team's definition maps the EFA's device and selects libfabric's
        # EFA provider; it keeps the team's role and the agent's environment.
        efa = definitions[f"spotline-dev-training-{team}-efa"]
        plain = definitions[f"spotline-dev-training-{team}"]
        devices = efa["LinuxParameters"]["Devices"]
        # One device per EFA interface of the pool's p4d.24xlarge.
        assert [d["HostPath"] for d in devices] == [f"/dev/infiniband/uverbs{i}" for i in range(4)]
        for device in devices:
            assert device["HostPath"] == device["ContainerPath"]
            # CDK writes them lower-case; CloudFormation's schema takes them in any case.
            assert sorted(p.upper() for p in device["Permissions"]) == ["MKNOD", "READ", "WRITE"]
        environment = {e["Name"]: e["Value"] for e in efa["Environment"]}
        assert environment["FI_PROVIDER"] == "efa" and environment["FI_EFA_FORK_SAFE"] == "1"
        assert {e["Name"]: e["Value"] for e in plain["Environment"]}.items() <= environment.items()
        assert efa["JobRoleArn"] == plain["JobRoleArn"]
        assert efa["ExecutionRoleArn"] == plain["ExecutionRoleArn"]
        # The plain one (every other pool's) maps no device: on an instance without an EFA a
        # container mapping one does not start.
        assert "Devices" not in plain["LinuxParameters"]
        assert "FI_PROVIDER" not in {e["Name"] for e in plain["Environment"]}
    # The launcher learns which pool is EFA and which definition each team's jobs use there.
    config = stack.spotline_config()
    assert [p.get("efa", False) for p in config["pools"]] == [False, True]
    assert config["efa_job_definitions"] == {t: f"spotline-dev-training-{t}-efa" for t in teams}


def test_without_an_efa_pool_there_is_no_efa_definition(synthesized: Synthesized) -> None:
    names = {
        d["Properties"]["JobDefinitionName"]
        for d in synthesized.template.find_resources("AWS::Batch::JobDefinition").values()
    }
    assert names and not any(n.endswith("-efa") for n in names)
    assert "efa_job_definitions" not in synthesized.stack.spotline_config()


def test_every_alarm_notifies_the_configured_topic(variant: tuple[SpotlineStack, Template]) -> None:
    _, template = variant
    alarms = template.find_resources("AWS::CloudWatch::Alarm")
    # the default 15 (OldestHeartbeat among them), ComputeEnvironmentsInvalid, StalledGangs, and
    # one capacity alarm for each of the two pools
    assert len(alarms) == 19
    assert all(a["Properties"]["AlarmActions"] == [TOPIC] for a in alarms.values())


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"efa": True, "instance_types": ["g5.xlarge"]}, "support EFA"),
        ({"efa": True, "placement_group": False}, "cluster placement group"),
        ({"efa": True, "purchase": "spot"}, "cluster placement group"),
        ({"placement_group": True, "purchase": "spot"}, "no placement group"),
        ({"placement_group": "yes"}, "must be true or false"),
        ({"efa": True, "instance_types": ["p4d.24xlarge", "p5.48xlarge"]}, "same number of EFA interfaces"),
        ({"availability_zone": "us-east-1a", "purchase": "spot", "placement_group": False}, "one AZ"),
    ],
)
def test_impossible_pool_networking_is_refused(change: dict[str, Any], message: str) -> None:
    pool = {
        "name": "p",
        "gpu_type": "a100",
        "instance_types": ["p4d.24xlarge"],
        "purchase": "on-demand",
        "max_gpus": 8,
    }
    with pytest.raises(ConfigError, match=message):
        parse_context({"pools": [{**pool, **change}]})


def test_azs_and_topic_are_checked() -> None:
    pool = {
        "name": "p",
        "gpu_type": "a100",
        "instance_types": ["p4d.24xlarge"],
        "purchase": "spot",
        "max_gpus": 8,
    }
    with pytest.raises(ConfigError, match="alarm_topic_arn"):
        parse_context({"pools": [pool], "alarm_topic_arn": "oncall"})
    with pytest.raises(ConfigError, match="vpc_availability_zones"):
        parse_context(
            {
                "pools": [pool],
                "vpc_id": "vpc-1",
                "vpc_subnet_ids": ["subnet-1"],
                "vpc_availability_zones": ["us-east-1a"],
                "availability_zones": ["us-east-1a"],
            }
        )


def test_cfn_lint_reports_no_error_on_the_variant(variant: tuple[SpotlineStack, Template]) -> None:
    from cfnlint.api import ManualArgs, lint

    _, template = variant
    matches = lint(json.dumps(template.to_json()), config=ManualArgs(regions=["us-east-1"]))
    assert [f"{m.rule.id}: {m.message}" for m in matches if m.rule.id.startswith("E")] == []


# --- the deployed configuration, published for doctor and configure ---------------------------


def _as_deployed(value: Any) -> str:
    """A Fn::Join's text, each reference (Ref, GetAtt, Select...) as `<...>`."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return str(separator).join(_as_deployed(part) for part in parts)
    return "<" + "".join(c for c in json.dumps(value) if c.isalnum()) + ">"


def _published(template: dict[str, Any], stack: SpotlineStack) -> tuple[dict[str, Any], str]:
    [parameter] = [
        r["Properties"] for r in template["Resources"].values() if r["Type"] == "AWS::SSM::Parameter"
    ]
    return parameter, _as_deployed(parameter["Value"])


def test_the_stack_publishes_its_configuration_where_doctor_reads_it(synthesized: Synthesized) -> None:
    stack = synthesized.stack
    parameter, text = _published(synthesized.json, stack)
    assert parameter["Name"] == f"/spotline/{stack.stack_name}/config"
    assert parameter["Type"] == "String" and parameter["Tier"] == "Standard"
    # The document parses with the model doctor and configure read it with.
    published = parse_published(text, where="template")
    config = stack.config
    assert published.stack == stack.stack_name and published.stage == config.stage
    assert [(p.name, p.purchase, p.instance_types, p.max_vcpus) for p in published.pools] == [
        (p.name, p.purchase, p.instance_types, p.max_vcpus) for p in config.pools
    ]
    # The names the stack gave its job queues and definitions, and the image the definitions run.
    queues = {q["Properties"]["JobQueueName"] for q in synthesized.resources("AWS::Batch::JobQueue").values()}
    # (Each team's own queue per pool: team_instances, the default.)
    assert {q for p in published.pools for q in p.team_job_queues.values()} == queues
    assert all(
        p.job_queue is None and set(p.team_job_queues) == set(config.team_names) for p in published.pools
    )
    definitions = {
        d["Properties"]["JobDefinitionName"]: d["Properties"]["ContainerProperties"]
        for d in synthesized.resources("AWS::Batch::JobDefinition").values()
    }
    assert set(published.job_definitions.values()) == set(definitions)
    assert published.teams == config.team_names and published.identities == dict(config.identities)
    images = {_as_deployed(d["Image"]) for d in definitions.values()}
    assert images == {published.training_image}
    assert published.powertools_layer_version == config.powertools_layer_version
    # The API's URL is the deployed one (configure --stack), a reference until deployed.
    assert published.api_url.startswith("https://<") and ".execute-api." in published.api_url
    assert len(published.availability_zones) == 2


def test_the_variant_publishes_its_efa_definitions_azs_and_topic(
    variant: tuple[SpotlineStack, Template],
) -> None:
    stack, template = variant
    _, text = _published(template.to_json(), stack)
    published = parse_published(text, where="template")
    assert [p.efa for p in published.pools] == [False, True]
    assert published.efa_job_definitions == {
        t: f"spotline-dev-training-{t}-efa" for t in stack.config.team_names
    }
    assert published.availability_zones == ("us-east-1b", "us-east-1d")
    assert published.alarm_topic_arn == TOPIC
    assert published.region == "us-east-1"
