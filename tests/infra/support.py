"""Helpers of the infrastructure tests: the CDK context `make synth` uses, the sources to build
from, and the synthesized stack's record.

When the repository's Lambda entry points (functions/*.py) or ASL files (statemachines/*.asl.json)
are not all present, the stack is built from placeholders written to a temporary directory;
nothing is ever written into the repository.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aws_cdk.assertions import Template

from spotline import resources as r
from stacks.spotline_stack import REPO_ROOT, SpotlineStack


def cdk_context() -> dict[str, Any]:
    """The context `cdk synth` sees offline: cdk.json's. No lookup is committed (cdk.context.json
    is a deployer's own cache): the stack is account-agnostic, its AZs resolved at deploy time."""
    context: dict[str, Any] = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]
    return context


def _placeholder_asl(machine: r.StateMachine) -> str:
    states: dict[str, Any] = {}
    names = sorted(machine.substitutions)
    for i, name in enumerate(names):
        state: dict[str, Any] = {
            "Type": "Task",
            "Resource": "arn:aws:states:::lambda:invoke",
            "Parameters": {"FunctionName": f"${{{name}}}", "Payload.$": "$"},
        }
        if i + 1 < len(names):
            state["Next"] = names[i + 1]
        else:
            state["End"] = True
        states[name] = state
    return json.dumps(
        {"Comment": "placeholder for the infrastructure tests", "StartAt": names[0], "States": states}
    )


def source_dirs(tmp: Path) -> tuple[Path, Path, bool]:
    """(functions_dir, statemachines_dir, real): the repository's when complete, else placeholders."""
    functions_dir = REPO_ROOT / "functions"
    statemachines_dir = REPO_ROOT / "statemachines"
    real = all((functions_dir / f"{f.module}.py").is_file() for f in r.FUNCTIONS) and all(
        (statemachines_dir / m.file).is_file() for m in r.STATE_MACHINES
    )
    if real:
        return functions_dir, statemachines_dir, True
    functions_dir = tmp / "functions"
    statemachines_dir = tmp / "statemachines"
    functions_dir.mkdir(parents=True)
    statemachines_dir.mkdir(parents=True)
    for function in r.FUNCTIONS:
        (functions_dir / f"{function.module}.py").write_text(
            "def handler(event, context):\n    return None\n"
        )
    for machine in r.STATE_MACHINES:
        (statemachines_dir / machine.file).write_text(_placeholder_asl(machine))
    return functions_dir, statemachines_dir, False


@dataclass
class Synthesized:
    stack: SpotlineStack
    template: Template
    # The synthesized template as plain JSON.
    json: dict[str, Any]
    # The exception synth raised (cdk-nag failing the validation), if any.
    synth_error: Exception | None
    validation_report: dict[str, Any] | None
    real_sources: bool
    outdir: Path

    def logical_id(self, construct: Any) -> str:
        child = construct.node.default_child if hasattr(construct, "node") else construct
        return str(self.stack.get_logical_id(child))

    def resources(self, kind: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.json["Resources"].items() if v["Type"] == kind}
