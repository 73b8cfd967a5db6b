"""One Lambda execution environment: the process a local function runs in.

Started by `lethe.localcloud.lambdas.LambdaRuntime` as `python -m lethe.localcloud.lambda_worker`
with the function's folder as working directory and an environment that mirrors Lambda's
(`_HANDLER`, `LAMBDA_TASK_ROOT`, `AWS_LAMBDA_FUNCTION_NAME`, ..., PYTHONPATH = code folder, then
layer folders). Nothing here is specific to Lethe: the worker only knows the Lambda contract.

Protocol (one JSON document per line, UTF-8):

- The response channel is the worker's *original* stdout file descriptor. At start-up the worker
  duplicates it for itself and then points fd 1 at fd 2, so everything the function prints (and
  Powertools' JSON logs, which go to stdout on Lambda) lands in the log file the parent attached
  to stderr, never in the protocol stream. Child processes of the handler inherit fd 1/2 (the
  log), not the protocol descriptor (Python creates it non-inheritable).
- After init the worker writes ``{"type": "ready", "init_ms": float, "error": null | {...}}``.
  An init error (import failure, missing handler, exception at module level) is reported there,
  and the worker exits: like Lambda, the next invocation starts a fresh environment.
- Each request on stdin is ``{"request_id", "payload" (str), "deadline_ms" (epoch ms),
  "invoked_function_arn"}``; the answer is ``{"type": "result", "ok": bool, "payload": str}``
  where payload is the handler's JSON result or Lambda's error document
  ``{"errorMessage", "errorType", "requestId", "stackTrace"}``.
- EOF on stdin ends the worker.
"""

from __future__ import annotations

import decimal
import importlib
import importlib.util
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import IO, Any


class LambdaContext:
    """What the Python runtime passes as `context` (the attributes handlers and Powertools read)."""

    def __init__(self, request_id: str, invoked_function_arn: str, deadline_ms: int) -> None:
        self.function_name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "")
        self.function_version = os.environ.get("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        self.invoked_function_arn = invoked_function_arn
        self.memory_limit_in_mb = os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128")
        self.aws_request_id = request_id
        self.log_group_name = os.environ.get("AWS_LAMBDA_LOG_GROUP_NAME", "")
        self.log_stream_name = os.environ.get("AWS_LAMBDA_LOG_STREAM_NAME", "")
        self.identity = None
        self.client_context = None
        self.tenant_id = None
        self._deadline_ms = deadline_ms

    def get_remaining_time_in_millis(self) -> int:
        return max(0, self._deadline_ms - int(time.time() * 1000))


class _JsonEncoder(json.JSONEncoder):
    """Lambda's Python runtime serialises Decimal (what DynamoDB returns) as a JSON number."""

    def default(self, o: Any) -> Any:
        if isinstance(o, decimal.Decimal):
            return int(o) if o == o.to_integral_value() else float(o)
        return super().default(o)


def error_document(
    error_type: str, message: str, request_id: str = "", stack: list[str] | None = None
) -> dict[str, Any]:
    return {
        "errorMessage": message,
        "errorType": error_type,
        "requestId": request_id,
        "stackTrace": stack or [],
    }


def _exception_document(
    exc: BaseException, request_id: str, *, skip_frames: int = 0
) -> dict[str, Any]:
    """Lambda's error document; `skip_frames` drops the runtime's own frames from the stack."""
    tb = exc.__traceback__
    for _ in range(skip_frames):
        if tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
    stack = traceback.format_list(traceback.extract_tb(tb))
    return error_document(type(exc).__name__, str(exc), request_id, stack)


def _log(line: str, stream: IO[str] | None = None) -> None:
    """Write one line to the function's log (fd 1 and 2 both go to the log file)."""
    out = stream or sys.stdout
    out.write(line + "\n")
    out.flush()


def _log_exception(exc: BaseException) -> None:
    # The Python runtime logs "[ERROR] Type: message" plus the traceback for unhandled errors.
    _log(f"[ERROR] {type(exc).__name__}: {exc}", sys.stderr)
    traceback.print_exception(exc, file=sys.stderr)
    sys.stderr.flush()


def _load_module(module_name: str, task_root: Path) -> ModuleType:
    """Import the handler module from the task root by file path when it is a plain module."""
    file_path = task_root / f"{module_name}.py"
    if "." not in module_name and file_path.is_file():
        spec = importlib.util.spec_from_file_location(module_name, file_path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {file_path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(module_name, None)
            raise
        return module
    return importlib.import_module(module_name)


def load_handler(handler: str, task_root: Path) -> Callable[[Any, LambdaContext], Any]:
    """Resolve "module.function" like the Lambda Python runtime, with its error types."""
    module_name, _, function_name = handler.rpartition(".")
    if not module_name or not function_name:
        raise _InitError(
            "Runtime.MalformedHandlerName", f"Bad handler '{handler}': not enough values to unpack"
        )
    try:
        module = _load_module(module_name.replace("/", "."), task_root)
    except ImportError as exc:
        raise _InitError(
            "Runtime.ImportModuleError", f"Unable to import module '{module_name}': {exc}"
        ) from exc
    function = getattr(module, function_name, None)
    if function is None:
        message = f"Handler '{function_name}' missing on module '{module_name}'"
        raise _InitError("Runtime.HandlerNotFound", message)
    return function  # type: ignore[no-any-return]


class _InitError(Exception):
    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type


def _send(channel: IO[str], message: dict[str, Any]) -> None:
    channel.write(json.dumps(message, ensure_ascii=False) + "\n")
    channel.flush()


def _invoke(
    handler: Callable[[Any, LambdaContext], Any], request: dict[str, Any]
) -> tuple[bool, str]:
    request_id = str(request["request_id"])
    context = LambdaContext(
        request_id, str(request["invoked_function_arn"]), int(request["deadline_ms"])
    )
    raw = request.get("payload") or "{}"
    try:
        event = json.loads(raw)
    except json.JSONDecodeError as exc:
        message = f"Unable to unmarshal input: {exc}"
        doc = error_document("Runtime.UnmarshalError", message, request_id)
        return False, json.dumps(doc)
    try:
        result = handler(event, context)
    except Exception as exc:
        _log_exception(exc)
        return False, json.dumps(_exception_document(exc, request_id, skip_frames=1))
    try:
        return True, json.dumps(result, cls=_JsonEncoder, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        message = f"Unable to marshal response: {exc}"
        doc = error_document("Runtime.MarshalError", message, request_id)
        return False, json.dumps(doc)


def _serve(channel: IO[str], handler: Callable[[Any, LambdaContext], Any], init_ms: float) -> None:
    version = os.environ.get("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
    memory = os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128")
    first = True
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        request_id = request["request_id"]
        _log(f"START RequestId: {request_id} Version: {version}")
        started = time.perf_counter()
        ok, payload = _invoke(handler, request)
        elapsed = (time.perf_counter() - started) * 1000
        sys.stdout.flush()
        sys.stderr.flush()
        _send(channel, {"type": "result", "ok": ok, "payload": payload})
        init = f"\tInit Duration: {init_ms:.2f} ms" if first else ""
        _log(f"END RequestId: {request_id}")
        _log(
            f"REPORT RequestId: {request_id}\tDuration: {elapsed:.2f} ms\t"
            f"Billed Duration: {max(1, round(elapsed))} ms\tMemory Size: {memory} MB{init}"
        )
        first = False


def main() -> None:
    # Keep the original stdout for the protocol, then send fd 1 to the log (fd 2).
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = open(1, "w", encoding="utf-8", buffering=1, closefd=False)  # noqa: SIM115

    task_root = Path(os.environ.get("LAMBDA_TASK_ROOT", os.getcwd()))
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    _log(f"INIT_START {stamp} Runtime Version: python:3.11 (local worker)")
    started = time.perf_counter()
    try:
        handler = load_handler(os.environ["_HANDLER"], task_root)
    except _InitError as exc:
        _log(f"[ERROR] {exc.error_type}: {exc}", sys.stderr)
        doc = error_document(exc.error_type, str(exc))
        _send(channel, {"type": "ready", "init_ms": 0.0, "error": doc})
        return
    except Exception as exc:
        _log_exception(exc)
        _send(channel, {"type": "ready", "init_ms": 0.0, "error": _exception_document(exc, "")})
        return
    init_ms = (time.perf_counter() - started) * 1000
    _send(channel, {"type": "ready", "init_ms": init_ms, "error": None})
    _serve(channel, handler, init_ms)


if __name__ == "__main__":
    main()
