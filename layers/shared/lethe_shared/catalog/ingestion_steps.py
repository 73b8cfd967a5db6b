"""The ingestion workflow's catalog steps (statemachines/ingestion.asl.json, run by
functions/ingestion_steps): every status change the workflow makes to a batch of raw object
versions, and the read of each version's outcome, through the `ObjectCatalog` port.

    mark_ingesting   each version INGESTING, unless it was deleted (or never catalogued)
    read_outcome     what the Spark ingest job recorded on one version, as the workflow acts on it
    mark_failed      every version still INGESTING becomes FAILED with the workflow's error

The Spark ingest job records each version's own outcome (INGESTED, QUARANTINED, SUPERSEDED,
FAILED, or DELETED when S3 no longer has it) through the same port (spark_jobs/lethe_jobs).
Every step is idempotent: the state machine retries it whole.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from pydantic import ConfigDict, Field

from lethe_shared.aws.s3 import split_s3_url
from lethe_shared.catalog.object_catalog import ObjectCatalog, ObjectStatus
from lethe_shared.models import Model

#: The longest `ingest_error` the workflow records (the cause of a failed Spark job run can be
#: long; the notification carries the same text).
MAX_ERROR_LENGTH = 4000


class BatchObject(Model):
    """One raw object version of an ingestion batch, as the state machine's input lists it."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    object_url: str = Field(pattern=r"^s3://[^/]+/.+")
    version_id: str = Field(min_length=1)


class Outcome(StrEnum):
    """What the workflow does about one version once the job has run."""

    RECORDED = "recorded"  # INGESTED, QUARANTINED or SUPERSEDED: announced
    FAILED = "failed"  # FAILED by the job: notified, and the execution fails
    GONE = "gone"  # deleted before it could be ingested, or never catalogued: nothing
    MISSING = "missing"  # no outcome recorded although the job succeeded: the batch fails


RECORDED_STATUSES = frozenset(
    {ObjectStatus.INGESTED, ObjectStatus.QUARANTINED, ObjectStatus.SUPERSEDED}
)


class VersionOutcome(Model):
    """One version's outcome, as the state machine reads it (None fields are left out)."""

    outcome: Outcome
    status: ObjectStatus | None = None
    rows_read: int | None = None
    rows_written: int | None = None
    rows_quarantined: int | None = None
    ingest_error: str | None = None


def mark_ingesting(catalog: ObjectCatalog, objects: Iterable[BatchObject], execution: str) -> int:
    """Mark each version of the batch INGESTING by `execution`; the number marked (0: every
    version was deleted, or never catalogued, before ingestion started)."""
    return sum(catalog.start_ingestion(o.object_url, o.version_id, execution) for o in objects)


def read_outcome(catalog: ObjectCatalog, version: BatchObject) -> VersionOutcome:
    bucket, key = split_s3_url(version.object_url)
    item = catalog.get(bucket, key, version.version_id)
    if item is None or item.status is ObjectStatus.DELETED:
        return VersionOutcome(outcome=Outcome.GONE, status=item.status if item else None)
    if item.status is ObjectStatus.FAILED:
        outcome = Outcome.FAILED
    elif item.status in RECORDED_STATUSES:
        outcome = Outcome.RECORDED
    else:
        outcome = Outcome.MISSING
    return VersionOutcome(
        outcome=outcome,
        status=item.status,
        rows_read=item.rows_read,
        rows_written=item.rows_written,
        rows_quarantined=item.rows_quarantined,
        ingest_error=item.ingest_error,
    )


def mark_failed(catalog: ObjectCatalog, objects: Iterable[BatchObject], error: str) -> int:
    """Mark every version of the batch that is still INGESTING FAILED with `error` (cut to
    MAX_ERROR_LENGTH); outcomes the job recorded stay. The number marked."""
    reason = error[:MAX_ERROR_LENGTH]
    return sum(catalog.fail_ingestion(o.object_url, o.version_id, reason) for o in objects)
