"""Hooks that let moto's Step Functions interpreter run Lethe's state machines for real.

moto 5.2.5 executes state machines with LocalStack's ASL engine, vendored in
`moto/stepfunctions/parser`. Things Lethe needs do not work there out of the box, so `install()`
patches the engine. Every patch is pinned to moto 5.2.5: `install()` refuses any other
version and checks that each target still looks as described below, so upgrading moto is a
deliberate act (re-read the named files, adjust, bump `PINNED_MOTO_VERSION`).

Patches (all applied by `install()`, all reverted by the callable it returns)
----------------------------------------------------------------------------
P1  JSONata evaluator.
    Where: `moto/stepfunctions/parser/asl/jsonata/jsonata.py`, module global `_eval_jsonata`.
    Why:   `eval_jsonata_expression()` calls `_eval_jsonata`, which moto ships as None (upstream
           LocalStack fills it with a JVM bridge), so every `{% %}` expression, Choice
           `Condition`, `Assign`, `Output`, `Arguments` and JSONPath variable sample (`$var`)
           crashes. We set it to `evaluate_jsonata`, built on `jsonata-python`. The engine hands
           over one self-contained expression, `($states:={...};$var:=...;EXPR)`, in which it has
           already bound `$states.input/result/errorOutput/context` and the Assign variables.
           `lift_declarations` reads those JSON values (P2) with the json module and binds them
           as variables, so JSONata parses only EXPR: parsing the whole execution input again
           on every evaluation was most of the cloud's CPU under load (`make soak`).
P2  JSON-safe variable declarations.
    Where: `encode_jsonata_variable_declarations` in `asl/jsonata/jsonata.py`, imported by name
           into `asl/eval/states.py` and `asl/eval/variable_store.py` (patched in all three).
    Why:   moto writes string values as `"{value}"` without escaping, so an input or variable
           holding `"`, `\\` or a newline breaks the generated expression. The replacement writes
           every value as JSON, which is valid JSONata.
P3  ASL's own JSONata functions.
    Where: `get_intrinsic_functions_declarations`, imported by name into
           `asl/component/common/string/string_expression.py` (source:
           `asl/component/intrinsic/jsonata.py`).
    Why:   moto declares `$partition`, `$range`, `$hash`, `$uuid`, `$parse` as JSONata code in
           front of each expression; `$hash` and `$uuid` only return "not supported", `$parse`
           uses `$eval`, and `$random([seed])` is missing. The wrapper drops moto's declarations
           for these six; `evaluate_jsonata` binds Python implementations instead (see
           `ASL_JSONATA_FUNCTIONS`).
P4  JSONata errors become `States.QueryEvaluationError`.
    Where: `StringJSONata._eval_body` in `asl/component/common/string/string_expression.py`.
    Why:   without it a failing expression is a bare Python exception, which the engine reports
           as `States.Runtime` and which no Retry/Catch can name as AWS documents. The wrapper
           raises the engine's `FailureEventException` with `States.QueryEvaluationError`.
P5  Spark tasks.
    Where: `state_task_for`, imported by name into `asl/parse/preprocessor.py` (source:
           `asl/component/state/exec/state_task/state_task_factory.py`).
    Why:   `glue:startJobRun.sync` goes to `StateTaskServiceGlue`, whose .sync path crashes
           (`StateTaskServiceCallback._eval_integration_pattern` calls `interrupt_all()` on a
           callback endpoint that is None when `.waitForTaskToken` is unsupported) and would only
           poll moto's fake job run; `emr-serverless` maps to `StateTaskServiceUnsupported`, which
           has no .sync. The wrapper returns `GlueStartJobRunSync` /
           `EmrServerlessStartJobRunSync` for exactly `glue:startJobRun.sync` and
           `emr-serverless:startJobRun.sync`; every other resource gets moto's own class. Both
           share one base class, `_SparkStartJobRunSync` (submit, run, record, answer or fail),
           run the job's real script with `spark_runner.run_spark_job` and record the run in
           moto's Glue (`moto/glue/models.py`: `FakeJob.job_runs`, subclass of `FakeJobRun`) or
           EMR Serverless backend (`moto/emrserverless/models.py`:
           `EMRServerlessBackend.start_job_run`, `JobRun.state`), so GetJobRun/GetJobRuns and
           ListJobRuns show them.
P6  ItemBatcher in a Distributed Map.
    Where: `AmazonStateLanguageParser.parse` (`asl/parse/asl_parser.py`, used by
           CreateStateMachine's validation and by every execution), `DistributedIterationComponent.
           _map_run` (`.../iteration/distributed_iteration_component.py`) and the `_eval_job` of
           `DistributedItemProcessorWorker` and `DistributedIteratorWorker`.
    Why:   moto's grammar has no ItemBatcher, so a definition with one is refused. `parse` takes
           every Map's ItemBatcher out of the definition, lets moto parse the rest, checks the
           batcher as AWS does and attaches an `ItemBatcherPlan` to the Map's iteration
           component (limits and BatchInput are evaluated by components moto parses from a Pass
           state holding the same fields). `_map_run` then applies ItemSelector to each item,
           cuts the selected items into `{"Items", "BatchInput"}` child inputs (`batch_items`)
           and runs one child per batch; `_eval_job` makes the Map Run's item counts count the
           items of each batch (DescribeMapRun: items in itemCounts, batches in
           executionCounts). The state machine's stored definition is unchanged.
P8  One parse at a time.
    Where: the same `AmazonStateLanguageParser.parse` wrapper as P6.
    Why:   moto's `Preprocessor` keeps its query language scope stack in a class attribute
           (`_query_language_per_scope = []`) that every parse shares, and every execution
           parses its definition in its own thread. Two executions of a JSONata machine with a
           JSONPath state (the erasure's approval wait) starting at once interleave their
           scopes and one fails "Cannot downgrade from JSONata context to a JSONPath context"
           in its thread: the execution stays RUNNING with no event. The wrapper holds a lock.
P7  ItemReader `arn:aws:states:::s3:listObjectsV2`.
    Where: `ResourceEvalS3._handle_list_objects_v2` (`.../item_reader/eval/resource_eval_s3.py`).
    Why:   moto lists one page (1,000 keys), fails on an empty listing (`response["Contents"]`)
           and passes boto3's objects on (datetimes the engine cannot serialise, `ETag`). The
           replacement reads every page and makes the items AWS documents ("ItemReader (Map)"):
           `{Etag, Key, LastModified (epoch seconds), Size, StorageClass}`; an S3 error fails
           the Map with States.ItemReaderFailed.

Outside the engine, `install()` also sets moto's `default_user_config["stepfunctions"]
["execute_state_machine"] = True` and `MOTO_PORT` (the engine's aws-sdk and service tasks call
`http://localhost:$MOTO_PORT`); both are restored on uninstall.

What the Spark tasks return (as the AWS .sync integrations do)
--------------------------------------------------------------
glue:startJobRun.sync
    TaskSubmitted output `{"JobName", "JobRunId"}`; task result = the GetJobRun JobRun:
    `Id, Attempt, JobName, StartedOn, LastModifiedOn, CompletedOn` (epoch milliseconds, as Step
    Functions serialises them), `JobRunState` (SUCCEEDED | FAILED | TIMEOUT | STOPPED),
    `Arguments` (the run's own, as GetJobRun shows them), `ErrorMessage` (failures: the script's
    final exception line), `ExecutionTime` (s), `Timeout` (min), `GlueVersion`, `WorkerType`,
    `NumberOfWorkers`, `MaxCapacity`, `AllocatedCapacity`, `PredecessorRuns`, `LogGroupName`,
    `ExecutionClass`. The script gets the merged arguments (DefaultArguments < task Arguments <
    NonOverridableArguments) minus Glue's own parameters (`GLUE_SYSTEM_ARGUMENTS`), plus
    `--JOB_NAME` and `--JOB_RUN_ID` as Glue passes them; `--extra-py-files` go on PYTHONPATH and
    `--conf` into the Spark configuration. `--additional-python-modules` is not installed.
emr-serverless:startJobRun.sync
    TaskSubmitted output `{"ApplicationId", "JobRunId", "Arn"}`; task result = the GetJobRun
    jobRun with Step Functions' PascalCase member names: `ApplicationId, JobRunId, Arn, Name,
    CreatedBy, CreatedAt, UpdatedAt` (epoch ms), `ExecutionRole`, `State` (SUCCESS | FAILED |
    CANCELLED), `StateDetails` (failures: "Job failed, ... ExitCode: N. Last few exceptions:
    <exception>"), `ReleaseLabel`, `JobDriver`, `ConfigurationOverrides`,
    `ExecutionTimeoutMinutes`, `TotalExecutionDurationSeconds`, `Tags`. Only SparkSubmit drivers
    run; `--py-files` and `--conf` (over `spark-defaults` properties) count, other spark-submit
    options are ignored. The request is first checked against the StartJobRun input shape of
    the EMR Serverless model botocore ships (member names, types, required members, lengths):
    what the API would refuse fails the task with `EMRServerless.ValidationException`. The
    Python environment of the run (`spark.archives` `<s3 url>#<dir>` and the
    `spark.emr-serverless.driverEnv.PYSPARK_DRIVER_PYTHON` / `...driverEnv.PYSPARK_PYTHON` /
    `spark.executorEnv.PYSPARK_PYTHON` pointing into `./<dir>/`) is checked for consistency (an
    interpreter in an archive the run does not unpack fails the run, as it would on EMR) and
    then not applied: the script runs with this venv's Python, which has the same pins
    (docs/SPARK.md). `ConfigurationOverrides.MonitoringConfiguration` (CloudWatch logging) is
    recorded on the run only; the driver's output goes to `<logs_dir>/spark-<JobRunId>.log`.
Failures
    A job that ends badly fails the task with `States.TaskFailed`, cause = the JSON of that job
    run (so Retry/Catch on States.TaskFailed work). API errors use the service's name, as Step
    Functions does: `Glue.EntityNotFoundException`, `Glue.ConcurrentRunsExceededException`,
    `EMRServerless.ResourceNotFoundException`, `EMRServerless.ValidationException`, cause = the
    service's message. Each run's driver output is in `<logs_dir>/spark-<JobRunId>.log`.
Not covered
    Request-response `glue:startJobRun` (no .sync) still goes to moto's class, which records a
    run but runs nothing; heartbeats are not sent; other emr-serverless actions are moto's.
"""

from __future__ import annotations

import abc
import copy
import functools
import hashlib
import json
import logging
import math
import os
import random
import re
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar, Final, Generic, Protocol, TypeVar, cast
from urllib.parse import urlparse

import jsonata
import moto
from botocore.exceptions import ClientError, ParamValidationError
from botocore.session import get_session as _botocore_session
from botocore.validate import ParamValidator
from jsonata.jexception import JException
from jsonata.utils import Utils as _JsonataUtils
from moto.core import config as moto_config
from moto.core.exceptions import JsonRESTError
from moto.core.utils import utcnow
from moto.emrserverless.models import JobRun as EmrServerlessJobRun
from moto.emrserverless.models import emrserverless_backends
from moto.glue.models import FakeJob, FakeJobRun, glue_backends
from moto.stepfunctions.parser.api import (
    EvaluationFailedEventDetails,
    HistoryEventType,
    TaskFailedEventDetails,
)
from moto.stepfunctions.parser.asl.component.common.error_name.custom_error_name import (
    CustomErrorName,
)
from moto.stepfunctions.parser.asl.component.common.error_name.error_name import ErrorName
from moto.stepfunctions.parser.asl.component.common.error_name.failure_event import (
    FailureEvent,
    FailureEventException,
)
from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name import (
    StatesErrorName,
)
from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name_type import (
    StatesErrorNameType,
)
from moto.stepfunctions.parser.asl.component.common.string import (
    string_expression as _string_expression,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_map.item_reader.eval.resource_eval_s3 import (  # noqa: E501
    ResourceEvalS3 as _ResourceEvalS3,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration.distributed_iteration_component import (  # noqa: E501
    DistributedIterationComponent as _DistributedIterationComponent,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration.itemprocessor.distributed_item_processor_worker import (  # noqa: E501
    DistributedItemProcessorWorker as _DistributedItemProcessorWorker,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration.iterator.distributed_iterator_worker import (  # noqa: E501
    DistributedIteratorWorker as _DistributedIteratorWorker,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_task.credentials import (
    StateCredentials,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.resource import (
    ResourceCondition,
    ResourceRuntimePart,
    ServiceResource,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service_callback import (  # noqa: E501
    StateTaskServiceCallback,
)
from moto.stepfunctions.parser.asl.eval import states as _eval_states
from moto.stepfunctions.parser.asl.eval import variable_store as _eval_variable_store
from moto.stepfunctions.parser.asl.eval.environment import Environment
from moto.stepfunctions.parser.asl.eval.event.event_detail import EventDetails
from moto.stepfunctions.parser.asl.eval.states import ItemData, MapData
from moto.stepfunctions.parser.asl.jsonata import jsonata as _engine_jsonata
from moto.stepfunctions.parser.asl.parse import preprocessor as _preprocessor
from moto.stepfunctions.parser.asl.parse.asl_parser import (
    AmazonStateLanguageParser as _AmazonStateLanguageParser,
)
from moto.stepfunctions.parser.asl.parse.asl_parser import (
    ASLParserException as _ASLParserException,
)

from lethe.localcloud.deployment import Endpoints
from lethe.localcloud.spark_runner import (
    DEFAULT_MASTER,
    RunSlots,
    SparkRunResult,
    parse_spark_submit_parameters,
    run_spark_job,
)

LOG = logging.getLogger(__name__)

PINNED_MOTO_VERSION: Final = "5.2.5"
DEFAULT_MAX_RUN_SECONDS: Final = 3600


# ----------------------------------------------------------------------------------------------
# Context


class HookContextLike(Protocol):
    """What `install()` needs; `Deployment` (deployment.py) and `HookContext` both provide it."""

    @property
    def endpoints(self) -> Endpoints: ...

    @property
    def logs_dir(self) -> Path: ...

    @property
    def repo_root(self) -> Path: ...


@dataclass(frozen=True)
class HookContext:
    endpoints: Endpoints
    logs_dir: Path  # spark-<run id>.log files go here
    repo_root: Path  # relative script locations (not s3://) resolve against it
    spark_master: str = DEFAULT_MASTER
    max_run_seconds: float = DEFAULT_MAX_RUN_SECONDS  # cap on every Spark run
    spark_slots: RunSlots | None = None  # None: LETHE_LOCAL_SPARK_RUNS (spark_runner.RunSlots)


@dataclass(frozen=True)
class _Runtime:
    endpoints: Endpoints
    logs_dir: Path
    repo_root: Path
    spark_master: str
    max_run_seconds: float
    slots: RunSlots

    def run(
        self,
        env: Environment,
        *,
        script: str,
        args: list[str],
        py_files: list[str],
        conf: Mapping[str, str],
        run_id: str,
        timeout_seconds: float,
    ) -> SparkRunResult:
        result = run_spark_job(
            script,
            args,
            py_files,
            endpoints=self.endpoints,
            logs_dir=self.logs_dir,
            run_id=run_id,
            timeout_seconds=min(timeout_seconds, self.max_run_seconds),
            spark_conf=conf,
            master=self.spark_master,
            should_continue=env.is_running,
            base_dir=self.repo_root,
            slots=self.slots,
        )
        LOG.info(
            "Spark run %s %s in %.1f s (log %s)%s",
            run_id,
            "succeeded" if result.succeeded else "failed",
            result.duration,
            result.log_path,
            f": {result.error_message}" if result.error_message else "",
        )
        return result


# ----------------------------------------------------------------------------------------------
# P1-P4: JSONata


class JSONataEvaluationError(Exception):
    """A JSONata expression failed; `detail` is what jsonata-python said (code: message)."""

    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = detail


_HASH_ALGORITHMS: Final[Mapping[str, str]] = {
    "MD5": "md5",
    "SHA-1": "sha1",
    "SHA-256": "sha256",
    "SHA-384": "sha384",
    "SHA-512": "sha512",
}


def _asl_hash(value: Any, algorithm: Any) -> str:
    name = _HASH_ALGORITHMS.get(str(algorithm))
    if name is None:
        raise JSONataEvaluationError(
            f"$hash: unsupported algorithm {algorithm!r} (use {', '.join(_HASH_ALGORITHMS)})"
        )
    data = (
        value if isinstance(value, str) else json.dumps(_plain_json(value), separators=(",", ":"))
    )
    return hashlib.new(name, data.encode("utf-8")).hexdigest()


def _asl_random(seed: Any = None) -> float:
    if seed is None:
        return random.random()  # noqa: S311 - $random is not for cryptography in ASL either
    return random.Random(int(seed)).random()  # noqa: S311


def _asl_uuid() -> str:
    return str(uuid.uuid4())


def _asl_parse(text: Any) -> Any:
    if not isinstance(text, str):
        raise JSONataEvaluationError("$parse: the argument must be a string holding JSON")
    try:
        return json.loads(text)
    except ValueError as exc:
        raise JSONataEvaluationError(f"$parse: not valid JSON: {exc}") from exc


def _asl_partition(array: Any, size: Any) -> list[Any]:
    items = list(array) if isinstance(array, list) else [array]
    if not isinstance(size, int | float) or size < 1 or int(size) != size:
        raise JSONataEvaluationError("$partition: the chunk size must be a positive integer")
    step = int(size)
    return [items[start : start + step] for start in range(0, len(items), step)]


_RANGE_LIMIT: Final = 1_000_000  # a guard against a typo hanging the interpreter, not an AWS limit


def _asl_range(start: Any, end: Any, step: Any = 1) -> list[Any]:
    if not all(isinstance(v, int | float) for v in (start, end, step)) or step == 0:
        raise JSONataEvaluationError("$range: start, end and a non-zero step must be numbers")
    count = math.floor((end - start) / step) + 1
    if count > _RANGE_LIMIT:
        raise JSONataEvaluationError(f"$range: more than {_RANGE_LIMIT} items")
    return [start + index * step for index in range(max(count, 0))]


ASL_JSONATA_FUNCTIONS: Final[Mapping[str, Callable[..., Any]]] = {
    "partition": _asl_partition,
    "range": _asl_range,
    "hash": _asl_hash,
    "random": _asl_random,
    "uuid": _asl_uuid,
    "parse": _asl_parse,
}
_NATIVE_REFERENCES: Final = frozenset(f"${name}" for name in ASL_JSONATA_FUNCTIONS)
_JSONATA_NULL: Final = _JsonataUtils.NULL_VALUE


_DECLARATION: Final = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*):=")
_JSON_DECODER: Final = json.JSONDecoder()


def lift_declarations(expression: str) -> tuple[str, dict[str, Any]]:
    """P1: the engine's expression is `(<declarations><expression>)`, and P2 writes each
    declared value (`$states`, every variable) as JSON. Read those values with the json module
    and bind them as variables, leaving JSONata's parser only the expression itself: parsing the
    whole execution input again for every evaluation (each Map iteration's, each Choice's) was
    most of the local cloud's CPU under load (`make soak`). Returns the rest of the expression
    and the bindings; a declaration that is not plain JSON (none are, after P2/P3) stops it.
    moto also checks a string result's type with `$type(<the same expression>)`: that one too."""
    head = next((p for p in ("(", "$type((") if expression.startswith(p)), None)
    if head is None:
        return expression, {}
    bindings: dict[str, Any] = {}
    position = len(head)
    while match := _DECLARATION.match(expression, position):
        try:
            value, end = _JSON_DECODER.raw_decode(expression, match.end())
        except ValueError:
            break
        if expression[end : end + 1] != ";":
            break
        # a JSON null bound at the top is JSONata's null, not "undefined"
        bindings[match.group(1)] = _JSONATA_NULL if value is None else value
        position = end + 1
    if not bindings:
        return expression, {}
    return head + expression[position:], bindings


def evaluate_jsonata(expression: str) -> Any:
    """P1: evaluate one self-contained JSONata expression as Step Functions would."""
    try:
        rest, bindings = lift_declarations(expression)
        compiled = jsonata.Jsonata(rest)
        for name, function in ASL_JSONATA_FUNCTIONS.items():
            compiled.register_lambda(name, function)
        result = compiled.evaluate(None, bindings)
    except JSONataEvaluationError:
        raise
    except JException as exc:
        raise JSONataEvaluationError(f"{exc.error}: {exc}") from exc
    except RecursionError as exc:
        raise JSONataEvaluationError("the expression recursed too deeply") from exc
    except Exception as exc:
        raise JSONataEvaluationError(f"{type(exc).__name__}: {exc}") from exc
    return _plain_json(result)


def _plain_json(value: Any) -> Any:
    """jsonata-python returns list subclasses and, for some expressions, functions or NaN: give
    the engine plain JSON values, and fail (as AWS does) on what JSON cannot hold."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise JSONataEvaluationError("the expression returned a number JSON cannot hold")
        return int(value) if value.is_integer() and abs(value) < 2**53 else value
    if isinstance(value, list):
        return [_plain_json(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _plain_json(item) for key, item in value.items()}
    raise JSONataEvaluationError(
        f"the expression returned an unsupported result type ({type(value).__name__})"
    )


def _encode_variable_declarations(bindings: dict[str, Any]) -> str:
    """P2: moto's `encode_jsonata_variable_declarations`, with strings written as JSON."""
    return "".join(
        f"{reference}:={json.dumps(value, separators=(',', ':'), default=_json_default)};"
        for reference, value in bindings.items()
    )


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def _make_declarations_filter(original: Callable[[set[str]], str]) -> Callable[[set[str]], str]:
    def get_intrinsic_functions_declarations(variable_references: set[str]) -> str:
        """P3: moto's declarations minus the functions `evaluate_jsonata` binds natively."""
        return original(set(variable_references) - _NATIVE_REFERENCES)

    return get_intrinsic_functions_declarations


def _make_string_jsonata_eval_body(
    original: Callable[[Any, Environment], None],
) -> Callable[[Any, Environment], None]:
    def _eval_body(self: Any, env: Environment) -> None:
        """P4: a failing expression is `States.QueryEvaluationError`, as in AWS."""
        try:
            original(self, env)
        except JSONataEvaluationError as exc:
            error = StatesErrorNameType.StatesQueryEvaluationError.to_name()
            cause = (
                f"The JSONata expression '{self.expression}' threw an error during "
                f"evaluation: {exc.detail}"
            )
            raise FailureEventException(
                FailureEvent(
                    env=env,
                    error_name=StatesErrorName(typ=StatesErrorNameType.StatesQueryEvaluationError),
                    event_type=HistoryEventType.EvaluationFailed,
                    event_details=_event_details(
                        evaluationFailedEventDetails=(
                            EvaluationFailedEventDetails(error=error, cause=cause)
                        )
                    ),
                )
            ) from exc

    return _eval_body


# ----------------------------------------------------------------------------------------------
# P5: Spark tasks


def _event_details(**details: Any) -> EventDetails:
    """moto's EventDetails is a TypedDict of every event kind; an event sets exactly one."""
    return cast(EventDetails, details)


def _epoch_millis(value: datetime | None) -> int | None:
    if value is None:
        return None
    aware = value if value.tzinfo else value.replace(tzinfo=UTC)
    return int(aware.timestamp() * 1000)


def _without_nulls(job_run: Mapping[str, Any]) -> dict[str, Any]:
    """Step Functions leaves out the members of a job run that have no value."""
    return {key: value for key, value in job_run.items() if value is not None}


def _state_timeout_seconds(task: StateTaskServiceCallback, env: Environment) -> float:
    task.timeout.eval(env=env)
    return float(env.stack.pop())


@dataclass(frozen=True)
class SparkRunPlan:
    """What the service would run: the script, its arguments, --py-files and Spark conf."""

    script: str
    argv: list[str]
    py_files: list[str]
    conf: dict[str, str]


_RunT = TypeVar("_RunT")


class _SparkStartJobRunSync(StateTaskServiceCallback, Generic[_RunT]):
    """The `.sync` Spark integration both services share (P5).

    `_eval_service_task` records a run in moto's backend of the service and answers the
    TaskSubmitted output; `_eval_integration_pattern` runs the job's real script locally
    (`_Runtime.run`), records the outcome on the run and answers the service's job run, or
    fails the task with `States.TaskFailed` and that job run as cause. A subclass says how its
    service does each step; `_RunT` is its kind of moto job run.
    """

    SERVICE: ClassVar[str]  # API errors are named `<SERVICE>.<code>`, as Step Functions does
    PARAMETERS: ClassVar[frozenset[str]]  # the task parameters the API takes; others dropped

    def __init__(self, runtime: _Runtime):
        super().__init__(
            supported_integration_patterns={cast(ResourceCondition, ResourceCondition.Sync)}
        )
        self._lethe = runtime

    def _get_supported_parameters(self) -> set[str] | None:
        return set(self.PARAMETERS)

    def _eval_service_task(
        self,
        env: Environment,
        resource_runtime_part: ResourceRuntimePart,
        normalised_parameters: dict[str, Any],
        state_credentials: StateCredentials,
    ) -> None:
        env.stack.append(self._submit(env, resource_runtime_part, normalised_parameters))

    def _eval_integration_pattern(
        self,
        env: Environment,
        resource_runtime_part: ResourceRuntimePart,
        normalised_parameters: dict[str, Any],
        state_credentials: StateCredentials,
    ) -> None:
        run = self._submitted_run(env, resource_runtime_part, env.stack.pop())
        plan = self._plan(env, run, normalised_parameters)
        result = self._lethe.run(
            env,
            script=plan.script,
            args=plan.argv,
            py_files=plan.py_files,
            conf=plan.conf,
            run_id=self._run_id(run),
            timeout_seconds=min(_state_timeout_seconds(self, env), self._time_limit_seconds(run)),
        )
        output = self._record(run, result)
        if not result.succeeded:
            raise self._task_failed(env, output)
        env.stack.append(output)

    def _task_failed(self, env: Environment, job_run: Mapping[str, Any]) -> FailureEventException:
        """What AWS reports when a .sync job ends badly: States.TaskFailed, job run as cause."""
        error = StatesErrorName(typ=StatesErrorNameType.StatesTaskFailed)
        return self._failure(env, error, json.dumps(job_run))

    def _error(self, env: Environment, code: str, message: str) -> FailureEventException:
        """An API error of the service, named as Step Functions names it (Glue.X)."""
        return self._failure(env, CustomErrorName(f"{self.SERVICE}.{code}"), message)

    def _failure(self, env: Environment, error: ErrorName, cause: str) -> FailureEventException:
        return FailureEventException(
            FailureEvent(
                env=env,
                error_name=error,
                event_type=HistoryEventType.TaskFailed,
                event_details=_event_details(
                    taskFailedEventDetails=TaskFailedEventDetails(
                        error=str(error.error_name),
                        cause=cause,
                        resource=self._get_sfn_resource(),
                        resourceType=self._get_sfn_resource_type(),
                    )
                ),
            )
        )

    # -- what each service does

    @abc.abstractmethod
    def _submit(
        self, env: Environment, part: ResourceRuntimePart, parameters: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Start a run in moto's backend; return the TaskSubmitted output that names it."""

    @abc.abstractmethod
    def _submitted_run(
        self, env: Environment, part: ResourceRuntimePart, submitted: Mapping[str, Any]
    ) -> _RunT: ...

    @abc.abstractmethod
    def _plan(self, env: Environment, run: _RunT, parameters: Mapping[str, Any]) -> SparkRunPlan:
        """What to run; a run that cannot start is recorded and fails the task here."""

    @abc.abstractmethod
    def _run_id(self, run: _RunT) -> str: ...

    @abc.abstractmethod
    def _time_limit_seconds(self, run: _RunT) -> float:
        """The run's own time limit (the state's TimeoutSeconds applies as well)."""

    @abc.abstractmethod
    def _record(self, run: _RunT, result: SparkRunResult) -> dict[str, Any]:
        """Record the outcome on the run; return the job run, the task result or failure cause."""


# Glue ------------------------------------------------------------------------------------------

# Special job parameters Glue itself consumes (AWS Glue docs, "Using job parameters in AWS Glue
# jobs"); the local run applies --extra-py-files and --conf and passes none of them to the script.
GLUE_SYSTEM_ARGUMENTS: Final = frozenset(
    {
        "--additional-python-modules",
        "--auto-scale-within-microbatch",
        "--class",
        "--conf",
        "--continuous-log-conversionPattern",
        "--continuous-log-logGroup",
        "--continuous-log-logStreamPrefix",
        "--customer-driver-env-vars",
        "--customer-executor-env-vars",
        "--datalake-formats",
        "--disable-proxy-v2",
        "--enable-auto-scaling",
        "--enable-continuous-cloudwatch-log",
        "--enable-continuous-log-filter",
        "--enable-glue-datacatalog",
        "--enable-job-insights",
        "--enable-lakeformation-fine-grained-access",
        "--enable-metrics",
        "--enable-observability-metrics",
        "--enable-rename-algorithm-v2",
        "--enable-s3-parquet-optimized-committer",
        "--enable-spark-ui",
        "--encryption-type",
        "--executor-cores",
        "--extra-files",
        "--extra-jars",
        "--extra-py-files",
        "--job-bookmark-option",
        "--job-language",
        "--python-modules-installer-option",
        "--scriptLocation",
        "--spark-event-logs-path",
        "--TempDir",
        "--use-postgres-driver",
        "--user-jars-first",
        "--write-shuffle-files-to-s3",
        "--write-shuffle-spills-to-s3",
        "--shuffle-storage-path",
        "--JOB_NAME",
        "--JOB_RUN_ID",
        "--JOB_ID",
    }
)
# The parameters of glue:startJobRun that Step Functions passes on (moto 5.2.5's
# StateTaskServiceGlue list); others are dropped.
_GLUE_PARAMETERS: Final = frozenset(
    {
        "JobName",
        "JobRunQueuingEnabled",
        "JobRunId",
        "Arguments",
        "AllocatedCapacity",
        "Timeout",
        "MaxCapacity",
        "SecurityConfiguration",
        "NotificationProperty",
        "WorkerType",
        "NumberOfWorkers",
        "ExecutionClass",
    }
)
_GLUE_RUN_ACTIVE: Final = frozenset({"STARTING", "RUNNING", "STOPPING", "WAITING"})
_GLUE_DEFAULT_TIMEOUT_MINUTES: Final = 2880


def glue_run_plan(
    *,
    job_name: str,
    run_id: str,
    command: Mapping[str, Any],
    default_arguments: Mapping[str, str],
    run_arguments: Mapping[str, str],
    non_overridable_arguments: Mapping[str, str],
) -> SparkRunPlan:
    """What Glue would run: the job's script, its arguments (defaults < run < non-overridable),
    --extra-py-files and --conf applied, Glue's own parameters dropped, and --JOB_NAME and
    --JOB_RUN_ID passed as Glue passes them (a script must tolerate unknown arguments)."""
    script = command.get("ScriptLocation") or ""
    if not script:
        raise ValueError(f"Glue job {job_name} has no Command.ScriptLocation")
    merged = {**default_arguments, **run_arguments, **non_overridable_arguments}
    py_files = [
        part.strip() for part in str(merged.get("--extra-py-files", "")).split(",") if part.strip()
    ]
    conf = parse_spark_submit_parameters(
        f"--conf {merged['--conf']}" if merged.get("--conf") else ""
    ).conf
    argv = ["--JOB_NAME", job_name, "--JOB_RUN_ID", run_id]
    for key, value in merged.items():
        name = key if key.startswith("--") else f"--{key}"
        if name in GLUE_SYSTEM_ARGUMENTS:
            continue
        argv.extend([name, str(value)])
    return SparkRunPlan(script=script, argv=argv, py_files=py_files, conf=conf)


class LocalGlueJobRun(FakeJobRun):
    """A job run that really runs: moto's FakeJobRun with a state we set, not a state machine."""

    def __init__(self, job: FakeJob, parameters: Mapping[str, Any]):
        super().__init__(
            job_name=job.name,
            arguments=dict(parameters.get("Arguments") or {}),
            allocated_capacity=parameters.get("AllocatedCapacity") or job.allocated_capacity,
            max_capacity=parameters.get("MaxCapacity") or job.max_capacity,
            timeout=parameters.get("Timeout") or job.timeout or _GLUE_DEFAULT_TIMEOUT_MINUTES,
            worker_type=parameters.get("WorkerType") or job.worker_type,
            security_configuration=(
                parameters.get("SecurityConfiguration") or job.security_configuration
            ),
            number_of_workers=parameters.get("NumberOfWorkers") or job.number_of_workers,
            notification_property=(
                parameters.get("NotificationProperty") or job.notification_property
            ),
        )
        self.job = job
        self.run_state = "RUNNING"
        self.error_message = ""
        self.glue_version = job.glue_version or "5.0"
        self.execution_class = parameters.get("ExecutionClass") or job.execution_class
        self.completed_on: datetime | None = None  # type: ignore[assignment]  # None: running
        self.execution_time = 0

    @property
    def status(self) -> str:
        return self.run_state

    @status.setter
    def status(self, value: str) -> None:
        self.run_state = value

    def finish(self, state: str, error_message: str, seconds: float) -> None:
        self.run_state = state
        self.error_message = error_message
        self.completed_on = self.modified_on = utcnow()
        self.execution_time = max(1, round(seconds)) if state != "RUNNING" else 0

    def as_dict(self) -> dict[str, Any]:
        """GetJobRun / GetJobRuns (moto serialises the datetimes)."""
        result = super().as_dict()
        result.update(
            {
                "ExecutionTime": self.execution_time,
                "GlueVersion": self.glue_version,
                "LogGroupName": "/aws-glue/jobs",
                "ExecutionClass": self.execution_class,
            }
        )
        if self.completed_on is None:
            result.pop("CompletedOn", None)
        if self.error_message:
            result["ErrorMessage"] = self.error_message
        if not self.arguments:
            result.pop("Arguments", None)
        return result

    def to_step_functions(self) -> dict[str, Any]:
        """The task result of glue:startJobRun.sync: the JobRun, timestamps in epoch millis."""
        result = self.as_dict()
        for key in ("StartedOn", "LastModifiedOn", "CompletedOn"):
            if key in result:
                result[key] = _epoch_millis(result[key])
        return _without_nulls(result)


class GlueStartJobRunSync(_SparkStartJobRunSync[LocalGlueJobRun]):
    """`arn:aws:states:::glue:startJobRun.sync` that runs the job's script locally."""

    SERVICE = "Glue"
    PARAMETERS = _GLUE_PARAMETERS

    def _job(self, env: Environment, part: ResourceRuntimePart, name: Any) -> FakeJob:
        try:
            job: FakeJob = glue_backends[part.account][part.region].get_job(str(name))
        except JsonRESTError as exc:
            raise self._error(env, exc.error_type, exc.message) from exc
        return job

    def _submit(
        self, env: Environment, part: ResourceRuntimePart, parameters: Mapping[str, Any]
    ) -> dict[str, Any]:
        job = self._job(env, part, parameters.get("JobName"))
        limit = int((job.execution_property or {}).get("MaxConcurrentRuns", 1))
        if sum(run.status in _GLUE_RUN_ACTIVE for run in job.job_runs) >= limit:
            raise self._error(
                env, "ConcurrentRunsExceededException", f"Concurrent runs exceeded for {job.name}"
            )
        run = LocalGlueJobRun(job, parameters)
        job.job_runs.append(run)
        return {"JobName": job.name, "JobRunId": run.job_run_id}

    def _submitted_run(
        self, env: Environment, part: ResourceRuntimePart, submitted: Mapping[str, Any]
    ) -> LocalGlueJobRun:
        job = self._job(env, part, submitted["JobName"])
        run = next(r for r in job.job_runs if r.job_run_id == submitted["JobRunId"])
        assert isinstance(run, LocalGlueJobRun)
        return run

    def _plan(
        self, env: Environment, run: LocalGlueJobRun, parameters: Mapping[str, Any]
    ) -> SparkRunPlan:
        job = run.job
        try:
            return glue_run_plan(
                job_name=job.name,
                run_id=run.job_run_id,
                command=cast(Mapping[str, Any], job.command or {}),
                default_arguments=job.default_arguments or {},
                run_arguments=parameters.get("Arguments") or {},
                non_overridable_arguments=job.non_overridable_arguments or {},
            )
        except ValueError as exc:
            run.finish("FAILED", str(exc), 0)
            raise self._task_failed(env, run.to_step_functions()) from exc

    def _run_id(self, run: LocalGlueJobRun) -> str:
        return str(run.job_run_id)

    def _time_limit_seconds(self, run: LocalGlueJobRun) -> float:
        return float(run.timeout or 0) * 60 or math.inf

    def _record(self, run: LocalGlueJobRun, result: SparkRunResult) -> dict[str, Any]:
        if result.succeeded:
            run.finish("SUCCEEDED", "", result.duration)
        elif result.timed_out:
            run.finish("TIMEOUT", result.error_message, result.duration)
        elif result.cancelled:
            run.finish("STOPPED", "Job run was stopped", result.duration)
        else:
            run.finish("FAILED", result.error_message, result.duration)
        return run.to_step_functions()


# EMR Serverless --------------------------------------------------------------------------------

_EMR_PARAMETERS: Final = frozenset(
    {
        "ApplicationId",
        "ClientToken",
        "ExecutionRoleArn",
        "JobDriver",
        "ConfigurationOverrides",
        "Tags",
        "ExecutionTimeoutMinutes",
        "Name",
        "ExecutionIamPolicy",
        "RetryPolicy",
        "Mode",
    }
)
_EMR_DEFAULT_TIMEOUT_MINUTES: Final = 720
# Map values whose keys are data, not API member names (left as they are).
_VERBATIM_MEMBERS: Final = frozenset({"Properties", "Tags", "LogTypes"})


def _camel_case_members(value: Any) -> Any:
    """ASL spells the EMR Serverless API in PascalCase; the API (and moto) uses camelCase."""
    if isinstance(value, list):
        return [_camel_case_members(item) for item in value]
    if not isinstance(value, dict):
        return value
    return {
        key[:1].lower() + key[1:]: (item if key in _VERBATIM_MEMBERS else _camel_case_members(item))
        for key, item in value.items()
    }


def _pascal_case_members(value: Any) -> Any:
    """moto keeps the request in API spelling; Step Functions answers in PascalCase."""
    if isinstance(value, list):
        return [_pascal_case_members(item) for item in value]
    if not isinstance(value, dict):
        return value
    result = {}
    for key, item in value.items():
        name = key[:1].upper() + key[1:]
        result[name] = item if name in _VERBATIM_MEMBERS else _pascal_case_members(item)
    return result


def emr_run_plan(parameters: Mapping[str, Any]) -> SparkRunPlan:
    """What EMR Serverless would run for JobDriver.SparkSubmit: EntryPoint with
    EntryPointArguments; --py-files and --conf from SparkSubmitParameters (over the
    `spark-defaults` classification of ConfigurationOverrides); other spark-submit options are
    ignored."""
    driver = (parameters.get("JobDriver") or {}).get("SparkSubmit")
    if not isinstance(driver, Mapping) or not driver.get("EntryPoint"):
        raise ValueError(
            "JobDriver.SparkSubmit.EntryPoint is required "
            "(the local cloud runs Spark job drivers only)"
        )
    conf: dict[str, str] = {}
    overrides = parameters.get("ConfigurationOverrides") or {}
    for classification in overrides.get("ApplicationConfiguration") or []:
        if classification.get("Classification") == "spark-defaults":
            conf.update(
                {str(k): str(v) for k, v in (classification.get("Properties") or {}).items()}
            )
    submit = parse_spark_submit_parameters(driver.get("SparkSubmitParameters"))
    if submit.ignored:
        LOG.info("local EMR Serverless run ignores spark-submit options %s", submit.ignored)
    conf.update(submit.conf)
    return SparkRunPlan(
        script=str(driver["EntryPoint"]),
        argv=[str(arg) for arg in driver.get("EntryPointArguments") or []],
        py_files=submit.py_files,
        conf=conf,
    )


@functools.lru_cache(maxsize=1)
def _start_job_run_input_shape() -> Any:
    model = _botocore_session().get_service_model("emr-serverless")
    return model.operation_model("StartJobRun").input_shape


def emr_request_problems(parameters: Mapping[str, Any]) -> list[str]:
    """What EMR Serverless' StartJobRun would refuse in the task's parameters (ASL's PascalCase),
    checked against botocore's service model: unknown members, wrong types, missing required
    members, lengths. Step Functions supplies ClientToken when the state does not."""
    request = _camel_case_members({k: v for k, v in parameters.items() if k in _EMR_PARAMETERS})
    request.setdefault("clientToken", "lethe-local")
    report = ParamValidator().validate(request, _start_job_run_input_shape())
    return [line.strip() for line in report.generate_report().splitlines() if line.strip()]


# The interpreter settings of an EMR Serverless run (Using Python libraries with EMR Serverless).
EMR_PYTHON_ENV_CONF: Final = (
    "spark.emr-serverless.driverEnv.PYSPARK_DRIVER_PYTHON",
    "spark.emr-serverless.driverEnv.PYSPARK_PYTHON",
    "spark.executorEnv.PYSPARK_PYTHON",
)


def emr_python_env_problems(conf: Mapping[str, str]) -> list[str]:
    """Why the run's Python environment could not start on EMR Serverless: each
    `spark.archives` entry must be an S3 object (`s3://bucket/key[#dir]`, unpacked as `dir`, by
    default the file name), and an interpreter setting `./<dir>/...` must name such a `dir`."""
    problems: list[str] = []
    unpacked: set[str] = set()
    for entry in (part.strip() for part in conf.get("spark.archives", "").split(",")):
        if not entry:
            continue
        location, _, directory = entry.partition("#")
        url = urlparse(location)
        if url.scheme != "s3" or not url.netloc or not url.path.strip("/"):
            problems.append(f"spark.archives: {location!r} is not an S3 object URL")
            continue
        unpacked.add(directory or Path(url.path).name)
    for key in EMR_PYTHON_ENV_CONF:
        value = conf.get(key, "")
        if value.startswith("./"):
            directory = value[2:].split("/", 1)[0]
            if directory not in unpacked:
                problems.append(
                    f"{key}={value}: no spark.archives entry is unpacked as {directory!r}"
                )
    return problems


def emr_job_run_output(job_run: Any) -> dict[str, Any]:
    """The task result of emr-serverless:startJobRun.sync: the GetJobRun JobRun, with member
    names in PascalCase as Step Functions returns them and timestamps in epoch millis."""
    output: dict[str, Any] = {
        "ApplicationId": job_run.application_id,
        "JobRunId": job_run.id,
        "Arn": job_run.arn,
        "Name": job_run.name,
        "CreatedBy": job_run.created_by,
        "CreatedAt": _epoch_millis(job_run.created_at),
        "UpdatedAt": _epoch_millis(job_run.updated_at),
        "ExecutionRole": job_run.execution_role_arn,
        "State": job_run.state,
        "StateDetails": job_run.state_details or "",
        "ReleaseLabel": job_run.release_label,
        "JobDriver": _pascal_case_members(job_run.job_driver),
        "ExecutionTimeoutMinutes": job_run.execution_timeout_minutes,
        "TotalExecutionDurationSeconds": job_run.total_execution_duration_seconds,
        "Tags": job_run.tags or {},
    }
    if job_run.configuration_overrides:
        output["ConfigurationOverrides"] = _pascal_case_members(job_run.configuration_overrides)
    return _without_nulls(output)


class EmrServerlessStartJobRunSync(_SparkStartJobRunSync[EmrServerlessJobRun]):
    """`arn:aws:states:::emr-serverless:startJobRun.sync` that runs the entry point locally."""

    SERVICE = "EMRServerless"
    PARAMETERS = _EMR_PARAMETERS

    def _submit(
        self, env: Environment, part: ResourceRuntimePart, parameters: Mapping[str, Any]
    ) -> dict[str, Any]:
        problems = emr_request_problems(parameters)
        if problems:
            raise self._error(env, "ValidationException", "; ".join(problems))
        try:
            emr_run_plan(parameters)
        except ValueError as exc:
            raise self._error(env, "ValidationException", str(exc)) from exc
        timeout = parameters.get("ExecutionTimeoutMinutes")
        try:
            job_run = emrserverless_backends[part.account][part.region].start_job_run(
                application_id=str(parameters.get("ApplicationId")),
                client_token=str(parameters.get("ClientToken") or uuid.uuid4()),
                execution_role_arn=str(parameters.get("ExecutionRoleArn") or ""),
                job_driver=_camel_case_members(parameters.get("JobDriver")),
                configuration_overrides=_camel_case_members(
                    parameters.get("ConfigurationOverrides")
                ),
                tags=parameters.get("Tags"),
                execution_timeout_minutes=int(timeout) if timeout else None,
                name=parameters.get("Name"),
            )
        except JsonRESTError as exc:
            raise self._error(env, exc.error_type, exc.message) from exc
        except (IndexError, ValueError) as exc:  # e.g. an ExecutionRoleArn that is no ARN
            raise self._error(env, "ValidationException", f"invalid request: {exc}") from exc
        job_run.state = "RUNNING"
        job_run.created_at = job_run.updated_at = utcnow()
        return {"ApplicationId": job_run.application_id, "JobRunId": job_run.id, "Arn": job_run.arn}

    def _submitted_run(
        self, env: Environment, part: ResourceRuntimePart, submitted: Mapping[str, Any]
    ) -> EmrServerlessJobRun:
        backend = emrserverless_backends[part.account][part.region]
        return backend.get_job_run(submitted["ApplicationId"], submitted["JobRunId"])

    def _plan(
        self, env: Environment, run: EmrServerlessJobRun, parameters: Mapping[str, Any]
    ) -> SparkRunPlan:
        plan = emr_run_plan(parameters)  # valid: _submit checked it
        problems = emr_python_env_problems(plan.conf)
        if problems:  # EMR starts such a run, and it fails when the driver starts
            run.state = "FAILED"
            run.state_details = (
                "Job failed, please check complete logs in configured logging destination. "
                f"Last few exceptions: {'; '.join(problems)}"
            )
            run.updated_at = utcnow()
            run.total_execution_duration_seconds = 0
            raise self._task_failed(env, emr_job_run_output(run))
        return plan

    def _run_id(self, run: EmrServerlessJobRun) -> str:
        return str(run.id)

    def _time_limit_seconds(self, run: EmrServerlessJobRun) -> float:
        return float(run.execution_timeout_minutes or _EMR_DEFAULT_TIMEOUT_MINUTES) * 60

    def _record(self, run: EmrServerlessJobRun, result: SparkRunResult) -> dict[str, Any]:
        if result.succeeded:
            run.state, run.state_details = "SUCCESS", ""
        elif result.timed_out or result.cancelled:
            run.state = "CANCELLED"
            run.state_details = (
                "Job run timed out." if result.timed_out else "Job run was cancelled."
            )
        else:
            run.state = "FAILED"
            run.state_details = (
                "Job failed, please check complete logs in configured logging destination. "
                f"ExitCode: {result.exit_code}. Last few exceptions: {result.error_message}"
            )
        run.updated_at = utcnow()
        run.total_execution_duration_seconds = max(1, round(result.duration))
        return emr_job_run_output(run)


def _make_state_task_for(
    original: Callable[[Any], Any],
    runtime: _Runtime,
) -> Callable[[Any], Any]:
    def state_task_for(resource: Any) -> Any:
        """P5: Lethe's Spark tasks for the two .sync Spark integrations, moto's for the rest."""
        if (
            isinstance(resource, ServiceResource)
            and resource.condition == ResourceCondition.Sync
            and resource.api_action.lower() == "startjobrun"
        ):
            if resource.service_name == "glue":
                return GlueStartJobRunSync(runtime)
            if resource.service_name == "emr-serverless":
                return EmrServerlessStartJobRunSync(runtime)
        return original(resource)

    return state_task_for


# ----------------------------------------------------------------------------------------------
# P6-P7: a Distributed Map's items (ItemReader s3:listObjectsV2) and batches (ItemBatcher)
#
# AWS documents both in the Step Functions Developer Guide, "ItemReader (Map)" and "ItemBatcher
# (Map)", and the States Language specification ("Reading Items", "Selecting Items", "Batching
# Items", "Processing Items"): the Map reads its items, applies ItemSelector to each (with
# Map.Item.Index and Map.Item.Value in the context), then cuts the selected items into batches;
# each child execution gets {"Items": [...]} plus "BatchInput" when given, and the Map's result
# has one element per batch.

ITEM_BATCHER_FIELDS: Final = frozenset(
    {
        "BatchInput",
        "MaxItemsPerBatch",
        "MaxItemsPerBatchPath",
        "MaxInputBytesPerBatch",
        "MaxInputBytesPerBatchPath",
    }
)
# "MaxInputBytesPerBatch: the maximum size of a batch in bytes, up to 256 KiB"; without it "the
# interpreter processes as many items it can process up to 256 KiB in each child workflow
# execution" (ItemBatcher (Map)). 256 KiB is also the limit of an execution's input.
MAX_BATCH_BYTES: Final = 256 * 1024
_BATCHER_STATE: Final = "ItemBatcher"
_PLAN_ATTRIBUTE: Final = "_lethe_item_batcher"  # on a Map's DistributedIterationComponent
_SIZES_ATTRIBUTE: Final = "_lethe_batch_sizes"  # on a Map Run record: items per child


class ItemBatcherError(ValueError):
    """A batch limit that is no positive integer, or an item bigger than the byte limit."""


def _json_size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


def batch_items(
    items: list[Any],
    *,
    max_items: int | None,
    max_bytes: int | None,
    batch_input: Any = None,
    has_batch_input: bool = False,
) -> list[dict[str, Any]]:
    """The child inputs of a batched Map: `{"Items": [...]}` (plus `"BatchInput"` when the
    ItemBatcher has one), in item order. A batch holds at most `max_items` items and at most
    `max_bytes` bytes (never more than 256 KiB), counted as the child input's compact UTF-8 JSON,
    BatchInput included: AWS does not say whether BatchInput counts, so the stricter reading.
    An item that cannot fit a batch on its own is an error (no child could start with it)."""
    for name, limit in (("MaxItemsPerBatch", max_items), ("MaxInputBytesPerBatch", max_bytes)):
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 1
        ):
            raise ItemBatcherError(f"{name} must be a positive integer, not {limit!r}")
    if max_items is None and max_bytes is None:
        raise ItemBatcherError("an ItemBatcher needs MaxItemsPerBatch or MaxInputBytesPerBatch")
    byte_limit = min(max_bytes or MAX_BATCH_BYTES, MAX_BATCH_BYTES)
    envelope: dict[str, Any] = {"Items": []}
    if has_batch_input:
        envelope["BatchInput"] = batch_input
    empty_size = _json_size(envelope)
    batches: list[list[Any]] = []
    current: list[Any] = []
    size = empty_size
    for index, item in enumerate(items):
        item_size = _json_size(item)
        if empty_size + item_size > byte_limit:
            raise ItemBatcherError(
                f"item {index} ({item_size} bytes) does not fit a batch of {byte_limit} bytes"
            )
        full = max_items is not None and len(current) >= max_items
        if current and (full or size + 1 + item_size > byte_limit):
            batches.append(current)
            current, size = [], empty_size
        size += item_size + (1 if current else 0)
        current.append(item)
    if current:
        batches.append(current)
    return [{**envelope, "Items": batch} for batch in batches]


def s3_list_item(content: Mapping[str, Any]) -> dict[str, Any]:
    """One item of an `s3:listObjectsV2` ItemReader, as "ItemReader (Map)" shows it: `Etag`,
    `Key`, `LastModified` (epoch seconds), `Size`, `StorageClass`."""
    modified = content.get("LastModified")
    if isinstance(modified, datetime):
        aware = modified if modified.tzinfo else modified.replace(tzinfo=UTC)
        modified = int(aware.timestamp())
    return {
        "Etag": content.get("ETag"),
        "Key": content["Key"],
        "LastModified": modified,
        "Size": content.get("Size"),
        "StorageClass": content.get("StorageClass", "STANDARD"),
    }


def _states_failure(
    env: Environment, typ: StatesErrorNameType, cause: str
) -> FailureEventException:
    error = StatesErrorName(typ=typ)
    return FailureEventException(
        FailureEvent(
            env=env,
            error_name=error,
            event_type=HistoryEventType.EvaluationFailed,
            event_details=_event_details(
                evaluationFailedEventDetails=EvaluationFailedEventDetails(
                    error=typ.to_name(), cause=cause
                )
            ),
        )
    )


def _list_objects_v2(
    env: Environment, resource_runtime_part: ResourceRuntimePart, state_credentials: Any
) -> None:
    """P7: every page of the listing (moto reads one page of 1,000 keys and fails on an empty
    prefix), each object in the ItemReader's item shape; S3 errors fail the Map with
    States.ItemReaderFailed."""
    s3 = _ResourceEvalS3._get_s3_client(
        resource_runtime_part=resource_runtime_part, state_credentials=state_credentials
    )
    parameters = dict(env.stack.pop() or {})
    items: list[dict[str, Any]] = []
    try:
        for page in s3.get_paginator("list_objects_v2").paginate(**parameters):
            items.extend(s3_list_item(content) for content in page.get("Contents", []))
    except (ClientError, ParamValidationError) as exc:
        raise _states_failure(
            env, StatesErrorNameType.StatesItemReaderFailed, f"s3:listObjectsV2 failed: {exc}"
        ) from exc
    env.stack.append(items)


@dataclass(frozen=True)
class ItemBatcherPlan:
    """One Map state's ItemBatcher: literal limits, and the rest evaluated at run time by a
    component moto parsed from a Pass state that holds the same fields (so paths, payload
    templates, intrinsic functions, JSONata and variables mean what they mean elsewhere)."""

    state: str
    max_items: int | None
    max_bytes: int | None
    has_batch_input: bool
    dynamic: Any | None  # the evaluator component, or None when everything is literal
    jsonata: bool

    def evaluate(self, env: Environment) -> tuple[int | None, int | None, Any]:
        values: dict[str, Any] = {}
        if self.dynamic is not None:
            frame = env.open_frame()
            try:
                map_input = env.states.get_input()
                frame.states.reset(input_value=map_input)
                frame.stack.append(map_input)  # JSONPath paths read the top of the stack
                context = cast(dict[str, Any], env.states.context_object.context_object_data)
                frame_context = cast(
                    dict[str, Any], frame.states.context_object.context_object_data
                )
                for key in ("State", "Map"):  # $$.State.EnteredTime and the like
                    if key in context:
                        frame_context[key] = context[key]
                self.dynamic.eval(frame)
                values = dict(frame.stack.pop())
            finally:
                env.delete_frame(frame)
        max_items = values.get("max_items", self.max_items)
        max_bytes = values.get("max_bytes", self.max_bytes)
        return max_items, max_bytes, values.get("batch_input")


def item_batcher_problems(batcher: Any, *, jsonata: bool) -> list[str]:
    """What AWS's definition checks refuse in an ItemBatcher (ItemBatcher (Map); the States
    Language's "Batching Items")."""
    if not isinstance(batcher, dict):
        return ["ItemBatcher must be an object"]
    problems = [
        f"ItemBatcher: unknown field {k}" for k in sorted(set(batcher) - ITEM_BATCHER_FIELDS)
    ]
    if not {
        "MaxItemsPerBatch",
        "MaxItemsPerBatchPath",
        "MaxInputBytesPerBatch",
        "MaxInputBytesPerBatchPath",
    } & set(batcher):
        problems.append("ItemBatcher needs MaxItemsPerBatch(Path) or MaxInputBytesPerBatch(Path)")
    for name in ("MaxItemsPerBatch", "MaxInputBytesPerBatch"):
        if name in batcher and f"{name}Path" in batcher:
            problems.append(f"ItemBatcher: {name} and {name}Path are exclusive")
        if jsonata and f"{name}Path" in batcher:
            problems.append(f"ItemBatcher: {name}Path is JSONPath only")
        value = batcher.get(name)
        if value is None or (jsonata and _is_jsonata(value)):
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            problems.append(f"ItemBatcher: {name} must be a positive integer")
        elif name == "MaxInputBytesPerBatch" and value > MAX_BATCH_BYTES:
            problems.append(f"ItemBatcher: MaxInputBytesPerBatch is at most {MAX_BATCH_BYTES}")
    if not jsonata and "BatchInput" in batcher and not isinstance(batcher["BatchInput"], dict):
        problems.append("ItemBatcher: BatchInput must be a payload template (an object)")
    return problems


def _is_jsonata(value: Any) -> bool:
    return isinstance(value, str) and value.startswith("{%") and value.endswith("%}")


def _item_batcher_plan(
    original_parse: Callable[[str], Any], state: str, batcher: dict[str, Any], *, jsonata: bool
) -> ItemBatcherPlan:
    literal_items = batcher.get("MaxItemsPerBatch")
    literal_bytes = batcher.get("MaxInputBytesPerBatch")
    dynamic: dict[str, Any] = {}
    if jsonata:
        for key, field in (
            ("max_items", "MaxItemsPerBatch"),
            ("max_bytes", "MaxInputBytesPerBatch"),
        ):
            if _is_jsonata(batcher.get(field)):
                dynamic[key] = batcher[field]
        if "BatchInput" in batcher:
            dynamic["batch_input"] = batcher["BatchInput"]
        wrapper = {"QueryLanguage": "JSONata", "Type": "Pass", "Output": dynamic, "End": True}
    else:
        for key, field in (
            ("max_items", "MaxItemsPerBatchPath"),
            ("max_bytes", "MaxInputBytesPerBatchPath"),
        ):
            if field in batcher:
                dynamic[f"{key}.$"] = batcher[field]
        if "BatchInput" in batcher:
            dynamic["batch_input"] = batcher["BatchInput"]
        wrapper = {"Type": "Pass", "Parameters": dynamic, "End": True}
    component = None
    if dynamic:
        program, _ = original_parse(
            json.dumps({"StartAt": _BATCHER_STATE, "States": {_BATCHER_STATE: wrapper}})
        )
        pass_state = program.states.states[_BATCHER_STATE]
        component = pass_state.output.jsonata_template_value if jsonata else pass_state.parameters
    return ItemBatcherPlan(
        state=state,
        max_items=None if _is_jsonata(literal_items) else literal_items,
        max_bytes=None if _is_jsonata(literal_bytes) else literal_bytes,
        has_batch_input="BatchInput" in batcher,
        dynamic=component,
        jsonata=jsonata,
    )


def _nested_states(
    state: dict[str, Any], here: tuple[str, ...]
) -> Iterator[tuple[Any, tuple[str, ...]]]:
    """The States blocks inside one state, with their paths."""
    for key in ("ItemProcessor", "Iterator"):
        if isinstance(state.get(key), dict):
            yield state[key].get("States"), (*here, key)
    for index, branch in enumerate(state.get("Branches") or []):
        if isinstance(branch, dict):
            yield branch.get("States"), (*here, "Branches", str(index))


def _take_item_batchers(document: Any) -> list[tuple[tuple[str, ...], Any]]:
    """Remove every Map state's ItemBatcher from the definition (moto's grammar has none) and
    return them with the path of their state: names, with ItemProcessor/Iterator or
    Branches/<i> between nesting levels."""
    found: list[tuple[tuple[str, ...], Any]] = []
    pending: list[tuple[Any, tuple[str, ...]]] = [
        (document.get("States") if isinstance(document, dict) else None, ())
    ]
    while pending:
        states, path = pending.pop()
        if not isinstance(states, dict):
            continue
        for name, state in states.items():
            if not isinstance(state, dict):
                continue
            here = (*path, name)
            if state.get("Type") == "Map" and "ItemBatcher" in state:
                found.append((here, state.pop("ItemBatcher")))
            pending.extend(_nested_states(state, here))
    return found


def _state_at(program: Any, path: tuple[str, ...]) -> Any:
    states = program.states.states
    position = 0
    while True:
        state = states[path[position]]
        position += 1
        if position == len(path):
            return state
        kind = path[position]
        position += 1
        if kind in ("ItemProcessor", "Iterator"):
            states = state.iteration_component._states.states
        else:  # Branches/<i>
            states = state.branches.programs[int(path[position])].states.states
            position += 1


# P8: moto's Preprocessor keeps its query language scopes in a list that is a class attribute
# (`Preprocessor._query_language_per_scope = []`), shared by every parse. Each execution parses
# its definition in its own thread, so two executions starting together interleave their
# scopes: a JSONata definition with one JSONPath state then fails "Cannot downgrade from JSONata
# context to a JSONPath context", in the execution's thread, and the execution stays RUNNING
# with no history (found by `make soak`: 50 erasure requests filed at once). One parse at a time.
_PARSE_LOCK = threading.RLock()


def _make_parse(original: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(definition: str) -> Any:
        """P6: parse without the ItemBatchers, then attach each to its Map's iteration.
        P8: one parse at a time (moto's parser shares state between parses)."""
        with _PARSE_LOCK:
            return _parse(definition)

    def _parse(definition: str) -> Any:
        try:
            document = json.loads(definition)
        except ValueError:
            return original(definition)
        batchers = _take_item_batchers(document)
        if not batchers:
            return original(definition)
        program, tree = original(json.dumps(document))
        problems: list[str] = []
        for path, batcher in batchers:
            state = _state_at(program, path)
            name = "/".join(path)
            if not isinstance(state.iteration_component, _DistributedIterationComponent):
                problems.append(f"{name}: ItemBatcher needs a Map in DISTRIBUTED mode")
                continue
            jsonata = not state._is_language_query_jsonpath()
            found = item_batcher_problems(batcher, jsonata=jsonata)
            if found:
                problems += [f"{name}: {problem}" for problem in found]
                continue
            plan = _item_batcher_plan(original, name, batcher, jsonata=jsonata)
            setattr(state.iteration_component, _PLAN_ATTRIBUTE, plan)
        if problems:
            raise _ASLParserException(errors=problems)
        return program, tree

    return cast(Callable[[str], Any], staticmethod(parse))


class _ScaledCounter:
    def __init__(self, counter: Any, factor: int):
        self._counter, self._factor = counter, factor

    def count(self, increment: int = 1) -> None:
        self._counter.count(increment * self._factor)

    def offset(self, offset: int) -> None:
        self._counter.offset(offset * self._factor)

    def get(self) -> int:
        return int(self._counter.get())


class _ScaledProgress:
    def __init__(self, progress: Any, factor: int):
        self._progress, self._factor = progress, factor

    def __getattr__(self, name: str) -> Any:
        return _ScaledCounter(getattr(self._progress, name), self._factor)


class _BatchRecordView:
    """The Map Run record as one batch's worker sees it: DescribeMapRun counts items (objects)
    in `itemCounts` and child executions (batches) in `executionCounts`, so an item count moto
    adds for a job counts every item of its batch."""

    def __init__(self, record: Any, batch_size: int):
        self._record = record
        self.item_counter = _ScaledProgress(record.item_counter, batch_size)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._record, name)


def _make_map_run(original: Callable[..., None]) -> Callable[..., None]:
    def _map_run(self: Any, env: Environment, eval_input: Any) -> None:
        """P6: apply ItemSelector to each item, then cut the selected items into batches."""
        plan: ItemBatcherPlan | None = getattr(self, _PLAN_ATTRIBUTE, None)
        if plan is None:
            original(self, env, eval_input)
            return
        items = env.stack.pop()
        selector = eval_input.item_selector or eval_input.parameters
        if selector is not None:
            items = _select_items(env, selector, items)
        max_items, max_bytes, batch_input = plan.evaluate(env)
        try:
            batches = batch_items(
                items,
                max_items=max_items,
                max_bytes=max_bytes,
                batch_input=batch_input,
                has_batch_input=plan.has_batch_input,
            )
        except ItemBatcherError as exc:
            typ = (
                StatesErrorNameType.StatesQueryEvaluationError
                if plan.jsonata
                else StatesErrorNameType.StatesRuntime
            )
            raise _states_failure(env, typ, f"{plan.state}: ItemBatcher: {exc}") from exc
        record = eval_input.map_run_record
        setattr(record, _SIZES_ATTRIBUTE, [len(batch["Items"]) for batch in batches])
        batched = copy.copy(eval_input)
        batched.item_selector = None  # applied above, item by item
        batched.parameters = None
        env.stack.append(batches)
        original(self, env, batched)

    return _map_run


def _select_items(env: Environment, selector: Any, items: list[Any]) -> list[Any]:
    """ItemSelector per item, with Map.Item.Index and Map.Item.Value in the context, as moto's
    workers apply it to one item per child."""
    selected = []
    frame = env.open_frame()
    try:
        map_input = env.states.get_input()
        for index, item in enumerate(items):
            frame.states.context_object.context_object_data["Map"] = MapData(
                Item=ItemData(Index=index, Value=item)
            )
            frame.states.reset(input_value=map_input)
            frame.stack.append(map_input)
            selector.eval(frame)
            selected.append(frame.stack.pop())
            frame.stack.clear()
    finally:
        env.delete_frame(frame)
    return selected


def _make_eval_job(original: Callable[..., None]) -> Callable[..., None]:
    def _eval_job(self: Any, env: Environment, job: Any) -> None:
        """P6: item counts of a batch's child count its items (see `_BatchRecordView`)."""
        record = self._map_run_record
        sizes = getattr(record, _SIZES_ATTRIBUTE, None)
        if sizes is None or isinstance(record, _BatchRecordView):
            original(self, env, job)
            return
        self._map_run_record = _BatchRecordView(record, sizes[job.job_index])
        try:
            original(self, env, job)
        finally:
            self._map_run_record = record

    return _eval_job


# ----------------------------------------------------------------------------------------------
# install / uninstall

_MISSING: Final = object()


@dataclass
class _Patch:
    owner: Any  # a module or a class
    name: str
    replacement: Any
    original: Any = _MISSING
    owned: bool = False  # whether `name` was in owner.__dict__ before we patched

    def apply(self) -> None:
        self.owned = self.name in vars(self.owner)
        self.original = (
            vars(self.owner)[self.name] if self.owned else getattr(self.owner, self.name)
        )
        setattr(self.owner, self.name, self.replacement)

    def revert(self) -> None:
        if vars(self.owner).get(self.name) is not self.replacement:
            LOG.warning(
                "%s.%s was changed by someone else after Lethe patched it; restoring "
                "moto's original anyway",
                getattr(self.owner, "__name__", self.owner),
                self.name,
            )
        if self.owned:
            setattr(self.owner, self.name, self.original)
        else:
            delattr(self.owner, self.name)


class _Installation:
    def __init__(
        self, patches: list[_Patch], restore_env: dict[str, str | None], restore_execute: Any
    ):
        self._patches = patches
        self._restore_env = restore_env
        self._restore_execute = restore_execute
        self._done = False

    def uninstall(self) -> None:
        with _install_lock:
            if self._done:
                return
            for patch in reversed(self._patches):
                patch.revert()
            for key, value in self._restore_env.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            moto_config.default_user_config["stepfunctions"]["execute_state_machine"] = (
                self._restore_execute
            )
            self._done = True
            if _current.installation is self:
                _current.installation = None


_install_lock = threading.Lock()


class _Current:
    installation: _Installation | None = None


_current = _Current()


def _check_pinned_engine() -> None:
    problems = []
    if moto.__version__ != PINNED_MOTO_VERSION:
        problems.append(
            f"moto is {moto.__version__}, the hooks are written for {PINNED_MOTO_VERSION}"
        )
    if getattr(_engine_jsonata, "_eval_jsonata", _MISSING) is not None:
        problems.append("asl/jsonata/jsonata.py: _eval_jsonata is not the unset global (None)")
    expected = [
        (_engine_jsonata, "encode_jsonata_variable_declarations"),
        (_eval_states, "encode_jsonata_variable_declarations"),
        (_eval_variable_store, "encode_jsonata_variable_declarations"),
        (_string_expression, "get_intrinsic_functions_declarations"),
        (_string_expression.StringJSONata, "_eval_body"),
        (_preprocessor, "state_task_for"),
        (StateTaskServiceCallback, "_eval_integration_pattern"),
        (_AmazonStateLanguageParser, "parse"),
        (_DistributedIterationComponent, "_map_run"),
        (_DistributedItemProcessorWorker, "_eval_job"),
        (_DistributedIteratorWorker, "_eval_job"),
        (_ResourceEvalS3, "_handle_list_objects_v2"),
        (_ResourceEvalS3, "_get_s3_client"),
    ]
    problems += [
        f"{getattr(owner, '__name__', owner)}.{name} is missing"
        for owner, name in expected
        if not hasattr(owner, name)
    ]
    if problems:
        raise RuntimeError(
            "Lethe's Step Functions hooks do not fit this moto: " + "; ".join(problems)
        )


def install(context: HookContextLike) -> Callable[[], None]:
    """Patch moto's Step Functions interpreter (see the module docstring) and return the
    callable that undoes it. Raises RuntimeError if the hooks are installed already or if moto
    is not the version they are pinned to."""
    runtime = _Runtime(
        endpoints=context.endpoints,
        logs_dir=Path(context.logs_dir),
        repo_root=Path(context.repo_root),
        spark_master=getattr(context, "spark_master", DEFAULT_MASTER),
        max_run_seconds=float(getattr(context, "max_run_seconds", DEFAULT_MAX_RUN_SECONDS)),
        slots=getattr(context, "spark_slots", None) or RunSlots.from_environment(),
    )
    with _install_lock:
        if _current.installation is not None:
            raise RuntimeError(
                "Lethe's Step Functions hooks are installed already; call the "
                "uninstall callable returned by install() first"
            )
        _check_pinned_engine()
        patches = [
            _Patch(_engine_jsonata, "_eval_jsonata", evaluate_jsonata),
            *(
                _Patch(
                    module, "encode_jsonata_variable_declarations", _encode_variable_declarations
                )
                for module in (_engine_jsonata, _eval_states, _eval_variable_store)
            ),
            _Patch(
                _string_expression,
                "get_intrinsic_functions_declarations",
                _make_declarations_filter(
                    vars(_string_expression)["get_intrinsic_functions_declarations"]
                ),
            ),
            _Patch(
                _string_expression.StringJSONata,
                "_eval_body",
                _make_string_jsonata_eval_body(_string_expression.StringJSONata._eval_body),
            ),
            _Patch(
                _preprocessor,
                "state_task_for",
                _make_state_task_for(vars(_preprocessor)["state_task_for"], runtime),
            ),
            _Patch(
                _AmazonStateLanguageParser,
                "parse",
                _make_parse(_AmazonStateLanguageParser.parse),
            ),
            _Patch(
                _DistributedIterationComponent,
                "_map_run",
                _make_map_run(_DistributedIterationComponent._map_run),
            ),
            *(
                _Patch(worker, "_eval_job", _make_eval_job(worker._eval_job))
                for worker in (_DistributedItemProcessorWorker, _DistributedIteratorWorker)
            ),
            _Patch(_ResourceEvalS3, "_handle_list_objects_v2", staticmethod(_list_objects_v2)),
        ]
        applied: list[_Patch] = []
        try:
            for patch in patches:
                patch.apply()
                applied.append(patch)
        except Exception:
            for patch in reversed(applied):
                patch.revert()
            raise
        port = urlparse(runtime.endpoints.endpoint_url).port
        restore_env: dict[str, str | None] = {}
        if port is not None:
            restore_env["MOTO_PORT"] = os.environ.get("MOTO_PORT")
            os.environ["MOTO_PORT"] = str(port)
        sfn_config = moto_config.default_user_config["stepfunctions"]
        restore_execute = sfn_config.get("execute_state_machine", False)
        sfn_config["execute_state_machine"] = True
        installation = _Installation(applied, restore_env, restore_execute)
        _current.installation = installation
        LOG.info(
            "Lethe Step Functions hooks installed (moto %s, Spark logs in %s)",
            moto.__version__,
            runtime.logs_dir,
        )
    slots = runtime.slots

    def uninstall() -> None:
        installation.uninstall()
        slots.shutdown()  # the warm Spark drivers (spark_runner.WarmDriver)

    return uninstall
