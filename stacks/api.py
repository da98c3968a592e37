"""The HTTP API: API Gateway REST, a Lambda proxy to the api function, IAM (SigV4) on every method.

The caller's team comes from the IAM identity API Gateway authenticated (requestContext.identity),
never from the body; the api function validates bodies against its pydantic models, and API
Gateway's validator checks what it can before a request reaches the function.
"""

from __future__ import annotations

from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from stacks.nag import acknowledge
from stacks.observability import EncryptedLogs


class HttpApi(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        handler: lambda_.IFunction,
        logs: EncryptedLogs,
        stage: str,
        rate_limit: float,
        burst_limit: int,
    ) -> None:
        super().__init__(scope, construct_id)
        access_logs = logs.log_group(self, "AccessLogs")
        self.rest_api = apigw.RestApi(
            self,
            "Api",
            description="Spotline job API",
            endpoint_types=[apigw.EndpointType.REGIONAL],
            cloud_watch_role=True,
            deploy_options=apigw.StageOptions(
                stage_name=stage,
                access_log_destination=apigw.LogGroupLogDestination(access_logs),
                access_log_format=apigw.AccessLogFormat.json_with_standard_fields(
                    caller=True,
                    http_method=True,
                    ip=True,
                    protocol=True,
                    request_time=True,
                    resource_path=True,
                    response_length=True,
                    status=True,
                    user=True,
                ),
                logging_level=apigw.MethodLoggingLevel.ERROR,
                metrics_enabled=True,
                tracing_enabled=True,
                throttling_rate_limit=rate_limit,
                throttling_burst_limit=burst_limit,
            ),
        )
        validator = self.rest_api.add_request_validator(
            "Validator", validate_request_body=True, validate_request_parameters=True
        )
        integration = apigw.LambdaIntegration(handler, proxy=True, allow_test_invoke=False)
        proxy = self.rest_api.root.add_resource("{proxy+}")
        self.methods = [
            resource.add_method(
                "ANY",
                integration,
                authorization_type=apigw.AuthorizationType.IAM,
                request_validator=validator,
            )
            for resource in (self.rest_api.root, proxy)
        ]
        acknowledge(
            self.rest_api,
            "AwsSolutions-COG4",
            "Callers authenticate with IAM (SigV4): the team is derived from the IAM identity, "
            "so a Cognito user pool authorizer would be a second, unused identity system.",
        )
        acknowledge(
            self.rest_api,
            "AwsSolutions-APIG3",
            "Every method requires SigV4-signed IAM credentials and the stage is throttled; a WAF "
            "web ACL (a per-month cost) can be associated when the API is exposed beyond the org.",
        )
        acknowledge(
            self.rest_api,
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
            "AmazonAPIGatewayPushToCloudWatchLogs]",
            "API Gateway's account-level CloudWatch role (needed for execution logging) uses the "
            "AWS-managed policy that API Gateway documents for it.",
        )
