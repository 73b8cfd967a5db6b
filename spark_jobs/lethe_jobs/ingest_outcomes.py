"""What the ingest job plans and answers per object version: the request, the outcome, the
ports a run talks to (shared by `ingest_core`, `ingest_planning` and `ingest_pipeline`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lethe_jobs.ingest_tasks import BatchObject
from lethe_shared.aws.s3 import S3ObjectStore
from lethe_shared.catalog.object_catalog import ObjectCatalog, ObjectStatus
from lethe_shared.datasets.registry import DatasetRegistry
from lethe_shared.index.subject_index import SubjectIndex


@dataclass(frozen=True)
class BatchRequest:
    """One raw object version the batch asks to ingest."""

    dataset_id: str
    key: str
    version_id: str


@dataclass
class ObjectResult:
    """The outcome of one object version of the batch."""

    request: BatchRequest
    object_url: str
    status: ObjectStatus
    rows_read: int = 0
    # rows of the raw object whose subject is null, empty or whitespace only: never indexed
    rows_without_subject: int = 0
    rows_written: int = 0
    rows_quarantined: int = 0
    lake_objects: list[str] = field(default_factory=list)
    quarantine_object: str | None = None
    error: str | None = None  # FAILED: why
    gone: bool = False  # DELETED: S3 no longer has the version, the catalog did not know yet

    def summary(self) -> dict[str, Any]:
        return {
            "dataset_id": self.request.dataset_id,
            "key": self.request.key,
            "version_id": self.request.version_id,
            "object_url": self.object_url,
            "status": self.status.value,
            "rows_read": self.rows_read,
            "rows_without_subject": self.rows_without_subject,
            "rows_written": self.rows_written,
            "rows_quarantined": self.rows_quarantined,
            "lake_objects": self.lake_objects,
            "quarantine_object": self.quarantine_object,
            "error": self.error,
        }


@dataclass(frozen=True)
class AwsPorts:
    s3: S3ObjectStore
    datasets: DatasetRegistry
    catalog: ObjectCatalog
    index: SubjectIndex
    hash_key: bytes = field(repr=False)  # the subject HMAC key: never logged


@dataclass(frozen=True)
class PlannedObject:
    """An object version to ingest: where it is, and what earlier ingestions of its key wrote."""

    obj: BatchObject
    request: BatchRequest
    earlier: set[str]
