"""cdk-nag acknowledgements: the one way this project suppresses a finding.

cdk-nag 3 reads CDK's native `Validations.of(construct).acknowledge(...)`. Each acknowledgement here
names one finding (for IAM5, the exact `Resource::...` or `Action::...` it is about) and says why
it is acceptable; an empty reason is refused at synth.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Acknowledgment, Stack, Validations
from constructs import IConstruct

# The name cdk-nag's AwsSolutionsChecks plugin reports under.
NAG_PLUGIN = "AwsSolutions"


def acknowledge(scope: IConstruct, rule_id: str, reason: str) -> None:
    """Acknowledge the AwsSolutions finding `rule_id` (e.g. "AwsSolutions-IAM4" or
    "AwsSolutions-IAM5[Resource::*]") on `scope` and everything below it."""
    if not reason.strip():
        raise ValueError(f"acknowledging {rule_id} needs a reason")
    if not rule_id.startswith("AwsSolutions-"):
        raise ValueError(f"{rule_id}: only AwsSolutions findings are acknowledged here")
    # "<plugin>::<rule>" is the id the validation report tells to acknowledge a finding with.
    Validations.of(scope).acknowledge(Acknowledgment(id=f"{NAG_PLUGIN}::{rule_id}", reason=reason))


def finding_resource(scope: IConstruct, value: str) -> str:
    """How cdk-nag names `value` (an ARN, possibly with tokens) in a finding id such as
    AwsSolutions-IAM5[Resource::...]: references flattened to <LogicalId.Attr> or <Ref>."""
    return _flatten(Stack.of(scope).resolve(value))


def _flatten(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and len(value) == 1:
        ((function, argument),) = value.items()
        if function == "Ref":
            return f"<{argument}>"
        if function == "Fn::GetAtt":
            return f"<{argument[0]}.{argument[1]}>"
        if function == "Fn::Join":
            separator, parts = argument
            return str(separator).join(_flatten(part) for part in parts)
    raise ValueError(f"cannot name {value!r} the way cdk-nag does")
