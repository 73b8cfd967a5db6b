"""The erasure report and the index update look their subjects up in ONE `lookup_many` call
(issue 20, item 4), with the same outcome as a `lookup` per subject."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

import pytest

from lethe_shared.aws.s3 import s3_url
from lethe_shared.catalog.zones import Zone
from lethe_shared.erasure.index_update import settle_index
from lethe_shared.erasure.report import EraseResults, build_manifest
from lethe_shared.index.subject_index import IndexEntry
from tests.fakes import MemoryIndex, MemoryObjectStore

pytestmark = pytest.mark.lambda_runtime

LAKE = "lethe-local-lake-123456789012-us-east-1"
A, B, C = "a" * 64, "b" * 64, "c" * 64
T0 = datetime(2026, 11, 28, 10, 0, tzinfo=UTC)
RID = "er-20261128T100000Z-0a1b2c3d"


class OneCallIndex(MemoryIndex):
    """Counts `lookup_many` calls; `lookup` is not to be called."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list[str]] = []

    def lookup(self, subject_hash: str) -> list[IndexEntry]:
        raise AssertionError("looked up one subject at a time")

    def lookup_many(self, subject_hashes: Iterable[str]) -> dict[str, list[IndexEntry]]:
        wanted = list(subject_hashes)
        self.calls.append(wanted)
        return {h: MemoryIndex.lookup(self, h) for h in dict.fromkeys(wanted)}


def entry(subject: str, key: str, *, deleted: bool = False) -> IndexEntry:
    return IndexEntry(
        subject_hash=subject,
        object_url=s3_url(LAKE, key),
        dataset_id=key.split("/", maxsplit=1)[0],
        zone=Zone.LAKE,
        format="parquet",
        rows=2,
        version_id="v1",
        etag="e1",
        deleted=deleted,
    )


def filled(index: MemoryIndex, objects: MemoryObjectStore) -> None:
    for subject, key, deleted in (
        (A, "reviews/p=1/a.parquet", False),
        (A, "orders/p=1/a.parquet", True),  # flagged: its rows sit in an older version
        (B, "reviews/p=1/a.parquet", False),
        (C, "reviews/p=2/c.parquet", False),  # a subject the request does not name
    ):
        index.entries[(subject, s3_url(LAKE, key))] = entry(subject, key, deleted=deleted)
        objects.put_version(LAKE, key, "v1")


def test_the_report_makes_one_call_and_finds_what_a_loop_finds() -> None:
    objects = MemoryObjectStore()
    one, loop = OneCallIndex(), MemoryIndex()
    filled(one, objects)
    filled(loop, objects)

    built = build_manifest(RID, [B, A, A], 2, index=one, objects=objects, now=T0)

    assert one.calls == [[A, B]]
    assert built == build_manifest(RID, [B, A, A], 2, index=loop, objects=objects, now=T0)
    assert [o.object_url for o in built.objects] == [
        s3_url(LAKE, "orders/p=1/a.parquet"),
        s3_url(LAKE, "reviews/p=1/a.parquet"),
    ]


def test_the_index_update_collects_what_it_kept_in_one_call() -> None:
    objects = MemoryObjectStore()
    index = OneCallIndex()
    filled(index, objects)
    nothing_erased = EraseResults(
        request_id=RID,
        manifest_sha256="0" * 64,
        correlation_id="c",
        finished_at=T0.isoformat(),
        objects=(),
    )

    update = settle_index(nothing_erased, [A, B], index=index, objects=objects)

    assert index.calls == [[A, B]]
    assert update.kept_reasons["object_not_erased"] == 3  # A twice (one flagged), B once
