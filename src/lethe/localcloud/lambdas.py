"""Local Lambda: run the deployment's real handlers in warm worker processes.

`LambdaRuntime` gives every function its own execution environments: worker subprocesses
(`python -m lethe.localcloud.lambda_worker`, see that module for the wire protocol) started on
first use and kept warm, as Lambda keeps an environment between invocations. A process, not a
thread, because each function has its own environment variables (`os.environ` is process-global)
and its own module-level state (cold-start caches such as `functools.cache`'d settings).

Environment of a worker, in order of precedence (later wins):
  1. this process's environment minus every ``AWS_*`` variable (credentials, profiles, endpoints
     of the host never leak into a function) and minus PYTHONPATH/PYTHONHOME;
  2. ``deployment.endpoints.client_environment()`` (endpoint, region, fake credentials), then
     the temporary credentials of the function's own role when the IAM check is on
     (``lethe.localcloud.iam``);
  3. the function's template environment (``spec.environment``);
  4. Lambda's reserved variables: AWS_LAMBDA_FUNCTION_NAME, AWS_LAMBDA_FUNCTION_VERSION,
     AWS_LAMBDA_FUNCTION_MEMORY_SIZE, AWS_LAMBDA_LOG_GROUP_NAME, AWS_LAMBDA_LOG_STREAM_NAME,
     AWS_LAMBDA_INITIALIZATION_TYPE, AWS_EXECUTION_ENV, LAMBDA_TASK_ROOT (= code_uri),
     LAMBDA_RUNTIME_DIR, _HANDLER, TZ, plus POWERTOOLS_TRACE_DISABLED=true (no X-Ray daemon
     locally) and PYTHONUNBUFFERED=1 (logs reach the file as they are written);
  5. PYTHONPATH = code_uri, then each layer folder (Lambda puts layers in /opt/python, after
     /var/task), then this package's source folder (only so `-m lethe.localcloud.lambda_worker`
     resolves when lethe is not installed in the interpreter).
The working directory is code_uri. A function's stdout/stderr (prints, Powertools logs, the
START/END/REPORT lines, tracebacks) are appended to ``deployment.logs_dir / "<name>.log"``.

Concurrency: each worker runs one invocation at a time. Concurrent invocations of the same
function start more workers, up to ``max_workers_per_function`` (default 4) like Lambda scales
out environments; beyond that, invocations queue for the next free worker. A function behind the
REST API may start up to ``max_api_workers`` (default 8): API Gateway does not queue, Lambda
gives a burst of requests an environment each, and with 4 a burst of 50 erasure filings waited
for a free worker most of its time (bench/filing_burst.py; docs/RELIABILITY.md). Idle workers are
reused most-recently-used first, so a steady sequential load stays on one warm worker.

Timeouts: an invocation that runs longer than ``spec.timeout_seconds`` gets its worker (and the
worker's process group: anything the handler spawned) killed and returns Lambda's timeout
error (``Sandbox.Timedout``, "... Task timed out after N.00 seconds"); the next invocation cold
starts. A worker that dies (``sys.exit``, crash) answers ``Runtime.ExitError`` and is replaced
on next use. Init (module import) may take up to max(10 s, timeout). Memory size is only
reported, not enforced.

Asynchronous invocations (`invoke_async`, InvocationType=Event, EventBridge targets) run on a
background thread each. On a function error (including timeouts) they are retried
``async_config.maximum_retry_attempts`` times, after 0.5 s and then 1 s (AWS waits about 1 and
2 minutes; shortened so local runs and tests stay fast). ``maximum_event_age_seconds`` is not
applied: with these delays no event gets old. When retries are exhausted and
``async_config.on_failure_arn`` (an SQS queue) is set, an AWS-shaped destination record is sent
there; otherwise the event is dropped with a warning, as Lambda drops it.

`install(runtime)` routes moto's Lambda ``Invoke`` API (boto3 ``lambda.invoke``, Step Functions
Lambda tasks, which call that API over HTTP) to the runtime; see its docstring for the patch.
SQS event source mappings (lethe.localcloud.sqs) call `invoke` directly, synchronously, as
Lambda's pollers do. `activity` counts asynchronous invocations for `wait_settled`.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from moto.awslambda_simple.models import LambdaSimpleBackend
from moto.core.config import default_user_config

from lethe.localcloud import iam
from lethe.localcloud.deployment import Deployment, FunctionSpec
from lethe.localcloud.lambda_pool import Pool, Worker, WorkerExited

logger = logging.getLogger("lethe.localcloud.lambdas")


#: Delays before the 1st and 2nd retry of a failed async invocation (AWS: about 1 and 2 minutes).
ASYNC_RETRY_DELAYS_SECONDS: tuple[float, ...] = (0.5, 1.0)
#: Lambda's init phase limit; local imports (pyarrow, pyspark) get at least the function timeout.
INIT_TIMEOUT_SECONDS = 10.0

_SOURCE_ROOT = Path(__file__).resolve().parents[2]  # src/, the folder that holds `lethe`
_RESERVED_PREFIX = "AWS_"
_DROPPED_VARIABLES = frozenset(
    {"PYTHONPATH", "PYTHONHOME", "_HANDLER", "LAMBDA_TASK_ROOT", "LAMBDA_RUNTIME_DIR", "TZ"}
)


@dataclass(frozen=True)
class InvokeResult:
    """What Lambda's Invoke API returns: the payload and, on failure, the FunctionError."""

    payload: bytes  # the handler's JSON result, or Lambda's error document
    function_error: str | None  # "Unhandled" on any error, None on success
    duration: float  # seconds, including a cold start
    request_id: str

    def json(self) -> Any:
        return json.loads(self.payload)


def _iso_now(milliseconds: bool = True) -> str:
    now = datetime.now(UTC)
    if milliseconds:
        return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def _timeout_document(request_id: str, timeout_seconds: int) -> dict[str, Any]:
    return {
        "errorType": "Sandbox.Timedout",
        "errorMessage": (
            f"RequestId: {request_id} Error: Task timed out after {timeout_seconds:.2f} seconds"
        ),
    }


def _exit_document(request_id: str, returncode: int | None) -> dict[str, Any]:
    if returncode is not None and returncode < 0:
        status = f"signal: {signal.Signals(-returncode).name.removeprefix('SIG').lower()}"
    else:
        status = f"exit status {returncode}"
    return {
        "errorType": "Runtime.ExitError",
        "errorMessage": f"RequestId: {request_id} Error: Runtime exited with error: {status}",
    }


class LambdaRuntime:
    """Runs the deployment's functions; see the module docstring for the execution model."""

    def __init__(
        self,
        deployment: Deployment,
        *,
        max_workers_per_function: int = 4,
        max_api_workers: int = 8,
        retry_delays: tuple[float, ...] = ASYNC_RETRY_DELAYS_SECONDS,
    ) -> None:
        self.deployment = deployment
        self._max_workers = max_workers_per_function
        self._max_api_workers = max_api_workers
        self._api_functions = {route.function_logical_id for route in deployment.api_routes}
        self._retry_delays = retry_delays or (0.0,)
        self._lock = threading.Lock()
        self._pools: dict[str, Pool] = {}
        self._pending = 0
        self._async_started = 0
        self._idle = threading.Condition()
        self._closed = threading.Event()

    # -- synchronous -------------------------------------------------------------------------

    def invoke(self, function_ref: str, payload: bytes) -> InvokeResult:
        """Invoke synchronously (RequestResponse). `function_ref`: logical id, name or ARN."""
        spec = self.deployment.function(function_ref)
        invoked_arn = function_ref if function_ref.startswith("arn:") else spec.arn
        request_id = str(uuid.uuid4())
        started = time.monotonic()
        pool = self._pool(spec)
        worker = pool.acquire()
        keep = False
        try:
            ok, body, keep = self._run(worker, request_id, payload, invoked_arn)
        finally:
            pool.release(worker, keep=keep)
        return InvokeResult(
            payload=body,
            function_error=None if ok else "Unhandled",
            duration=time.monotonic() - started,
            request_id=request_id,
        )

    def _run(
        self, worker: Worker, request_id: str, payload: bytes, invoked_arn: str
    ) -> tuple[bool, bytes, bool]:
        """Run one invocation on `worker`: (ok, payload, keep the worker)."""
        spec = worker.spec
        try:
            if not worker.started:
                init_deadline = time.monotonic() + max(INIT_TIMEOUT_SECONDS, spec.timeout_seconds)
                try:
                    init_error = worker.start(init_deadline)
                except OSError as exc:  # no code folder, no interpreter: nothing to run
                    init_error = {
                        "errorType": "Runtime.InvalidEntrypoint",
                        "errorMessage": str(exc),
                    }
                if init_error is not None:
                    init_error["requestId"] = request_id
                    return False, json.dumps(init_error).encode(), False
            deadline = time.monotonic() + spec.timeout_seconds
            worker.send(
                {
                    "request_id": request_id,
                    "payload": payload.decode("utf-8") if payload else "{}",
                    "deadline_ms": int(time.time() * 1000) + spec.timeout_seconds * 1000,
                    "invoked_function_arn": invoked_arn,
                }
            )
            message = worker.receive(deadline)
        except TimeoutError:
            worker.kill()
            seconds = spec.timeout_seconds
            self._log_line(
                spec, f"{_iso_now()} {request_id} Task timed out after {seconds:.2f} seconds"
            )
            return False, json.dumps(_timeout_document(request_id, seconds)).encode(), False
        except WorkerExited as exc:
            document = _exit_document(request_id, exc.returncode)
            self._log_line(spec, f"RequestId: {request_id} {document['errorMessage']}")
            return False, json.dumps(document).encode(), False
        return bool(message["ok"]), str(message["payload"]).encode("utf-8"), True

    def redeploy(self, spec: FunctionSpec) -> FunctionSpec:
        """Replace the function `spec.logical_id` (code, handler, environment, timeout), as
        UpdateFunctionCode and UpdateFunctionConfiguration do: its warm workers are stopped and
        the next invocation cold starts the new one. Returns the spec it replaced."""
        with self._lock:
            previous = self.deployment.functions[spec.logical_id]
            self.deployment.functions[spec.logical_id] = spec
            pool = self._pools.pop(spec.logical_id, None)
        if pool is not None:
            pool.close()
        return previous

    def _log_line(self, spec: FunctionSpec, line: str) -> None:
        with self._log_path(spec).open("a", encoding="utf-8") as log:
            log.write(line + "\n")

    def _log_path(self, spec: FunctionSpec) -> Path:
        return self.deployment.logs_dir / f"{spec.name}.log"

    def _pool(self, spec: FunctionSpec) -> Pool:
        with self._lock:
            if self._closed.is_set():
                raise RuntimeError("the Lambda runtime is shut down")
            pool = self._pools.get(spec.logical_id)
            if pool is None:
                env = self.worker_environment(spec)
                log_path = self._log_path(spec)
                pool = Pool(lambda: Worker(spec, env, log_path), self.max_workers(spec))
                self._pools[spec.logical_id] = pool
            return pool

    def max_workers(self, spec: FunctionSpec) -> int:
        """How many execution environments `spec` may run at once (module docstring)."""
        if spec.logical_id in self._api_functions:
            return max(self._max_workers, self._max_api_workers)
        return self._max_workers

    def worker_environment(self, spec: FunctionSpec) -> dict[str, str]:
        """The environment a worker of `spec` runs with (see the module docstring)."""
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(_RESERVED_PREFIX) and key not in _DROPPED_VARIABLES
        }
        env.update(self.deployment.endpoints.client_environment())
        env.update(iam.function_environment(spec.name))  # its role's own keys (IAM check on)
        env.update(spec.environment)
        day = datetime.now(UTC).strftime("%Y/%m/%d")
        env.update(
            {
                "AWS_LAMBDA_FUNCTION_NAME": spec.name,
                "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
                "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(spec.memory_mb),
                "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{spec.name}",
                "AWS_LAMBDA_LOG_STREAM_NAME": f"{day}/[$LATEST]{uuid.uuid4().hex}",
                "AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand",
                "AWS_EXECUTION_ENV": "AWS_Lambda_python3.11",
                "LAMBDA_TASK_ROOT": str(spec.code_uri),
                "LAMBDA_RUNTIME_DIR": str(Path(sys.executable).parent),
                "_HANDLER": spec.handler,
                "TZ": ":UTC",
                "POWERTOOLS_TRACE_DISABLED": "true",
                "PYTHONUNBUFFERED": "1",
                "PYTHONPATH": os.pathsep.join(
                    [str(spec.code_uri), *(str(p) for p in spec.layer_paths), str(_SOURCE_ROOT)]
                ),
            }
        )
        return env

    # -- asynchronous ------------------------------------------------------------------------

    def invoke_async(self, function_ref: str, event: Any) -> str:
        """Queue an asynchronous (Event) invocation; returns its request id at once.

        Raises KeyError at once if the function is not part of the deployment.
        """
        spec = self.deployment.function(function_ref)
        if self._closed.is_set():
            raise RuntimeError("the Lambda runtime is shut down")
        request_id = str(uuid.uuid4())
        with self._idle:
            self._pending += 1
            self._async_started += 1
        thread = threading.Thread(
            target=self._run_async,
            args=(spec, function_ref, event, request_id),
            name=f"lambda-async-{spec.name}",
            daemon=True,
        )
        thread.start()
        return request_id

    def _run_async(
        self, spec: FunctionSpec, function_ref: str, event: Any, request_id: str
    ) -> None:
        try:
            payload = json.dumps(event).encode("utf-8")
            max_attempts = 1 + max(0, spec.async_config.maximum_retry_attempts)
            result: InvokeResult | None = None
            attempts = 0
            for attempt in range(max_attempts):
                if attempt:
                    delay = self._retry_delays[min(attempt - 1, len(self._retry_delays) - 1)]
                    if self._closed.wait(delay):
                        return
                if self._closed.is_set():
                    return
                result = self.invoke(function_ref, payload)
                attempts += 1
                if result.function_error is None:
                    return
                logger.info(
                    "async invocation %s of %s failed (attempt %d of %d)",
                    request_id,
                    spec.name,
                    attempts,
                    max_attempts,
                )
            if result is not None:
                self._on_failure(spec, event, request_id, attempts, result)
        except Exception:
            logger.exception("async invocation %s of %s crashed", request_id, spec.name)
        finally:
            with self._idle:
                self._pending -= 1
                self._idle.notify_all()

    def _on_failure(
        self, spec: FunctionSpec, event: Any, request_id: str, attempts: int, result: InvokeResult
    ) -> None:
        destination = spec.async_config.on_failure_arn
        if destination is None:
            logger.warning(
                "async invocation %s of %s failed %d times; no on-failure destination, dropped",
                request_id,
                spec.name,
                attempts,
            )
            return
        try:
            response_payload: Any = json.loads(result.payload)
        except ValueError:
            response_payload = result.payload.decode("utf-8", "replace")
        record = {
            "version": "1.0",
            "timestamp": _iso_now(),
            "requestContext": {
                "requestId": request_id,
                "functionArn": f"{spec.arn}:$LATEST",
                "condition": "RetriesExhausted",
                "approximateInvokeCount": attempts,
            },
            "requestPayload": event,
            "responseContext": {
                "statusCode": 200,
                "executedVersion": "$LATEST",
                "functionError": result.function_error,
            },
            "responsePayload": response_payload,
        }
        _, _, _, region, account, queue_name = destination.split(":", 5)
        sqs = self.deployment.endpoints.client("sqs", region)
        queue_url = sqs.get_queue_url(QueueName=queue_name, QueueOwnerAWSAccountId=account)
        sqs.send_message(QueueUrl=queue_url["QueueUrl"], MessageBody=json.dumps(record))
        logger.info("async invocation %s of %s sent to %s", request_id, spec.name, destination)

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def activity(self) -> int:
        """Asynchronous invocations started so far (for `EventDispatcher.wait_settled`)."""
        with self._idle:
            return self._async_started

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no asynchronous invocation is pending; False if `timeout` passed first."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._pending:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._idle.wait(remaining)
        return True

    def shutdown(self) -> None:
        """Stop every worker; pending asynchronous invocations stop before their next attempt."""
        self._closed.set()
        with self._lock:
            pools = list(self._pools.values())
            self._pools.clear()
        for pool in pools:
            pool.close()


# -- moto hook ---------------------------------------------------------------------------------


class _Hook:
    """The installed runtime and moto's original method (one install per process)."""

    lock = threading.Lock()
    runtime: LambdaRuntime | None = None
    original: Callable[..., Any] | None = None


def _header(headers: Any, name: str) -> str | None:
    if headers is None:
        return None
    value = headers.get(name)
    if value is None and isinstance(headers, Mapping):
        lowered = name.lower()
        value = next((v for k, v in headers.items() if str(k).lower() == lowered), None)
    return None if value is None else str(value)


def _moto_invoke(  # noqa: PLR0917 - moto's method signature
    backend: Any,
    function_name: str,
    qualifier: str | None,
    body: Any,
    headers: Any,
    response_headers: Any,
) -> str | bytes | None:
    """Replacement of LambdaSimpleBackend.invoke (same signature)."""
    runtime, original = _Hook.runtime, _Hook.original
    assert runtime is not None
    assert original is not None
    function = backend.get_function(function_name, qualifier)  # moto's 404 for unknown names
    try:
        spec = runtime.deployment.function(function.function_name)
    except KeyError:
        logger.warning("%s is not in the deployment: moto's canned answer", function_name)
        return original(backend, function_name, qualifier, body, headers, response_headers)  # type: ignore[no-any-return]
    payload = body.encode("utf-8") if isinstance(body, str) else bytes(body or b"")
    invocation_type = _header(headers, "X-Amz-Invocation-Type") or "RequestResponse"
    if invocation_type == "DryRun":
        return b""
    if invocation_type == "Event":
        runtime.invoke_async(spec.arn, json.loads(payload or b"{}"))
        return b""
    result = runtime.invoke(spec.arn, payload)
    if result.function_error:
        response_headers["x-amz-function-error"] = result.function_error
    response_headers["x-amz-executed-version"] = "$LATEST"
    response_headers["Content-Length"] = str(len(result.payload))
    return result.payload


def install(runtime: LambdaRuntime) -> Callable[[], None]:
    """Route moto's Lambda Invoke to `runtime`; returns a callable that undoes it.

    The one patch: ``moto.awslambda_simple.models.LambdaSimpleBackend.invoke``, the backend method
    behind moto's Invoke API when ``default_user_config["lambda"]["use_docker"]`` is False (the
    local cloud sets that; otherwise moto would try Docker). Every caller goes through it: boto3
    ``lambda.invoke`` against the server and Step Functions Lambda tasks (moto's interpreter calls
    the Invoke API over HTTP, reads ``x-amz-function-error`` and fails the task with the payload's
    ``errorType`` as error name, as on AWS). The patched method:

    - checks the function exists in moto (unknown names keep moto's 404);
    - InvocationType ``Event``: `runtime.invoke_async`, empty 202 answer;
      ``DryRun``: empty answer without running anything;
    - otherwise runs the handler and sets ``x-amz-function-error: Unhandled`` on error;
    - functions moto knows but the deployment does not keep moto's canned behaviour.

    Not routed: moto's deprecated InvokeAsync API and S3's direct Lambda notifications (both call
    moto's Docker path); Lethe uses neither. Raises RuntimeError if already installed.
    """
    with _Hook.lock:
        if _Hook.runtime is not None:
            raise RuntimeError("lethe.localcloud.lambdas is already installed")
        if default_user_config.get("lambda", {}).get("use_docker", True) is not False:
            logger.warning(
                'moto lambda use_docker is not False: set default_user_config["lambda"]'
                '["use_docker"] = False or Invoke will not reach the local runtime'
            )
        original = LambdaSimpleBackend.invoke
        _Hook.runtime, _Hook.original = runtime, original
        LambdaSimpleBackend.invoke = _moto_invoke  # type: ignore[method-assign,assignment]

    def uninstall() -> None:
        with _Hook.lock:
            if _Hook.runtime is runtime:
                LambdaSimpleBackend.invoke = original  # type: ignore[method-assign]
                _Hook.runtime, _Hook.original = None, None

    return uninstall
