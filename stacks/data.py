"""DynamoDB tables, one per `resources.TABLES` entry: keys, sparse GSIs and TTL as declared there."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from constructs import Construct

from spotline import resources as r


def _attribute(table: r.Table, name: str) -> dynamodb.Attribute:
    kind = dynamodb.AttributeType.NUMBER if name in table.number_keys else dynamodb.AttributeType.STRING
    return dynamodb.Attribute(name=name, type=kind)


def _index(table: r.Table, index: r.Index) -> dynamodb.GlobalSecondaryIndexPropsV2:
    included = index.projection is not None
    return dynamodb.GlobalSecondaryIndexPropsV2(
        index_name=index.name,
        partition_key=_attribute(table, index.partition_key),
        sort_key=_attribute(table, index.sort_key) if index.sort_key else None,
        projection_type=dynamodb.ProjectionType.INCLUDE if included else dynamodb.ProjectionType.ALL,
        non_key_attributes=list(index.projection) if index.projection is not None else None,
    )


class Tables(Construct):
    """On-demand, PITR-protected, encrypted tables; retained when the stack is deleted (job
    history and the capacity ledger outlive a redeploy)."""

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.by_logical_id: dict[str, dynamodb.TableV2] = {}
        for table in r.TABLES:
            self.by_logical_id[table.logical_id] = dynamodb.TableV2(
                self,
                table.logical_id,
                partition_key=_attribute(table, table.partition_key),
                sort_key=_attribute(table, table.sort_key) if table.sort_key else None,
                global_secondary_indexes=[_index(table, index) for index in table.indexes] or None,
                time_to_live_attribute=table.ttl_attribute,
                billing=dynamodb.Billing.on_demand(),
                point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                    point_in_time_recovery_enabled=True
                ),
                encryption=dynamodb.TableEncryptionV2.aws_managed_key(),
                removal_policy=RemovalPolicy.RETAIN,
            )

    def __getitem__(self, logical_id: str) -> dynamodb.TableV2:
        return self.by_logical_id[logical_id]
