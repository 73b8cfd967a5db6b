"""Index maintenance on object events, with fakes for S3, the index and the requester."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from lethe_shared.catalog import CatalogItem, ObjectStatus, Zone, normalize_sequencer
from lethe_shared.index_maintenance import IndexAction, IndexMaintainer, index_execution_name
from lethe_shared.subjects import IndexEntry

LAKE, RAW = "lake", "raw"
KEY = "reviews/review_date=2026-11-22/part-1.parquet"


class ClientError(Exception):
    def __init__(self, code: str) -> None:
        self.response = {"Error": {"Code": code}}


class FakeS3:
    class exceptions:
        ClientError = ClientError

    def __init__(
        self,
        head: dict[str, Any] | None = None,
        versions: list[dict[str, Any]] | None = None,
        markers: list[dict[str, Any]] | None = None,
    ) -> None:
        self.head, self.versions, self.markers = head, versions or [], markers or []

    def head_object(self, **kwargs: Any) -> dict[str, Any]:
        if self.head is None:
            raise ClientError("404")
        return self.head

    def list_object_versions(self, **kwargs: Any) -> dict[str, Any]:
        return {"Versions": self.versions, "DeleteMarkers": self.markers, "IsTruncated": False}


class FakeIndex:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def lookup(self, subject_hash: str) -> list[IndexEntry]:
        return []

    def replace_object(self, object_url: str, entries: Iterable[IndexEntry]) -> None:
        self.calls.append(("replace", object_url))

    def flag_deleted(self, object_url: str, deleted: bool = True) -> int:
        self.calls.append(("flag", object_url))
        return 1

    def remove_object(self, object_url: str) -> int:
        self.calls.append(("remove", object_url))
        return 1


class FakeRequester:
    def __init__(self) -> None:
        self.lambdas: list[dict[str, str]] = []
        self.sparks: list[tuple[str, dict[str, Any]]] = []

    def by_lambda(self, request: dict[str, str]) -> None:
        self.lambdas.append(request)

    def by_spark(self, name: str, request: dict[str, Any]) -> None:
        self.sparks.append((name, request))


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
    s3: FakeS3, max_bytes: int = 100
) -> tuple[IndexMaintainer, FakeIndex, FakeRequester]:
    index, requester = FakeIndex(), FakeRequester()
    return (
        IndexMaintainer(index=index, s3=s3, requester=requester, max_lambda_bytes=max_bytes),
        index,
        requester,
    )


def test_small_lake_object_goes_to_the_lambda() -> None:
    maintainer, _, requester = _maintainer(FakeS3(head={"ContentLength": 100, "Metadata": {}}))

    assert maintainer.on_created(_item()) is IndexAction.LAMBDA
    assert requester.lambdas == [
        {"dataset_id": "reviews", "bucket": LAKE, "key": KEY, "version_id": "v1"}
    ]


def test_large_lake_object_goes_to_spark_under_a_name_per_version() -> None:
    maintainer, _, requester = _maintainer(FakeS3(head={"ContentLength": 101, "Metadata": {}}))

    assert maintainer.on_created(_item()) is IndexAction.SPARK
    assert requester.sparks == [
        (
            index_execution_name(_item()),
            {"dataset_id": "reviews", "objects": [{"bucket": LAKE, "key": KEY}]},
        )
    ]
    assert index_execution_name(_item()) != index_execution_name(_item(version="v2"))
    assert len(index_execution_name(_item(dataset="d" * 63))) <= 80


def test_objects_written_by_ingestion_are_already_indexed() -> None:
    head = {"ContentLength": 1, "Metadata": {"lethe-producer": "ingest"}}
    maintainer, index, requester = _maintainer(FakeS3(head=head))

    assert maintainer.on_created(_item()) is IndexAction.INDEXED_BY_INGEST
    assert (index.calls, requester.lambdas, requester.sparks) == ([], [], [])


@pytest.mark.parametrize(
    "item", [_item(zone=Zone.RAW, status=ObjectStatus.RECEIVED), _item(dataset=None)]
)
def test_raw_and_ignored_objects_are_not_indexed_on_creation(item: CatalogItem) -> None:
    maintainer, _, requester = _maintainer(FakeS3(head={"ContentLength": 1, "Metadata": {}}))

    assert maintainer.on_created(item) is None
    assert requester.lambdas == []


def test_an_object_gone_before_indexing() -> None:
    maintainer, _, requester = _maintainer(FakeS3(head=None))

    assert maintainer.on_created(_item()) is IndexAction.GONE
    assert requester.lambdas == []


def test_delete_marker_flags_the_entries() -> None:
    maintainer, index, _ = _maintainer(FakeS3())

    assert (
        maintainer.on_deleted(_item(status=ObjectStatus.DELETED, marker=True))
        is IndexAction.FLAGGED
    )
    assert index.calls == [("flag", f"s3://{LAKE}/{KEY}")]


def test_permanent_delete_of_the_last_version_removes_the_entries() -> None:
    other_key = {"Key": KEY + ".bak", "VersionId": "x", "IsLatest": True, "Size": 5}
    maintainer, index, _ = _maintainer(FakeS3(versions=[other_key]))  # a sibling key only

    assert maintainer.on_deleted(_item(status=ObjectStatus.DELETED)) is IndexAction.REMOVED
    assert index.calls == [("remove", f"s3://{LAKE}/{KEY}")]


def test_permanent_delete_of_the_current_version_reindexes_the_older_one() -> None:
    older = {"Key": KEY, "VersionId": "v0", "IsLatest": True, "Size": 10}
    maintainer, index, requester = _maintainer(FakeS3(versions=[older]))

    assert maintainer.on_deleted(_item(status=ObjectStatus.DELETED)) is IndexAction.LAMBDA
    assert requester.lambdas[0]["version_id"] == "v0"
    assert index.calls == []


def test_permanent_delete_leaving_a_delete_marker_current_flags_the_entries() -> None:
    marker = {"Key": KEY, "VersionId": "m1", "IsLatest": True}
    maintainer, index, _ = _maintainer(FakeS3(markers=[marker]))

    assert maintainer.on_deleted(_item(status=ObjectStatus.DELETED)) is IndexAction.FLAGGED
    assert index.calls == [("flag", f"s3://{LAKE}/{KEY}")]


def test_a_small_quarantine_file_still_goes_to_spark() -> None:
    maintainer, _, requester = _maintainer(FakeS3(head={"ContentLength": 10, "Metadata": {}}))
    item = _item().model_copy(update={"key": "reviews/_quarantine/abc.jsonl"})

    assert maintainer.on_created(item) is IndexAction.SPARK
    assert requester.lambdas == []
