"""The ingestion workflow's catalog steps (statemachines/ingestion.asl.json), one domain function
each (lethe_shared.catalog.ingestion_steps), so that the object catalog has one writer, its
adapter:

    {"step": "mark_ingesting", "execution", "objects": [...]}   -> {"marked": n}
    {"step": "read_outcome", "execution", "object": {...}}      -> {"outcome", "status"?, counts?,
                                                                    "ingest_error"?}
    {"step": "mark_failed", "execution", "objects": [...], "error"}  -> {"failed": n}

`objects` are the execution's input objects ({object_url, version_id, ...}); `execution` is the
execution's ARN, recorded as `ingest_execution` and used as the correlation id of the log lines.
Every step is idempotent; the state machine retries the function's failures.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import ConfigDict, Field, TypeAdapter

from lethe_shared.aws.scrub import scrubbed_errors
from lethe_shared.aws.wiring import Aws, wiring
from lethe_shared.catalog.ingestion_steps import (
    BatchObject,
    mark_failed,
    mark_ingesting,
    read_outcome,
)
from lethe_shared.catalog.object_catalog import DynamoObjectCatalog
from lethe_shared.config import Settings
from lethe_shared.models import Model

logger = Logger()
tracer = Tracer()


class IngestionStepsSettings(Settings):
    catalog_table: str = Field(alias="CATALOG_TABLE", min_length=1)


class MarkIngesting(Model):
    step: Literal["mark_ingesting"]
    execution: str = Field(min_length=1)
    objects: list[BatchObject] = Field(min_length=1)


class ReadOutcome(Model):
    step: Literal["read_outcome"]
    execution: str = Field(min_length=1)
    object: BatchObject


class MarkFailed(Model):
    step: Literal["mark_failed"]
    execution: str = Field(min_length=1)
    objects: list[BatchObject] = Field(min_length=1)
    error: str = Field(min_length=1)


Step = MarkIngesting | ReadOutcome | MarkFailed
# Built on the first event, like every model (lethe_shared.models).
StepEvent: TypeAdapter[Step] = TypeAdapter(
    Annotated[Step, Field(discriminator="step")], config=ConfigDict(defer_build=True)
)


def _build(settings: IngestionStepsSettings, aws: Aws) -> DynamoObjectCatalog:
    return DynamoObjectCatalog(aws.table(settings.catalog_table))


_catalog = wiring(IngestionStepsSettings, _build)


def _run(step: Step, catalog: DynamoObjectCatalog) -> Any:
    if isinstance(step, MarkIngesting):
        marked = mark_ingesting(catalog, step.objects, step.execution)
        logger.info(
            "batch marked INGESTING", extra={"versions": len(step.objects), "marked": marked}
        )
        return {"marked": marked}
    if isinstance(step, ReadOutcome):
        outcome = read_outcome(catalog, step.object)
        return outcome.model_dump(mode="json", exclude_none=True)
    failed = mark_failed(catalog, step.objects, step.error)
    logger.info("batch marked FAILED", extra={"versions": len(step.objects), "failed": failed})
    return {"failed": failed}


@logger.inject_lambda_context(correlation_id_path="execution", log_event=False)
@tracer.capture_lambda_handler
@scrubbed_errors  # Step Functions keeps the error text in the execution history
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    step = StepEvent.validate_python(event)
    logger.append_keys(step=step.step)
    result: dict[str, Any] = _run(step, _catalog())
    return result
