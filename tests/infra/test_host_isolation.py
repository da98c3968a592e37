"""Host isolation on the template: what a team's container can reach on its instance and on the
bus (nothing here is deployed; docs/security.md). The boot script's rules themselves run in
network namespaces in test_host_isolation_netns.py."""

from __future__ import annotations

import json
from typing import Any

from stacks.batch import CONTAINER_IMDS_ENVIRONMENT, HOST_ISOLATION_SCRIPT, ecr_repository_arn
from tests.infra.support import Synthesized
from tests.infra.test_stack import as_list, getatt_arn


def _launch_data(syn: Synthesized, template: Any) -> dict[str, Any]:
    data: dict[str, Any] = syn.json["Resources"][syn.logical_id(template)]["Properties"]["LaunchTemplateData"]
    return data


def _user_data_text(data: dict[str, Any]) -> str:
    """The user data's literal text (its Fn::Base64 / Fn::Join parts, references dropped)."""

    def text(value: Any) -> str:
        if isinstance(value, str):
            return value
        if isinstance(value, dict) and "Fn::Base64" in value:
            return text(value["Fn::Base64"])
        if isinstance(value, dict) and "Fn::Join" in value:
            return "".join(text(part) for part in value["Fn::Join"][1])
        return ""

    return text(data["UserData"])


def test_training_containers_cannot_reach_instance_metadata(synthesized: Synthesized) -> None:
    # Given the launch template every pool's instances start from
    data = _launch_data(synthesized, synthesized.stack.compute.launch_template)
    # Then IMDSv2 only, and a token cannot cross a hop (bridge-mode containers)
    assert data["MetadataOptions"] == {
        "HttpEndpoint": "enabled",
        "HttpPutResponseHopLimit": 1,
        "HttpTokens": "required",
    }
    # And the user data is the boot script that tests/infra/test_host_isolation_netns.py runs in
    # network namespaces, byte for byte (one MIME part of Batch's multi-part user data)
    script = HOST_ISOLATION_SCRIPT.read_text()
    assert script.startswith("#!/bin/bash\n") and "\nset -euo pipefail\n" in script
    assert script in _user_data_text(data)


def test_every_job_definition_turns_the_sdks_metadata_lookups_off(synthesized: Synthesized) -> None:
    definitions = synthesized.resources("AWS::Batch::JobDefinition")
    assert definitions
    for definition in definitions.values():
        environment = {
            e["Name"]: e["Value"] for e in definition["Properties"]["ContainerProperties"]["Environment"]
        }
        # The agent then takes its region from the environment and its Spot notice from the
        # control plane (the signal item), never from IMDS.
        assert environment.items() >= CONTAINER_IMDS_ENVIRONMENT.items()
        assert "AWS_DEFAULT_REGION" in environment


def test_the_spot_warning_reaches_the_control_plane_from_eventbridge(synthesized: Synthesized) -> None:
    # The agent no longer reads the notice from IMDS: EC2's warning on the default bus goes to
    # the spot_interruption function, which asks each job on the instance to checkpoint
    # (tests/integration: test_a_spot_warning_asks_every_job_on_the_instance_to_checkpoint_by_the_notice).
    rules = [
        r["Properties"]
        for r in synthesized.resources("AWS::Events::Rule").values()
        if "EventPattern" in r["Properties"]
    ]
    warnings = [
        r for r in rules if r["EventPattern"].get("detail-type") == ["EC2 Spot Instance Interruption Warning"]
    ]
    assert len(warnings) == 1
    assert "EventBusName" not in warnings[0] or warnings[0]["EventBusName"] == "default"


def test_only_the_team_roles_and_the_control_plane_may_put_events_on_the_bus(
    synthesized: Synthesized,
) -> None:
    stack = synthesized.stack
    [policy] = synthesized.resources("AWS::Events::EventBusPolicy").values()
    properties = policy["Properties"]
    assert properties["EventBusName"] == {"Ref": synthesized.logical_id(stack.messaging.bus)}
    statement = properties["Statement"]
    assert statement["Effect"] == "Deny" and statement["Principal"] == {"AWS": "*"}
    assert statement["Action"] == "events:PutEvents"
    allowed = statement["Condition"]["ArnNotEquals"]["aws:PrincipalArn"]
    expected = [getatt_arn(synthesized, role) for role in stack.compute.team_roles.values()] + [
        getatt_arn(synthesized, role) for role in stack.functions.roles.values()
    ]
    assert allowed == expected
    # No other principal gets in through an Allow on the bus.
    assert all(s.get("Effect") != "Allow" for s in as_list(properties.get("Statement")))


def test_an_ecr_image_names_its_repository() -> None:
    image = "123456789012.dkr.ecr.us-east-1.amazonaws.com/research/llm:v3"
    assert ecr_repository_arn(image) == "arn:aws:ecr:us-east-1:123456789012:repository/research/llm"
    assert ecr_repository_arn("nvcr.io/nvidia/pytorch:24.01-py3") is None
    assert json.dumps(CONTAINER_IMDS_ENVIRONMENT) == '{"AWS_EC2_METADATA_DISABLED": "true"}'
