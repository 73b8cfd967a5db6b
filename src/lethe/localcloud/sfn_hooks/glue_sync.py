"""`arn:aws:states:::glue:startJobRun.sync` run locally (patch P5).

What the task returns (as the AWS .sync integration does)
---------------------------------------------------------
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
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final, cast

from moto.core.exceptions import JsonRESTError
from moto.core.utils import utcnow
from moto.glue.models import FakeJob, FakeJobRun, glue_backends
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
                result[key] = epoch_millis(result[key])
        return without_nulls(result)


class GlueStartJobRunSync(SparkStartJobRunSync[LocalGlueJobRun]):
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

    def _execution_role(self, run: LocalGlueJobRun) -> str:
        return str(run.job.role or "")

    def _iam_requests(
        self, part: ResourceRuntimePart, parameters: Mapping[str, Any]
    ) -> list[iam.Request]:
        """AWS's policy for `glue:startJobRun.sync`: start, get and stop runs of the job (the
        job's role was passed when the job was created, not here)."""
        job = f"arn:aws:glue:{part.region}:{part.account}:job/{parameters.get('JobName')}"
        actions = ("StartJobRun", "GetJobRun", "GetJobRuns", "BatchStopJobRun")
        return [iam.Request(f"glue:{action}", job) for action in actions]

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
