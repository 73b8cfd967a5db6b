"""One contract, two implementations: each storage port's test fake (tests/fakes.py) and its AWS
adapter (on moto) pass the same tests, so a unit test on a fake says something about AWS."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest

from lethe_shared.aws.s3 import KeyState, ObjectStore, S3ObjectStore, key_state
from lethe_shared.catalog.object_catalog import (
    CatalogItem,
    DynamoObjectCatalog,
    IngestionRecord,
    ObjectCatalog,
    ObjectStatus,
    Zone,
    normalize_sequencer,
)
from lethe_shared.errors import CatalogItemMissingError
from lethe_shared.index.entry_removal import EntryState, Removal
from lethe_shared.index.subject_index import (
    DynamoSubjectIndex,
    EntryBatch,
    IndexEntry,
    SubjectIndex,
)
from tests.fakes import MemoryCatalog, MemoryIndex, MemoryObjectStore
from tests.integration.conftest import RAW

pytestmark = pytest.mark.lambda_runtime

URL = "s3://lake/reviews/p=1/part-a.parquet"
OTHER = "s3://lake/reviews/p=2/part-b.parquet"


def _entry(subject: str, url: str = URL, rows: int = 1, **extra: Any) -> IndexEntry:
    return IndexEntry(
        subject_hash=subject * 64,
        object_url=url,
        dataset_id="reviews",
        zone=Zone.LAKE,
        format="parquet",
        rows=rows,
        version_id="v1",
        etag="e1",
        **extra,
    )


@pytest.fixture(params=["memory", "dynamodb"])
def index(request: pytest.FixtureRequest, lethe_tables: dict[str, Any]) -> SubjectIndex:
    if request.param == "memory":
        return MemoryIndex()
    return DynamoSubjectIndex(lethe_tables["SubjectIndexTable"])


def test_index_replace_lookup_flag_and_remove(index: SubjectIndex) -> None:
    index.replace_object(URL, [_entry("a"), _entry("b", rows=2)])
    index.replace_object(OTHER, [_entry("a", OTHER)])

    flagged = index.replace_object(URL, [_entry("b", rows=3)])  # a left the current version

    assert flagged == 1
    assert sorted((e.object_url, e.rows, e.deleted) for e in index.lookup("a" * 64)) == [
        (URL, 1, True),  # its older version may still hold a's row
        (OTHER, 1, False),
    ]
    assert [(e.object_url, e.rows) for e in index.lookup("b" * 64)] == [(URL, 3)]
    assert index.subjects_of(URL) == {"a" * 64, "b" * 64}
    assert index.described_versions(URL) == {"v1"}
    assert index.prune_flagged(URL) == 1
    assert index.subjects_of(URL) == {"b" * 64}
    assert index.flag_deleted(OTHER) == 1
    assert [e.deleted for e in index.lookup("a" * 64)] == [True]
    assert index.described_versions(OTHER) == set()
    assert index.remove_object(URL) == 1
    assert index.lookup("b" * 64) == []
    with pytest.raises(ValueError, match="every entry must belong"):
        index.replace_object(URL, [_entry("c", OTHER)])


def test_index_removes_only_the_given_subjects(index: SubjectIndex) -> None:
    index.replace_object(URL, [_entry("a"), _entry("b"), _entry("c")])

    removed = index.remove_subjects(URL, ["a" * 64, "c" * 64, "d" * 64])

    assert removed == 2  # d had no entry
    assert index.subjects_of(URL) == {"b" * 64}
    assert [e.version_id for e in index.lookup("b" * 64)] == ["v1"]  # untouched


def test_index_describes_version_across_batches(index: SubjectIndex) -> None:
    subjects = [f"{n:064x}" for n in range(150)]  # more than one BatchGetItem of 100 keys
    index.replace_object(
        URL, [_entry("a").model_copy(update={"subject_hash": s}) for s in subjects]
    )

    assert index.describes_version(URL, subjects, version_id="v1", etag="e1")
    assert not index.describes_version(URL, subjects, version_id="v2", etag="e1")
    assert not index.describes_version(URL, [*subjects, "f" * 64], version_id="v1", etag="e1")
    index.flag_deleted(URL)
    assert not index.describes_version(URL, subjects, version_id="v1", etag="e1")


def test_index_entries_of_a_dataset(index: SubjectIndex) -> None:
    index.replace_object(URL, [_entry("a", rows=2)])
    index.replace_object(OTHER, [_entry("b", OTHER).model_copy(update={"dataset_id": "other"})])

    found = list(index.entries_of_dataset("reviews"))

    assert [(f.object_url, f.subject_hash, f.rows, f.deleted) for f in found] == [
        (URL, "a" * 64, 2, False)
    ]


def _batch(subjects: Sequence[str], url: str = URL, version: str = "v2") -> EntryBatch:
    """A batch of one entry per subject hash, the n-th with n + 1 rows (hints 0, 1, ...)."""
    ends = [sum(range(2, n + 2)) for n in range(1, len(subjects) + 1)]
    return EntryBatch(
        object_url=url,
        dataset_id="reviews",
        zone=Zone.LAKE,
        format="parquet",
        version_id=version,
        etag="e2",
        subject_hashes=subjects,
        ends=ends,
        row_hints=list(range(ends[-1] if ends else 0)),
    )


def test_index_replace_object_with_a_batch(index: SubjectIndex) -> None:
    index.replace_object(URL, [_entry("a"), _entry("b", rows=2)])
    index.replace_object(OTHER, [_entry("a", OTHER)])
    batch = _batch(["b" * 64, "c" * 64])

    flagged = index.replace_object(URL, batch)  # a left the current version

    assert flagged == 1
    assert index.subjects_of(URL) == {"a" * 64, "b" * 64, "c" * 64}
    for entry in batch.entries():
        (found,) = index.lookup(entry.subject_hash)
        assert found == entry  # every field, updated_at too
        assert found.to_item() == entry.to_item()
    assert [(e.object_url, e.version_id, e.deleted) for e in index.lookup("a" * 64)] == [
        (URL, "v1", True),
        (OTHER, "v1", False),
    ]
    assert index.described_versions(URL) == {"v2"}
    assert index.describes_version(URL, ["b" * 64, "c" * 64], version_id="v2", etag="e2")
    with pytest.raises(ValueError, match="every entry must belong"):
        index.replace_object(OTHER, batch)
    assert index.subjects_of(OTHER) == {"a" * 64}


def test_index_replace_object_with_a_batch_as_with_its_entries(index: SubjectIndex) -> None:
    """A batch and its entries as models make the same entries; an empty batch flags every
    entry of the object, as an empty list does."""
    subjects = [f"{n:064x}" for n in range(30)]  # more than one BatchWriteItem of 25 items
    index.replace_object(URL, _batch(subjects))
    index.replace_object(OTHER, _batch(subjects, OTHER).entries())

    for subject in subjects:
        by_batch, by_models = sorted(index.lookup(subject), key=lambda e: e.object_url != URL)
        assert by_batch.object_url == URL
        assert by_batch.to_item() | {"object_url": OTHER} == by_models.to_item() | {
            "updated_at": by_batch.updated_at
        }
    assert index.replace_object(URL, _batch([])) == len(subjects)
    assert index.replace_object(OTHER, []) == len(subjects)
    assert all(e.deleted for s in subjects for e in index.lookup(s))


def test_index_removes_an_entry_only_while_it_describes_what_was_read(
    index: SubjectIndex,
) -> None:
    # Given a, b and c (c flagged: the current version no longer holds it), as read
    index.replace_object(URL, [_entry("a"), _entry("b"), _entry("c")])
    index.replace_object(URL, [_entry("a"), _entry("b")])
    read = index.entry_states(URL)
    assert read == [
        EntryState("a" * 64, "v1", "e1", False),
        EntryState("b" * 64, "v1", "e1", False),
        EntryState("c" * 64, "v1", "e1", True),
    ]
    assert index.entry_states(URL, ["b" * 64, "d" * 64]) == [read[1]]
    # and then a writer: b's entry now describes v2, c's is gone
    index.replace_object(URL, [_entry("a"), _entry("b").model_copy(update={"version_id": "v2"})])
    index.remove_subjects(URL, ["c" * 64])

    removal = index.remove_unchanged(URL, [*read, EntryState("d" * 64, "v1", "e1")])

    # Then only a goes; b stays and comes back as it is now; c and d count in neither
    assert removal.removed == (read[0],)
    assert removal.changed == (EntryState("b" * 64, "v2", "e1", False),)
    assert index.subjects_of(URL) == {"b" * 64}


def test_index_removal_holds_the_flag_too(index: SubjectIndex) -> None:
    index.replace_object(URL, [_entry("a")])

    removal = index.remove_unchanged(URL, [EntryState("a" * 64, "v1", "e1", deleted=True)])

    assert removal == Removal((), (EntryState("a" * 64, "v1", "e1", False),))
    assert index.subjects_of(URL) == {"a" * 64}


def test_index_removes_many_entries_unless_changed(index: SubjectIndex) -> None:
    """More than one transaction of 100 deletes: one entry gone, one that differs from what
    the caller read (it read ETag e0) in the second."""
    subjects = [f"{n:064x}" for n in range(150)]
    index.replace_object(
        URL, [_entry("a").model_copy(update={"subject_hash": s}) for s in subjects]
    )
    read = [
        s if s.subject_hash != subjects[120] else EntryState(s.subject_hash, "v1", "e0")
        for s in index.entry_states(URL)
    ]
    index.remove_subjects(URL, [subjects[7]])

    removal = index.remove_unchanged(URL, read)

    assert len(removal.removed) == 148
    assert removal.changed == (EntryState(subjects[120], "v1", "e1", False),)
    assert index.subjects_of(URL) == {subjects[120]}


@pytest.mark.parametrize("removal", ["remove_object", "prune_flagged"])
def test_index_maintenance_removals_leave_an_entry_a_writer_rewrote_meanwhile(
    index: SubjectIndex, monkeypatch: pytest.MonkeyPatch, removal: str
) -> None:
    # Given a (flagged: only an older version held it) and b, read by the removal; then, between
    # its read and its delete, an indexer rewrites a for a new version that holds it again
    index.replace_object(URL, [_entry("a"), _entry("b")])
    index.replace_object(URL, [_entry("b")])
    read_states = index.entry_states

    def read_then_rewritten(url: str, subjects: Any = None) -> list[EntryState]:
        states = read_states(url, subjects)
        v3 = {"version_id": "v3"}
        index.replace_object(URL, [_entry(s).model_copy(update=v3) for s in "ab"])
        return states

    monkeypatch.setattr(index, "entry_states", read_then_rewritten)

    removed = getattr(index, removal)(URL)

    # Then the new version's entries stay: nothing a writer wrote after the read is removed
    assert removed == 0
    assert {e.version_id for e in index.lookup("a" * 64)} == {"v3"}
    assert index.subjects_of(URL) == {"a" * 64, "b" * 64}


@pytest.mark.parametrize("removal", ["remove_object", "prune_flagged"])
def test_index_maintenance_removals_remove_what_they_read(
    index: SubjectIndex, removal: str
) -> None:
    index.replace_object(URL, [_entry("a"), _entry("b")])
    index.replace_object(URL, [_entry("b")])  # a flagged

    removed = getattr(index, removal)(URL)

    left = {"b" * 64} if removal == "prune_flagged" else set()
    assert (removed, index.subjects_of(URL)) == (2 - len(left), left)


def _item(
    version: str, sequencer: str, status: ObjectStatus = ObjectStatus.RECEIVED
) -> CatalogItem:
    return CatalogItem(
        bucket=RAW,
        key="reviews/a.csv",
        version_id=version,
        zone=Zone.RAW,
        status=status,
        sequencer=normalize_sequencer(sequencer),
        dataset_id="reviews",
    )


@pytest.fixture(params=["memory", "dynamodb"])
def catalog(request: pytest.FixtureRequest, lethe_tables: dict[str, Any]) -> ObjectCatalog:
    if request.param == "memory":
        return MemoryCatalog()
    return DynamoObjectCatalog(lethe_tables["ObjectCatalogTable"])


def test_catalog_orders_events_by_sequencer(catalog: ObjectCatalog) -> None:
    assert catalog.put_if_newer(_item("v1", "10")) is True
    assert catalog.put_if_newer(_item("v1", "10")) is False  # duplicate delivery
    assert catalog.put_if_newer(_item("v1", "0F", ObjectStatus.DELETED)) is False  # older event
    assert catalog.put_if_newer(_item("v2", "20")) is True

    stored = catalog.get(RAW, "reviews/a.csv", "v1")
    assert stored is not None
    assert stored.status is ObjectStatus.RECEIVED
    assert catalog.newer_version_of(f"s3://{RAW}/reviews/a.csv", "v1") == "v2"
    assert catalog.newer_version_of(f"s3://{RAW}/reviews/a.csv", "v2") is None
    assert catalog.newer_version_of(f"s3://{RAW}/reviews/a.csv", "unknown") is None
    assert sorted(i.version_id for i in catalog.by_dataset("reviews")) == ["v1", "v2"]


def test_a_permanent_delete_is_no_newer_version_but_a_delete_marker_is(
    catalog: ObjectCatalog,
) -> None:
    url = f"s3://{RAW}/reviews/a.csv"
    catalog.put_if_newer(_item("v1", "10"))
    catalog.put_if_newer(_item("v2", "20"))
    catalog.put_if_newer(_item("v1", "30", ObjectStatus.DELETED))  # v1 deleted for good

    assert catalog.newer_version_of(url, "v2") is None

    marker = _item("m1", "40", ObjectStatus.DELETED).model_copy(update={"delete_marker": True})
    catalog.put_if_newer(marker)

    assert catalog.newer_version_of(url, "v2") == "m1"


def test_catalog_records_ingestions_and_their_lake_objects(catalog: ObjectCatalog) -> None:
    url = f"s3://{RAW}/reviews/a.csv"
    catalog.put_if_newer(_item("v1", "10"))
    catalog.put_if_newer(_item("v2", "20"))

    def record(lake: list[str]) -> IngestionRecord:
        now = datetime(2026, 11, 23, tzinfo=UTC)
        return IngestionRecord(ObjectStatus.INGESTED, 2, 2, 0, lake, None, "run-1", now)

    catalog.record_ingestion(url, "v1", record(["s3://lake/reviews/p=1/part-x.parquet"]))
    catalog.record_ingestion(url, "v2", record(["s3://lake/reviews/p=2/part-x.parquet"]))

    assert catalog.lake_objects_of(url) == {
        "s3://lake/reviews/p=1/part-x.parquet",
        "s3://lake/reviews/p=2/part-x.parquet",
    }
    with pytest.raises(CatalogItemMissingError, match="v9"):
        catalog.record_ingestion(url, "v9", record([]))


def test_catalog_records_a_failure_on_the_version(catalog: ObjectCatalog) -> None:
    url = f"s3://{RAW}/reviews/a.csv"
    catalog.put_if_newer(_item("v1", "10"))
    catalog.put_if_newer(_item("v2", "20"))
    now = datetime(2026, 11, 23, tzinfo=UTC)

    catalog.record_failure(url, "v1", "dataset 'reviews' is not registered", "run-1", now)

    failed = catalog.get(RAW, "reviews/a.csv", "v1")
    untouched = catalog.get(RAW, "reviews/a.csv", "v2")
    assert failed is not None
    assert failed.status is ObjectStatus.FAILED
    assert untouched is not None
    assert untouched.status is ObjectStatus.RECEIVED
    with pytest.raises(CatalogItemMissingError, match="v9"):
        catalog.record_failure(url, "v9", "gone", "run-1", now)


def test_catalog_moves_a_batch_version_through_the_ingestion_workflow(
    catalog: ObjectCatalog,
) -> None:
    url = f"s3://{RAW}/reviews/a.csv"
    catalog.put_if_newer(_item("v1", "10"))
    catalog.put_if_newer(_item("v2", "20", ObjectStatus.DELETED))

    assert catalog.start_ingestion(url, "v1", "arn:execution:1") is True
    assert catalog.start_ingestion(url, "v2", "arn:execution:1") is False  # DELETED stays
    assert catalog.start_ingestion(url, "v9", "arn:execution:1") is False  # never catalogued
    assert catalog.get(RAW, "reviews/a.csv", "v9") is None
    assert catalog.fail_ingestion(url, "v1", "States.TaskFailed: boom") is True
    assert catalog.fail_ingestion(url, "v1", "again") is False  # no longer INGESTING
    assert catalog.fail_ingestion(url, "v2", "boom") is False

    failed = catalog.get(RAW, "reviews/a.csv", "v1")
    assert failed is not None
    assert (failed.status, failed.ingest_error) == (ObjectStatus.FAILED, "States.TaskFailed: boom")
    versions = sorted(catalog.versions_of(url), key=lambda i: i.version_id)
    assert [(i.version_id, i.status) for i in versions] == [
        ("v1", ObjectStatus.FAILED),
        ("v2", ObjectStatus.DELETED),
    ]
    assert catalog.versions_of(f"s3://{RAW}/reviews/none.csv") == []


Producer = tuple[ObjectStore, Callable[[str, bytes], str], Callable[[str], object]]


@pytest.fixture(params=["memory", "s3"])
def objects(request: pytest.FixtureRequest, lethe_buckets: Callable[..., None]) -> Producer:
    """The store, and how a producer puts an object and deletes a key in it."""
    if request.param == "memory":
        memory = MemoryObjectStore()
        return (
            memory,
            lambda key, body: memory.put(RAW, key, body),
            lambda key: memory.delete(RAW, key),
        )
    lethe_buckets()
    s3 = boto3.client("s3")
    return (
        S3ObjectStore(s3),
        lambda key, body: str(s3.put_object(Bucket=RAW, Key=key, Body=body)["VersionId"]),
        lambda key: s3.delete_object(Bucket=RAW, Key=key),
    )


def test_object_store_heads_versions_and_states(objects: Producer) -> None:
    store, put, delete = objects
    first = put("reviews/a.csv", b"one")
    second = put("reviews/a.csv", b"second")
    put("reviews/a.csv.bak", b"sibling")

    head = store.head(RAW, "reviews/a.csv")
    assert head is not None
    assert (head.version_id, head.size) == (second, 6)
    assert store.read_bytes(RAW, "reviews/a.csv", first) == b"one"
    assert [v.version_id for v in store.versions_of(RAW, "reviews/a.csv")] == [second, first]
    assert key_state(store.versions_of(RAW, "reviews/a.csv")) is KeyState.CURRENT

    delete("reviews/a.csv")

    assert store.head(RAW, "reviews/a.csv") is None
    assert key_state(store.versions_of(RAW, "reviews/a.csv")) is KeyState.HIDDEN
    assert store.versions_of(RAW, "reviews/a.csv")[0].delete_marker is True
    assert store.head(RAW, "reviews/never.csv") is None
