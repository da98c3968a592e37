"""What the LocalStack tier runs on: LocalStack started as a host process (its own Python 3.13
environment, `scripts/localstack.sh`; no Docker), moto's server beside it for what LocalStack's
free edition cannot run here, and a task worker that stands in for Lambda.

Stand-ins (LocalStack's DynamoDB needs Java and the DynamoDB Local jar, its Lambda needs Docker,
its Batch is a paid feature):
- DynamoDB: moto's server (`spotline.local.moto_server.SerializedMotoServer`), the local
  runtime's; the control plane's DynamoDB client points at it, every other client at LocalStack.
- Lambda: `TaskWorker`. Each `lambda:invoke` task of the ASL is sent to an SQS queue instead
  (`sqs:sendMessage.waitForTaskToken`, with the same Parameters as its MessageBody); the worker
  runs the real handler in this process and answers with SendTaskSuccess (`{"Payload": result}`,
  what lambda:invoke returns) or SendTaskFailure (the exception's class name as the error, as
  Lambda reports an unhandled error). A `lambda:invoke.waitForTaskToken` task's payload already
  carries its token, so the worker only reports a handler's failure and the real
  Checkpoint Completed handler answers it. Everything else in the ASL (paths, Choice, Retry,
  Catch, ResultSelector, TimeoutSecondsPath) runs unchanged on LocalStack's interpreter.
- Batch: the integration tier's RecordingLauncher.
"""

from __future__ import annotations

import copy
import json
import os
import socket
import subprocess
import threading
import time
import traceback
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from spotline import resources
from spotline.local.lambdas import LambdaContextStub, function_name_of
from spotline.local.provision import render_definition

REGION = "us-east-1"
# What the tier asks LocalStack to start (all of it runs in its free edition, without Docker).
SERVICES = "sqs,events,s3,stepfunctions,sts,iam,logs"
LAMBDA_INVOKE = "arn:aws:states:::lambda:invoke"
LAMBDA_CALLBACK = "arn:aws:states:::lambda:invoke.waitForTaskToken"
SQS_CALLBACK = "arn:aws:states:::sqs:sendMessage.waitForTaskToken"
# The MessageBody field that carries the task token of a plain lambda:invoke task.
TOKEN_FIELD = "spotline_task_token"

Handler = Callable[[dict[str, Any], Any], Any]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalStack:
    """LocalStack as a host process: `python -m localstack.runtime.main` of the tier's
    environment, on a free loopback port, with its files under `root`."""

    def __init__(self, python: str, root: Path) -> None:
        self.python = python
        self.root = root
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = root / "localstack.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 180.0) -> None:
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(self.root),
            "GATEWAY_LISTEN": f"127.0.0.1:{self.port}",
            "SERVICES": SERVICES,
            "EAGER_SERVICE_LOADING": "1",
            # Host mode: its files here, not /var/lib/localstack (it takes this machine for a
            # container when it finds a container runtime's marks).
            "OVERRIDE_IN_DOCKER": "0",
            "FILESYSTEM_ROOT": str(self.root / "filesystem"),
            # Nothing outside this machine: no DNS server, no certificate download, no analytics.
            "DNS_ADDRESS": "0",
            "SKIP_SSL_CERT_DOWNLOAD": "1",
            "DISABLE_EVENTS": "1",
        }
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [self.python, "-m", "localstack.runtime.main"],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.root,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout_s
        wanted = set(SERVICES.split(","))
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"LocalStack exited with {self.process.returncode}:\n{self.tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/_localstack/health", timeout=2) as response:
                    services = json.loads(response.read())["services"]
                if all(services.get(s) in ("available", "running") for s in wanted):
                    return
            except OSError:
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"LocalStack was not ready in {timeout_s:.0f}s:\n{self.tail()}")

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    def client(self, service: str) -> Any:
        return boto3.client(  # type: ignore[call-overload]
            service,
            endpoint_url=self.url,
            region_name=REGION,
            aws_access_key_id="test",
            aws_secret_access_key="test",
            config=Config(retries={"mode": "standard", "max_attempts": 3}),
        )


# --- the workflows on LocalStack's interpreter ---------------------------------------------------


def localstack_definition(
    machine: resources.StateMachine, function_arns: Mapping[str, str], queue_url: str
) -> str:
    """The ASL of `machine` (statemachines/, rendered as the stack renders it) with each Lambda
    task sent to `queue_url` for the TaskWorker: only Resource and the Parameters' wrapping change."""
    definition = json.loads(render_definition(machine, function_arns))
    for state in _task_states(definition):
        resource = state["Resource"]
        if resource not in (LAMBDA_INVOKE, LAMBDA_CALLBACK):
            continue
        parameters = state["Parameters"]
        body: dict[str, Any] = {
            "function": parameters["FunctionName"],
            "callback": resource == LAMBDA_CALLBACK,
        }
        body["Payload"] = parameters["Payload"]
        if resource == LAMBDA_INVOKE:
            body[f"{TOKEN_FIELD}.$"] = "$$.Task.Token"
        state["Resource"] = SQS_CALLBACK
        state["Parameters"] = {"QueueUrl": queue_url, "MessageBody": body}
    return json.dumps(definition)


def _task_states(definition: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for state in definition["States"].values():
        if state["Type"] == "Task":
            yield state
        for branch in state.get("Branches", []):
            yield from _task_states(branch)
        if "Iterator" in state:
            yield from _task_states(state["Iterator"])


def lambda_error(error: BaseException) -> tuple[str, str]:
    """(error, cause) of a task whose function raised `error`, as Lambda reports an unhandled one."""
    cause = {
        "errorType": type(error).__name__,
        "errorMessage": str(error),
        "stackTrace": traceback.format_exception(error)[-5:],
    }
    return type(error).__name__, json.dumps(cause)


class TaskWorker:
    """Runs the Lambda tasks the workflows send to `queue_url` with the real handlers, one at a
    time (one Lambda instance), and answers Step Functions on LocalStack."""

    def __init__(self, sqs: Any, stepfunctions: Any, queue_url: str, handlers: Mapping[str, Handler]) -> None:
        self.sqs = sqs
        self.stepfunctions = stepfunctions
        self.queue_url = queue_url
        self.handlers = dict(handlers)
        self.invocations: list[tuple[str, dict[str, Any]]] = []
        self.errors: list[BaseException] = []
        # Answers Step Functions no longer wanted (the execution ended or the token was answered).
        self.late_answers: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="localstack-task-worker", daemon=True)

    def start(self) -> TaskWorker:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                messages = self.sqs.receive_message(
                    QueueUrl=self.queue_url, MaxNumberOfMessages=1, WaitTimeSeconds=1
                ).get("Messages", [])
                for message in messages:
                    self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])
                    self.handle(json.loads(message["Body"]))
            except Exception as error:  # the tests assert that the worker saw none
                self.errors.append(error)
                time.sleep(0.2)

    def handle(self, body: dict[str, Any]) -> None:
        name = function_name_of(str(body["function"]))
        payload = copy.deepcopy(body["Payload"])
        self.invocations.append((name, payload))
        token = payload.get("taskToken") if body["callback"] else body[TOKEN_FIELD]
        try:
            try:
                result = self.handlers[name](payload, LambdaContextStub.for_function(name, REGION))
            except Exception as error:
                failure, cause = lambda_error(error)
                self.stepfunctions.send_task_failure(taskToken=token, error=failure, cause=cause)
                return
            if not body["callback"]:
                output = {"StatusCode": 200, "ExecutedVersion": "$LATEST", "Payload": result}
                self.stepfunctions.send_task_success(taskToken=token, output=json.dumps(output))
        except self.stepfunctions.exceptions.TaskTimedOut as late:
            self.late_answers.append(str(late))
        except self.stepfunctions.exceptions.InvalidToken as late:
            self.late_answers.append(str(late))


@contextmanager
def task_worker(
    sqs: Any, stepfunctions: Any, queue_url: str, handlers: Mapping[str, Handler]
) -> Iterator[TaskWorker]:
    worker = TaskWorker(sqs, stepfunctions, queue_url, handlers).start()
    try:
        yield worker
    finally:
        worker.stop()
