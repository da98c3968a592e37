"""Day one and day two on the synthesized template: Lambda concurrency, deploys that
keep training alive, alarms that reach someone, and a deploy after a destroy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aws_cdk import App, Environment
from aws_cdk.assertions import Template

from stacks.config import parse_context
from stacks.spotline_stack import SpotlineStack
from tests.infra.support import Synthesized, cdk_context, source_dirs
from tests.infra.test_stack import function_role_id, statements_of_role


def _properties(syn: Synthesized, construct: Any) -> dict[str, Any]:
    props: dict[str, Any] = syn.json["Resources"][syn.logical_id(construct)]["Properties"]
    return props


def test_no_function_reserves_concurrency_by_default(synthesized: Synthesized) -> None:
    # Finding 2: an account limited to 10 cannot reserve any (AWS keeps 100 unreserved)
    for function in synthesized.resources("AWS::Lambda::Function").values():
        assert "ReservedConcurrentExecutions" not in function["Properties"]
    assert synthesized.stack.config.scheduler_reserved_concurrency is None
    # The scheduler's passes stay serial: one FIFO message group
    queue = synthesized.stack.messaging.scheduler_queue
    [mapping] = [
        m["Properties"]
        for m in synthesized.resources("AWS::Lambda::EventSourceMapping").values()
        if m["Properties"].get("EventSourceArn") == {"Fn::GetAtt": [synthesized.logical_id(queue), "Arn"]}
    ]
    scheduler = synthesized.logical_id(synthesized.stack.functions["scheduler"])
    assert mapping["FunctionName"] == {"Ref": scheduler}
    assert _properties(synthesized, queue)["FifoQueue"] is True


def test_a_deploy_leaves_running_jobs_alone_and_new_instances_get_the_new_template(
    synthesized: Synthesized,
) -> None:
    # Finding 13
    compute = synthesized.stack.compute
    for pool, environment in compute.compute_environments.items():
        props = _properties(synthesized, environment)
        assert props["UpdatePolicy"] == {"TerminateJobsOnUpdate": False, "JobExecutionTimeoutMinutes": 360}, (
            pool
        )
        template = compute.launch_template
        assert props["ComputeResources"]["LaunchTemplate"] == {
            "LaunchTemplateId": {"Ref": synthesized.logical_id(template)},
            "Version": {"Fn::GetAtt": [synthesized.logical_id(template), "LatestVersionNumber"]},
        }


def test_workflows_invoke_the_function_versions_of_their_deploy(synthesized: Synthesized) -> None:
    # Finding 13: an execution keeps its definition, so it keeps the versions it names
    versions = synthesized.resources("AWS::Lambda::Version")
    assert versions
    for machine in synthesized.resources("AWS::StepFunctions::StateMachine").values():
        substitutions = machine["Properties"]["DefinitionSubstitutions"]
        assert substitutions
        for value in substitutions.values():
            assert value["Ref"] in versions


def test_every_alarm_notifies_the_stacks_topic_which_an_optional_email_subscribes(
    synthesized: Synthesized,
) -> None:
    # Finding 18
    template = synthesized.json
    topic_id = synthesized.logical_id(synthesized.stack.alarms.topic)
    assert template["Resources"][topic_id]["Type"] == "AWS::SNS::Topic"
    assert "KmsMasterKeyId" in template["Resources"][topic_id]["Properties"]
    assert template["Parameters"]["AlarmEmail"]["Default"] == ""
    [subscription] = [r for r in template["Resources"].values() if r["Type"] == "AWS::SNS::Subscription"]
    assert subscription["Properties"]["Protocol"] == "email"
    assert subscription["Properties"]["Endpoint"] == {"Ref": "AlarmEmail"}
    assert subscription["Condition"] in template["Conditions"]
    alarms = synthesized.resources("AWS::CloudWatch::Alarm")
    assert {a["Properties"]["AlarmActions"][0]["Ref"] for a in alarms.values()} == {topic_id}
    text = str({k: a["Properties"] for k, a in alarms.items()})
    for metric in ("Throttles", "ThrottledRequests", "5XXError", "AgentEventsWithoutRun"):
        assert metric in text, metric


def test_a_deploy_after_a_destroy_adopts_the_retained_training_repository(tmp_path: Path) -> None:
    # Finding 19: the repository outlives `cdk destroy` under its fixed name; creating it again
    # would fail, so the redeploy adopts it
    functions_dir, statemachines_dir, _ = source_dirs(tmp_path / "sources")
    raw = {**cdk_context(), "adopt_training_repository": True}
    stack = SpotlineStack(
        App(context=raw),
        "Redeploy",
        config=parse_context(raw),
        env=Environment(account="123456789012", region="us-east-1"),
        functions_dir=functions_dir,
        statemachines_dir=statemachines_dir,
        build_dir=tmp_path / "build",
    )
    template = Template.from_stack(stack)
    template.resource_count_is("AWS::ECR::Repository", 0)
    definitions = template.find_resources("AWS::Batch::JobDefinition")
    assert definitions
    for definition in definitions.values():
        image = str(definition["Properties"]["ContainerProperties"]["Image"])
        assert "spotline-dev-train" in image


def test_capacity_alarms_watch_invalid_environments_spot_waits_and_stalled_gangs(
    synthesized: Synthesized,
) -> None:
    # Finding 18: each alarm watches a metric the reconciler emits with exactly these dimensions
    # (tests/integration/test_gang_liveness.py checks the emitted EMF documents)
    stack = synthesized.stack
    alarms = {name: _properties(synthesized, alarm) for name, alarm in stack.alarms.alarms.items()}
    spot_pools = [p.name for p in stack.config.pools if p.is_spot]
    on_demand_pools = [p.name for p in stack.config.pools if not p.is_spot]
    assert spot_pools and {n for n in alarms if n.startswith("SpotCapacity-")} == {
        f"SpotCapacity-{p}" for p in spot_pools
    }
    # On-Demand pools get the same alarm (a spent vCPU quota, or no capacity in a gang's one AZ)
    assert on_demand_pools and {n for n in alarms if n.startswith("OnDemandCapacity-")} == {
        f"OnDemandCapacity-{p}" for p in on_demand_pools
    }
    waiting = [(f"SpotCapacity-{p}", p) for p in spot_pools] + [
        (f"OnDemandCapacity-{p}", p) for p in on_demand_pools
    ]
    for name, pool in waiting:
        props = alarms[name]
        assert (props["Namespace"], props["MetricName"], props["Statistic"]) == (
            "Spotline",
            "OldestUnstartedAge",
            "Maximum",
        )
        assert props["Dimensions"] == [{"Name": "Pool", "Value": pool}]
        # Below the reconciler's start timeout (default 30 minutes), which requeues the job
        assert props["Threshold"] == 900 and props["EvaluationPeriods"] == 2
        assert props["AlarmActions"], name  # it notifies the alarm topic
    assert "vCPU quota" in alarms[f"OnDemandCapacity-{on_demand_pools[0]}"]["AlarmDescription"]
    for name, metric in (
        ("ComputeEnvironmentsInvalid", "ComputeEnvironmentsInvalid"),
        ("StalledGangs", "StalledGangs"),
    ):
        props = alarms[name]
        assert (props["Namespace"], props["MetricName"]) == ("Spotline", metric)
        assert props["Dimensions"] == [{"Name": "service", "Value": "spotline"}]
        assert props["Threshold"] == 1
        assert props["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    # The reconciler may read the compute environments behind its queues, and nothing more of Batch
    statements = statements_of_role(synthesized, function_role_id(synthesized, "reconciler"))
    actions = {a for statement in statements for a in statement["Action"] if a.startswith("batch:")}
    assert actions == {
        "batch:DescribeJobQueues",
        "batch:DescribeComputeEnvironments",
        "batch:DescribeJobs",
        "batch:ListJobs",
        "batch:TerminateJob",
    }
