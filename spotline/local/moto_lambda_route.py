"""The one patch on moto: Step Functions' Lambda tasks run Spotline's Python handlers.

moto executes ASL when `execute_state_machine` is on, but without Docker it cannot run a Lambda
function's code (its Invoke echoes the input). Its Step Functions interpreter calls one module's
two functions for `arn:aws:states:::lambda:invoke` (and its `.waitForTaskToken` form); while a
`LambdaTaskDispatcher` is installed, both call the in-repo handler instead, with Lambda's error
semantics: an exception becomes FunctionError "Unhandled" with `errorType` = the exception's
class name, which is what the ASL's Retry and Catch match on AWS.

The patched names are private to moto, so this module is pinned to one moto version (pyproject
pins the same): `install` refuses any other, saying what to do, rather than patch names that may
have moved or changed meaning.
"""

from __future__ import annotations

import importlib
import json
import threading
import traceback
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from spotline.local.lambdas import LambdaContextStub, function_name_of

MOTO_VERSION = "5.2.5"
_LAMBDA_EVAL = "moto.stepfunctions.parser.asl.component.state.exec.state_task.lambda_eval_utils"
# (module, attribute): the functions moto's interpreter calls to invoke Lambda.
_PATCH_TARGETS = ((_LAMBDA_EVAL, "_invoke_lambda_function"), (_LAMBDA_EVAL, "exec_lambda_function"))

LambdaHandler = Callable[[dict[str, Any], Any], Any]


class UnsupportedMotoVersion(RuntimeError):
    """The installed moto is not the version this route was written against."""


def require_moto_version(found: str | None = None) -> None:
    """Refuse any moto but MOTO_VERSION (`found`: the installed version, read if not given)."""
    if found is None:
        import moto

        found = str(moto.__version__)
    if found != MOTO_VERSION:
        raise UnsupportedMotoVersion(
            f"spotline's local runtime routes Step Functions' Lambda tasks through moto "
            f"{MOTO_VERSION}'s private interpreter functions, and moto {found} is installed: "
            f"install moto=={MOTO_VERSION} (as pyproject.toml pins), or update "
            f"spotline/local/moto_lambda_route.py for moto {found} and its pin together"
        )


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
        error_class = importlib.import_module(_LAMBDA_EVAL).LambdaFunctionErrorException
        response = self.invoke(parameters["FunctionName"], parameters.get("Payload"))
        if response.get("FunctionError"):
            raise error_class(
                response["FunctionError"], json.dumps(response["Payload"], separators=(",", ":"))
            )
        env.stack.append(response)

    def install(self) -> LambdaTaskDispatcher:
        """Patch moto (process-wide) until `uninstall`."""
        require_moto_version()
        replacements = {
            "_invoke_lambda_function": self._invoke_lambda_function,
            "exec_lambda_function": self._exec_lambda_function,
        }
        for module_name, attribute in _PATCH_TARGETS:
            module = importlib.import_module(module_name)
            if not hasattr(module, attribute):
                raise UnsupportedMotoVersion(f"moto changed: {module_name}.{attribute} is gone")
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
