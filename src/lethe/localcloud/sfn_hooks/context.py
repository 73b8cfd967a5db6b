"""What every hook shares: the context `install()` takes, the runtime the Spark tasks run
their scripts with, and how a hook hands the engine an event or a failure.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol, cast

from moto.stepfunctions.parser.api import EvaluationFailedEventDetails, HistoryEventType
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
from moto.stepfunctions.parser.asl.eval.environment import Environment
from moto.stepfunctions.parser.asl.eval.event.event_detail import EventDetails

from lethe.localcloud.deployment import Endpoints
from lethe.localcloud.spark_runner import DEFAULT_MASTER, SparkRunResult, run_spark_job
from lethe.localcloud.spark_slots import RunSlots

LOG = logging.getLogger("lethe.localcloud.sfn_hooks")


DEFAULT_MAX_RUN_SECONDS: Final = 3600


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
    spark_slots: RunSlots | None = None  # None: LETHE_LOCAL_SPARK_RUNS (spark_slots.RunSlots)


@dataclass(frozen=True)
class Runtime:
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
        extra_env: Mapping[str, str] | None = None,
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
            extra_env=extra_env,  # the job role's credentials (lethe.localcloud.iam)
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


def make_event_details(**details: Any) -> EventDetails:
    """moto's EventDetails is a TypedDict of every event kind; an event sets exactly one."""
    return cast(EventDetails, details)


def states_failure(env: Environment, typ: StatesErrorNameType, cause: str) -> FailureEventException:
    error = StatesErrorName(typ=typ)
    return FailureEventException(
        FailureEvent(
            env=env,
            error_name=error,
            event_type=HistoryEventType.EvaluationFailed,
            event_details=make_event_details(
                evaluationFailedEventDetails=EvaluationFailedEventDetails(
                    error=typ.to_name(), cause=cause
                )
            ),
        )
    )
