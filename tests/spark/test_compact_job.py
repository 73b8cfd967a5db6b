"""The compaction job (`spark_jobs/compact.py` main and lethe_jobs.compact_core) against the moto
server: level-0 segments folded into level-1 partitions by Spark tasks (one per dataset),
lookups the same before and after, a dataset under the threshold left alone, and an erasure
racing the job's commit never bringing a hash back."""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any

import boto3
import pytest
from pyspark.sql import SparkSession

from compact import main as compact_main
from lethe_jobs.compact_core import CompactArgs, run_compaction
from lethe_shared.catalog.zones import Zone
from lethe_shared.index.opening import IndexLocation, IndexStore
from lethe_shared.index.segments import SegmentSubjectIndex, manifest_table_definition
from lethe_shared.index.segments.manifest import ACTIVE
from lethe_shared.index.subject_index import IndexEntry
from tests.spark.cloud import Cloud

BUCKET = "lethe-test-index"
MANIFEST = "lethe-test-index-manifest"
ERASED = 5  # the subject an erasure removes while the job is about to commit


def subject(i: int) -> str:
    return hashlib.sha256(f"subject-{i}".encode()).hexdigest()


def url(dataset: str, i: int) -> str:
    return f"s3://lake/{dataset}/part-{i}.parquet"


def entries(object_url: str, hashes: list[str], rng: random.Random) -> list[IndexEntry]:
    return [
        IndexEntry(
            subject_hash=h,
            object_url=object_url,
            dataset_id=object_url.split("/")[3],
            zone=Zone.LAKE,
            format="parquet",
            rows=rng.randint(1, 5),
            row_hints=(1, 2),
            version_id="v1",
            etag="etag-v1",
            matching_fingerprint="m" * 16,
            key_fingerprint="k" * 16,
        )
        for h in hashes
    ]


def open_index(location: IndexLocation) -> SegmentSubjectIndex:
    return SegmentSubjectIndex(
        boto3.client("s3"),
        location.bucket,
        boto3.resource("dynamodb").Table(location.manifest_table),
        partition_bits=2,
    )


def erasing_index(location: IndexLocation) -> SegmentSubjectIndex:
    """The index a Spark task opens, with an erasure of subject ERASED in its first commit's
    window: the erasure rewrites the level-0 inputs the task has read."""
    index = open_index(location)
    raced: list[int] = []

    def erase_in_the_window(partition: int) -> None:
        if raced:
            return
        raced.append(partition)
        other = open_index(location)
        erased = subject(ERASED)
        removals = {url("ds", i): other.entry_states(url("ds", i), [erased]) for i in range(6)}
        assert other.erase_entries("ds", removals).rewritten

    index.compactor.before_commit = erase_in_the_window
    return index


@pytest.fixture
def index(cloud: Cloud) -> SegmentSubjectIndex:
    boto3.client("s3").create_bucket(Bucket=BUCKET)
    boto3.resource("dynamodb").create_table(**manifest_table_definition(MANIFEST))
    return open_index(IndexLocation(IndexStore.SEGMENTS, "", BUCKET, MANIFEST))


def fill(index: SegmentSubjectIndex, dataset: str, objects: int) -> list[str]:
    """One level-0 segment per object (as one ingest task each), subjects 0..19 spread."""
    rng = random.Random(dataset)
    hashes = [subject(i) for i in range(20)]
    for i in range(objects):
        chosen = sorted({*rng.sample(hashes, 6), subject(ERASED)})
        index.replace_object(url(dataset, i), entries(url(dataset, i), chosen, rng))
    return hashes


def looked_up(index: SegmentSubjectIndex, hashes: list[str]) -> dict[str, list[tuple[Any, ...]]]:
    return {
        h: sorted((e.object_url, e.rows, e.version_id) for e in index.lookup(h)) for h in hashes
    }


def active(index: SegmentSubjectIndex, dataset: str, level: int) -> list[Any]:
    return [s for s in index.manifest.listing(dataset) if s.level == level and s.state == ACTIVE]


def all_bytes(s3: Any) -> list[tuple[str, bytes]]:
    found = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
        for item in page.get("Contents", []):
            found.append(
                (item["Key"], s3.get_object(Bucket=BUCKET, Key=item["Key"])["Body"].read())
            )
    return found


def test_the_job_folds_level0_segments_into_partitions_and_skips_a_small_backlog(
    index: SegmentSubjectIndex, capsys: pytest.CaptureFixture[str]
) -> None:
    hashes = fill(index, "ds", 6) + fill(index, "few", 2)
    before = looked_up(index, hashes)
    assert len(active(index, "ds", 0)) == 6

    code = compact_main(
        [
            "--index-store", "segments", "--index-bucket", BUCKET, "--manifest-table", MANIFEST,
            "--correlation-id", "compact-1", "--min-level0", "3", "--settle-seconds", "0",
        ]
    )  # fmt: skip

    assert code == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(result["compacted"]) == {"ds"}
    assert result["skipped"] == {"few": 2}
    assert result["compacted"]["ds"]["level0_retired"] == 6
    assert result["compacted"]["ds"]["level0_after"] == 0
    assert active(index, "ds", 0) == []
    level1 = active(index, "ds", 1)
    assert 1 <= len(level1) <= 4  # partition_bits=2: at most one level-1 segment per partition
    assert sorted({s.partition for s in level1}) == sorted(s.partition for s in level1)
    assert len(active(index, "few", 0)) == 2  # under the threshold: untouched
    assert looked_up(index, hashes) == before


def test_an_erasure_racing_the_job_never_brings_the_hash_back(
    index: SegmentSubjectIndex, spark: SparkSession
) -> None:
    hashes = fill(index, "ds", 6)
    erased = subject(ERASED)
    assert index.lookup(erased)
    others = [h for h in hashes if h != erased]
    before = looked_up(index, others)
    args = CompactArgs(
        correlation_id="compact-race", min_level0=1, settle_seconds=0, dataset_id="ds",
        index_store="segments", index_table="", index_bucket=BUCKET, manifest_table=MANIFEST,
    )  # fmt: skip

    result = run_compaction(spark, args, erasing_index)

    assert result["failed"] == {}
    assert result["compacted"]["ds"]["restarts"] >= 1
    assert index.lookup(erased) == []
    prefix = bytes.fromhex(erased)[:6]  # no segment holds the hash, whole or as a 48-bit prefix
    assert [key for key, data in all_bytes(boto3.client("s3")) if prefix in data] == []
    assert looked_up(index, others) == before
    assert active(index, "ds", 0) == []
