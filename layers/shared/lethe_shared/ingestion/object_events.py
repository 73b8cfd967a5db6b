"""Domain logic of the object events handler: an S3 event becomes a catalog item.

Pure apart from the ports it is given, so it is tested with in-memory fakes and with moto.

Whether a version is Lethe's own write comes from the writes ledger alone
(lethe_shared.catalog.writes_ledger), never from its metadata: a copy of any object, with any
metadata (`lethe-producer: erase` included), under any key, is ingested and indexed like any
upload. A created version whose writer is not known yet (a Lethe job has an open intent on its
key and has not recorded its version) raises WriteNotSettledError before anything is written:
the handler fails the SQS record and SQS delivers it again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Protocol

from lethe_shared.aws.s3 import NULL_VERSION, ObjectStore
from lethe_shared.catalog.object_catalog import (
    Buckets,
    CatalogItem,
    ObjectCatalog,
    ObjectStatus,
    Zone,
    normalize_sequencer,
)
from lethe_shared.catalog.writes_ledger import WritesLedger, event_time
from lethe_shared.datasets.registry import DatasetRegistry, dataset_of_key
from lethe_shared.errors import MalformedEventError
from lethe_shared.index.maintenance import IndexAction
from lethe_shared.ingestion.starter import IngestionStarter

DELETE_MARKER_CREATED = "Delete Marker Created"
PERMANENTLY_DELETED = "Permanently Deleted"


class EventKind(StrEnum):
    CREATED = "Object Created"
    DELETED = "Object Deleted"


@dataclass(frozen=True)
class ObjectEvent:
    """The parts of an S3 EventBridge event that the catalog needs, already validated."""

    kind: EventKind
    bucket: str
    key: str
    version_id: str | None
    sequencer: str
    etag: str = ""
    size: int | None = None
    reason: str = ""
    deletion_type: str = ""
    time: str = ""


class IndexMaintenance(Protocol):
    """See lethe_shared.index.maintenance.IndexMaintainer."""

    def on_created(self, item: CatalogItem) -> IndexAction | None: ...

    def on_deleted(self, item: CatalogItem) -> IndexAction | None: ...


@dataclass(frozen=True)
class Outcome:
    item: CatalogItem
    written: bool  # False: a duplicate or an older event; the catalog already knows better
    ingestion_requested: bool = False  # see IngestionStarter.start
    index_action: IndexAction | None = None
    gone: bool = False  # a created raw version S3 no longer had when its event was read


def catalog_item_for(
    event: ObjectEvent,
    zone: Zone,
    dataset_id: str | None,
    *,
    ignored_retention: timedelta,
    rewritten: bool = False,
    gone: bool = False,
    now: datetime | None = None,
) -> CatalogItem:
    """The catalog item an event leads to. Records of objects outside any dataset expire after
    `ignored_retention` (DynamoDB TTL); everything else is kept as the audit trail. A raw
    version an erasure wrote (`rewritten`) is REWRITTEN: its rows are in the lake already. A
    created version that S3 no longer has (`gone`: deleted before its event was read, as an
    erasure purges the versions it rewrote) is DELETED, the state its Object Deleted event
    gives it: there is nothing to ingest."""
    try:
        sequencer = normalize_sequencer(event.sequencer)
    except ValueError as exc:
        raise MalformedEventError(str(exc)) from exc
    if event.kind is EventKind.DELETED or gone:
        status = ObjectStatus.DELETED
    elif dataset_id is None:
        status = ObjectStatus.IGNORED
    elif zone is Zone.RAW:
        status = ObjectStatus.REWRITTEN if rewritten else ObjectStatus.RECEIVED
    else:
        status = ObjectStatus.STORED
    expires_at = None
    if dataset_id is None:
        expires_at = int(((now or datetime.now(UTC)) + ignored_retention).timestamp())
    return CatalogItem(
        expires_at=expires_at,
        bucket=event.bucket,
        key=event.key,
        version_id=event.version_id or NULL_VERSION,
        zone=zone,
        status=status,
        sequencer=sequencer,
        dataset_id=dataset_id,
        etag=event.etag,
        size=event.size,
        delete_marker=event.deletion_type == DELETE_MARKER_CREATED,
        event_reason=event.reason,
        event_time=event.time,
    )


def _raw_version_now(
    objects: ObjectStore, ledger: WritesLedger, event: ObjectEvent
) -> tuple[bool, bool]:
    """(rewritten, gone) for a created raw version: no longer in S3 at all (one HEAD of the
    exact version), or else written by a Lethe job (an erasure's rewrite: the writes ledger
    says so, never the version's metadata). Raises WriteNotSettledError while a job that may
    have written it has not recorded it yet."""
    version = event.version_id or NULL_VERSION
    if objects.head(event.bucket, event.key, version) is None:
        return False, True
    writer = ledger.settled_writer_of(
        event.bucket, event.key, version, created_at=event_time(event.time)
    )
    return writer is not None, False


def _still_wanted(item: CatalogItem, written: bool, catalog: ObjectCatalog) -> bool:
    """Indexing of a lake object is asked for again on a redelivered event (written is False), in
    case the first delivery died between the catalog write and the request; the request is
    idempotent. A version that a newer event already marked deleted gets none. (Ingestion of a
    raw version: `_ingestion_wanted`.)"""
    if written:
        return True
    stored = catalog.get(item.bucket, item.key, item.version_id)
    return stored is not None and stored.status is not ObjectStatus.DELETED


def _ingestion_wanted(item: CatalogItem, written: bool, catalog: ObjectCatalog) -> bool:
    """Ingestion is asked for a new RECEIVED version, and again on a redelivered event while the
    catalog still says RECEIVED: the first delivery may have died between the catalog write and
    the start, or its batch's execution may not have started (the handler then fails the event's
    SQS record, and SQS redelivers it). Once the state machine has taken the version
    (INGESTING and later), or a newer event marked it DELETED, a redelivery asks for nothing:
    batches are named by their content, so a start in another batch would ingest it again."""
    if written:
        return True
    stored = catalog.get(item.bucket, item.key, item.version_id)
    return stored is not None and stored.status is ObjectStatus.RECEIVED


def _maintain_index(
    item: CatalogItem, written: bool, catalog: ObjectCatalog, index: IndexMaintenance
) -> IndexAction | None:
    if item.dataset_id is None:
        return None
    if item.status is ObjectStatus.DELETED:
        # Only the newest event speaks for the key: a late delete must not touch the index.
        return index.on_deleted(item) if written else None
    if item.status is ObjectStatus.STORED and _still_wanted(item, written, catalog):
        return index.on_created(item)
    return None


def record_object_event(
    event: ObjectEvent,
    *,
    buckets: Buckets,
    registry: DatasetRegistry,
    catalog: ObjectCatalog,
    ingestion: IngestionStarter,
    index: IndexMaintenance,
    objects: ObjectStore,
    ledger: WritesLedger,
    ignored_retention: timedelta = timedelta(days=30),
) -> Outcome:
    """Record one S3 object event in the catalog, idempotently and in sequencer order; ask
    `ingestion` for a new raw object version under a registered dataset (the object events
    handler collects these and starts one execution per batch: lethe_shared.ingestion.starter);
    keep the
    subject index current for lake objects that arrive by other means and for deletes.

    An event from a bucket other than the raw and lake `buckets` is malformed for this
    deployment (the EventBridge rule should never deliver it). A raw version that an erasure
    wrote (the writes `ledger` records it) is recorded REWRITTEN and not ingested; one S3 no
    longer has (deleted before this event was read) is recorded DELETED, not ingested, and
    leaves the subject index to its own Object Deleted event (the newer one, which speaks for
    the key). A version whose writer is not settled yet raises WriteNotSettledError before
    anything is written. A permanently deleted version leaves the ledger too (`forget`).
    """
    zone = buckets.zone_of(event.bucket)
    if zone is None:
        raise MalformedEventError(f"bucket {event.bucket!r} is neither the raw nor the lake bucket")
    candidate = dataset_of_key(event.key)
    dataset_id = candidate if candidate and registry.get(candidate) is not None else None
    rewritten = gone = False
    if event.kind is EventKind.CREATED and dataset_id is not None:
        if zone is Zone.RAW:
            rewritten, gone = _raw_version_now(objects, ledger, event)
        else:  # settled before anything is written; `index.on_created` asks for the writer
            version = event.version_id or NULL_VERSION
            ledger.settled_writer_of(
                event.bucket, event.key, version, created_at=event_time(event.time)
            )
    if event.kind is EventKind.DELETED and event.deletion_type == PERMANENTLY_DELETED:
        ledger.forget(event.bucket, event.key, event.version_id or NULL_VERSION)
    item = catalog_item_for(
        event,
        zone,
        dataset_id,
        ignored_retention=ignored_retention,
        rewritten=rewritten,
        gone=gone,
    )
    written = catalog.put_if_newer(item)
    requested = (
        item.status is ObjectStatus.RECEIVED
        and _ingestion_wanted(item, written, catalog)
        and ingestion.start(item)
    )
    index_action = None if gone else _maintain_index(item, written, catalog, index)
    return Outcome(
        item=item,
        written=written,
        ingestion_requested=requested,
        index_action=index_action,
        gone=gone,
    )
