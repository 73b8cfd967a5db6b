"""Index maintenance on object events, with in-memory S3, index and requester (tests/fakes.py)."""

from __future__ import annotations

import pytest

from lethe_shared.catalog.object_catalog import CatalogItem, ObjectStatus, Zone, normalize_sequencer
from lethe_shared.catalog.writes_ledger import Writer
from lethe_shared.errors import WriteNotSettledError
from lethe_shared.index.maintenance import IndexAction, IndexMaintainer, index_execution_name
from lethe_shared.index.subject_index import IndexEntry
from tests.fakes import MemoryIndex, MemoryObjectStore, MemoryWritesLedger, RecordingRequester

pytestmark = pytest.mark.lambda_runtime

LAKE, RAW = "lake", "raw"
KEY = "reviews/review_date=2026-11-22/part-1.parquet"
URL = f"s3://{LAKE}/{KEY}"
SUBJECT = "a" * 64


def _item(
    *,
    zone: Zone = Zone.LAKE,
    status: ObjectStatus = ObjectStatus.STORED,
    dataset: str | None = "reviews",
    marker: bool = False,
    version: str = "v1",
) -> CatalogItem:
    return CatalogItem(
        bucket=LAKE if zone is Zone.LAKE else RAW,
        key=KEY,
        version_id=version,
        zone=zone,
        status=status,
        sequencer=normalize_sequencer("1"),
        dataset_id=dataset,
        delete_marker=marker,
    )


def _maintainer(
    store: MemoryObjectStore, max_bytes: int = 100, ledger: MemoryWritesLedger | None = None
) -> tuple[IndexMaintainer, MemoryIndex, RecordingRequester]:
    index, requester = MemoryIndex(), RecordingRequester()
    index.replace_object(
        URL,
        [
            IndexEntry(
                subject_hash=SUBJECT,
                object_url=URL,
                dataset_id="reviews",
                zone=Zone.LAKE,
                format="parquet",
                rows=1,
            )
        ],
    )
    return (
        IndexMaintainer(
            index=index,
            objects=store,
            requester=requester,
            max_lambda_bytes=max_bytes,
            ledger=ledger or MemoryWritesLedger(),
        ),
        index,
        requester,
    )


def _store(
    *bodies: bytes, metadata: dict[str, str] | None = None
) -> tuple[MemoryObjectStore, list[str]]:
    store = MemoryObjectStore()
    versions = [store.put(LAKE, KEY, body, metadata) for body in bodies]
    return store, versions


def test_small_lake_object_goes_to_the_lambda() -> None:
    store, (version,) = _store(b"x" * 100)
    maintainer, _, requester = _maintainer(store)

    assert maintainer.on_created(_item(version=version)) is IndexAction.LAMBDA
    assert requester.lambdas == [
        {"dataset_id": "reviews", "bucket": LAKE, "key": KEY, "version_id": version}
    ]


def test_large_lake_object_goes_to_spark_under_a_name_per_version() -> None:
    store, (version,) = _store(b"x" * 101)
    maintainer, _, requester = _maintainer(store)

    assert maintainer.on_created(_item(version=version)) is IndexAction.SPARK
    assert requester.sparks == [
        (
            index_execution_name(_item(version=version)),
            {"dataset_id": "reviews", "objects": [{"bucket": LAKE, "key": KEY}]},
        )
    ]
    assert index_execution_name(_item()) != index_execution_name(_item(version="v2"))
    assert index_execution_name(_item()).startswith("reviews-index-")
    assert len(index_execution_name(_item(dataset="d" * 63))) <= 80


@pytest.mark.parametrize("writer", [Writer.INGEST, Writer.ERASE])
def test_objects_the_ledger_says_a_self_indexing_job_wrote_are_already_indexed(
    writer: Writer,
) -> None:
    store, (version,) = _store(b"x", metadata={"lethe-producer": writer.value})
    ledger = MemoryWritesLedger()
    ledger.record(LAKE, KEY, version, writer)
    maintainer, index, requester = _maintainer(store, ledger=ledger)

    assert maintainer.on_created(_item(version=version)) is IndexAction.INDEXED_BY_WRITER
    assert (requester.lambdas, requester.sparks) == ([], [])
    assert index.subjects_of(URL) == {SUBJECT}


@pytest.mark.parametrize("claimed", ["ingest", "erase"])
def test_lake_objects_claiming_lethe_metadata_without_a_ledger_record_are_indexed(
    claimed: str,
) -> None:
    # a copy of a lake file (CopyObject keeps its metadata), or a producer setting the header
    store, (version,) = _store(b"x", metadata={"lethe-producer": claimed})
    maintainer, _, requester = _maintainer(store)

    assert maintainer.on_created(_item(version=version)) is IndexAction.LAMBDA
    assert [r["version_id"] for r in requester.lambdas] == [version]


def test_a_lake_object_whose_writer_is_not_settled_raises_and_asks_nothing() -> None:
    store = MemoryObjectStore()
    ledger = MemoryWritesLedger()
    ledger.writer(Writer.INGEST, "exec-1").intend(LAKE, KEY, 1)
    version = store.put(LAKE, KEY, b"x")
    maintainer, _, requester = _maintainer(store, ledger=ledger)

    with pytest.raises(WriteNotSettledError):
        maintainer.on_created(_item(version=version))
    assert (requester.lambdas, requester.sparks) == ([], [])


def test_after_a_delete_a_current_version_the_ledger_names_is_not_reindexed() -> None:
    store, (older, newer) = _store(b"older", b"newer")
    ledger = MemoryWritesLedger()
    ledger.record(LAKE, KEY, older, Writer.ERASE)
    store.delete_version(LAKE, KEY, newer)
    maintainer, _, requester = _maintainer(store, ledger=ledger)

    action = maintainer.on_deleted(_item(status=ObjectStatus.DELETED, version=newer))

    assert action is IndexAction.UNCHANGED  # the erasure indexed it (unlike the test above)
    assert requester.lambdas == []


@pytest.mark.parametrize(
    "item", [_item(zone=Zone.RAW, status=ObjectStatus.RECEIVED), _item(dataset=None)]
)
def test_raw_and_ignored_objects_are_not_indexed_on_creation(item: CatalogItem) -> None:
    store, _ = _store(b"x")
    maintainer, _, requester = _maintainer(store)

    assert maintainer.on_created(item) is None
    assert requester.lambdas == []


def test_an_object_gone_before_indexing() -> None:
    maintainer, _, requester = _maintainer(MemoryObjectStore())

    assert maintainer.on_created(_item()) is IndexAction.GONE
    assert requester.lambdas == []


def test_delete_marker_over_data_flags_the_entries() -> None:
    store, _ = _store(b"x")
    store.delete(LAKE, KEY)
    maintainer, index, _ = _maintainer(store)

    assert (
        maintainer.on_deleted(_item(status=ObjectStatus.DELETED, marker=True))
        is IndexAction.FLAGGED
    )
    assert [e.deleted for e in index.lookup(SUBJECT)] == [True]


def test_permanent_delete_of_the_last_version_removes_the_entries() -> None:
    store = MemoryObjectStore()
    store.put(LAKE, KEY + ".bak", b"sibling")  # a key sharing the prefix is not this key
    maintainer, index, _ = _maintainer(store)

    assert maintainer.on_deleted(_item(status=ObjectStatus.DELETED)) is IndexAction.REMOVED
    assert index.lookup(SUBJECT) == []


def test_permanent_delete_of_the_current_version_reindexes_the_older_one() -> None:
    store, (older, newer) = _store(b"older", b"newer")
    store.delete_version(LAKE, KEY, newer)
    maintainer, index, requester = _maintainer(store)

    assert maintainer.on_deleted(_item(status=ObjectStatus.DELETED, version=newer)) is (
        IndexAction.LAMBDA
    )
    assert requester.lambdas[0]["version_id"] == older
    assert index.subjects_of(URL) == {SUBJECT}  # untouched until the re-index replaces them


def test_permanent_delete_leaving_a_delete_marker_over_data_flags_the_entries() -> None:
    store, (_, newer) = _store(b"older", b"newer")
    store.delete(LAKE, KEY)
    store.delete_version(LAKE, KEY, newer)
    maintainer, index, _ = _maintainer(store)

    assert maintainer.on_deleted(_item(status=ObjectStatus.DELETED, version=newer)) is (
        IndexAction.FLAGGED
    )
    assert [e.deleted for e in index.lookup(SUBJECT)] == [True]


def test_only_delete_markers_left_remove_the_entries() -> None:
    """No version holds data any more: nothing for erasure to find, so nothing is kept (the
    rule the Spark index job applies too: lethe_shared.aws.s3.key_state)."""
    store, (version,) = _store(b"data")
    store.delete(LAKE, KEY)
    store.delete_version(LAKE, KEY, version)
    maintainer, index, _ = _maintainer(store)

    assert maintainer.on_deleted(_item(status=ObjectStatus.DELETED, version=version)) is (
        IndexAction.REMOVED
    )
    assert index.lookup(SUBJECT) == []


def test_a_small_quarantine_file_still_goes_to_spark() -> None:
    store = MemoryObjectStore()
    version = store.put(LAKE, "reviews/_quarantine/abc.jsonl", b"x" * 10)
    maintainer, _, requester = _maintainer(store)
    item = _item(version=version).model_copy(update={"key": "reviews/_quarantine/abc.jsonl"})

    assert maintainer.on_created(item) is IndexAction.SPARK
    assert requester.lambdas == []
