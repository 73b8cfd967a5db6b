"""The subject index on the running local cloud, through the CLI: ingestion indexes what it
reads and writes, `lethe index lookup` finds exactly the objects that hold a subject (checked
against a full scan the test does itself), backfill and reconcile run end to end, and the
subject's raw id is never printed."""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections.abc import Iterator
from typing import Any

import pyarrow.parquet as pq
import pytest

from lethe_shared.index.segments import SegmentSubjectIndex
from tests.localcloud_support import SAMPLES, LocalCloud, cli, wait_for

SUBJECT = "u-1001"
UPLOADS = {  # raw key -> sample
    "reviews/2026/11/21/batch-001.csv": "reviews-2026-11-21.csv",
    "orders/2026/11/21/orders-0001": "orders-2026-11-21.jsonl.gz.bin",
}
# Datasets whose single subject column a plain subject id matches: dataset -> column path.
SUBJECT_COLUMNS = {"reviews": "user_id", "orders": "customer.id"}
TERMINAL = {"INGESTED", "QUARANTINED", "FAILED"}
Found = tuple[str, str, str, str, int]  # dataset, zone, bucket, key, rows


@pytest.fixture(scope="module")
def ingested(registered: LocalCloud) -> LocalCloud:
    """The samples holding u-1001 uploaded as a producer would, and ingested."""
    s3 = registered.client("s3")
    raw = registered.outputs["RawBucketName"]
    versions = {
        key: s3.put_object(Bucket=raw, Key=key, Body=(SAMPLES / sample).read_bytes())["VersionId"]
        for key, sample in UPLOADS.items()
    }
    catalog = registered.table("ObjectCatalogTableName")

    def settled() -> bool:
        for key, version in versions.items():
            item = catalog.get_item(
                Key={"object_url": f"s3://{raw}/{key}", "version_id": version},
                ConsistentRead=True,
            ).get("Item")
            if item is None or item["status"] not in TERMINAL:
                return False
        return True

    wait_for(settled, timeout=600, what="ingestion of the uploads")
    return registered


def _subject_values(record: dict[str, Any], path: str) -> Any:
    value: Any = record
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _records(dataset: str, zone: str, key: str, body: bytes) -> Iterator[dict[str, Any]]:
    """The rows of one object, as dictionaries, whatever its format."""
    if body[:2] == b"\x1f\x8b":
        body = gzip.decompress(body)
    if key.endswith(".parquet"):
        yield from pq.read_table(io.BytesIO(body)).to_pylist()
    elif "/_quarantine/" in key:
        if key.endswith(".jsonl"):  # rejected rows; a JSON Lines record is its original line
            for line in body.decode("utf-8").splitlines():
                record = json.loads(line)["record"]
                yield json.loads(record) if isinstance(record, str) else record
    elif zone == "raw" and dataset == "reviews":
        yield from csv.DictReader(io.StringIO(body.decode("utf-8-sig"), newline=""))
    elif zone == "raw" and dataset == "orders":
        for line in body.decode("utf-8").splitlines():
            if line.strip():
                yield json.loads(line)


def _full_scan(cloud: LocalCloud, subject: str) -> set[Found]:
    """Every current raw and lake object of the samples' datasets that holds the subject."""
    s3 = cloud.client("s3")
    found: set[Found] = set()
    for dataset, column in SUBJECT_COLUMNS.items():
        for zone, bucket in (
            ("raw", cloud.outputs["RawBucketName"]),
            ("lake", cloud.outputs["LakeBucketName"]),
        ):
            listing = s3.list_objects_v2(Bucket=bucket, Prefix=f"{dataset}/")
            for summary in listing.get("Contents", []):
                key = summary["Key"]
                body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
                rows = sum(
                    1
                    for record in _records(dataset, zone, key, body)
                    if _subject_values(record, column) == subject
                )
                if rows:
                    found.add((dataset, zone, bucket, key, rows))
    return found


def _looked_up(cloud: LocalCloud, *args: str) -> tuple[set[Found], str]:
    result = cli(cloud, "index", "lookup", "--subject", SUBJECT, "--json", *args)
    assert result.returncode == 0, result.stderr
    listed = json.loads(result.stdout)
    return {(e["dataset"], e["zone"], e["bucket"], e["key"], e["rows"]) for e in listed}, (
        result.stdout + result.stderr
    )


def test_lookup_lists_exactly_the_objects_a_full_scan_finds(ingested: LocalCloud) -> None:
    expected = _full_scan(ingested, SUBJECT)
    # Written down from the samples: the raw CSV and JSON Lines files, and the lake partitions
    # 2026-11-20 and 2026-11-21 of reviews, 2026-11-20 of orders.
    assert {(d, z, k.split("/")[1]) for d, z, _, k, _ in expected} >= {
        ("reviews", "raw", "2026"),
        ("reviews", "lake", "review_date=2026-11-20"),
        ("reviews", "lake", "review_date=2026-11-21"),
        ("orders", "raw", "2026"),
        ("orders", "lake", "order_date=2026-11-20"),
    }

    found, _ = _looked_up(ingested)

    assert found == expected


def test_lookup_never_prints_the_raw_subject_id(ingested: LocalCloud) -> None:
    _, as_json = _looked_up(ingested)
    as_text = cli(ingested, "index", "lookup", "--subject", SUBJECT)

    assert as_text.returncode == 0, as_text.stderr
    assert "u-1001" not in as_json
    assert "u-1001" not in as_text.stdout + as_text.stderr
    assert "reviews" in as_text.stdout  # the objects are listed, by subject hash


def test_lookup_filters_by_dataset(ingested: LocalCloud) -> None:
    found, _ = _looked_up(ingested, "--dataset", "orders")

    assert found
    assert {dataset for dataset, *_ in found} == {"orders"}


def test_backfill_restores_lost_entries(ingested: LocalCloud) -> None:
    before, _ = _looked_up(ingested)
    # Given the raw reviews object's entries lost (as in a lake indexed before Lethe): on the
    # segment store (the deployed default), every row of the object made dead
    index = SegmentSubjectIndex(
        ingested.client("s3"),
        ingested.outputs["IndexBucketName"],
        ingested.table("IndexManifestTableName"),
    )
    raw_prefix = f"s3://{ingested.outputs['RawBucketName']}/reviews/"
    lost = {e.object_url for e in index.entries("reviews") if e.object_url.startswith(raw_prefix)}
    assert lost, "the raw reviews object should have index entries"
    for object_url in lost:
        index.remove_object(object_url)
    assert _looked_up(ingested)[0] != before

    result = cli(ingested, "index", "backfill", "--dataset", "reviews")

    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("arn:aws:states:")
    assert ":execution:lethe-local-index-backfill:reviews-backfill-" in lines[0]
    assert "backfill of reviews SUCCEEDED" in lines[-1]
    after, _ = _looked_up(ingested)
    assert after == before  # the lost entries are back, and nothing else changed


def test_reconcile_reports_zero_drift(ingested: LocalCloud) -> None:
    result = cli(ingested, "index", "reconcile", "--dataset", "reviews", "--json")

    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["dataset_id"] == "reviews"
    assert report["objects_scanned"] > 0
    assert report["entries_found"] == report["entries_expected"] > 0
    assert [report[k]["count"] for k in ("missing", "stale", "wrong_rows")] == [0, 0, 0]
