"""The one AZ of each gang pool, looked up at deploy time where EC2 offers its instance types.

A cluster placement group lives in one AZ, so a gang pool's compute environment gets one subnet.
Which AZ offers a pool's P or G types differs by region and by account (AZ names map to other
physical zones in each), so it is not decided at synth: a custom resource per pool
(`functions/zone_lookup.py`, behind CDK's provider framework) asks EC2 during the deploy and
answers the AZ and the VPC's private subnet there. A pool given `availability_zone` in cdk.json
skips it.
"""

from __future__ import annotations

from aws_cdk import CustomResource, Duration
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import custom_resources as cr
from constructs import Construct

from stacks.nag import acknowledge, finding_resource
from stacks.observability import EncryptedLogs

RESOURCE_TYPE = "Custom::SpotlineGangZone"
HANDLER = "functions.zone_lookup.handler"


class GangZones(Construct):
    """The lookup function, its provider, and one lookup per gang pool (`zone_of`)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        code: lambda_.Code,
        layers: list[lambda_.ILayerVersion],
        runtime: lambda_.Runtime,
        logs: EncryptedLogs,
        subnets: list[ec2.ISubnet],
    ) -> None:
        super().__init__(scope, construct_id)
        self.subnets = subnets
        role = iam.Role(
            self,
            "LookupRole",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description="Spotline deploy-time lookup of each gang pool's AZ",
        )
        role.add_to_policy(
            iam.PolicyStatement(actions=["ec2:DescribeInstanceTypeOfferings"], resources=["*"])
        )
        acknowledge(
            role,
            "AwsSolutions-IAM5[Resource::*]",
            "ec2:DescribeInstanceTypeOfferings is read-only and supports no resource-level permission.",
        )
        log_group = logs.log_group(self, "LookupLogs")
        log_group.grant_write(role)
        self.function = lambda_.Function(
            self,
            "Lookup",
            runtime=runtime,
            handler=HANDLER,
            code=code,
            layers=layers,
            role=role,
            timeout=Duration.seconds(60),
            memory_size=256,
            log_group=log_group,
            environment={"POWERTOOLS_SERVICE_NAME": "spotline", "PYDANTIC_DISABLE_PLUGINS": "__all__"},
            description="Spotline (deploy time): the AZ of a gang pool where its instance types are offered",
        )
        acknowledge(
            self.function,
            "AwsSolutions-L1",
            "Python 3.12 is pinned, as for the stack's other functions (the Powertools layer is "
            "built for it).",
        )
        provider_logs = logs.log_group(self, "ProviderLogs")
        self.provider = cr.Provider(self, "Provider", on_event_handler=self.function, log_group=provider_logs)
        framework = self.provider.node.find_child("framework-onEvent")
        acknowledge(
            framework,
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
            "CDK's custom resource provider framework (deploy time only) writes its own logs with "
            "AWS's basic execution policy.",
        )
        acknowledge(
            framework,
            f"AwsSolutions-IAM5[Resource::{finding_resource(self, self.function.function_arn)}:*]",
            "The provider framework invokes the one lookup function, any version of it.",
        )
        acknowledge(
            framework,
            "AwsSolutions-L1",
            "CDK's provider framework picks its own Node.js runtime; it runs at deploy time only.",
        )

    def zone_of(self, pool: str, instance_types: tuple[str, ...]) -> tuple[str, str]:
        """(AZ, subnet id) of `pool`, resolved during the deploy."""
        lookup = CustomResource(
            self,
            f"{pool}-zone",
            service_token=self.provider.service_token,
            resource_type=RESOURCE_TYPE,
            properties={
                "Pool": pool,
                "InstanceTypes": list(instance_types),
                "Subnets": [
                    {"SubnetId": s.subnet_id, "AvailabilityZone": s.availability_zone} for s in self.subnets
                ],
            },
        )
        return lookup.get_att_string("AvailabilityZone"), lookup.get_att_string("SubnetId")
