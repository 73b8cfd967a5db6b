"""`arn:aws:states:::emr-serverless:startJobRun.sync` run locally (patch P5).

What the task returns (as the AWS .sync integration does)
---------------------------------------------------------
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
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlparse

from botocore.session import get_session as _botocore_session
from botocore.validate import ParamValidator
from moto.core.exceptions import JsonRESTError
from moto.core.utils import utcnow
from moto.emrserverless.models import JobRun as EmrServerlessJobRun
from moto.emrserverless.models import emrserverless_backends
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.resource import (
    ResourceRuntimePart,
)
from moto.stepfunctions.parser.asl.eval.environment import Environment

from lethe.localcloud import iam
from lethe.localcloud.sfn_hooks.spark_sync import (
    SparkRunPlan,
    SparkStartJobRunSync,
    epoch_millis,
    without_nulls,
)
from lethe.localcloud.spark_runner import SparkRunResult
from lethe.localcloud.spark_submit import parse_spark_submit_parameters

LOG = logging.getLogger("lethe.localcloud.sfn_hooks")


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
        "CreatedAt": epoch_millis(job_run.created_at),
        "UpdatedAt": epoch_millis(job_run.updated_at),
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
    return without_nulls(output)


class EmrServerlessStartJobRunSync(SparkStartJobRunSync[EmrServerlessJobRun]):
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

    def _execution_role(self, run: EmrServerlessJobRun) -> str:
        return str(run.execution_role_arn or "")

    def _iam_requests(
        self, part: ResourceRuntimePart, parameters: Mapping[str, Any]
    ) -> list[iam.Request]:
        """AWS's policy for `emr-serverless:startJobRun.sync`: start, get and cancel runs of
        the application, the managed event rule, and PassRole of the execution role."""
        application = (
            f"arn:aws:emr-serverless:{part.region}:{part.account}:/applications/"
            f"{parameters.get('ApplicationId')}"
        )
        rule = (
            f"arn:aws:events:{part.region}:{part.account}:rule/"
            "StepFunctionsGetEventsForEMRServerlessJobRule"
        )
        passed = {"iam:passedtoservice": ["emr-serverless.amazonaws.com"]}
        return [
            iam.Request("emr-serverless:StartJobRun", application),
            iam.Request("emr-serverless:GetJobRun", f"{application}/jobruns/local"),
            iam.Request("emr-serverless:CancelJobRun", f"{application}/jobruns/local"),
            *(iam.Request(f"events:{a}", rule) for a in ("PutTargets", "PutRule", "DescribeRule")),
            iam.Request(
                "iam:PassRole",
                str(parameters.get("ExecutionRoleArn") or ""),
                passed,
                frozenset({"iam:passedtoservice"}),
            ),
        ]

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
