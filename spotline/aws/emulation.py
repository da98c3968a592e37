"""Running Spotline's handlers and workflows on moto, in-process (tests) or behind moto's
ThreadedMotoServer (the local runtime).

moto executes ASL when `execute_state_machine` is on, but without Docker it does not run a
Lambda function's code (its invoke echoes the input). `LambdaTaskDispatcher` patches the one
function moto's Step Functions interpreter calls for `arn:aws:states:::lambda:invoke` (and its
`.waitForTaskToken` form) so the task runs the in-repo handler, with Lambda's error semantics:
an exception becomes FunctionError "Unhandled" with `errorType` = the exception's class name,
which is what the ASL's Retry and Catch match on AWS.

Pinned to moto 5.2.5: the patched names are private (see `_PATCH_TARGETS`); `install` fails
loudly if they move.
"""

from __future__ import annotations

import importlib
import json
import threading
import traceback
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spotline.aws import resources

ACCOUNT_ID = "123456789012"  # moto's default account
DEFAULT_REGION = "us-east-1"
MOTO_VERSION = "5.2.5"
STATEMACHINES_DIR = Path(__file__).resolve().parents[2] / "statemachines"

LambdaHandler = Callable[[dict[str, Any], Any], Any]

_LAMBDA_EVAL = "moto.stepfunctions.parser.asl.component.state.exec.state_task.lambda_eval_utils"
# (module, attribute): the functions moto's interpreter calls to invoke Lambda.
_PATCH_TARGETS = ((_LAMBDA_EVAL, "_invoke_lambda_function"), (_LAMBDA_EVAL, "exec_lambda_function"))


@dataclass
class LambdaContextStub:
    """The attributes of a Lambda context that Powertools reads."""

    function_name: str = "spotline-local"
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = f"arn:aws:lambda:{DEFAULT_REGION}:{ACCOUNT_ID}:function:spotline-local"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    function_version: str = "$LATEST"
    log_group_name: str = "/aws/lambda/spotline-local"
    log_stream_name: str = "local"
    timeout_ms: int = 60_000

    def get_remaining_time_in_millis(self) -> int:
        return self.timeout_ms

    @classmethod
    def for_function(cls, name: str, region: str = DEFAULT_REGION) -> LambdaContextStub:
        return cls(function_name=name, invoked_function_arn=function_arn(name, region))


def function_arn(name: str, region: str = DEFAULT_REGION, account: str = ACCOUNT_ID) -> str:
    return f"arn:aws:lambda:{region}:{account}:function:{name}"


def function_name_of(name_or_arn: str) -> str:
    """`arn:aws:lambda:...:function:<name>[:qualifier]` or a bare name -> the name."""
    if name_or_arn.startswith("arn:"):
        parts = name_or_arn.split(":")
        return parts[6] if len(parts) > 6 else name_or_arn
    return name_or_arn


def import_handler(function: resources.Function) -> LambdaHandler:
    """`functions.<module>.handler`, as the Lambda runtime imports it (the repository root must
    be on sys.path)."""
    handler: LambdaHandler = importlib.import_module(f"functions.{function.module}").handler
    return handler


# --- dispatching Lambda tasks ---------------------------------------------------------------


class LambdaTaskDispatcher:
    """Routes moto's Lambda invocations (from Step Functions tasks) to Python handlers, by
    function name or ARN. A function name absent from the registry fails the task with
    `Lambda.ResourceNotFoundException`, as AWS would."""

    def __init__(self, handlers: Mapping[str, LambdaHandler] | None = None) -> None:
        self._handlers: dict[str, LambdaHandler] = {}
        self._originals: list[tuple[Any, str, Any]] = []
        self._lock = threading.Lock()
        self.invocations: list[tuple[str, dict[str, Any]]] = []
        for name, handler in (handlers or {}).items():
            self.register(name, handler)

    def register(self, name_or_arn: str, handler: LambdaHandler) -> None:
        self._handlers[function_name_of(name_or_arn)] = handler

    def invoke(self, name_or_arn: str, payload: Any) -> dict[str, Any]:
        """Run the handler and answer like Lambda's Invoke (StatusCode, Payload, FunctionError)."""
        name = function_name_of(name_or_arn)
        handler = self._handlers.get(name)
        if handler is None:
            return {
                "StatusCode": 404,
                "FunctionError": "Unhandled",
                "Payload": {
                    "errorType": "Lambda.ResourceNotFoundException",
                    "errorMessage": f"no function {name}",
                },
            }
        event = _decode(payload)
        with self._lock:
            self.invocations.append((name, event if isinstance(event, dict) else {"payload": event}))
        try:
            result = handler(event, LambdaContextStub.for_function(name))
        except Exception as error:  # Lambda turns any exception into a function error
            return {
                "StatusCode": 200,
                "FunctionError": "Unhandled",
                "ExecutedVersion": "$LATEST",
                "Payload": {
                    "errorType": type(error).__name__,
                    "errorMessage": str(error),
                    "stackTrace": traceback.format_exception(error)[-5:],
                },
            }
        # What Lambda returns is JSON: round-trip it so a handler returning non-JSON fails here.
        return {"StatusCode": 200, "ExecutedVersion": "$LATEST", "Payload": json.loads(json.dumps(result))}

    # The replacements of moto's functions, with their signatures.
    def _invoke_lambda_function(self, parameters: dict[str, Any], region: str, state_credentials: Any) -> Any:
        return self.invoke(parameters["FunctionName"], parameters.get("Payload"))

    def _exec_lambda_function(
        self, env: Any, parameters: dict[str, Any], region: str, account: str, credentials: Any
    ) -> None:
        from moto.stepfunctions.parser.asl.component.state.exec.state_task.lambda_eval_utils import (
            LambdaFunctionErrorException,
        )

        response = self.invoke(parameters["FunctionName"], parameters.get("Payload"))
        if response.get("FunctionError"):
            raise LambdaFunctionErrorException(
                response["FunctionError"], json.dumps(response["Payload"], separators=(",", ":"))
            )
        env.stack.append(response)

    def install(self) -> LambdaTaskDispatcher:
        """Patch moto (process-wide) until `uninstall`."""
        import moto

        if moto.__version__ != MOTO_VERSION:
            raise RuntimeError(
                f"spotline.aws.emulation patches moto {MOTO_VERSION}; found {moto.__version__}"
            )
        replacements = {
            "_invoke_lambda_function": self._invoke_lambda_function,
            "exec_lambda_function": self._exec_lambda_function,
        }
        for module_name, attribute in _PATCH_TARGETS:
            module = importlib.import_module(module_name)
            if not hasattr(module, attribute):
                raise RuntimeError(f"moto changed: {module_name}.{attribute} is gone")
            self._originals.append((module, attribute, getattr(module, attribute)))
            setattr(module, attribute, replacements[attribute])
        return self

    def uninstall(self) -> None:
        while self._originals:
            module, attribute, original = self._originals.pop()
            setattr(module, attribute, original)


def _decode(payload: Any) -> Any:
    if payload is None:
        return {}
    if isinstance(payload, (bytes, bytearray)):
        payload = payload.decode("utf-8")
    if isinstance(payload, str):
        try:
            return json.loads(payload)
        except json.JSONDecodeError:
            return payload
    return payload


@contextmanager
def dispatch_lambda_tasks(handlers: Mapping[str, LambdaHandler]) -> Iterator[LambdaTaskDispatcher]:
    """`with dispatch_lambda_tasks({"workflow_tasks": handler}): ...` runs Step Functions'
    Lambda tasks in-process for the duration of the block."""
    dispatcher = LambdaTaskDispatcher(handlers).install()
    try:
        yield dispatcher
    finally:
        dispatcher.uninstall()


def enable_state_machine_execution() -> None:
    """Make moto (in-process or ThreadedMotoServer in this process) execute ASL definitions."""
    from moto.core.config import default_user_config

    default_user_config["stepfunctions"]["execute_state_machine"] = True


# --- creating the resources -----------------------------------------------------------------


def table_definition(table: resources.Table, name: str) -> dict[str, Any]:
    """CreateTable arguments for `table` (on-demand billing, indexes projecting all)."""
    keys = {table.partition_key, *(k for k in [table.sort_key] if k)}
    for index in table.indexes:
        keys |= {index.partition_key, *(k for k in [index.sort_key] if k)}

    def schema(partition: str, sort: str | None) -> list[dict[str, str]]:
        return [{"AttributeName": partition, "KeyType": "HASH"}] + (
            [{"AttributeName": sort, "KeyType": "RANGE"}] if sort else []
        )

    definition: dict[str, Any] = {
        "TableName": name,
        "BillingMode": "PAY_PER_REQUEST",
        "KeySchema": schema(table.partition_key, table.sort_key),
        "AttributeDefinitions": [
            {"AttributeName": k, "AttributeType": "N" if k in table.number_keys else "S"}
            for k in sorted(keys)
        ],
    }
    if table.indexes:
        definition["GlobalSecondaryIndexes"] = [
            {
                "IndexName": index.name,
                "KeySchema": schema(index.partition_key, index.sort_key),
                "Projection": {"ProjectionType": "ALL"}
                if index.projection is None
                else {"ProjectionType": "INCLUDE", "NonKeyAttributes": list(index.projection)},
            }
            for index in table.indexes
        ]
    return definition


def create_tables(dynamodb: Any, prefix: str = "spotline") -> dict[str, str]:
    """Every table of resources.TABLES, named `<prefix>-<logical id>`; returns logical id -> name."""
    names: dict[str, str] = {}
    for table in resources.TABLES:
        name = f"{prefix}-{table.logical_id.lower()}"
        dynamodb.create_table(**table_definition(table, name))
        names[table.logical_id] = name
    return names


def render_definition(
    machine: resources.StateMachine, function_arns: Mapping[str, str], directory: Path = STATEMACHINES_DIR
) -> str:
    """The ASL of `machine` with each ${Substitution} replaced by its function's ARN."""
    text = (directory / machine.file).read_text()
    for placeholder, function in machine.substitutions.items():
        text = text.replace("${" + placeholder + "}", function_arns[function])
    return text


def create_state_machines(
    stepfunctions: Any,
    function_arns: Mapping[str, str] | None = None,
    *,
    prefix: str = "spotline",
    role_arn: str = f"arn:aws:iam::{ACCOUNT_ID}:role/spotline-workflows",
    directory: Path = STATEMACHINES_DIR,
) -> dict[str, str]:
    """Every workflow of resources.STATE_MACHINES (Standard); returns name -> ARN. Function
    ARNs default to `function_arn(<function name>)` in the client's region."""
    region = stepfunctions.meta.region_name
    arns = dict(function_arns or {f.name: function_arn(f.name, region) for f in resources.FUNCTIONS})
    created: dict[str, str] = {}
    for machine in resources.STATE_MACHINES:
        response = stepfunctions.create_state_machine(
            name=f"{prefix}-{machine.name}",
            definition=render_definition(machine, arns, directory),
            roleArn=role_arn,
            type="STANDARD",
        )
        created[machine.name] = response["stateMachineArn"]
    return created


def environment(
    table_names: Mapping[str, str],
    *,
    event_bus: str,
    state_machines: Mapping[str, str],
    config: Mapping[str, Any],
    scheduler_queue_url: str | None = None,
    checkpoint_bucket: str | None = None,
) -> dict[str, str]:
    """The functions' environment variables, as the stack sets them."""
    env = {table.env: table_names[table.logical_id] for table in resources.TABLES}
    env[resources.ENV_EVENT_BUS] = event_bus
    for machine in resources.STATE_MACHINES:
        if machine.name in state_machines:
            env[machine.env] = state_machines[machine.name]
    env[resources.ENV_CONFIG] = json.dumps(dict(config))
    if scheduler_queue_url:
        env[resources.ENV_SCHEDULER_QUEUE_URL] = scheduler_queue_url
    if checkpoint_bucket:
        env[resources.ENV_CHECKPOINT_BUCKET] = checkpoint_bucket
    return env
