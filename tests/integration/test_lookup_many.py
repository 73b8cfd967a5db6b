"""`lookup_many` on both subject index stores against moto (issue 20, item 4): the same answer
as a loop of `lookup` (flagged, pruned and removed objects; level-0 backlog over level 1; full
digests and 48-bit prefixes), the segment reads run concurrently and read what a sequential
read reads, a segment compacted away mid-lookup restarts it from the manifest, and a read
that fails fails the whole call (never fewer entries)."""

from __future__ import annotations

import hashlib
import random
import threading
from collections.abc import Callable
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from lethe_shared.catalog.zones import Zone
from lethe_shared.index.segments import SegmentSubjectIndex, manifest_table_definition
from lethe_shared.index.segments.lookup import READ_ATTEMPTS
from lethe_shared.index.segments.s3_ranges import SegmentGoneError
from lethe_shared.index.subject_index import DynamoSubjectIndex, IndexEntry
from tests.integration.conftest import REGION

BUCKET = "lethe-test-lookup-many"
MANIFEST = "lethe-test-lookup-many-manifest"
DATASETS = ("orders", "reviews", "visits")


def subject(i: int) -> str:
    return hashlib.sha256(f"many-{i}".encode()).hexdigest()


def url(dataset: str, i: int) -> str:
    return f"s3://lake/{dataset}/part-{i:03d}.parquet"


def entries_of(object_url: str, hashes: list[str], version: str) -> list[IndexEntry]:
    dataset = object_url.split("/")[3]
    return [
        IndexEntry(
            subject_hash=h,
            object_url=object_url,
            dataset_id=dataset,
            zone=Zone.LAKE,
            format="parquet",
            rows=1 + int(h[:2], 16) % 4,
            row_hints=(),
            version_id=version,
            etag=f"etag-{version}",
            matching_fingerprint="m" * 16,
            key_fingerprint="k" * 16,
        )
        for h in hashes
    ]


@pytest.fixture
def s3(aws: None) -> Any:
    client = boto3.client("s3", region_name=REGION)
    client.create_bucket(Bucket=BUCKET)
    return client


@pytest.fixture
def manifest(aws: None) -> Any:
    return boto3.resource("dynamodb", region_name=REGION).create_table(
        **manifest_table_definition(MANIFEST)
    )


def make_index(s3: Any, manifest: Any, **options: Any) -> SegmentSubjectIndex:
    return SegmentSubjectIndex(s3, BUCKET, manifest, settle_seconds=0, **options)


def cold(s3: Any, **options: Any) -> SegmentSubjectIndex:
    """A new index over the same store (empty footer cache), through its own Table resource."""
    table = boto3.resource("dynamodb", region_name=REGION).Table(MANIFEST)
    return make_index(s3, table, **options)


def lake_history(index: Any, rng: random.Random, hashes: list[str], *, compact: bool) -> None:
    """Objects in three datasets written, rewritten with fewer subjects (flagged entries),
    flagged deleted, pruned, removed and erased; compacted halfway when `compact` (then more
    writes: a level-0 backlog over level 1)."""
    for dataset in DATASETS:
        for i in range(8):
            target = url(dataset, i)
            index.replace_object(target, entries_of(target, rng.sample(hashes, 12), "v1"))
    if compact:
        for dataset in DATASETS:
            index.compact(dataset)
    for dataset in DATASETS:
        for i in range(0, 8, 2):  # rewritten: the subjects it lost read flagged
            target = url(dataset, i)
            index.replace_object(target, entries_of(target, rng.sample(hashes, 6), "v2"))
        index.flag_deleted(url(dataset, 1))  # a delete marker: every entry flagged
        index.prune_flagged(url(dataset, 2))  # no older version left: its flagged ones go
        index.remove_object(url(dataset, 3))  # the object is gone
        index.remove_subjects(url(dataset, 4), hashes[:3])  # erased
        target = url(dataset, 8)  # a new object in the backlog
        index.replace_object(target, entries_of(target, rng.sample(hashes, 12), "v1"))


def assert_same_as_a_loop(index: Any, wanted: list[str]) -> dict[str, list[IndexEntry]]:
    many = index.lookup_many(wanted)
    assert list(many) == list(dict.fromkeys(wanted))  # every hash asked for, in order
    assert many == {h: index.lookup(h) for h in wanted}
    return many


# ------------------------------------------------------------------ the same as a loop


@pytest.mark.parametrize("width", [32, 6])
@pytest.mark.parametrize("compact", [False, True])
def test_segments_lookup_many_is_a_loop_of_lookup(
    s3: Any, manifest: Any, width: int, compact: bool
) -> None:
    rng = random.Random(20 + width + compact)
    hashes = [subject(i) for i in range(30)]
    index = make_index(s3, manifest, partition_bits=1, row_group=8, hash_bytes=width)
    lake_history(index, rng, hashes, compact=compact)
    reader = cold(s3)
    listing = [s for d in DATASETS for s in reader.manifest.listing(d) if s.state == "active"]
    assert {s.level for s in listing} == ({0, 1} if compact else {0})

    wanted = [*hashes[:12], subject(999), hashes[0]]  # one unknown, one asked twice
    many = assert_same_as_a_loop(reader, wanted)

    found = [e for entries in many.values() for e in entries]
    assert any(e.deleted for e in found)  # flagged entries are in the answer
    assert any(not e.deleted for e in found)
    assert many[subject(999)] == []
    urls = {e.object_url for e in found}
    assert not any(url(d, 3) in urls for d in DATASETS)  # removed
    assert any(url(d, 8) in urls for d in DATASETS)  # the backlog's new objects
    for h in hashes[:3]:  # erased from object 4
        assert not any(e.object_url == url(d, 4) for d in DATASETS for e in many[h])
    assert reader.lookup_many([]) == {}


def test_dynamodb_lookup_many_is_a_loop_of_lookup(lethe_tables: dict[str, Any]) -> None:
    rng = random.Random(31)
    hashes = [subject(i) for i in range(30)]
    index = DynamoSubjectIndex(lethe_tables["SubjectIndexTable"])
    lake_history(index, rng, hashes, compact=False)
    wanted = [*hashes[:12], subject(999), hashes[0]]

    many = assert_same_as_a_loop(index, wanted)

    found = [e for entries in many.values() for e in entries]
    assert any(e.deleted for e in found)
    assert any(not e.deleted for e in found)
    assert many[subject(999)] == []
    for entries in many.values():  # by object URL, as a Query answers
        assert [e.object_url for e in entries] == sorted(e.object_url for e in entries)
    assert index.lookup_many([]) == {}
    assert index.lookup_many([hashes[5]]) == {hashes[5]: index.lookup(hashes[5])}


def test_both_stores_answer_the_same(s3: Any, manifest: Any, lethe_tables: dict[str, Any]) -> None:
    hashes = [subject(i) for i in range(30)]
    segments = make_index(s3, manifest, partition_bits=1, row_group=8)
    dynamo = DynamoSubjectIndex(lethe_tables["SubjectIndexTable"])
    for index in (segments, dynamo):
        lake_history(index, random.Random(5), hashes, compact=index is segments)

    def seen(index: Any) -> dict[str, set[tuple[str, str, bool]]]:
        many = index.lookup_many(hashes)
        return {h: {(e.object_url, e.version_id, e.deleted) for e in many[h]} for h in many}

    assert seen(cold(s3)) == seen(dynamo)


# ------------------------------------------------------------------ concurrent reads


def test_the_segment_reads_run_concurrently_and_read_what_one_thread_reads(
    s3: Any, manifest: Any
) -> None:
    rng = random.Random(41)
    hashes = [subject(i) for i in range(30)]
    index = make_index(s3, manifest, partition_bits=1, row_group=8)
    lake_history(index, rng, hashes, compact=True)

    threads: set[str] = set()
    parallel = cold(s3)
    by_hashes = parallel.reader.by_hashes

    def recorded(segment: Any, keys: Any) -> Any:
        threads.add(threading.current_thread().name)
        return by_hashes(segment, keys)

    parallel.reader.by_hashes = recorded  # type: ignore[method-assign]
    found = parallel.lookup_many(hashes)
    assert len({t for t in threads if t.startswith("lethe-lookup")}) > 1

    alone = cold(s3)
    alone.reads.threads = 1
    assert alone.lookup_many(hashes) == found
    assert parallel.counter.by_key == alone.counter.by_key  # the same files, as often
    assert (parallel.counter.gets, parallel.counter.bytes) == (
        alone.counter.gets,
        alone.counter.bytes,
    )


# ------------------------------------------------------------------ races and failures


def test_a_segment_compacted_away_mid_lookup_restarts_it_from_the_manifest(
    s3: Any, manifest: Any
) -> None:
    rng = random.Random(51)
    hashes = [subject(i) for i in range(30)]
    index = make_index(s3, manifest, partition_bits=1, row_group=8)
    lake_history(index, rng, hashes, compact=False)
    expected = {h: cold(s3).lookup(h) for h in hashes}

    reader = cold(s3)
    planned: list[str] = []
    hash_reads = reader.reads.hash_reads
    lock = threading.Lock()

    def then_compacted(dataset_id: str, wanted: Any) -> Any:
        plan = hash_reads(dataset_id, wanted)  # the listing read: level-0 segments only
        with lock:
            planned.append(dataset_id)
            if len(planned) == 1:
                # every dataset compacted before any segment is read: its level-0 files go
                compactor = cold(s3)
                for dataset in DATASETS:
                    assert compactor.compact(dataset).level0_retired > 0
        return plan

    reader.reads.hash_reads = then_compacted  # type: ignore[method-assign]
    found = reader.lookup_many(hashes)
    assert len(planned) == 2 * len(DATASETS)  # listed again after the files were gone
    assert found == expected
    assert all(
        s.level == 1 for d in DATASETS for s in reader.manifest.listing(d) if s.state == "active"
    )


def _failing_get(s3: Any, wanted: Callable[[str], bool], error: Exception) -> list[str]:
    """Every GetObject of a key `wanted` picks raises `error`; the keys it refused."""
    refused: list[str] = []

    def refuse(params: dict[str, Any], **_: Any) -> None:
        if wanted(params["Key"]):
            refused.append(params["Key"])
            raise error

    s3.meta.events.register("before-parameter-build.s3.GetObject", refuse)
    return refused


def test_a_failing_get_fails_the_whole_call(s3: Any, manifest: Any) -> None:
    rng = random.Random(61)
    hashes = [subject(i) for i in range(30)]
    index = make_index(s3, manifest, partition_bits=1, row_group=8)
    lake_history(index, rng, hashes, compact=True)
    reader = cold(s3)
    level0 = [s for s in reader.manifest.listing("reviews") if s.level == 0]
    victim = level0[-1].key
    denied = ClientError({"Error": {"Code": "AccessDenied", "Message": "denied"}}, "GetObject")
    refused = _failing_get(s3, lambda key: key == victim, denied)

    with pytest.raises(ClientError) as raised:
        reader.lookup_many(hashes)
    assert raised.value.response["Error"]["Code"] == "AccessDenied"
    assert refused == [victim]  # not retried: only a segment that is gone restarts the read
    with pytest.raises(ClientError):
        reader.lookup(hashes[0])  # as a single lookup fails


def test_a_segment_that_stays_gone_fails_the_call_after_the_retries(s3: Any, manifest: Any) -> None:
    rng = random.Random(71)
    hashes = [subject(i) for i in range(30)]
    index = make_index(s3, manifest, partition_bits=0, row_group=8)
    lake_history(index, rng, hashes, compact=True)
    reader = cold(s3)
    victim = next(s for s in reader.manifest.listing("orders") if s.level == 1).key
    gone = ClientError({"Error": {"Code": "NoSuchKey", "Message": "gone"}}, "GetObject")
    refused = _failing_get(s3, lambda key: key == victim, gone)

    with pytest.raises(SegmentGoneError):
        reader.lookup_many(hashes)
    assert len(refused) == READ_ATTEMPTS  # the manifest read again each time, then it raises


def test_a_failing_query_fails_the_dynamodb_call(lethe_tables: dict[str, Any]) -> None:
    hashes = [subject(i) for i in range(12)]
    table = lethe_tables["SubjectIndexTable"]
    index = DynamoSubjectIndex(table)
    lake_history(index, random.Random(81), hashes, compact=False)
    victim = hashes[7]

    def refuse(params: dict[str, Any], **_: Any) -> None:
        value = params.get("ExpressionAttributeValues", {}).get(":h")
        if value in (victim, {"S": victim}):  # before or after the resource's conversion
            raise ClientError(
                {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "x"}},
                "Query",
            )

    table.meta.client.meta.events.register("before-parameter-build.dynamodb.Query", refuse)
    with pytest.raises(ClientError) as raised:
        index.lookup_many(hashes)
    assert raised.value.response["Error"]["Code"] == "ProvisionedThroughputExceededException"
    assert index.lookup_many(hashes[:7])  # the others still answer
