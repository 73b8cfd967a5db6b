"""The local cloud process: moto server, hooks, the deployed template, the REST API.

`LocalCloud.start()`:

1. configures moto (`configure_moto`: `MOTO_CONFIG` - no Docker for Lambda, Step Functions
   really execute, AWS managed IAM policies loaded so roles can attach them - and
   `patch_policy_conditions`, without which every TLS-only bucket denies every request) and
   starts ``moto.server.ThreadedMotoServer`` on 127.0.0.1 and a free port (``MOTO_PORT`` is set
   to it: moto's Step Functions interpreter calls that port);
2. provisions template.yaml (lethe.localcloud.provision) with the local parameters;
3. installs the hooks: Lambda runtime (lambdas), EventBridge delivery (eventbridge), AWS-shaped
   S3 events (s3events), SQS event source mappings and message move tasks (sqs), Step Functions
   JSONata / Spark tasks (sfn_hooks);
   then switches the IAM check on (lethe.localcloud.iam: each role's own credentials, every
   call authorised against the template's policies; LETHE_LOCAL_IAM=enforce|off);
4. uploads the Spark artifacts to the artifacts bucket (lethe.artifacts, as a real deploy does);
5. serves the REST API (api) and a small control endpoint (captured mail, health);
6. writes the state file atomically (JSON, see `state_document`).

`serve_forever()` blocks until SIGTERM or SIGINT, then `stop()` undoes everything in reverse
and marks the state file as not ready; logs and the state directory stay.

State file (JSON): endpoint_url, region, account_id, api_url (the REST API, with its stage),
control_url (GET /mail, GET /health), outputs (the stack Outputs; ApiUrl is the local API),
pid, state_dir, logs_dir, stack_name, parameters (effective, Defaults included), not_created
(logical id -> reason), sqs_event_sources (the local batching window cap and retry delay),
iam (enforce | off: the IAM check's mode), ready (true; false with stopped_at once stopped),
started_at.

Layout: ``<state_file>.d/`` is the state directory; ``logs/`` in it holds ``moto.log`` (every
failed request to the emulated AWS APIs, and the server's other messages), ``<function
name>.log`` per Lambda function, Spark run logs, and ``localcloud.log`` when started by
``lethe local up --detach``.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Final

from lethe.artifacts import upload_spark_artifacts
from lethe.localcloud import moto_speed
from lethe.localcloud.common import PINNED_MOTO_VERSION, CloudError
from lethe.localcloud.deployment import Deployment, Endpoints
from lethe.localcloud.dynamodb_partitions import patch_dynamodb_partitions
from lethe.localcloud.dynamodb_transactions import (
    DYNAMODB_LOCK,
    make_dynamodb_atomic,
    patch_transaction_copies,
)
from lethe.localcloud.intrinsics import ACCOUNT_ID

# The CLI imports this module for the state-file helpers, so it imports nothing heavy at the
# top: moto, the template translator and the hooks are imported where the cloud starts them.

logger = logging.getLogger(__name__)

DEFAULT_REGION: Final = "us-east-1"
LOCAL_PARAMETERS: Final[Mapping[str, str]] = {
    "Stage": "local",
    "ApproverEmails": "approver@example.com",
    "SenderEmail": "lethe@example.com",
    "SparkEngine": "EMR_SERVERLESS",
}
MOTO_CONFIG: Final[Mapping[str, Mapping[str, Any]]] = {
    "lambda": {"use_docker": False},  # moto.awslambda_simple: the local runtime runs handlers
    "batch": {"use_docker": False},
    "stepfunctions": {"execute_state_machine": True},
    "iam": {"load_aws_managed_policies": True},  # SAM roles attach AWSLambdaBasicExecutionRole
}


#: Environment variables that shorten SQS event source waits locally (docs/LOCAL_CLOUD.md):
#: the longest batching window a poller waits (seconds; "none": the mapping's own window) and
#: how soon a failed record is received again (seconds; "none": the queue's VisibilityTimeout).
MAX_BATCH_WINDOW_ENV: Final = "LETHE_LOCAL_MAX_BATCH_WINDOW"
SQS_RETRY_SECONDS_ENV: Final = "LETHE_LOCAL_SQS_RETRY_SECONDS"
DEFAULT_MAX_BATCH_WINDOW: Final = 2.0
DEFAULT_SQS_RETRY_SECONDS: Final = 1
#: How many execution environments a function behind the REST API may run at once (others: 4).
API_WORKERS_ENV: Final = "LETHE_LOCAL_API_WORKERS"
DEFAULT_API_WORKERS: Final = 8


def _env_number(name: str, default: float, *, integer: bool = False) -> float | None:
    """A non-negative number from the environment; None for "none"/"off"; `default` if unset."""
    text = os.environ.get(name, "").strip().lower()
    if not text:
        return default
    if text in {"none", "off"}:
        return None
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        raise CloudError(f"{name}={text!r} is not a number (or 'none')") from None
    if value < 0:
        raise CloudError(f"{name}={text!r} must not be negative")
    return value


def default_state_dir(state_file: Path) -> Path:
    return state_file.with_name(state_file.name + ".d")


def parse_parameter_overrides(items: Sequence[str]) -> dict[str, str]:
    """``Key=Value`` items (as `sam deploy --parameter-overrides` takes them) -> dict."""
    result: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"parameter override {item!r} is not Key=Value")
        result[key.strip()] = value
    return result


def _failed_requests(record: logging.LogRecord) -> bool:
    """moto.log keeps the requests that failed (4xx, 5xx) and every other message of the
    server: the line of a successful request names no operation (`"POST / HTTP/1.1" 200 -`)
    and writing one per request cost 8 % of the cloud process's CPU in a soak."""
    args = record.args if isinstance(record.args, tuple) else ()
    # werkzeug's log_request: '"%s" %s %s' % (request line, status code, size)
    return not (len(args) == 3 and str(args[1]).startswith(("1", "2", "3")))


def configure_moto() -> Callable[[], None]:
    """Make this process's moto behave as the local cloud needs; returns the undo callable.

    Applies MOTO_CONFIG to moto's process-wide user config, `patch_policy_conditions`,
    `make_dynamodb_atomic`, the DynamoDB partition and transaction patches and moto_speed's
    (per-request work no answer depends on: dispatch, SQS counts, DynamoDB answers). The memory
    patches of moto_instances are applied by the local cloud's own process only
    (`lethe.localcloud.__main__`, `patch_moto_memory`): in a process shared with pytest they
    let moto's finalizers run on any thread (see moto_instances).
    """
    from moto.core import config  # noqa: PLC0415 - heavy, see the top

    saved = copy.deepcopy(config.default_user_config)
    target: dict[str, Any] = config.default_user_config  # type: ignore[assignment]
    for section, values in MOTO_CONFIG.items():
        target.setdefault(section, {}).update(values)
    unpatch = patch_policy_conditions()
    unatomic = make_dynamodb_atomic()
    unpartition = patch_dynamodb_partitions(DYNAMODB_LOCK)
    uncopied = patch_transaction_copies()  # one backup per transaction (dynamodb_transactions)
    undispatch = moto_speed.patch_dispatch()
    unsqs = moto_speed.patch_sqs_counts()
    unserialize = moto_speed.patch_dynamodb_serializer()

    def restore() -> None:
        unserialize()
        unsqs()
        undispatch()
        uncopied()
        unpartition()
        unatomic()
        unpatch()
        target.clear()
        target.update(saved)

    return restore


def patch_policy_conditions() -> Callable[[], None]:
    """Evaluate resource-policy Conditions as AWS does when a key is not in the request context.

    Where: ``moto/iam/access_control.py``, ``IAMPolicyStatement.is_action_permitted``, which
    S3 uses for bucket policies (``FakeBucket.get_permission``) on every object request.
    Why: moto 5.2.5 passes no request context for bucket policies and treats a condition on an
    absent key as satisfied. The TLS-only statement every Lethe bucket has (Deny s3:* when
    aws:SecureTransport is false) then denies every request. On AWS a condition on a key that
    is absent from the request context does not hold (except ...IfExists operators and Null),
    so the statement does not apply; and a statement whose condition does not hold is ignored,
    where moto answers DENIED even for an Allow. Patched accordingly: such statements are
    NEUTRAL. Locally no request carries aws:SecureTransport (the local HTTP endpoint stands in
    for AWS's HTTPS one), aws:SourceArn or aws:SourceAccount, so conditional statements do not
    apply; unconditional ones are evaluated by moto as before. Returns the undo callable.
    """
    import moto  # noqa: PLC0415 - heavy, see the top
    from moto.iam.access_control import IAMPolicyStatement, PermissionResult  # noqa: PLC0415 - heavy, see the top

    if moto.__version__ != PINNED_MOTO_VERSION or not hasattr(
        IAMPolicyStatement, "_check_conditions"
    ):
        raise CloudError(
            f"lethe.localcloud.cloud.patch_policy_conditions is written for moto "
            f"{PINNED_MOTO_VERSION} (found {moto.__version__}): re-check "
            "moto/iam/access_control.py IAMPolicyStatement and adjust"
        )
    original = IAMPolicyStatement.is_action_permitted
    check_conditions = IAMPolicyStatement._check_conditions

    def is_action_permitted(
        self: Any,
        action: str,
        resource: str = "*",
        principal: str | None = None,
        incoming_condition_values: dict[str, str] | None = None,
    ) -> Any:
        conditions = self._statement.get("Condition")
        if conditions and not (
            _keys_present(conditions, incoming_condition_values or {})
            and check_conditions(self, incoming_condition_values)
        ):
            return PermissionResult.NEUTRAL
        return original(self, action, resource, principal, incoming_condition_values)

    IAMPolicyStatement.is_action_permitted = is_action_permitted  # type: ignore[method-assign]

    def undo() -> None:
        IAMPolicyStatement.is_action_permitted = original  # type: ignore[method-assign]

    return undo


def _keys_present(conditions: Mapping[str, Any], context: Mapping[str, Any]) -> bool:
    """False when a condition tests a key the request context lacks (and must have it)."""
    for operator, tests in conditions.items():
        if operator.endswith("IfExists") or operator == "Null":
            continue
        if any(key not in context for key in tests):
            return False
    return True


def write_state(state_file: Path, document: Mapping[str, Any]) -> None:
    """Write JSON atomically: a reader sees the old file or the new one, never half of one."""
    state_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = state_file.with_name(f".{state_file.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, state_file)


def read_state(state_file: Path) -> dict[str, Any] | None:
    """The state document, or None when the file is missing or not (yet) valid JSON."""
    try:
        document = json.loads(state_file.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return document if isinstance(document, dict) else None


class _ControlHandler(BaseHTTPRequestHandler):
    """GET /mail: captured SES mail; GET /health: liveness. Local (127.0.0.1) only."""

    def do_GET(self) -> None:
        from lethe.localcloud.mail import captured_mail  # noqa: PLC0415 - heavy, see the top

        routes: dict[str, Callable[[], Any]] = {
            "/mail": captured_mail,
            "/health": lambda: {"ready": True, "pid": os.getpid()},
        }
        produce = routes.get(self.path.split("?", 1)[0].rstrip("/") or "/")
        if produce is None:
            self._send(404, {"message": f"no such path {self.path}"})
            return
        try:
            self._send(200, produce())
        except Exception as error:  # report, keep serving
            logger.exception("control endpoint %s failed", self.path)
            self._send(500, {"message": str(error)})

    def _send(self, status: int, document: Any) -> None:
        body = json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("control: " + format, *args)


class LocalCloud:
    """One running local cloud; see the module docstring."""

    def __init__(
        self,
        repo_root: Path | None = None,
        state_file: Path = Path("localcloud.json"),
        parameters: Mapping[str, str] | None = None,
        region: str = DEFAULT_REGION,
        *,
        stack_name: str | None = None,
        state_dir: Path | None = None,
        max_batching_window: float | str | None = "env",
        sqs_retry_seconds: int | str | None = "env",
    ) -> None:
        """`max_batching_window` and `sqs_retry_seconds` ("env": from MAX_BATCH_WINDOW_ENV and
        SQS_RETRY_SECONDS_ENV, defaults 2 s and 1 s; None: as the template says)."""
        if repo_root is None:
            from lethe.localcloud.template import REPO_ROOT  # noqa: PLC0415 - heavy, see the top

            repo_root = REPO_ROOT
        self.repo_root = repo_root.resolve()
        self.state_file = state_file.resolve()
        self.parameters = {**LOCAL_PARAMETERS, **(parameters or {})}
        self.region = region
        self.stack_name = stack_name or f"lethe-{self.parameters['Stage']}"
        self.state_dir = (state_dir or default_state_dir(self.state_file)).resolve()
        self.deployment: Deployment | None = None
        self.dispatcher: Any = None  # the EventDispatcher, once started (wait_settled)
        self.api_url = ""
        self.control_url = ""
        self.state: dict[str, Any] = {}
        self.iam_mode = "off"  # set when the IAM check is installed (lethe.localcloud.iam)
        self._undo: list[tuple[str, Callable[[], None]]] = []
        self._lock = threading.Lock()
        self.max_batching_window: float | None = (
            _env_number(MAX_BATCH_WINDOW_ENV, DEFAULT_MAX_BATCH_WINDOW)
            if max_batching_window == "env"
            else (None if max_batching_window is None else float(max_batching_window))
        )
        retry = (
            _env_number(SQS_RETRY_SECONDS_ENV, DEFAULT_SQS_RETRY_SECONDS, integer=True)
            if sqs_retry_seconds == "env"
            else sqs_retry_seconds
        )
        self.sqs_retry_seconds: int | None = None if retry is None else int(retry)

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    # -- lifecycle

    def start(self) -> dict[str, Any]:
        """Start everything and write the state file; on failure undo what was started."""
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self.state

    def _start(self) -> None:
        started = time.monotonic()
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self._route_moto_log(self.logs_dir / "moto.log")
        endpoints = self._start_moto()
        self._install_sfn_hooks(endpoints)
        from lethe.localcloud.provision import provision  # noqa: PLC0415 - heavy, see the top

        logger.info(
            "provisioning %s as stack %s", self.repo_root / "template.yaml", self.stack_name
        )
        deployment = provision(
            endpoints, self.repo_root, self.state_dir, self.parameters, self.stack_name
        )
        self.deployment = deployment
        from lethe.localcloud import iam  # noqa: PLC0415 - heavy, see the top

        # each role its own credentials, every call checked (LETHE_LOCAL_IAM, default enforce)
        self.iam_mode = iam.mode_from_environment()
        self._undo.append(("IAM check", iam.install(deployment, self.iam_mode)))
        runtime = self._install_hooks(deployment)
        self._upload_artifacts(deployment)
        self._start_api(deployment, runtime)
        self._start_control()
        self.state = self.state_document(deployment)
        write_state(self.state_file, self.state)
        logger.info(
            "local cloud ready in %.1f s: %s (API %s); state in %s",
            time.monotonic() - started,
            endpoints.endpoint_url,
            self.api_url or "none",
            self.state_file,
        )

    def _route_moto_log(self, path: Path) -> None:
        handler = logging.FileHandler(path)
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        werkzeug = logging.getLogger("werkzeug")  # the moto server's request log
        werkzeug.addHandler(handler)
        werkzeug.addFilter(_failed_requests)
        werkzeug.setLevel(logging.INFO)
        werkzeug.propagate = False

        def close() -> None:
            werkzeug.removeFilter(_failed_requests)
            werkzeug.removeHandler(handler)
            werkzeug.propagate = True
            handler.close()

        self._undo.append(("moto log", close))

    def _start_moto(self) -> Endpoints:
        from moto.server import ThreadedMotoServer  # noqa: PLC0415 - heavy, see the top

        self._undo.append(("moto config", configure_moto()))
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        self._undo.append(("moto server", server.stop))
        # moto's backends are process-wide: the resources of this cloud must not outlive it
        # (a second LocalCloud in the same process, as in the test suite, starts empty).
        self._undo.append(("moto state", _reset_moto_backends))
        port = server.get_host_and_port()[1]
        previous_port = os.environ.get("MOTO_PORT")
        os.environ["MOTO_PORT"] = str(port)  # the Step Functions interpreter calls this port
        self._undo.append(("MOTO_PORT", lambda: _restore_env("MOTO_PORT", previous_port)))
        logger.info("moto %s on 127.0.0.1:%d", _moto_version(), port)
        return Endpoints(f"http://127.0.0.1:{port}", self.region, ACCOUNT_ID)

    def _install_sfn_hooks(self, endpoints: Endpoints) -> None:
        """Before provisioning: creating a state machine parses its definition, and moto's
        parser needs the hooks to read ItemBatcher (sfn_hooks P6)."""
        from lethe.localcloud import sfn_hooks  # noqa: PLC0415 - heavy, see the top

        context = sfn_hooks.HookContext(
            endpoints=endpoints, logs_dir=self.logs_dir, repo_root=self.repo_root
        )
        self._undo.append(("Step Functions hooks", sfn_hooks.install(context)))

    def _install_hooks(self, deployment: Deployment) -> Any:
        from lethe.localcloud import (  # noqa: PLC0415 - heavy, see the top
            eventbridge,
            kms_hooks,
            lambdas,
            s3events,
            sqs,
        )

        api_workers = _env_number(API_WORKERS_ENV, DEFAULT_API_WORKERS, integer=True)
        runtime = lambdas.LambdaRuntime(  # "none": as on AWS, one environment per request
            deployment, max_api_workers=max(1, int(api_workers)) if api_workers else 1000
        )
        self._undo.append(("Lambda workers", runtime.shutdown))
        self._undo.append(("Lambda invoke hook", lambdas.install(runtime)))
        sources = sqs.SqsEventSources(
            runtime,
            max_batching_window=self.max_batching_window,
            retry_visibility_seconds=self.sqs_retry_seconds,
        )
        self._undo.append(("SQS message move tasks", sqs.install_message_move_tasks()))
        self._undo.append(("SQS event source mappings", sqs.install(sources)))
        dispatcher = eventbridge.EventDispatcher(runtime)
        dispatcher.add_source(sources)
        self.dispatcher = dispatcher
        self._undo.append(("EventBridge dispatcher", dispatcher.stop))
        self._undo.append(("EventBridge targets hook", eventbridge.install(dispatcher)))
        self._undo.append(("S3 events hook", s3events.install(dispatcher.dispatch)))
        self._undo.append(("KMS digest signing hook", kms_hooks.install()))
        return runtime

    def _upload_artifacts(self, deployment: Deployment) -> None:

        bucket = deployment.outputs.get("ArtifactsBucketName")
        if not bucket:
            logger.warning("no ArtifactsBucketName output: Spark artifacts not uploaded")
            return
        # the archive's stand-in: the pre-flight asks for it as on AWS (lethe.artifacts)
        uris = upload_spark_artifacts(
            deployment.endpoints.client("s3"), bucket, self.repo_root, python_env_stand_in=True
        )
        logger.info("Spark artifacts: %s", ", ".join(uris))

    def _start_api(self, deployment: Deployment, runtime: Any) -> None:
        if not deployment.api_routes:
            logger.info("the template has no REST API routes")
            return
        from lethe.localcloud.api import ApiServer  # noqa: PLC0415 - heavy, see the top
        from lethe.localcloud.provision import localize_outputs  # noqa: PLC0415 - heavy, see the top

        server = ApiServer(deployment, runtime, api_id=_rest_api_id(deployment))
        self.api_url = server.start()
        self._undo.append(("REST API server", server.stop))
        deployment.outputs = localize_outputs(deployment, self.api_url)

    def _start_control(self) -> None:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _ControlHandler)
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever, name="local-control", daemon=True)
        thread.start()
        self.control_url = f"http://127.0.0.1:{server.server_address[1]}"

        def stop() -> None:
            server.shutdown()
            server.server_close()

        self._undo.append(("control endpoint", stop))

    def state_document(self, deployment: Deployment) -> dict[str, Any]:
        """What the state file holds (the CLI and the tests read it)."""
        return {
            "endpoint_url": deployment.endpoints.endpoint_url,
            "region": deployment.endpoints.region,
            "account_id": deployment.endpoints.account_id,
            "api_url": self.api_url,
            "control_url": self.control_url,
            "outputs": dict(deployment.outputs),
            "pid": os.getpid(),
            "state_dir": str(self.state_dir),
            "logs_dir": str(self.logs_dir),
            "stack_name": self.stack_name,
            "parameters": dict(deployment.parameters),
            "not_created": dict(deployment.not_created),
            # each function's template variables as deployed here (`lethe local sam-env`)
            "function_environments": {
                logical_id: dict(spec.environment)
                for logical_id, spec in sorted(deployment.functions.items())
            },
            "sqs_event_sources": {
                "max_batching_window_seconds": self.max_batching_window,
                "retry_seconds": self.sqs_retry_seconds,
            },
            "iam": self.iam_mode,  # enforce | off (LETHE_LOCAL_IAM)
            "ready": True,
            "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }

    def serve_forever(self) -> None:
        """Block until SIGTERM or SIGINT, then stop."""
        previous = signal.signal(signal.SIGTERM, raise_keyboard_interrupt)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            logger.info("stopping the local cloud")
        finally:
            signal.signal(signal.SIGTERM, previous)
            self.stop()

    def stop(self) -> None:
        """Undo everything started, in reverse; mark the state file as not ready. Idempotent."""
        with self._lock:
            undo, self._undo = self._undo, []
        for name, action in reversed(undo):
            try:
                action()
            except Exception:  # keep stopping the rest
                logger.exception("stopping %s failed", name)
        self._mark_stopped()

    def _mark_stopped(self) -> None:
        state = read_state(self.state_file)
        if state is None or state.get("pid") != os.getpid():
            return
        state.pop("pid", None)
        state["ready"] = False
        state["stopped_at"] = datetime.now(UTC).isoformat(timespec="seconds")
        with contextlib.suppress(OSError):
            write_state(self.state_file, state)


def _reset_moto_backends() -> None:
    from moto.moto_api._internal.models import moto_api_backend  # noqa: PLC0415 - heavy

    moto_api_backend.reset()


def raise_keyboard_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _restore_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def _moto_version() -> str:
    import moto  # noqa: PLC0415 - heavy, see the top

    return str(moto.__version__)


def _rest_api_id(deployment: Deployment) -> str | None:
    """The physical id of the template's REST API (the translated template names its type)."""
    translated = deployment.state_dir / "translated-template.json"
    try:
        resources = json.loads(translated.read_text()).get("Resources", {})
    except (OSError, json.JSONDecodeError):
        return None
    for logical_id, resource in resources.items():
        if (
            resource.get("Type") == "AWS::ApiGateway::RestApi"
            and logical_id in deployment.physical_ids
        ):
            return deployment.physical_ids[logical_id]
    return None
