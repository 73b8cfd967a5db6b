"""Object events: S3 Object Created / Object Deleted on the raw and lake buckets, in batches.

Entry point of every object that reaches Lethe. The EventBridge rule `lethe-<stage>-object-events`
sends each S3 event to the queue `lethe-<stage>-object-events`; this function takes them from the
queue in batches (SQS event source, `ReportBatchItemFailures`). Each record's body is the
EventBridge S3 event.

Per record, in the batch's order: one catalog item per object version
(lethe_shared.catalog.object_catalog,
conditional on the S3 sequencer, so order and duplicates do not matter), and the subject index
kept current for lake objects that arrive by other means and for deletes
(lethe_shared.index.maintenance). New raw object versions under a registered dataset are
*collected*; after the batch, they are started as one ingestion execution per group of at most
MAX_BATCH_OBJECTS versions, each with a manifest in the reports bucket and a deterministic name
(lethe_shared.ingestion.starter).

Which versions Lethe's own jobs wrote comes from the writes ledger
(lethe_shared.catalog.writes_ledger, in the catalog table), never from object metadata. A
record whose version a Lethe job may have written but not recorded yet (an open intent on its
key) is tried again for a moment (`SETTLE_WAIT_SECONDS` per batch, the common case: the job
records its version milliseconds after its PUT returns), then reported failed *without an
error* (`ObjectEventsDeferred`): SQS delivers it again after the visibility timeout, and the
intent's bound decides it within 4 receives (docs of the ledger module).

Failures are per record (Powertools BatchProcessor): a malformed record (not JSON, not S3's
EventBridge shape) or one that fails on a dependency is logged with its reason and reported in
`batchItemFailures`; SQS redelivers it after the queue's visibility timeout and, after
`maxReceiveCount` receives, moves it to `ObjectEventsDeadLetterQueue`. A group whose manifest or
execution could not be started reports the records that asked for it. The other records of the
batch are deleted from the queue.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.parser.models import S3EventNotificationEventBridgeModel
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import Field, ValidationError

from lethe_shared.aws.s3 import S3ObjectStore, s3_url
from lethe_shared.aws.scrub import scrub_exception
from lethe_shared.aws.wiring import Aws, wiring
from lethe_shared.catalog.object_catalog import Buckets, DynamoObjectCatalog
from lethe_shared.catalog.writes_ledger import DynamoWritesLedger
from lethe_shared.datasets.registry import DynamoDatasetRegistry
from lethe_shared.errors import MalformedEventError, WriteNotSettledError
from lethe_shared.index.maintenance import AwsIndexRequester, IndexMaintainer
from lethe_shared.index.opening import IndexSettings as SettingsWithIndex
from lethe_shared.index.opening import open_subject_index
from lethe_shared.ingestion.object_events import (
    EventKind,
    ObjectEvent,
    Outcome,
    record_object_event,
)
from lethe_shared.ingestion.starter import (
    IngestionCollector,
    IngestionGroup,
    StartOutcome,
    StepFunctionsBatchStarter,
)
from lethe_shared.subject_hashing.shown_keys import PartitionRedactor

logger = Logger()
tracer = Tracer()
metrics = Metrics()
# Failures are reported per record, also when every record failed: the response says which.
processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
# How long one batch waits, in all, for Lethe's jobs to record versions they wrote, before it
# leaves such records to SQS's redelivery; and the pause between two looks at the ledger.
SETTLE_WAIT_SECONDS = 2.0
SETTLE_PAUSE_SECONDS = 0.25


class ObjectEventsSettings(SettingsWithIndex):
    catalog_table: str = Field(alias="CATALOG_TABLE", min_length=1)
    datasets_table: str = Field(alias="DATASETS_TABLE", min_length=1)
    raw_bucket: str = Field(alias="RAW_BUCKET", min_length=3)
    lake_bucket: str = Field(alias="LAKE_BUCKET", min_length=3)
    reports_bucket: str = Field(alias="REPORTS_BUCKET", min_length=3)
    ignored_retention_days: int = Field(alias="IGNORED_RETENTION_DAYS", ge=1)
    ingestion_state_machine_arn: str = Field(alias="INGESTION_STATE_MACHINE_ARN", min_length=20)
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
    starter: StepFunctionsBatchStarter
    index: IndexMaintainer
    objects: S3ObjectStore
    ledger: DynamoWritesLedger
    ignored_retention: timedelta
    reports_bucket: str


def _build(settings: ObjectEventsSettings, aws: Aws) -> _Dependencies:
    objects = S3ObjectStore(aws.client("s3"))
    ledger = DynamoWritesLedger(aws.table(settings.catalog_table))
    registry = DynamoDatasetRegistry(aws.table(settings.datasets_table))
    return _Dependencies(
        buckets=Buckets(raw=settings.raw_bucket, lake=settings.lake_bucket),
        registry=registry,
        catalog=DynamoObjectCatalog(aws.table(settings.catalog_table)),
        starter=StepFunctionsBatchStarter(
            aws.client("stepfunctions"),
            aws.client("s3"),
            settings.ingestion_state_machine_arn,
            settings.reports_bucket,
        ),
        index=IndexMaintainer(
            index=open_subject_index(
                settings.index_location, s3=aws.client("s3"), dynamodb=aws.table, datasets=registry
            ),
            objects=objects,
            requester=AwsIndexRequester(
                lambda_client=aws.client("lambda"),
                function_name=settings.indexer_function_name,
                sfn_client=aws.client("stepfunctions"),
                backfill_state_machine_arn=settings.index_backfill_state_machine_arn,
            ),
            max_lambda_bytes=settings.lambda_index_max_bytes,
            ledger=ledger,
        ),
        objects=objects,
        ledger=ledger,
        ignored_retention=timedelta(days=settings.ignored_retention_days),
        reports_bucket=settings.reports_bucket,
    )


# Built once per execution environment, at the first invocation (not at import).
_dependencies = wiring(ObjectEventsSettings, _build)


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


def event_of_body(body: str | None) -> dict[str, Any]:
    """The EventBridge event a record's body holds, or MalformedEventError."""
    try:
        event = json.loads(body or "")
    except json.JSONDecodeError as exc:
        raise MalformedEventError(f"the record body is not JSON: {exc}") from exc
    if not isinstance(event, dict):
        raise MalformedEventError(f"the record body is a JSON {type(event).__name__}, not an event")
    return event


def sqs_records(event: dict[str, Any]) -> list[dict[str, Any]]:
    records = event.get("Records") if isinstance(event, dict) else None
    if not isinstance(records, list):
        keys = sorted(event) if isinstance(event, dict) else type(event).__name__
        raise MalformedEventError(
            f"not an SQS event (no Records list; got {keys}): this function is invoked by its "
            "SQS event source, each record's body being an EventBridge S3 event"
        )
    return records


class _Batch:
    """What one invocation processes: the records' outcomes and the versions to ingest."""

    def __init__(self, deps: _Dependencies) -> None:
        self.deps = deps
        self.collector = IngestionCollector()
        self.counts: Counter[str] = Counter()
        self.settle_wait = SETTLE_WAIT_SECONDS  # left for this batch
        self.shown = PartitionRedactor(deps.registry.get)  # keys as the logs show them

    def _record(self, event: ObjectEvent, message_id: str) -> Outcome:
        """record_object_event, looked at again for a moment while the version's writer is
        not settled (nothing is written before it is, so a second look starts afresh)."""
        while True:
            try:
                return record_object_event(
                    event,
                    buckets=self.deps.buckets,
                    registry=self.deps.registry,
                    catalog=self.deps.catalog,
                    ingestion=self.collector.for_record(message_id),
                    index=self.deps.index,
                    objects=self.deps.objects,
                    ledger=self.deps.ledger,
                    ignored_retention=self.deps.ignored_retention,
                )
            except WriteNotSettledError:
                if self.settle_wait <= 0:
                    raise
                pause = min(SETTLE_PAUSE_SECONDS, self.settle_wait)
                self.settle_wait -= pause
                time.sleep(pause)

    def record(self, record: SQSRecord) -> None:
        """Process one SQS record; raise to report it as a batch item failure."""
        context = {
            "message_id": record.message_id,
            "receive_count": record.attributes.approximate_receive_count,
        }
        logger.set_correlation_id(None)  # the EventBridge event id, once the body is read
        try:
            raw = event_of_body(record.body)
            event_id = raw.get("id")
            if isinstance(event_id, str):
                context["event_id"] = event_id
                logger.set_correlation_id(event_id)
            outcome = self._record(to_object_event(raw), record.message_id)
        except WriteNotSettledError as exc:
            self.counts["deferred"] += 1
            logger.info(
                "object version's writer not settled yet; SQS delivers the event again",
                extra={**context, "reason": str(exc), "retry_after": exc.retry_after_seconds},
            )
            raise
        except MalformedEventError as exc:
            self.counts["malformed"] += 1
            logger.error(
                "malformed object event; SQS redelivers it, then the dead-letter queue keeps it",
                extra={**context, "reason": str(exc)},
            )
            raise
        except Exception as exc:
            self.counts["failed"] += 1
            scrub_exception(exc)  # its text (and the traceback's) names no key, quotes no value
            logger.exception(
                "object event failed; SQS redelivers it",
                extra={**context, "error": f"{type(exc).__name__}: {exc}"},
            )
            raise
        self.counts["recorded" if outcome.written else "skipped"] += 1
        _log_outcome(outcome, context, self.shown)

    def start_ingestion(self, failed_records: set[str]) -> set[str]:
        """Start one execution per group; returns the records of the groups that did not start."""
        not_started: set[str] = set()
        for group in self.collector.groups(failed_records):
            logger.set_correlation_id(group.name)
            details = _group_details(group, self.deps.reports_bucket)
            try:
                outcome = self.deps.starter.start(group)
            except Exception as exc:  # reported per record: SQS redelivers them
                self.counts["batches_not_started"] += 1
                scrub_exception(exc)
                not_started |= group.record_ids
                logger.exception(
                    "ingestion batch not started; its records are reported failed and redelivered",
                    extra={**details, "error": f"{type(exc).__name__}: {exc}"},
                )
                continue
            self.counts[outcome.value] += 1
            metrics.add_metric(
                name="IngestionBatchObjects", unit=MetricUnit.Count, value=len(group.items)
            )
            logger.info(
                "ingestion batch started"
                if outcome is StartOutcome.STARTED
                else "ingestion batch was started before (same objects, same name)",
                extra=details,
            )
        logger.set_correlation_id(None)
        return not_started


def _group_details(group: IngestionGroup, reports_bucket: str) -> dict[str, Any]:
    """The batch's line names every object version in it (at most the batch size, 200), so that
    `lethe trace s3://<raw object>` finds the execution an upload went to from the logs alone,
    before the object's catalog item records it."""
    return {
        "execution": group.name,
        "manifest": s3_url(reports_bucket, group.manifest_key),
        "objects": len(group.items),
        "datasets": sorted({item.dataset_id or "" for item in group.items}),
        "records": len(group.record_ids),
        "versions": [f"{item.object_url}#{item.version_id}" for item in group.items],
    }


def _log_outcome(outcome: Outcome, context: dict[str, Any], shown: PartitionRedactor) -> None:
    item = outcome.item
    if outcome.gone:
        message = "object version created and deleted before its event was read; not ingested"
    elif outcome.written:
        message = "object event recorded"
    else:
        message = "object event already known; skipped"
    logger.info(
        message,
        extra={
            **context,
            # a lake key's subject partition values redacted (found again by its version id)
            "object_url": shown.url(item.object_url),
            "version_id": item.version_id,
            "status": item.status.value,
            "dataset_id": item.dataset_id,
            "sequencer": item.sequencer,
            "ingestion_requested": outcome.ingestion_requested,
            "index_action": outcome.index_action,
            "gone": outcome.gone,
        },
    )


_COUNT_METRICS = {
    "recorded": "ObjectEventsRecorded",
    "skipped": "ObjectEventsSkipped",
    "malformed": "MalformedObjectEvents",
    "failed": "ObjectEventsFailed",
    "deferred": "ObjectEventsDeferred",
    StartOutcome.STARTED.value: "IngestionExecutionsStarted",
    StartOutcome.ALREADY_STARTED.value: "IngestionExecutionsAlreadyStarted",
    "batches_not_started": "IngestionBatchesNotStarted",
}


@logger.inject_lambda_context(log_event=False)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    deps = _dependencies()
    records = sqs_records(event)
    batch = _Batch(deps)
    with processor(records=records, handler=batch.record):
        processor.process()
    failed = {str(f["itemIdentifier"]) for f in processor.response()["batchItemFailures"]}
    failed |= batch.start_ingestion(failed)
    for key, name in _COUNT_METRICS.items():
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=batch.counts[key])
    metrics.add_metric(name="ObjectEventsBatchSize", unit=MetricUnit.Count, value=len(records))
    # Record order, so the response reads like the batch.
    failures = [
        {"itemIdentifier": record.get("messageId")}
        for record in records
        if record.get("messageId") in failed
    ]
    if failures:
        logger.warning(
            "batch items reported failed",
            extra={"failed": len(failures), "records": len(records)},
        )
    return {"batchItemFailures": failures}
