"""Running Spotline's handlers and workflows on moto, in-process (tests) or behind moto's
ThreadedMotoServer (the local runtime).

moto executes ASL when `execute_state_machine` is on, but without Docker it does not run a
Lambda function's code (its invoke echoes the input). `LambdaTaskDispatcher` patches the one
function moto's Step Functions interpreter calls for `arn:aws:states:::lambda:invoke` (and its
`.waitForTaskToken` form) so the task runs the in-repo handler, with Lambda's error semantics:
an exception becomes FunctionError "Unhandled" with `errorType` = the exception's class name,
which is what the ASL's Retry and Catch match on AWS.

`SerializedMotoServer` is moto's server answering one request at a time. moto's backends are
not safe under concurrent requests: a failed TransactWriteItems rolls back by restoring a
snapshot of whole tables, wiping other requests' writes made meanwhile, and iterations raise
"dictionary changed size". One lock around every request makes the emulation linearizable, as
DynamoDB is per item; `install_item_transactions` makes a transaction snapshot only the items
it touches, and `install_keyed_queries` makes a query look only at the items of its key,
so neither costs the size of the table; `install_cheap_lookups` routes a request without
listing moto's package and reads a queue attribute without counting the queue. The server
keeps connections alive (werkzeug's own loop closes each).

Pinned to moto 5.2.5: the patched names are private (see `_PATCH_TARGETS`); `install` fails
loudly if they move.
"""

from __future__ import annotations

import base64
import collections
import copy
import functools
import importlib
import io
import json
import socket
import threading
import traceback
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spotline import resources

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


_INVOCATION_LOCKS: dict[str, threading.RLock] = {}


def import_handler(function: resources.Function) -> LambdaHandler:
    """`functions.<module>.handler`, as the Lambda runtime imports it (the repository root must
    be on sys.path), invoked one event at a time per function, as one Lambda instance runs:
    a handler may keep its invocation in module state (the API resolver keeps the current
    request), which concurrent threads would mix up (a job stored under another team)."""
    handler: LambdaHandler = importlib.import_module(f"functions.{function.module}").handler
    lock = _INVOCATION_LOCKS.setdefault(function.module, threading.RLock())

    def invoke(event: dict[str, Any], context: Any) -> Any:
        with lock:
            return handler(event, context)

    return invoke


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
        _require_moto()
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


def _require_moto() -> None:
    import moto

    if moto.__version__ != MOTO_VERSION:
        raise RuntimeError(f"spotline.aws.emulation patches moto {MOTO_VERSION}; found {moto.__version__}")


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
    """Every workflow of resources.STATE_MACHINES (of its type); returns name -> ARN. Function
    ARNs default to `function_arn(<function name>)` in the client's region."""
    region = stepfunctions.meta.region_name
    arns = dict(function_arns or {f.name: function_arn(f.name, region) for f in resources.FUNCTIONS})
    created: dict[str, str] = {}
    for machine in resources.STATE_MACHINES:
        response = stepfunctions.create_state_machine(
            name=f"{prefix}-{machine.name}",
            definition=render_definition(machine, arns, directory),
            roleArn=role_arn,
            type="EXPRESS" if machine.express else "STANDARD",
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


# --- serving moto, one request at a time -------------------------------------------------------

# Held while moto serves a request (re-entrant: a request never waits on another request).
EMULATION_LOCK = threading.RLock()
_serving = threading.local()  # .held: this thread is serving a request under EMULATION_LOCK


def _serialized(app: Any) -> Any:
    """The WSGI app `app`, run under EMULATION_LOCK, its body produced before the lock is let go.

    The request body is read before the lock is taken (a slow client never holds it up), and
    the response goes out with its Content-Length, so the connection can serve the next request
    (keep-alive: see `SerializedMotoServer`). `bench/aws_costs.py` wraps this function to meter
    every request: keep its signature (a WSGI app in, a WSGI app out)."""

    def serve(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        stream = environ["wsgi.input"]
        length = environ.get("CONTENT_LENGTH")
        if length:
            body_in = stream.read(int(length))
        elif environ.get("wsgi.input_terminated"):  # chunked: werkzeug ends the stream
            body_in = stream.read()
        else:
            body_in = b""
        environ["wsgi.input"] = io.BytesIO(body_in)
        captured: list[Any] = []

        def capture(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            captured[:] = [status, headers, exc_info]
            return lambda data: None  # moto never writes through start_response's callable

        with EMULATION_LOCK:
            # A request served in-process from inside another one (`serve_in_process`) hands
            # the flag back as it found it.
            outer = getattr(_serving, "held", False)
            _serving.held = True
            try:
                result = app(environ, capture)
                try:
                    body = b"".join(result)
                finally:
                    close = getattr(result, "close", None)
                    if close is not None:
                        close()
            finally:
                _serving.held = outer
        status, headers, exc_info = captured
        if not any(name.lower() == "content-length" for name, _ in headers):
            headers = [*headers, ("Content-Length", str(len(body)))]
        start_response(status, headers, exc_info)
        return [body]

    return serve


class SerializedMotoServer:
    """moto's ThreadedMotoServer, but linearizable: a thread per connection, one request served
    at a time under EMULATION_LOCK. An SQS long poll waits outside the lock (`install`
    patches the queue's wait), so a poller never holds up other clients."""

    def __init__(self, ip_address: str = "127.0.0.1", port: int = 0) -> None:
        self._address = (ip_address, port)
        self._server: Any = None
        self._thread: threading.Thread | None = None
        # The open client connections (kept alive), closed by `stop`.
        self._connections: set[Any] = set()
        self._in_process = ""  # "host:port" while this process's SDK calls skip HTTP

    def start(self) -> None:
        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )
        from werkzeug.serving import make_server

        connections = self._connections

        class KeepAliveHandler(MotoRequestHandler):
            # HTTP/1.1 with keep-alive: an SDK client keeps its connection. werkzeug's own
            # `run_wsgi` closes every connection (and, after each response, reads whatever the
            # client sent next), so every call cost a TCP connection and a server thread. This
            # one writes the whole response (`_serialized` gives it with its Content-Length,
            # having read the request's body whole) and leaves the connection open.
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                connections.add(self.connection)

            def finish(self) -> None:
                connections.discard(self.connection)
                super().finish()

            def run_wsgi(self) -> None:
                answer: list[Any] = []

                def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
                    answer[:] = [status, headers]
                    return lambda data: None

                try:
                    body = b"".join(self.server.app(self.make_environ(), start_response))
                except Exception:
                    traceback.print_exc()
                    self.close_connection = True
                    self.send_error(500)
                    return
                status, headers = answer
                code, _, message = status.partition(" ")
                self.send_response(int(code), message)
                for name, value in headers:
                    self.send_header(name, value)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)
                self.wfile.flush()

        install_serialized_moto()
        app = DomainDispatcherApplication(create_backend_app)
        self._server = make_server(
            self._address[0],
            self._address[1],
            _serialized(app),
            threaded=True,
            request_handler=KeepAliveHandler,
        )
        self._thread = threading.Thread(target=self._server.serve_forever, name="moto", daemon=True)
        self._thread.start()

    def serve_in_process(self) -> None:
        """From now until `stop`, this process's SDK calls to this server skip HTTP: each is
        handed to the same serialized app, as the server would (`serve_in_process`). Other
        processes (the training jobs' agents, the CLI) still call it over HTTP."""
        host, port = self.get_host_and_port()
        self._in_process = f"{host}:{port}"
        serve_in_process(self._in_process, self._server.app)

    def get_host_and_port(self) -> tuple[str, int]:
        if self._server is None:
            raise RuntimeError("the server is not started")
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def stop(self) -> None:
        if self._in_process:
            # Calls made after the stop fail as they would over HTTP: connection refused.
            _IN_PROCESS_APPS.pop(self._in_process, None)
            self._in_process = ""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        # A kept-alive connection would otherwise go on being served after the stop.
        for connection in list(self._connections):
            with suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)


_installed: set[str] = set()


# --- the SDK calls of this process, served without HTTP ------------------------------------------

# "host:port" of a server -> its (serialized) WSGI app, for `serve_in_process`.
_IN_PROCESS_APPS: dict[str, Any] = {}


def serve_in_process(netloc: str, app: Any) -> None:
    """Serve this process's SDK requests to `http://<netloc>` by calling `app` (a WSGI app: the
    server's own, `_serialized`) in the calling thread, with the environ the server would build.

    botocore still serializes each request, signs it and parses the response; moto still parses
    it and answers under EMULATION_LOCK. What goes is the transport: the socket write and read on
    both sides, and the hand-over of the GIL to a server thread and back on every call, which is
    most of what an SDK call cost when the handlers, the workflows and moto share one process.
    A transport error cannot happen, so a call is never retried for one."""
    from botocore.httpsession import URLLib3Session

    with EMULATION_LOCK:
        _IN_PROCESS_APPS[netloc] = app
        if "in-process" in _installed:
            return
        original = URLLib3Session.send

        def send(self: Any, request: Any) -> Any:
            url = request.url
            # "http://host:port/..." (the local endpoint is plain HTTP).
            netloc_of = url[7:].partition("/")[0] if url.startswith("http://") else ""
            served = _IN_PROCESS_APPS.get(netloc_of)
            if served is None:
                return original(self, request)
            return _call_in_process(served, netloc_of, request)

        URLLib3Session.send = send  # type: ignore[method-assign]
        _installed.add("in-process")


def _call_in_process(app: Any, netloc: str, request: Any) -> Any:
    from urllib.parse import unquote, urlsplit

    from botocore.awsrequest import AWSResponse
    from moto.core.botocore_stubber import MockRawResponse

    body = request.body
    if body is None:
        data = b""
    elif isinstance(body, bytes | bytearray):
        data = bytes(body)
    elif isinstance(body, str):
        data = body.encode()
    else:  # a file-like body (an upload)
        data = body.read()
        if isinstance(data, str):
            data = data.encode()
    parts = urlsplit(request.url)
    host, _, port = netloc.partition(":")
    # As werkzeug's server builds it (`WSGIRequestHandler.make_environ`): WSGI strings are the
    # UTF-8 bytes read as Latin-1.
    environ: dict[str, Any] = {
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(data),
        "wsgi.errors": io.StringIO(),
        "wsgi.multithread": True,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
        "REQUEST_METHOD": request.method,
        "SCRIPT_NAME": "",
        "PATH_INFO": unquote(parts.path or "/").encode().decode("latin1"),
        "QUERY_STRING": parts.query.encode().decode("latin1"),
        "REMOTE_ADDR": "127.0.0.1",
        "REMOTE_PORT": 0,
        "SERVER_NAME": host,
        "SERVER_PORT": port,
        "SERVER_PROTOCOL": "HTTP/1.1",
        "HTTP_HOST": netloc,
        "CONTENT_LENGTH": str(len(data)),
    }
    for name, value in request.headers.items():
        if "_" in name:
            continue
        if isinstance(value, bytes):
            value = value.decode("latin1")
        key = name.upper().replace("-", "_")
        if key in ("CONTENT_LENGTH", "HOST"):
            continue  # the body's own length, and the host above
        if key != "CONTENT_TYPE":
            key = f"HTTP_{key}"
        environ[key] = value
    answer: list[Any] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        answer[:] = [status, headers]
        return lambda chunk: None

    try:
        payload = b"".join(app(environ, start_response))
    except Exception:
        # What the server answers when moto raises (`SerializedMotoServer`): a 500, which the SDK
        # treats as it would over HTTP (retried, then raised as a ClientError).
        traceback.print_exc()
        payload, answer[:] = b"", ["500 Internal Server Error", [("Content-Length", "0")]]
    status, headers = answer
    response_body = b"" if request.method == "HEAD" else payload
    return AWSResponse(request.url, int(status.split(" ", 1)[0]), headers, MockRawResponse(response_body))


def install_serialized_moto() -> None:
    """Patch moto (process-wide, once) for `SerializedMotoServer`: SQS long polls let the lock
    go while they wait; transactions roll back item by item; queries read their key's items;
    a request finds its backend, and a queue attribute is read, without listing everything."""
    _require_moto()
    with EMULATION_LOCK:
        if "serialized" in _installed:
            return
        _install_sqs_wait()
        install_item_transactions()
        install_keyed_queries()
        install_cheap_lookups()
        install_fast_attribute_values()
        install_parse_caches()
        install_update_expression_cache()
        install_shallow_read_copies()
        install_dispatch_caches()
        install_condition_lexing_cache()
        _installed.add("serialized")


def _install_sqs_wait() -> None:
    from moto.sqs.models import Queue

    original = Queue.wait_for_messages

    def wait_for_messages(self: Any, timeout: int) -> None:
        if not getattr(_serving, "held", False):
            original(self, timeout)
            return
        # Let other requests run (a SendMessage among them) while this poll waits.
        _serving.held = False
        EMULATION_LOCK.release()
        try:
            original(self, timeout)
        finally:
            EMULATION_LOCK.acquire()
            _serving.held = True

    Queue.wait_for_messages = wait_for_messages  # type: ignore[method-assign]


def install_item_transactions() -> None:
    """TransactWriteItems that keeps the prior version of each item it touches and, if any
    action fails, puts those items back: moto 5.2.5 deep-copies every table the transaction
    names and restores the copies, which costs the tables' size and, under concurrency, wipes
    other requests' writes. Otherwise moto's own code (same checks, same errors)."""
    from moto.dynamodb.comparisons import get_filter_expression
    from moto.dynamodb.exceptions import (
        ConditionalCheckFailed,
        MockValidationException,
        MultipleTransactionsException,
        TooManyTransactionsException,
        TransactionCanceledException,
        TransactWriteSingleOpException,
    )
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.dynamo_type import DynamoType

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        if len(transact_items) > 100:
            raise TooManyTransactionsException()
        touched: list[tuple[Any, Any, Any, Any]] = []  # (table, hash, range, prior item or None)
        targets: set[tuple[str, str]] = set()

        def rollback() -> None:
            for table, hash_value, range_value, prior in reversed(touched):
                if prior is None:
                    table.delete_item(hash_value, range_value)
                elif range_value is not None:
                    table.items[hash_value][range_value] = prior
                else:
                    table.items[hash_value] = prior

        errors: list[tuple[str | None, str | None, dict[str, Any] | None]] = []
        for item in transact_items:
            original_item: dict[str, Any] | None = None
            if len(list(item.keys())) > 1:
                raise TransactWriteSingleOpException
            try:
                op_type, op = next(iter(item.items()))
                if op_type not in {"ConditionCheck", "Put", "Delete", "Update"}:
                    raise ValueError("Unsupported transaction operation")
                table_name = op["TableName"]
                condition_expression = op.get("ConditionExpression")
                names = op.get("ExpressionAttributeNames")
                values = op.get("ExpressionAttributeValues")
                table = self.get_table(table_name)
                if op_type == "Put":
                    attrs = op["Item"]
                    key = {table.hash_key_attr: attrs[table.hash_key_attr]}
                    if table.range_key_attr is not None:
                        key[table.range_key_attr] = attrs[table.range_key_attr]
                else:
                    key = op["Key"]
                target = (str(table_name), str(dict(sorted(key.items()))))
                if target in targets:
                    raise MultipleTransactionsException()
                targets.add(target)

                current = self.get_item(table_name, key)
                if condition_expression is not None:
                    condition = get_filter_expression(condition_expression, names, values)
                    if not condition.expr(current):
                        if op.get("ReturnValuesOnConditionCheckFailure") == "ALL_OLD" and current:
                            original_item = current.to_json()["Attributes"]
                        raise ConditionalCheckFailed(item=original_item)
                if op_type != "ConditionCheck":
                    hash_value = DynamoType(key[table.hash_key_attr])
                    range_value = (
                        DynamoType(key[table.range_key_attr]) if table.range_key_attr is not None else None
                    )
                    touched.append((table, hash_value, range_value, copy.deepcopy(current)))
                if op_type == "Put":
                    self.put_item(
                        table_name,
                        op["Item"],
                        condition_expression=condition_expression,
                        expression_attribute_names=names,
                        expression_attribute_values=values,
                    )
                elif op_type == "Delete":
                    self.delete_item(
                        table_name,
                        key,
                        condition_expression=condition_expression,
                        expression_attribute_names=names,
                        expression_attribute_values=values,
                    )
                elif op_type == "Update":
                    self.update_item(
                        table_name,
                        key,
                        update_expression=op["UpdateExpression"],
                        condition_expression=condition_expression,
                        expression_attribute_names=names,
                        expression_attribute_values=values,
                    )
                errors.append((None, None, None))
            except (MultipleTransactionsException, MockValidationException):
                rollback()
                raise
            except ConditionalCheckFailed as error:
                errors.append(("ConditionalCheckFailed", str(error.message), original_item))
            except Exception as error:  # moto's own: any other failure cancels the transaction
                errors.append((type(error).__name__, str(error), original_item))
        if any(code is not None for code, _, _ in errors):
            rollback()
            raise TransactionCanceledException(errors)

    DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign]


def install_cheap_lookups() -> None:
    """Two lookups of moto 5.2.5 that cost the size of something on every request:
    - the server lists moto's package directory (a directory listing and a stat per service)
      to route each request: the listing is made once;
    - GetQueueAttributes computes every attribute of the queue, the message counts among them
      (a pass over all its messages), even for one attribute; EventBridge asks for one on each
      event it sends to a queue, and each ReceiveMessage once per message it returns (the
      retention period), so a queue with a backlog cost its length squared. Only the attributes
      asked for are computed now (same names, same values, same errors)."""
    from moto import backends
    from moto.core.utils import camelcase_to_underscores
    from moto.sqs.exceptions import InvalidAttributeName
    from moto.sqs.models import SQSBackend

    modules = tuple(backends.list_of_moto_modules())
    backends.list_of_moto_modules = lambda: iter(modules)

    original = SQSBackend.get_queue_attributes

    def get_queue_attributes(self: Any, queue_name: str, attribute_names: list[str]) -> dict[str, Any]:
        if not attribute_names or "All" in attribute_names:
            return dict(original(self, queue_name, attribute_names))
        queue = self.get_queue(queue_name)
        valid = ["All", *queue.BASE_ATTRIBUTES, *queue.FIFO_ATTRIBUTES, *queue.KMS_ATTRIBUTES]
        invalid = next((name for name in attribute_names if name not in valid), None)
        if invalid or invalid == "":
            raise InvalidAttributeName(invalid)
        present = list(queue.BASE_ATTRIBUTES)
        if queue.fifo_queue:
            present += queue.FIFO_ATTRIBUTES
        if queue.kms_master_key_id:
            present += queue.KMS_ATTRIBUTES
        attributes: dict[str, Any] = {}
        for name in attribute_names:
            if name not in present:
                continue
            value = getattr(queue, camelcase_to_underscores(name))
            if name == "RedrivePolicy" and value:
                value = json.dumps(value)
            if value is not None:
                attributes[name] = str(value).lower() if isinstance(value, bool) else value
        return attributes

    SQSBackend.get_queue_attributes = get_queue_attributes  # type: ignore[method-assign]
    _install_lazy_queue_attributes()


class _QueueAttributes(Mapping[str, Any]):
    """`Queue.attributes` as moto 5.2.5 builds it (same names, order and values), each value
    computed when it is read: SendMessage to a FIFO queue reads `ContentBasedDeduplication`
    from it four times, and the eager dict counted the queue's messages (three passes over
    them, a clock read per message) each time, so a backlog of n messages cost n squared."""

    def __init__(self, queue: Any) -> None:
        self._queue = queue
        names = list(queue.BASE_ATTRIBUTES)
        if queue.fifo_queue:
            names += queue.FIFO_ATTRIBUTES
        if queue.kms_master_key_id:
            names += queue.KMS_ATTRIBUTES
        self._names = dict.fromkeys(names)

    def __getitem__(self, name: str) -> Any:
        if name not in self._names:
            raise KeyError(name)
        from moto.core.utils import camelcase_to_underscores

        queue = self._queue
        if name == "Policy" and queue.policy:
            return queue.policy
        if name == "RedrivePolicy" and queue.redrive_policy:
            return json.dumps(queue.redrive_policy)
        value = getattr(queue, camelcase_to_underscores(name))
        return str(value).lower() if isinstance(value, bool) else value

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def _install_lazy_queue_attributes() -> None:
    """`Queue.attributes` computed per name, and a queue's message filters read the clock once
    per call rather than twice per message (moto 5.2.5's `Message.visible` and `.delayed`)."""
    from moto.core.utils import unix_time_millis
    from moto.sqs.models import Queue

    def attributes(self: Any) -> dict[str, Any]:
        # A plain dict where moto hands the whole set on (GetQueueAttributes "All").
        return _QueueAttributes(self)  # type: ignore[return-value]

    def messages(self: Any) -> list[Any]:
        now = unix_time_millis()
        return [m for m in self._messages if now > m.visible_at and not now < m.delayed_until]

    def delayed(self: Any) -> int:
        now = unix_time_millis()
        return sum(1 for m in self._messages if now < m.delayed_until)

    def not_visible(self: Any) -> int:
        now = unix_time_millis()
        return sum(1 for m in self._messages if not now > m.visible_at)

    Queue.attributes = property(attributes)  # type: ignore[assignment,method-assign]
    Queue.messages = property(messages)  # type: ignore[assignment,method-assign]
    Queue.approximate_number_of_messages_delayed = property(delayed)  # type: ignore[assignment,method-assign]
    Queue.approximate_number_of_messages_not_visible = property(not_visible)  # type: ignore[assignment,method-assign]


def install_fast_attribute_values() -> None:
    """DynamoDB's item attributes written straight to JSON: moto 5.2.5 serializes each
    AttributeValue through its generic shape walker (a key lookup per member of the structure,
    for every attribute of every item returned), which was a quarter of the local runtime's CPU.
    The output is the same: one type key, binaries base64-encoded, maps and lists recursed."""
    from moto.core.serialize import BaseJSONSerializer

    original = BaseJSONSerializer._serialize_type_structure

    def serialize_structure(self: Any, serialized: Any, value: Any, shape: Any, key: str) -> None:
        if key and shape.name == "AttributeValue" and isinstance(value, dict):
            serialized[self.get_serialized_name(shape, key)] = _attribute_value_json(value)
            return
        original(self, serialized, value, shape, key)

    BaseJSONSerializer._serialize_type_structure = serialize_structure  # type: ignore[method-assign]


def _b64(value: Any) -> str:
    raw = value.encode() if isinstance(value, str) else bytes(value)
    return base64.b64encode(raw).decode()


def _attribute_value_json(value: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind, inner in value.items():
        if inner is None:
            continue
        if kind == "B":
            out[kind] = _b64(inner)
        elif kind == "BS":
            out[kind] = [_b64(v) for v in inner]
        elif kind == "M":
            out[kind] = {k: _attribute_value_json(v) for k, v in inner.items()}
        elif kind == "L":
            out[kind] = [_attribute_value_json(v) for v in inner]
        elif kind in ("NULL", "BOOL"):
            out[kind] = bool(inner)
        elif kind in ("SS", "NS"):
            out[kind] = [str(v) for v in inner]
        else:  # S, N
            out[kind] = str(inner)
    return out


def install_parse_caches() -> None:
    """Step Functions parses its state machine's ASL with ANTLR on every execution, and it and
    EventBridge's input transformer parse each JSONPath with a freshly built parser on every
    use (moto 5.2.5): a seventh of the local runtime's CPU, then 8% more for EventBridge's. The
    syntax tree of a definition, and each parsed path, are kept. The evaluation components (the
    program) are not shared between executions: each execution gets its own, unpickled from the
    bytes of the program as first built, before it ran (a fifteenth of the cost of building it
    from the tree again, which was a tenth of the local runtime's CPU while a pass admitted).
    Same results, same errors (a definition that fails to parse is not cached)."""
    import pickle

    import jsonpath_ng
    import jsonpath_ng.ext
    from moto.stepfunctions.parser.asl.component.common.path import result_path
    from moto.stepfunctions.parser.asl.parse import asl_parser
    from moto.stepfunctions.parser.asl.parse.preprocessor import Preprocessor
    from moto.stepfunctions.parser.asl.utils import json_path

    trees: dict[str, Any] = {}
    # A definition's program as built from its tree, before any execution ran it: its bytes.
    programs: dict[str, bytes] = {}
    original_parse = asl_parser.AmazonStateLanguageParser.parse

    def parse_definition(definition: str) -> tuple[Any, Any]:
        tree = trees.get(definition)
        if tree is None:
            program, tree = original_parse(definition)
            trees[definition] = tree
            with suppress(Exception):  # a program that does not pickle is built each time
                programs[definition] = pickle.dumps(program, protocol=pickle.HIGHEST_PROTOCOL)
            return program, tree
        blob = programs.get(definition)
        if blob is not None:
            return pickle.loads(blob), tree
        return Preprocessor().visit(tree), tree

    asl_parser.AmazonStateLanguageParser.parse = staticmethod(parse_definition)  # type: ignore[method-assign]
    # Step Functions' modules bind `parse` at import: the name each one calls is replaced; the
    # package's own name too, for EventBridge's input transformer, which imports it per event.
    extended = functools.lru_cache(maxsize=4096)(jsonpath_ng.ext.parse)  # type: ignore[attr-defined]
    jsonpath_ng.ext.parse = extended  # type: ignore[attr-defined]
    json_path.parse = extended  # type: ignore[attr-defined]
    result_path.parse = functools.lru_cache(maxsize=4096)(jsonpath_ng.parse)  # type: ignore[attr-defined]


def install_update_expression_cache() -> None:
    """DynamoDB's update expressions, parsed once per text (moto 5.2.5 tokenizes and parses an
    UpdateExpression twice per update: once to check its placeholders, once to apply it, and the
    validator then deep-copies the tree it is given: together half the CPU of a TransactWriteItems
    that updates a job). The tree of each text is kept, never changed: the placeholder check only
    reads it, and the validator works on a copy, made here by unpickling the tree's bytes (a
    fraction of `copy.deepcopy`'s cost). Same results, same errors: a text that fails to parse is
    not kept, and raises each time."""
    import pickle

    # Any: these are moto's private names (pinned version), not its typed interface.
    models: Any = importlib.import_module("moto.dynamodb.models")
    dynamodb_responses: Any = importlib.import_module("moto.dynamodb.responses")
    expressions: Any = importlib.import_module("moto.dynamodb.parsing.expressions")
    validators: Any = importlib.import_module("moto.dynamodb.parsing.validators")
    original_make = expressions.UpdateExpressionParser.make.__func__
    trees: dict[str, Any] = {}
    cache_limit = 4096

    def make(cls: Any, expression_str: str) -> Any:
        tree = trees.get(expression_str)
        if tree is None:
            tree = original_make(cls, expression_str)
            if len(trees) < cache_limit:
                # The bytes of the tree as parsed, before anything is hung on it.
                tree._spotline_pickled = pickle.dumps(tree, protocol=pickle.HIGHEST_PROTOCOL)
                tree._spotline_found = {}  # clause types -> the clauses found (`find_clauses`)
                tree._spotline_checked = set()  # (names, table keys) the pure checks passed with
                trees[expression_str] = tree
        return tree

    original_deepcopy = validators.deepcopy

    def copy_tree(node: Any, memo: Any = None) -> Any:
        pickled = getattr(node, "_spotline_pickled", None)
        if pickled is not None:
            return pickle.loads(pickled)
        return original_deepcopy(node, memo)

    # The placeholder check reads the kept tree's clauses: found once per tree and clause types.
    node_class = importlib.import_module("moto.dynamodb.parsing.ast_nodes").Node
    original_find = node_class.find_clauses

    def find_clauses(self: Any, clause_types: Any) -> Any:
        found = self.__dict__.get("_spotline_found")
        if found is None:
            return original_find(self, clause_types)
        key = tuple(clause_types)
        if key not in found:
            found[key] = original_find(self, clause_types)
        return list(found[key])

    # Three of the validator's passes only check the text against the attribute names and the
    # table's keys (one SET clause at most, no overlapping paths, no key updated): where a kept
    # tree passed them with the same names and keys, they are not run again.
    checks_of_the_text = (
        validators.ActionCountValidator,
        validators.OverlappingPathsValidator,
        validators.UpdateHashRangeKeyValidator,
    )
    update_validator = validators.UpdateExpressionValidator
    original_init, original_validate = update_validator.__init__, update_validator.validate

    def init(self: Any, expression: Any, expression_attribute_names: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, expression, expression_attribute_names, *args, **kwargs)
        self._spotline_pending = None
        checked = getattr(expression, "_spotline_checked", None)
        if checked is None:
            return
        key = (tuple(sorted((expression_attribute_names or {}).items())), tuple(self.table.table_key_attrs))
        if key in checked:
            self.processors = [p for p in self.processors if not isinstance(p, checks_of_the_text)]
        else:
            self._spotline_pending = (checked, key)

    def validate(self: Any) -> Any:
        result = original_validate(self)
        if self._spotline_pending is not None:
            checked, key = self._spotline_pending
            checked.add(key)
        return result

    node_class.find_clauses = find_clauses
    update_validator.__init__ = init
    update_validator.validate = validate
    parser = classmethod(make)
    expressions.UpdateExpressionParser.make = parser
    # Both callers bound the class at import; the class attribute is what they call.
    assert models.UpdateExpressionParser is expressions.UpdateExpressionParser
    assert dynamodb_responses.UpdateExpressionParser is expressions.UpdateExpressionParser
    validators.deepcopy = copy_tree


def install_condition_lexing_cache() -> None:
    """A condition expression's tokens, lexed once per text (moto 5.2.5 lexes every condition
    of every write and query anew, regular expression by regular expression, before putting in
    the call's attribute names and values). The tokens are immutable (named tuples; the lexer
    gives each an empty `children` list that no later stage changes): each parse gets its own
    sequence of them, and every later stage runs as before, with the call's names and values.
    A text that fails to lex is not kept, and fails each time."""
    comparisons: Any = importlib.import_module("moto.dynamodb.comparisons")
    parser = comparisons.ConditionExpressionParser
    original = parser._lex_condition_expression
    lexed: dict[str, tuple[Any, ...]] = {}
    cache_limit = 4096

    def lex(self: Any) -> Any:
        text = self.condition_expression
        tokens = lexed.get(text)
        if tokens is None:
            tokens = tuple(original(self))
            if len(lexed) < cache_limit:
                lexed[text] = tokens
        return collections.deque(tokens)

    parser._lex_condition_expression = lex


def install_dispatch_caches() -> None:
    """moto lists a response class's methods with `inspect.getmembers` on every request, to
    check that the action is one of them (moto 5.2.5: 4% of a call served in-process). A class's
    methods do not change once it is defined: they are listed once per class."""
    responses: Any = importlib.import_module("moto.core.responses")
    original = responses.method_names_from_class
    listed: dict[Any, list[str]] = {}

    def method_names_from_class(clazz: Any) -> list[str]:
        names = listed.get(clazz)
        if names is None:
            names = listed[clazz] = original(clazz)
        return names

    responses.method_names_from_class = method_names_from_class


def install_shallow_read_copies() -> None:
    """A query or scan copies every item it returns before projecting and serializing it (moto
    5.2.5: `copy.deepcopy` of each item, value by value: a fifth of the local runtime's CPU when
    the reconciler and the passes read a few hundred active jobs). The copy only shields the stored
    items from the read path, which builds new items to project and otherwise only reads; and the
    response is serialized under EMULATION_LOCK, before any write can change a stored value. So
    the copy here is shallow: a new item with its own attribute map, sharing the values. Every
    other deep copy of the table module (backups, restores) stays deep."""
    import copy as copy_module
    import types

    table_module: Any = importlib.import_module("moto.dynamodb.models.table")
    dynamo_type: Any = importlib.import_module("moto.dynamodb.models.dynamo_type")
    Item, LimitedSizeDict = dynamo_type.Item, dynamo_type.LimitedSizeDict

    def shallow(item: Any) -> Any:
        result = Item.__new__(Item)
        result.hash_key = item.hash_key
        result.range_key = item.range_key
        attrs = LimitedSizeDict.__new__(LimitedSizeDict)
        dict.__init__(attrs, item.attrs)  # as Item.__deepcopy__: no size check on a stored item
        result.attrs = attrs
        return result

    def deepcopy(value: Any, memo: Any = None) -> Any:
        if type(value) is Item:
            return shallow(value)
        if type(value) is list and value and all(type(v) is Item for v in value):
            return [shallow(v) for v in value]
        return copy_module.deepcopy(value, memo)

    # The name `copy` as the table module sees it: the real module but for `deepcopy`.
    proxy = types.SimpleNamespace(**{name: getattr(copy_module, name) for name in copy_module.__all__})
    proxy.deepcopy = deepcopy
    table_module.copy = proxy


_candidates = threading.local()  # .of: (table, the items a query may return), while it runs


def install_keyed_queries() -> None:
    """A query reads only the items it may return: the items of its partition key on the table,
    the items whose index key attributes equal the condition's on an index. moto 5.2.5 sorts
    every item of the table on each query (and a table query filters them after). The rest is
    moto's own query (same order, pages, filters and errors)."""
    from moto.dynamodb.models.table import Table

    original_query = Table.query
    original_all_items = Table.all_items

    def all_items(self: Any) -> list[Any]:
        override = getattr(_candidates, "of", None)
        if override is None or override[0] is not self:
            return original_all_items(self)
        return sorted(override[1], key=lambda x: (x.hash_key, x.range_key) if x.range_key else x.hash_key)

    def query(
        self: Any,
        hash_key: Any,
        range_comparison: Any,
        range_objs: Any,
        limit: Any,
        exclusive_start_key: Any,
        scan_index_forward: Any,
        projection_expressions: Any,
        index_name: str | None = None,
        consistent_read: bool = False,
        filter_expression: Any = None,
        hash_key_conditions: list[tuple[str, Any]] | None = None,
        range_key_conditions: Any = None,
        **filter_kwargs: Any,
    ) -> Any:
        def run() -> Any:
            return original_query(
                self,
                hash_key,
                range_comparison,
                range_objs,
                limit,
                exclusive_start_key,
                scan_index_forward,
                projection_expressions,
                index_name,
                consistent_read,
                filter_expression,
                hash_key_conditions=hash_key_conditions,
                range_key_conditions=range_key_conditions,
                **filter_kwargs,
            )

        if index_name is None and hash_key is not None:
            bucket = self.items.get(hash_key)
            if not bucket:
                items: list[Any] = []
            elif self.range_key_attr:
                items = list(bucket.values())
            else:
                items = [bucket]
        elif index_name is not None and hash_key_conditions:
            items = [item for item in _every_item(self) if _matches(item, hash_key_conditions)]
        else:
            return run()
        _candidates.of = (self, items)
        try:
            return run()
        finally:
            _candidates.of = None

    Table.query = query  # type: ignore[method-assign]
    Table.all_items = all_items  # type: ignore[method-assign]


def _matches(item: Any, conditions: list[tuple[str, Any]]) -> bool:
    for name, value in conditions:
        present = item.attrs.get(name)
        if present is None or present != value:
            return False
    return True


def _every_item(table: Any) -> Iterator[Any]:
    for bucket in table.items.values():
        if table.range_key_attr:
            yield from bucket.values()
        else:
            yield bucket
