"""Which task class runs a Task state's resource (patch P5, applied by `install()`).

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
           share one base class, `SparkStartJobRunSync` (submit, run, record, answer or fail),
           run the job's real script with `spark_runner.run_spark_job` and record the run in
           moto's Glue (`moto/glue/models.py`: `FakeJob.job_runs`, subclass of `FakeJobRun`) or
           EMR Serverless backend (`moto/emrserverless/models.py`:
           `EMRServerlessBackend.start_job_run`, `JobRun.state`), so GetJobRun/GetJobRuns and
           ListJobRuns show them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.resource import (
    ResourceCondition,
    ServiceResource,
)

from lethe.localcloud.sfn_hooks.context import Runtime
from lethe.localcloud.sfn_hooks.emr_sync import EmrServerlessStartJobRunSync
from lethe.localcloud.sfn_hooks.glue_sync import GlueStartJobRunSync


def make_state_task_for(
    original: Callable[[Any], Any],
    runtime: Runtime,
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
