"""Object events: S3 Object Created / Object Deleted on the raw and lake buckets, via EventBridge.

Entry point of every object that reaches Lethe. Records one catalog item per object version
(see lethe_shared.catalog) and starts the ingestion state machine for a new raw object version
under a registered dataset. Invoked asynchronously by the `ObjectEventsRule` EventBridge rule:
an exception makes Lambda retry twice and then park the event in `ObjectEventsDeadLetterQueue`,
so a malformed event is logged with its reason, retried a bounded number of times, and kept.
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

from lethe_shared.catalog import DynamoObjectCatalog, Zone
from lethe_shared.config import Settings, load_settings
from lethe_shared.errors import MalformedEventError
from lethe_shared.ingestion import StepFunctionsIngestionStarter
from lethe_shared.object_events import EventKind, ObjectEvent, record_object_event
from lethe_shared.registry import DynamoDatasetRegistry

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


@dataclass(frozen=True)
class _Dependencies:
    zones: dict[str, Zone]
    registry: DynamoDatasetRegistry
    catalog: DynamoObjectCatalog
    ingestion: StepFunctionsIngestionStarter
    ignored_retention: timedelta


@cache
def _dependencies() -> _Dependencies:
    """Built once per execution environment, at the first invocation (not at import)."""
    settings = load_settings(ObjectEventsSettings)
    dynamodb = boto3.resource("dynamodb")
    return _Dependencies(
        zones={settings.raw_bucket: Zone.RAW, settings.lake_bucket: Zone.LAKE},
        registry=DynamoDatasetRegistry(dynamodb.Table(settings.datasets_table)),
        catalog=DynamoObjectCatalog(dynamodb.Table(settings.catalog_table)),
        ingestion=StepFunctionsIngestionStarter(
            boto3.client("stepfunctions"), settings.ingestion_state_machine_arn
        ),
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
        zones=deps.zones,
        registry=deps.registry,
        catalog=deps.catalog,
        ingestion=deps.ingestion,
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
    }
