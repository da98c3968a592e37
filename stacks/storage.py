"""The checkpoint bucket and the bucket that receives its server access logs."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_s3 as s3
from constructs import Construct

from stacks.nag import acknowledge

# Object key prefix of every checkpoint: checkpoints/<team>/<job_id>/ (spotline.resources).
CHECKPOINT_PREFIX = "checkpoints/"


class CheckpointStorage(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        noncurrent_version_days: int,
        access_log_expiration_days: int,
    ) -> None:
        super().__init__(scope, construct_id)
        # Server access logs only support SSE-S3 on the destination bucket.
        self.access_logs = s3.Bucket(
            self,
            "AccessLogs",
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="expire-access-logs", expiration=Duration.days(access_log_expiration_days)
                )
            ],
            removal_policy=RemovalPolicy.RETAIN,
        )
        acknowledge(
            self.access_logs,
            "AwsSolutions-S1",
            "This bucket is the server-access-log destination of the checkpoint bucket; logging it "
            "into itself would loop and logging it elsewhere only moves the problem.",
        )
        # Checkpoints are large and written often: SSE-S3 avoids a KMS request per part, and
        # versioning protects the last good checkpoint from a torn or mistaken overwrite.
        self.checkpoints = s3.Bucket(
            self,
            "Checkpoints",
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            versioned=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            server_access_logs_bucket=self.access_logs,
            server_access_logs_prefix="checkpoints-bucket/",
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="expire-superseded-checkpoints",
                    noncurrent_version_expiration=Duration.days(noncurrent_version_days),
                    expired_object_delete_marker=True,
                ),
                s3.LifecycleRule(
                    id="abort-incomplete-uploads",
                    abort_incomplete_multipart_upload_after=Duration.days(1),
                ),
            ],
            removal_policy=RemovalPolicy.RETAIN,
        )
