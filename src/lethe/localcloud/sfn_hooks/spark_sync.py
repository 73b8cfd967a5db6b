"""The `.sync` Spark integration Glue and EMR Serverless share (patch P5, with
`state_tasks`, `glue_sync` and `emr_sync`).

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
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar, Generic, TypeVar, cast

from moto.stepfunctions.parser.api import HistoryEventType, TaskFailedEventDetails
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
from moto.stepfunctions.parser.asl.component.state.exec.state_task.credentials import (
    StateCredentials,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.resource import (
    ResourceCondition,
    ResourceRuntimePart,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service_callback import (  # noqa: E501
    StateTaskServiceCallback,
)
from moto.stepfunctions.parser.asl.eval.environment import Environment

from lethe.localcloud import iam
from lethe.localcloud.sfn_hooks.context import Runtime, make_event_details
from lethe.localcloud.spark_runner import SparkRunResult


def epoch_millis(value: datetime | None) -> int | None:
    if value is None:
        return None
    aware = value if value.tzinfo else value.replace(tzinfo=UTC)
    return int(aware.timestamp() * 1000)


def without_nulls(job_run: Mapping[str, Any]) -> dict[str, Any]:
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


class SparkStartJobRunSync(StateTaskServiceCallback, Generic[_RunT]):
    """The `.sync` Spark integration both services share (P5).

    `_eval_service_task` records a run in moto's backend of the service and answers the
    TaskSubmitted output; `_eval_integration_pattern` runs the job's real script locally
    (`Runtime.run`), records the outcome on the run and answers the service's job run, or
    fails the task with `States.TaskFailed` and that job run as cause. A subclass says how its
    service does each step; `_RunT` is its kind of moto job run.
    """

    SERVICE: ClassVar[str]  # API errors are named `<SERVICE>.<code>`, as Step Functions does
    PARAMETERS: ClassVar[frozenset[str]]  # the task parameters the API takes; others dropped

    def __init__(self, runtime: Runtime):
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
        self._authorize(env, state_credentials, resource_runtime_part, normalised_parameters)
        env.stack.append(self._submit(env, resource_runtime_part, normalised_parameters))

    def _authorize(
        self,
        env: Environment,
        state_credentials: StateCredentials,
        part: ResourceRuntimePart,
        parameters: Mapping[str, Any],
    ) -> None:
        """The IAM check (lethe.localcloud.iam): what Step Functions calls as the state's role
        to start and follow the run (start, poll, the EMR Serverless event rule, PassRole)."""
        try:
            iam.authorize(
                str(state_credentials.role_arn),
                self._iam_requests(part, parameters),
                caller=f"{self.SERVICE} .sync task",
            )
        except iam.AccessDenied as exc:
            raise self._error(env, "AccessDeniedException", str(exc)) from exc

    def _eval_integration_pattern(
        self,
        env: Environment,
        resource_runtime_part: ResourceRuntimePart,
        normalised_parameters: dict[str, Any],
        state_credentials: StateCredentials,
    ) -> None:
        run = self._submitted_run(env, resource_runtime_part, env.stack.pop())
        plan = self._plan(env, run, normalised_parameters)
        role = self._execution_role(run)
        result = self._lethe.run(
            env,
            script=plan.script,
            args=plan.argv,
            py_files=plan.py_files,
            conf=plan.conf,
            run_id=self._run_id(run),
            timeout_seconds=min(_state_timeout_seconds(self, env), self._time_limit_seconds(run)),
            extra_env=iam.role_environment(role),  # the job runs as its execution role
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
                event_details=make_event_details(
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
    def _execution_role(self, run: _RunT) -> str:
        """The role the job runs as (an ARN or a role name); "" for none."""

    @abc.abstractmethod
    def _iam_requests(
        self, part: ResourceRuntimePart, parameters: Mapping[str, Any]
    ) -> list[iam.Request]:
        """What the state's role must be allowed for this task (AWS's documented policy)."""

    @abc.abstractmethod
    def _time_limit_seconds(self, run: _RunT) -> float:
        """The run's own time limit (the state's TimeoutSeconds applies as well)."""

    @abc.abstractmethod
    def _record(self, run: _RunT, result: SparkRunResult) -> dict[str, Any]:
        """Record the outcome on the run; return the job run, the task result or failure cause."""
