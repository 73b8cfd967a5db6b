"""The carried pointers (`segments.carried`) against moto: what compaction keeps of the level-0
items it retires, read by digest range, replaced atomically, and swept after a crash."""

from __future__ import annotations

import random
from typing import Any

import boto3
import pyarrow as pa
import pytest

from lethe_shared.index.segments import SegmentSubjectIndex, manifest_table_definition, s3_ranges
from lethe_shared.index.segments import carried as carried_module
from lethe_shared.index.segments.described import url_digest
from lethe_shared.index.segments.s3_ranges import SegmentGoneError
from lethe_shared.index.subject_index import IndexEntry
from tests.integration.conftest import REGION
from tests.integration.test_segment_index import BUCKET, entries_of, make_index, subject, url

A, B = subject(1), subject(2)


@pytest.fixture
def s3(aws: None) -> Any:
    client = boto3.client("s3", region_name=REGION)
    client.create_bucket(Bucket=BUCKET)
    return client


@pytest.fixture
def manifest(aws: None) -> Any:
    return boto3.resource("dynamodb", region_name=REGION).create_table(
        **manifest_table_definition("lethe-test-index-manifest")
    )


def written(target: str, hashes: list[str], version: str) -> list[IndexEntry]:
    return entries_of(target, hashes, version, random.Random(version))


def carried_keys(s3: Any) -> list[str]:
    found = s3.list_objects_v2(Bucket=BUCKET, Prefix="segments/ds/carried/")
    return sorted(o["Key"] for o in found.get("Contents", []))


def test_merged_keeps_the_highest_origin_per_digest_sorted() -> None:
    old = pa.table(
        {"digest": [b"b" * 8, b"d" * 8], "origin": ["0002", "0009"]}, schema=carried_module.SCHEMA
    )
    table = carried_module.merged(
        old,
        [("0005", frozenset({b"b" * 8, b"a" * 8})), ("0003", frozenset({b"d" * 8, b"a" * 8}))],
    )
    assert table["digest"].to_pylist() == [b"a" * 8, b"b" * 8, b"d" * 8]
    assert table["origin"].to_pylist() == ["0005", "0005", "0009"]
    assert carried_module.merged(carried_module.empty(), []).num_rows == 0


def test_a_lookup_reads_only_the_carried_row_groups_of_its_objects(
    s3: Any, manifest: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(carried_module, "GROUP_ROWS", 64)
    monkeypatch.setattr(s3_ranges, "TAIL_BYTES", 2048)  # the file does not come whole with it
    writer = make_index(s3, manifest)
    urls = [url("ds", i) for i in range(3000)]
    # A in one object only, B in all: the carried file holds 3,000 digests in 47 row groups
    writer.replace_objects(
        [(u, written(u, [A, B] if i == 7 else [B], "v1")) for i, u in enumerate(urls)]
    )
    writer.compact("ds")
    (item,) = writer.manifest.listing("ds").active_carried
    reader = make_index(s3, manifest)  # a cold cache
    assert [e.object_url for e in reader.lookup_in("ds", [A])[A]] == [urls[7]]
    parquet = reader.files.open(item.key, item.etag)
    assert parquet.metadata.num_row_groups == 47
    assert item.bytes > 8 * 2048
    # the footer's suffix GET, perhaps the rest of the footer, and ONE row group
    assert reader.counter.by_key[item.key] <= 3
    sizes: list[tuple[str, int]] = []
    add = reader.counter.add
    monkeypatch.setattr(reader.counter, "add", lambda k, n: (sizes.append((k, n)), add(k, n)))
    reader.lookup_in("ds", [A])  # footer cached: the one row group only
    assert [n for k, n in sizes if k == item.key] == [
        parquet.metadata.row_group(g).column(0).total_compressed_size
        + parquet.metadata.row_group(g).column(1).total_compressed_size
        for g in range(47)
        if parquet.metadata.row_group(g).column(0).statistics.min
        <= url_digest(urls[7])
        <= parquet.metadata.row_group(g).column(0).statistics.max
    ]
    found = reader.lookup_in("ds", [B])[B]
    assert len(found) == 3000
    assert found == writer.lookup_in("ds", [B])[B]


def test_a_reader_whose_carried_file_was_replaced_reads_again(
    s3: Any, manifest: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = make_index(s3, manifest)
    first, second = url("ds", 0), url("ds", 1)
    index.replace_object(first, written(first, [A, B], "v1"))
    index.compact("ds")
    listed = index.manifest.listing("ds")  # names the first carried file
    index.replace_object(second, written(second, [A], "v1"))
    index.compact("ds")  # a new carried file; the first is deleted
    stale = make_index(s3, manifest).reads.level0(listed)  # a cold cache: it must GET the file
    with pytest.raises(SegmentGoneError):
        stale.pointers({first: None})
    # a lookup meeting it starts again from the manifest and answers as if it had not
    reader = make_index(s3, manifest)
    listing = reader.manifest.listing
    calls: list[int] = []

    def old_first(dataset_id: str) -> Any:
        calls.append(1)
        return listed if len(calls) == 1 else listing(dataset_id)

    monkeypatch.setattr(reader.manifest, "listing", old_first)
    assert [e.object_url for e in reader.lookup_in("ds", [A])[A]] == [first, second]
    assert len(calls) >= 2


def test_a_compaction_that_died_leaves_nothing_the_next_one_does_not_sweep(
    s3: Any, manifest: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = make_index(s3, manifest, pending_timeout_seconds=0)
    target = url("ds", 0)
    index.replace_object(target, written(target, [A], "v1"))
    index.compact("ds")
    index.replace_object(target, written(target, [A, B], "v2"))

    def dies(*_: Any) -> None:
        raise RuntimeError("the compaction's process died")

    # died after writing the new carried file, before committing it
    monkeypatch.setattr(index.manifest, "transact", dies)
    with pytest.raises(RuntimeError):
        index.compactor.carry(
            "ds", index.manifest.listing("ds"), list(index.manifest.segments("ds", 0))
        )
    monkeypatch.undo()
    states = sorted(c.state for c in index.manifest.listing("ds").carried)
    assert states == ["active", "pending"]
    assert len(carried_keys(s3)) == 2
    assert sorted(e.version_id for e in index.lookup(B)) == ["v2"]  # the pending one: unread
    report = index.compact("ds")
    assert report.pending_swept >= 1
    (left,) = index.manifest.listing("ds").carried
    assert left.state == "active"
    assert carried_keys(s3) == [left.key]
    assert sorted(e.version_id for e in index.lookup(A)) == ["v2"]
    assert url_digest(target) in carried_module.read_whole(index.files, left)["digest"].to_pylist()


def test_an_erasure_leaves_the_carried_file_as_it_is_it_holds_no_subject(
    s3: Any, manifest: Any
) -> None:
    index: SegmentSubjectIndex = make_index(s3, manifest)
    target = url("ds", 0)
    index.replace_object(target, written(target, [A, B], "v1"))
    index.compact("ds")
    before = carried_keys(s3)
    index.erase_entries("ds", {target: index.entry_states(target, [A])})
    assert carried_keys(s3) == before
    assert index.lookup(A) == []
    assert [e.version_id for e in index.lookup(B)] == ["v1"]
