"""CDK entry point: `make synth` (scripts/synth.sh) runs this through the CDK CLI.

The deployment's settings come from the CDK context (cdk.json); AwsSolutions checks (cdk-nag 3)
run during synth, and any finding that is not acknowledged in `stacks/` fails it.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import App, Environment, Validations
from cdk_nag import AwsSolutionsChecks

from stacks.config import CONTEXT_KEYS, parse_context
from stacks.spotline_stack import SpotlineStack

STACK_NAME_PREFIX = "Spotline"


def stack_name(stage: str) -> str:
    """The stack's name for a stage (`Spotline-dev`, `Spotline-prod`): two stages deploy side by
    side in one account instead of one replacing the other's resources."""
    return f"{STACK_NAME_PREFIX}-{stage}"


def build_app(app: App, **stack_options: Any) -> SpotlineStack:
    """Add the Spotline stack and the AwsSolutions checks to `app`; `stack_options` go to
    SpotlineStack (tests point `functions_dir`, `statemachines_dir` and `build_dir` elsewhere)."""
    context = {key: app.node.try_get_context(key) for key in CONTEXT_KEYS}
    config = parse_context({k: v for k, v in context.items() if v is not None})
    stack = SpotlineStack(
        app,
        stack_name(config.stage),
        config=config,
        env=Environment(account=config.account, region=config.region),
        description="Spotline: priority-based, checkpoint-aware scheduling of training jobs on GPUs",
        **stack_options,
    )
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return stack


if __name__ == "__main__":
    application = App()
    build_app(application)
    application.synth()
