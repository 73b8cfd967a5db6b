"""Object events domain: status, idempotency and ordering, with in-memory ports."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from lethe_shared.catalog.object_catalog import Buckets, CatalogItem, ObjectStatus, Zone, latest
from lethe_shared.catalog.writes_ledger import Writer
from lethe_shared.datasets.document import parse_dataset
from lethe_shared.errors import MalformedEventError, WriteNotSettledError
from lethe_shared.index.maintenance import IndexAction
from lethe_shared.ingestion.object_events import (
    EventKind,
    ObjectEvent,
    catalog_item_for,
    record_object_event,
)
from lethe_shared.ingestion.starter import ingestion_execution_name as execution_name
from tests.fakes import (
    MemoryCatalog,
    MemoryObjectStore,
    MemoryRegistry,
    MemoryWritesLedger,
    RecordingStarter,
)

pytestmark = pytest.mark.lambda_runtime

RAW, LAKE = "raw-bucket", "lake-bucket"
BUCKETS = Buckets(raw=RAW, lake=LAKE)


def _registry() -> MemoryRegistry:
    return MemoryRegistry(
        parse_dataset(
            {
                "dataset_id": "reviews",
                "format": "csv",
                "subject_columns": ["u"],
                "schema": [{"name": "u", "type": "string"}],
            }
        )
    )


def _event(
    kind: EventKind = EventKind.CREATED,
    *,
    bucket: str = RAW,
    key: str = "reviews/a.jsonl",
    version: str | None = "v1",
    seq: str = "10",
    deletion: str = "",
) -> ObjectEvent:
    return ObjectEvent(
        kind=kind,
        bucket=bucket,
        key=key,
        version_id=version,
        sequencer=seq,
        etag="abc",
        size=10,
        reason="PutObject",
        deletion_type=deletion,
    )


@pytest.fixture
def catalog() -> MemoryCatalog:
    return MemoryCatalog()


class RecordingIndex:
    """Records which index maintenance the domain asked for."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def on_created(self, item: CatalogItem) -> IndexAction | None:
        self.calls.append(("created", item.version_id))
        return IndexAction.LAMBDA

    def on_deleted(self, item: CatalogItem) -> IndexAction | None:
        self.calls.append(("deleted", item.version_id))
        return IndexAction.FLAGGED


@pytest.fixture
def starter() -> RecordingStarter:
    return RecordingStarter()


def _record(
    event: ObjectEvent,
    catalog: MemoryCatalog,
    starter: RecordingStarter | None = None,
    index: RecordingIndex | None = None,
    objects: MemoryObjectStore | None = None,
    ledger: MemoryWritesLedger | None = None,
) -> bool:
    outcome = record_object_event(
        event,
        buckets=BUCKETS,
        registry=_registry(),
        catalog=catalog,
        ingestion=starter or RecordingStarter(),
        index=index or RecordingIndex(),
        objects=objects or _holding(event),
        ledger=ledger or MemoryWritesLedger(),
    )
    return outcome.written


def _holding(event: ObjectEvent) -> MemoryObjectStore:
    """A store that has the event's version: S3 sends Object Created once the version exists."""
    objects = MemoryObjectStore()
    objects.put_version(event.bucket, event.key, event.version_id or "null")
    return objects


@pytest.mark.parametrize(
    ("bucket", "key", "status", "dataset"),
    [
        (RAW, "reviews/2026/a.jsonl", ObjectStatus.RECEIVED, "reviews"),
        (LAKE, "reviews/review_date=2026-11-22/p.parquet", ObjectStatus.STORED, "reviews"),
        (RAW, "unknown/a.jsonl", ObjectStatus.IGNORED, None),
        (RAW, "reviews", ObjectStatus.IGNORED, None),  # no prefix: the dataset's folder itself
        (RAW, "top-level.csv", ObjectStatus.IGNORED, None),
    ],
)
def test_created_status_by_zone_and_dataset(
    catalog: MemoryCatalog, bucket: str, key: str, status: ObjectStatus, dataset: str | None
) -> None:
    assert _record(_event(bucket=bucket, key=key), catalog)

    (item,) = catalog.items.values()
    assert item.status is status
    assert item.dataset_id == dataset


def test_duplicate_delivery_leaves_one_item(catalog: MemoryCatalog) -> None:
    assert _record(_event(), catalog) is True
    assert _record(_event(), catalog) is False

    assert len(catalog.items) == 1


def test_delete_after_create_marks_version_deleted(catalog: MemoryCatalog) -> None:
    _record(_event(seq="10"), catalog)
    _record(_event(EventKind.DELETED, seq="11", deletion="Permanently Deleted"), catalog)

    (item,) = catalog.items.values()
    assert item.status is ObjectStatus.DELETED
    assert item.dataset_id == "reviews"


def test_out_of_order_delete_then_create_converges_to_deleted(catalog: MemoryCatalog) -> None:
    _record(_event(EventKind.DELETED, seq="11", deletion="Permanently Deleted"), catalog)
    assert _record(_event(seq="10"), catalog) is False

    (item,) = catalog.items.values()
    assert item.status is ObjectStatus.DELETED


def test_delete_marker_is_a_new_version_and_the_latest(catalog: MemoryCatalog) -> None:
    _record(_event(version="v1", seq="10"), catalog)
    _record(
        _event(EventKind.DELETED, version="dm1", seq="12", deletion="Delete Marker Created"),
        catalog,
    )

    newest = latest(catalog.by_dataset("reviews"))
    assert newest is not None
    assert (newest.version_id, newest.status, newest.delete_marker) == (
        "dm1",
        ObjectStatus.DELETED,
        True,
    )
    assert catalog.items[("s3://raw-bucket/reviews/a.jsonl", "v1")].status is ObjectStatus.RECEIVED


def test_unversioned_write_uses_null_version(catalog: MemoryCatalog) -> None:
    _record(_event(version=None), catalog)

    assert list(catalog.items) == [("s3://raw-bucket/reviews/a.jsonl", "null")]


def test_ignored_items_expire_and_dataset_items_do_not() -> None:
    now = datetime(2026, 11, 22, tzinfo=UTC)

    ignored = catalog_item_for(
        _event(key="x/y"), Zone.RAW, None, ignored_retention=timedelta(days=30), now=now
    )
    kept = catalog_item_for(
        _event(), Zone.RAW, "reviews", ignored_retention=timedelta(days=30), now=now
    )

    assert ignored.expires_at == int(datetime(2026, 12, 22, tzinfo=UTC).timestamp())
    assert kept.expires_at is None


def test_event_from_another_bucket_is_malformed(catalog: MemoryCatalog) -> None:
    with pytest.raises(MalformedEventError, match="'elsewhere' is neither the raw nor the lake"):
        _record(_event(bucket="elsewhere"), catalog)
    assert catalog.items == {}


def test_bad_sequencer_is_malformed(catalog: MemoryCatalog) -> None:
    with pytest.raises(MalformedEventError, match="not a hexadecimal string"):
        _record(_event(seq="not-hex"), catalog)
    assert catalog.items == {}


def test_new_raw_version_starts_ingestion_once(
    catalog: MemoryCatalog, starter: RecordingStarter
) -> None:
    _record(_event(), catalog, starter)
    _record(_event(), catalog, starter)  # duplicate delivery

    (item,) = catalog.items.values()
    assert starter.started == [execution_name(item)]


def test_redelivery_retries_a_start_that_never_happened(
    catalog: MemoryCatalog, starter: RecordingStarter
) -> None:
    _record(_event(), catalog, RecordingStarter())  # first delivery: its start was lost
    _record(_event(), catalog, starter)  # redelivery

    assert len(starter.started) == 1


@pytest.mark.parametrize(
    ("bucket", "key"),
    [(LAKE, "reviews/review_date=2026-11-22/p.parquet"), (RAW, "unknown/a.jsonl")],
)
def test_lake_and_ignored_objects_are_not_ingested(
    catalog: MemoryCatalog, starter: RecordingStarter, bucket: str, key: str
) -> None:
    _record(_event(bucket=bucket, key=key), catalog, starter)

    assert starter.started == []


def test_deleted_version_is_not_ingested_on_late_create(
    catalog: MemoryCatalog, starter: RecordingStarter
) -> None:
    _record(_event(EventKind.DELETED, seq="11", deletion="Permanently Deleted"), catalog, starter)
    _record(_event(seq="10"), catalog, starter)

    assert starter.started == []


def test_execution_name_is_deterministic_and_valid() -> None:
    item = catalog_item_for(_event(), Zone.RAW, "reviews", ignored_retention=timedelta(days=1))
    other = catalog_item_for(
        _event(version="v2"), Zone.RAW, "reviews", ignored_retention=timedelta(days=1)
    )
    long_id = catalog_item_for(_event(), Zone.RAW, "d" * 63, ignored_retention=timedelta(days=1))

    assert execution_name(item) == execution_name(item)
    assert execution_name(item) != execution_name(other)
    assert execution_name(item).startswith("reviews-")
    assert len(execution_name(long_id)) == 80
    assert all(c.isalnum() or c in "-_" for c in execution_name(long_id))


def test_a_lake_object_under_a_dataset_is_handed_to_index_maintenance(
    catalog: MemoryCatalog,
) -> None:
    index = RecordingIndex()

    _record(_event(bucket=LAKE, key="reviews/p=1/f.parquet"), catalog, index=index)
    _record(_event(bucket=RAW, key="reviews/a.csv"), catalog, index=index)  # ingestion indexes raw
    _record(_event(bucket=LAKE, key="elsewhere/f.parquet"), catalog, index=index)  # IGNORED

    assert index.calls == [("created", "v1")]


def test_a_delete_is_handed_to_index_maintenance_but_a_late_one_is_not(
    catalog: MemoryCatalog,
) -> None:
    index = RecordingIndex()
    _record(_event(seq="10"), catalog, index=index)
    _record(
        _event(EventKind.DELETED, seq="12", deletion="Permanently Deleted"), catalog, index=index
    )
    late = _event(EventKind.DELETED, seq="11", deletion="Permanently Deleted")

    _record(late, catalog, index=index)

    assert index.calls == [("deleted", "v1")]


def test_a_raw_version_an_erasure_wrote_is_recorded_rewritten_and_not_ingested(
    catalog: MemoryCatalog, starter: RecordingStarter
) -> None:
    objects, ledger = MemoryObjectStore(), MemoryWritesLedger()
    version = objects.put(RAW, "reviews/a.jsonl", b"{}\n", {"lethe-producer": "erase"})
    ledger.record(RAW, "reviews/a.jsonl", version, Writer.ERASE)  # the erase job said so

    _record(_event(version=version), catalog, starter, objects=objects, ledger=ledger)

    (item,) = catalog.items.values()
    assert item.status is ObjectStatus.REWRITTEN
    assert starter.started == []


@pytest.mark.parametrize("claimed", ["erase", "ingest"])
def test_a_raw_version_claiming_lethe_metadata_without_a_ledger_record_is_ingested(
    catalog: MemoryCatalog, starter: RecordingStarter, claimed: str
) -> None:
    # a copy of an erased object (CopyObject copies metadata), or a producer setting the header
    objects = MemoryObjectStore()
    metadata = {"lethe-producer": claimed, "lethe-erasure": "er-1", "lethe-erased-rows": "1"}
    version = objects.put(RAW, "reviews/copy.jsonl", b"{}\n", metadata)

    _record(_event(key="reviews/copy.jsonl", version=version), catalog, starter, objects=objects)

    (item,) = catalog.items.values()
    assert item.status is ObjectStatus.RECEIVED
    assert len(starter.started) == 1


def test_a_version_of_an_erased_key_that_the_ledger_does_not_name_is_ingested(
    catalog: MemoryCatalog, starter: RecordingStarter
) -> None:
    # the erase job's own version is on record; a producer's copy onto the same key is not
    objects, ledger = MemoryObjectStore(), MemoryWritesLedger()
    ours = objects.put(RAW, "reviews/a.jsonl", b"{}\n", {"lethe-producer": "erase"})
    ledger.record(RAW, "reviews/a.jsonl", ours, Writer.ERASE)
    copy = objects.put(RAW, "reviews/a.jsonl", b"{}\n", {"lethe-producer": "erase"})

    _record(_event(version=copy, seq="11"), catalog, starter, objects=objects, ledger=ledger)

    stored = catalog.get(RAW, "reviews/a.jsonl", copy)
    assert stored is not None
    assert stored.status is ObjectStatus.RECEIVED
    assert len(starter.started) == 1


def test_an_event_read_before_the_writer_recorded_its_version_waits_then_is_skipped(
    catalog: MemoryCatalog, starter: RecordingStarter
) -> None:
    objects, ledger = MemoryObjectStore(), MemoryWritesLedger()
    writes = ledger.writer(Writer.ERASE, "erasure-er-1")
    token = writes.intend(RAW, "reviews/a.jsonl", 10)  # the intent, before the PUT
    version = objects.put(RAW, "reviews/a.jsonl", b"{}\n")  # the PUT: S3 sends its event
    event = _event(version=version)

    with pytest.raises(WriteNotSettledError) as raised:
        _record(event, catalog, starter, objects=objects, ledger=ledger)

    assert catalog.items == {}  # nothing written: the redelivery starts afresh
    assert starter.started == []
    assert 0 < raised.value.retry_after_seconds <= 601
    writes.written(RAW, "reviews/a.jsonl", token, version)  # the PUT returned: on record

    assert _record(event, catalog, starter, objects=objects, ledger=ledger)
    (item,) = catalog.items.values()
    assert item.status is ObjectStatus.REWRITTEN
    assert starter.started == []


def test_an_event_held_by_an_intent_that_expired_is_a_producers_version(
    catalog: MemoryCatalog, starter: RecordingStarter
) -> None:
    # the job died between its PUT and its record (or its PUT outlived the intent)
    objects, ledger = MemoryObjectStore(), MemoryWritesLedger()
    ledger.writer(Writer.ERASE, "erasure-er-1").intend(RAW, "reviews/a.jsonl", 10)
    version = objects.put(RAW, "reviews/a.jsonl", b"{}\n", {"lethe-producer": "erase"})
    event = _event(version=version)
    with pytest.raises(WriteNotSettledError):
        _record(event, catalog, starter, objects=objects, ledger=ledger)

    ledger.now += timedelta(seconds=601)

    assert _record(event, catalog, starter, objects=objects, ledger=ledger)
    (item,) = catalog.items.values()
    assert item.status is ObjectStatus.RECEIVED
    assert len(starter.started) == 1


def test_an_intent_opened_after_the_version_was_created_does_not_hold_its_event(
    catalog: MemoryCatalog, starter: RecordingStarter
) -> None:
    objects, ledger = MemoryObjectStore(), MemoryWritesLedger()
    version = objects.put(RAW, "reviews/a.jsonl", b"{}\n")
    created = ledger.now
    ledger.now += timedelta(minutes=5)  # Lethe writes the key again, five minutes later
    ledger.writer(Writer.ERASE, "erasure-er-2").intend(RAW, "reviews/a.jsonl", 10)
    event = ObjectEvent(
        kind=EventKind.CREATED, bucket=RAW, key="reviews/a.jsonl", version_id=version,
        sequencer="10", time=created.isoformat(),
    )  # fmt: skip

    assert _record(event, catalog, starter, objects=objects, ledger=ledger)
    assert len(starter.started) == 1


def test_a_lake_event_waits_for_the_writer_before_anything_is_written(
    catalog: MemoryCatalog,
) -> None:
    objects, ledger, index = MemoryObjectStore(), MemoryWritesLedger(), RecordingIndex()
    key = "reviews/review_date=2026-11-22/part-1.parquet"
    ledger.writer(Writer.INGEST, "exec-1").intend(LAKE, key, 10)
    version = objects.put(LAKE, key, b"PAR1")

    event = _event(bucket=LAKE, key=key, version=version)
    with pytest.raises(WriteNotSettledError):
        _record(event, catalog, objects=objects, index=index, ledger=ledger)

    assert (catalog.items, index.calls) == ({}, [])


def test_a_permanent_delete_removes_the_versions_ledger_record(catalog: MemoryCatalog) -> None:
    ledger = MemoryWritesLedger()
    ledger.record(RAW, "reviews/a.jsonl", "v1", Writer.ERASE)
    ledger.record(RAW, "reviews/a.jsonl", "v2", Writer.ERASE)

    _record(
        _event(EventKind.DELETED, version="v1", seq="11", deletion="Permanently Deleted"),
        catalog,
        ledger=ledger,
    )

    assert ledger.writer_of(RAW, "reviews/a.jsonl", "v1") is None
    assert ledger.writer_of(RAW, "reviews/a.jsonl", "v2") == "erase"


def test_a_raw_version_a_producer_wrote_is_received_and_ingested(
    catalog: MemoryCatalog, starter: RecordingStarter
) -> None:
    objects = MemoryObjectStore()
    version = objects.put(RAW, "reviews/a.jsonl", b"{}\n", {"lethe-producer": "somebody"})

    _record(_event(version=version), catalog, starter, objects=objects)

    (item,) = catalog.items.values()
    assert item.status is ObjectStatus.RECEIVED
    assert len(starter.started) == 1


def test_redelivery_asks_again_while_the_version_is_still_received(
    catalog: MemoryCatalog, starter: RecordingStarter
) -> None:
    # the first delivery's batch never started its execution (the record was reported failed)
    _record(_event(), catalog, RecordingStarter())

    outcome = record_object_event(
        _event(),
        buckets=BUCKETS,
        registry=_registry(),
        catalog=catalog,
        ingestion=starter,
        index=RecordingIndex(),
        objects=_holding(_event()),
        ledger=MemoryWritesLedger(),
    )

    assert (outcome.written, outcome.ingestion_requested) == (False, True)
    assert len(starter.started) == 1


@pytest.mark.parametrize(
    "status",
    [
        ObjectStatus.INGESTING,
        ObjectStatus.INGESTED,
        ObjectStatus.QUARANTINED,
        ObjectStatus.SUPERSEDED,
        ObjectStatus.FAILED,
    ],
)
def test_redelivery_asks_nothing_once_the_state_machine_took_the_version(
    catalog: MemoryCatalog, starter: RecordingStarter, status: ObjectStatus
) -> None:
    _record(_event(), catalog, RecordingStarter())
    ((key, item),) = catalog.items.items()
    catalog.items[key] = item.model_copy(update={"status": status})  # what the workflow wrote

    outcome = record_object_event(
        _event(),
        buckets=BUCKETS,
        registry=_registry(),
        catalog=catalog,
        ingestion=starter,
        index=RecordingIndex(),
        objects=_holding(_event()),
        ledger=MemoryWritesLedger(),
    )

    assert (outcome.written, outcome.ingestion_requested) == (False, False)
    assert starter.started == []


def test_a_raw_version_deleted_before_its_event_was_read_is_deleted_and_not_ingested(
    catalog: MemoryCatalog, starter: RecordingStarter
) -> None:
    # an erasure rewrote the object and purged this version before its Created event was read
    index = RecordingIndex()
    created = _event(seq="10")

    outcome = record_object_event(
        created,
        buckets=BUCKETS,
        registry=_registry(),
        catalog=catalog,
        ingestion=starter,
        index=index,
        objects=MemoryObjectStore(),
        ledger=MemoryWritesLedger(),
    )
    again = record_object_event(
        created,
        buckets=BUCKETS,
        registry=_registry(),
        catalog=catalog,
        ingestion=starter,
        index=index,
        objects=MemoryObjectStore(),
        ledger=MemoryWritesLedger(),
    )
    deleted = _record(
        _event(EventKind.DELETED, seq="11", deletion="Permanently Deleted"), catalog, starter, index
    )

    assert (outcome.written, outcome.gone, outcome.ingestion_requested) == (True, True, False)
    assert outcome.item.status is ObjectStatus.DELETED
    assert (again.written, again.ingestion_requested) == (False, False)
    assert starter.started == []
    assert deleted  # its own Object Deleted event is newer: it speaks for the key
    assert index.calls == [("deleted", "v1")]
    (item,) = catalog.items.values()
    assert item.status is ObjectStatus.DELETED
