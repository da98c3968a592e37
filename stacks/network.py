"""The VPC the GPU instances run in: created, or imported by id without a lookup.

A created VPC has private subnets behind NAT (`nat_gateways`, 1 by default; `nat_per_zone` one
in each AZ) plus S3 and DynamoDB gateway endpoints. The bulk of a training job's traffic
(checkpoints, and ECR image layers, which ECR serves from S3) goes through the free gateway
endpoints, so NAT carries little more than API calls, and instances get no public addresses.
`vpc_endpoints` adds interface endpoints for those calls too (`INTERFACE_ENDPOINTS`). Public
subnets without NAT would save the NAT's fixed hourly cost but put every GPU instance on the
internet; not worth it for this workload.
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, Validations
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from stacks.config import DEFAULT_AZ_COUNT
from stacks.observability import EncryptedLogs

# What the instances call besides S3 and DynamoDB (gateway endpoints): image pulls (ECR's API and
# registry), the ECS agent (ECS, and its ecs-agent and ecs-telemetry channels), container logs,
# STS (the SDK's regional endpoint) and the training agent's heartbeats and checkpoints (EventBridge).
INTERFACE_ENDPOINTS: dict[str, ec2.InterfaceVpcEndpointAwsService] = {
    "EcrApi": ec2.InterfaceVpcEndpointAwsService.ECR,
    "EcrDocker": ec2.InterfaceVpcEndpointAwsService.ECR_DOCKER,
    "Ecs": ec2.InterfaceVpcEndpointAwsService.ECS,
    "EcsAgent": ec2.InterfaceVpcEndpointAwsService.ECS_AGENT,
    "EcsTelemetry": ec2.InterfaceVpcEndpointAwsService.ECS_TELEMETRY,
    "Logs": ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_LOGS,
    "Sts": ec2.InterfaceVpcEndpointAwsService.STS,
    "Events": ec2.InterfaceVpcEndpointAwsService.EVENTBRIDGE,
}


class Network(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        logs: EncryptedLogs,
        nat_gateways: int,
        vpc_id: str | None = None,
        subnet_ids: tuple[str, ...] = (),
        availability_zones: tuple[str, ...] = (),
        created_availability_zones: tuple[str, ...] = (),
        interface_endpoints: bool = False,
    ) -> None:
        super().__init__(scope, construct_id)
        if vpc_id:
            self.vpc: ec2.IVpc = ec2.Vpc.from_vpc_attributes(
                self,
                "Vpc",
                vpc_id=vpc_id,
                availability_zones=list(availability_zones),
                private_subnet_ids=list(subnet_ids),
            )
            # Route table ids only matter for adding gateway endpoints, which an imported VPC
            # already has or does not need from this stack.
            Validations.of(self.vpc).acknowledge(
                Acknowledgment(
                    id="Annotation::@aws-cdk/aws-ec2:noSubnetRouteTableId",
                    reason="The stack never reads the imported subnets' route tables.",
                )
            )
        else:
            vpc = ec2.Vpc(
                self,
                "Vpc",
                # P and G instance types exist only in some AZs: the context names them
                # (`availability_zones`), else the region's first two.
                **(
                    {"availability_zones": list(created_availability_zones)}
                    if created_availability_zones
                    else {"max_azs": DEFAULT_AZ_COUNT}
                ),
                nat_gateways=nat_gateways,
                subnet_configuration=[
                    ec2.SubnetConfiguration(name="public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=24),
                    ec2.SubnetConfiguration(
                        name="private", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, cidr_mask=18
                    ),
                ],
                gateway_endpoints={
                    "S3": ec2.GatewayVpcEndpointOptions(service=ec2.GatewayVpcEndpointAwsService.S3),
                    "DynamoDB": ec2.GatewayVpcEndpointOptions(
                        service=ec2.GatewayVpcEndpointAwsService.DYNAMODB
                    ),
                },
                # Nothing uses the default security group; restricting it would add a custom
                # resource (a Node.js Lambda) to the stack for no gain.
                restrict_default_security_group=False,
            )
            self.vpc = vpc
        flow_log_group = logs.log_group(self, "FlowLogs")
        self.flow_log = ec2.FlowLog(
            self,
            "FlowLog",
            resource_type=ec2.FlowLogResourceType.from_vpc(self.vpc),
            destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_log_group),
            traffic_type=ec2.FlowLogTrafficType.ALL,
        )
        # Single-node jobs (every Spot pool's, and the small jobs of On-Demand pools) talk to no
        # other instance: their group lets nothing in. Only the pools that run gangs (a cluster
        # placement group) get the gang group, whose members reach each other on every port
        # (torch.distributed rendezvous and NCCL pick ports at run time; EFA needs all traffic
        # from the group itself). A gang's nodes can therefore reach other gangs in those pools,
        # never a Spot instance; per-gang or per-team groups are not possible with Batch, which
        # gives every instance of a compute environment the same groups (docs/security.md).
        self.training_security_group = ec2.SecurityGroup(
            self,
            "TrainingInstances",
            vpc=self.vpc,
            description="Spotline single-node training instances: nothing inbound, all outbound",
            allow_all_outbound=True,
        )
        self.gang_security_group = ec2.SecurityGroup(
            self,
            "GangInstances",
            vpc=self.vpc,
            description="Spotline gang training instances: inbound from the gang pools instances only",
            allow_all_outbound=True,
        )
        self.gang_security_group.add_ingress_rule(
            self.gang_security_group,
            ec2.Port.all_traffic(),
            "gang nodes: torch.distributed rendezvous, NCCL and EFA between the gang pools' instances",
        )
        # EFA also needs an outbound rule to the group itself (AWS's EFA security group): the
        # all-outbound rule to 0.0.0.0/0 does not cover it. (CDK drops egress rules added to a
        # group that allows all outbound, hence the resource of its own.)
        ec2.CfnSecurityGroupEgress(
            self,
            "GangInstancesToThemselves",
            group_id=self.gang_security_group.security_group_id,
            ip_protocol="-1",
            destination_security_group_id=self.gang_security_group.security_group_id,
            description="EFA and NCCL to the gang pools' instances",
        )
        self.subnets = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)
        self.endpoint_security_group: ec2.SecurityGroup | None = None
        if interface_endpoints:
            self._interface_endpoints()

    def _interface_endpoints(self) -> None:
        """`INTERFACE_ENDPOINTS` in every AZ's private subnet, with private DNS (the SDKs and the
        ECS agent use the services' usual names), reachable on HTTPS from the training instances."""
        group = ec2.SecurityGroup(
            self,
            "Endpoints",
            vpc=self.vpc,
            description="Spotline interface endpoints: HTTPS from the training instances",
            allow_all_outbound=False,
        )
        for instances in (self.training_security_group, self.gang_security_group):
            group.add_ingress_rule(instances, ec2.Port.tcp(443), "the training instances' AWS calls")
        for name, service in INTERFACE_ENDPOINTS.items():
            self.vpc.add_interface_endpoint(
                name,
                service=service,
                subnets=self.subnets,
                private_dns_enabled=True,
                security_groups=[group],
                open=False,
            )
        self.endpoint_security_group = group
