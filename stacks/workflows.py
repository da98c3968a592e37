"""Step Functions Standard workflows from `statemachines/<file>`, one per `resources.STATE_MACHINES`.

Each ${Name} in an ASL file is substituted with the ARN of the function that
`StateMachine.substitutions` names. The definition is inlined (read at synth, validated as JSON,
its placeholders checked against the declared substitutions) rather than uploaded as an S3 asset:
the template then carries the whole workflow, and emulators that do not support
`DefinitionS3Location` deploy it as-is.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path

from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from spotline import resources as r
from stacks.nag import acknowledge, finding_resource
from stacks.observability import EncryptedLogs

_PLACEHOLDER = re.compile(r"\$\{([A-Za-z0-9_]+)\}")


def read_definition(path: Path, machine: r.StateMachine) -> str:
    """The ASL text of `machine`, after checking that it parses and that its placeholders are
    exactly the declared substitutions."""
    if not path.is_file():
        raise FileNotFoundError(f"state machine '{machine.name}': {path} not found")
    text = path.read_text()
    try:
        json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"state machine '{machine.name}': {path} is not valid JSON: {err}") from err
    used = set(_PLACEHOLDER.findall(text))
    declared = set(machine.substitutions)
    if used - declared:
        raise ValueError(
            f"state machine '{machine.name}': {path} uses undeclared ${{...}} {sorted(used - declared)}"
        )
    if declared - used:
        raise ValueError(f"state machine '{machine.name}': {path} never uses {sorted(declared - used)}")
    return text


class Workflows(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        statemachines_dir: Path,
        functions: Mapping[str, lambda_.IFunction],
        names: Mapping[str, str],
        logs: EncryptedLogs,
    ) -> None:
        super().__init__(scope, construct_id)
        self.state_machines: dict[str, sfn.StateMachine] = {}
        for machine in r.STATE_MACHINES:
            text = read_definition(statemachines_dir / machine.file, machine)
            invoked = {name: functions[fn] for name, fn in machine.substitutions.items()}
            role = iam.Role(
                self,
                f"{machine.name}-role",
                assumed_by=iam.ServicePrincipal("states.amazonaws.com"),
                description=f"Spotline {machine.name} workflow: invokes only its task functions",
            )
            # The workflows invoke published versions (below), and an execution started before a
            # deploy keeps invoking the versions it started with: any version of these functions.
            versions = sorted({f"{fn.function_arn}:*" for fn in invoked.values()})
            role.add_to_policy(iam.PolicyStatement(actions=["lambda:InvokeFunction"], resources=versions))
            for resource in versions:
                acknowledge(
                    role,
                    f"AwsSolutions-IAM5[Resource::{finding_resource(role, resource)}]",
                    "Any published version of the workflow's own task functions: an execution that "
                    "started before a deploy keeps invoking the versions it started with.",
                )
            state_machine = sfn.StateMachine(
                self,
                machine.name,
                # Named, so that functions can be told its ARN without a reference to it (the
                # workflow invokes functions that also read that ARN: a reference would be a cycle).
                state_machine_name=names[machine.name],
                state_machine_type=(
                    sfn.StateMachineType.EXPRESS if machine.express else sfn.StateMachineType.STANDARD
                ),
                definition_body=sfn.DefinitionBody.from_string(text),
                # Each task invokes the function version published by this deploy: Step Functions
                # runs an execution on the definition it started with, so a workflow in flight
                # keeps its code through a deploy (docs/upgrade-and-teardown.md).
                definition_substitutions={
                    name: _current_version(fn).function_arn for name, fn in invoked.items()
                },
                role=role,
                # Every event, without states' input and output: the preempt workflow's carry
                # the checkpoint request's task token, which would let a log reader answer it.
                logs=sfn.LogOptions(
                    destination=logs.log_group(self, f"{machine.name}-logs"),
                    level=sfn.LogLevel.ALL,
                    include_execution_data=False,
                ),
                tracing_enabled=True,
            )
            acknowledge(
                role,
                "AwsSolutions-IAM5[Resource::*]",
                "Step Functions log delivery (logs:CreateLogDelivery and related) and X-Ray tracing "
                "support no resource-level permissions; CDK adds them for logging and tracing.",
            )
            self.state_machines[machine.name] = state_machine

    def __getitem__(self, name: str) -> sfn.StateMachine:
        return self.state_machines[name]


def _current_version(function: lambda_.IFunction) -> lambda_.IVersion:
    """The version this deploy publishes of `function` (kept after later deploys)."""
    if not isinstance(function, lambda_.Function):
        raise TypeError(f"{function} is not a Function of this stack: no version to publish")
    return function.current_version
