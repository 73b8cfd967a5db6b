"""Object events: S3 Object Created / Object Deleted on the raw and lake buckets, via EventBridge.

Entry point of every object that reaches Lethe. Records one catalog item per object version
(see lethe_shared.catalog), starts the ingestion state machine for a new raw object version
under a registered dataset, and keeps the subject index current for lake objects that arrive by
other means and for deletes (lethe_shared.index_maintenance).

Invoked asynchronously by the `ObjectChanged` EventBridge rule: an exception makes Lambda retry
twice and then park the event in `ObjectEventsDeadLetterQueue`, so a malformed event is logged
with its reason, retried a bounded number of times, and kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from functools import cache
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.parser.models import S3EventNotificationEventBridgeModel
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import Field, ValidationError

from lethe_shared.catalog import Buckets, DynamoObjectCatalog
from lethe_shared.config import Settings, load_settings
from lethe_shared.errors import MalformedEventError
from lethe_shared.index_maintenance import AwsIndexRequester, IndexMaintainer
from lethe_shared.ingestion import StepFunctionsIngestionStarter
from lethe_shared.object_events import EventKind, ObjectEvent, record_object_event
from lethe_shared.registry import DynamoDatasetRegistry
from lethe_shared.s3 import S3ObjectStore
from lethe_shared.subjects import DynamoSubjectIndex

logger = Logger()
tracer = Tracer()
metrics = Metrics()


class ObjectEventsSettings(Settings):
    catalog_table: str = Field(alias="CATALOG_TABLE", min_length=1)
    datasets_table: str = Field(alias="DATASETS_TABLE", min_length=1)
    raw_bucket: str = Field(alias="RAW_BUCKET", min_length=3)
    lake_bucket: str = Field(alias="LAKE_BUCKET", min_length=3)
    ignored_retention_days: int = Field(alias="IGNORED_RETENTION_DAYS", ge=1)
    ingestion_state_machine_arn: str = Field(alias="INGESTION_STATE_MACHINE_ARN", min_length=20)
    index_table: str = Field(alias="INDEX_TABLE", min_length=1)
    indexer_function_name: str = Field(alias="INDEXER_FUNCTION_NAME", min_length=1)
    index_backfill_state_machine_arn: str = Field(
        alias="INDEX_BACKFILL_STATE_MACHINE_ARN", min_length=20
    )
    lambda_index_max_bytes: int = Field(alias="LAMBDA_INDEX_MAX_BYTES", ge=0)


@dataclass(frozen=True)
class _Dependencies:
    buckets: Buckets
    registry: DynamoDatasetRegistry
    catalog: DynamoObjectCatalog
    ingestion: StepFunctionsIngestionStarter
    index: IndexMaintainer
    objects: S3ObjectStore
    ignored_retention: timedelta


@cache
def _dependencies() -> _Dependencies:
    """Built once per execution environment, at the first invocation (not at import)."""
    settings = load_settings(ObjectEventsSettings)
    dynamodb = boto3.resource("dynamodb")
    stepfunctions = boto3.client("stepfunctions")
    objects = S3ObjectStore(boto3.client("s3"))
    return _Dependencies(
        buckets=Buckets(raw=settings.raw_bucket, lake=settings.lake_bucket),
        registry=DynamoDatasetRegistry(dynamodb.Table(settings.datasets_table)),
        catalog=DynamoObjectCatalog(dynamodb.Table(settings.catalog_table)),
        ingestion=StepFunctionsIngestionStarter(
            stepfunctions, settings.ingestion_state_machine_arn
        ),
        index=IndexMaintainer(
            index=DynamoSubjectIndex(dynamodb.Table(settings.index_table)),
            objects=objects,
            requester=AwsIndexRequester(
                lambda_client=boto3.client("lambda"),
                function_name=settings.indexer_function_name,
                sfn_client=stepfunctions,
                backfill_state_machine_arn=settings.index_backfill_state_machine_arn,
            ),
            max_lambda_bytes=settings.lambda_index_max_bytes,
        ),
        objects=objects,
        ignored_retention=timedelta(days=settings.ignored_retention_days),
    )


def to_object_event(raw: dict[str, Any]) -> ObjectEvent:
    """Validate an EventBridge S3 event into an ObjectEvent, or raise MalformedEventError."""
    try:
        model = parse(event=raw, model=S3EventNotificationEventBridgeModel)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise MalformedEventError(f"not an S3 EventBridge event: {problems}") from exc
    try:
        kind = EventKind(model.detail_type)
    except ValueError as exc:
        raise MalformedEventError(f"unsupported detail-type {model.detail_type!r}") from exc
    detail = model.detail
    if not detail.object.sequencer:
        raise MalformedEventError("detail.object.sequencer is missing")
    return ObjectEvent(
        kind=kind,
        bucket=detail.bucket.name,
        key=detail.object.key,
        version_id=detail.object.version_id,
        sequencer=detail.object.sequencer,
        etag=detail.object.etag,
        size=int(detail.object.size) if detail.object.size is not None else None,
        reason=detail.reason or "",
        deletion_type=detail.deletion_type or "",
        time=model.time.isoformat(),
    )


@logger.inject_lambda_context(correlation_id_path="id", log_event=False)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    deps = _dependencies()
    try:
        object_event = to_object_event(event)
    except MalformedEventError as exc:
        metrics.add_metric(name="MalformedObjectEvents", unit=MetricUnit.Count, value=1)
        logger.error(
            "malformed object event; Lambda retries it, then the DLQ keeps it",
            extra={"reason": str(exc), "event_id": event.get("id")},
        )
        raise
    outcome = record_object_event(
        object_event,
        buckets=deps.buckets,
        registry=deps.registry,
        catalog=deps.catalog,
        ingestion=deps.ingestion,
        index=deps.index,
        objects=deps.objects,
        ignored_retention=deps.ignored_retention,
    )
    item = outcome.item
    logger.info(
        "object event recorded" if outcome.written else "object event already known; skipped",
        extra={
            "object_url": item.object_url,
            "version_id": item.version_id,
            "status": item.status.value,
            "dataset_id": item.dataset_id,
            "sequencer": item.sequencer,
            "ingestion_requested": outcome.ingestion_requested,
            "index_action": outcome.index_action,
        },
    )
    metric = "ObjectEventsRecorded" if outcome.written else "ObjectEventsSkipped"
    metrics.add_metric(name=metric, unit=MetricUnit.Count, value=1)
    return {
        "object_url": item.object_url,
        "version_id": item.version_id,
        "status": item.status.value,
        "dataset_id": item.dataset_id,
        "written": outcome.written,
        "ingestion_requested": outcome.ingestion_requested,
        "index_action": outcome.index_action,
    }
