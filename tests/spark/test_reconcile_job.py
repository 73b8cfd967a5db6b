"""The reconcile job (`spark_jobs/reconcile.py` main) against the moto server, and its pure
comparison (`drift`) on tiny frames."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from ingest import main as ingest_main
from lethe_jobs.reconcile_core import (
    ENTRY_SCHEMA,
    FOUND_SCHEMA,
    ExpectSettings,
    drift,
    expected_entries,
    scan_dataset,
)
from lethe_shared.aws.s3 import S3ObjectStore
from lethe_shared.catalog.object_catalog import Buckets, Zone
from lethe_shared.datasets.document import parse_dataset
from lethe_shared.index.subject_index import IndexEntry
from reconcile import main as reconcile_main
from tests.spark.cloud import (
    COMMON_JOB_ARGS,
    GLUE_ARGS,
    HASH_KEY,
    LAKE,
    RAW,
    REPORTS,
    Cloud,
    JobRunner,
    h,
    ingest_args,
)

FIXTURES = Path(__file__).parent / "fixtures"
REVIEWS = json.loads((FIXTURES / "reviews.dataset.json").read_text())
REVIEWS_KEY = "reviews/2026/11/batch-1.csv"
REVIEWS_HASH = "bf6f28df84c0c9eb"
RAW_URL = f"s3://{RAW}/{REVIEWS_KEY}"
DAY1_URL = f"s3://{LAKE}/reviews/review_date=2026-11-22/part-{REVIEWS_HASH}.parquet"
DAY2_KEY = f"reviews/review_date=2026-11-23/part-{REVIEWS_HASH}.parquet"
GONE_URL = f"s3://{LAKE}/reviews/review_date=2026-01-01/part-0000000000000000.parquet"
NO_DRIFT = {"count": 0, "sample": []}


def test_drift_names_missing_stale_and_wrong_row_counts(spark: SparkSession) -> None:
    expected = spark.createDataFrame(
        [
            ("s3://l/a", "h1", 2),
            ("s3://l/a", "h2", 1),
            ("s3://l/b", "h1", 4),
            ("s3://l/d", "h1", 1),
        ],
        ENTRY_SCHEMA,
    )
    found = spark.createDataFrame(
        [
            ("s3://l/a", "h1", 2, False, False),
            ("s3://l/b", "h1", 3, False, False),
            ("s3://l/c", "h3", 1, False, False),
            ("s3://l/d", "h1", 1, True, False),  # flagged deleted: a lookup does not show it
            ("s3://l/d", "h2", 1, True, False),  # flagged, and no older version to hold it
            ("s3://l/e", "h1", 2, True, True),  # flagged; an older version may hold it
        ],
        FOUND_SCHEMA,
    )

    result = drift(expected, found)

    assertDataFrameEqual(
        result,
        spark.createDataFrame(
            [
                ("s3://l/a", "h2", "missing", 1, None),
                ("s3://l/b", "h1", "wrong_rows", 4, 3),
                ("s3://l/c", "h3", "stale", None, 1),
                ("s3://l/d", "h1", "missing", 1, 1),
                ("s3://l/d", "h2", "stale", None, 1),
            ],
            "object_url string, subject_hash string, drift string, expected_rows long,"
            " found_rows long",
        ),
    )


class ReconcileRunner(JobRunner):
    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        common = [*COMMON_JOB_ARGS, "--reports-bucket", REPORTS, "--dataset-id", "reviews"]
        super().__init__(reconcile_main, common, capsys)


def _report(cloud: Cloud, correlation_id: str) -> dict[str, Any]:
    key = f"reconcile/reviews/{correlation_id}.json"
    document = json.loads(cloud.s3.get_object(Bucket=REPORTS, Key=key)["Body"].read())
    assert document.pop("generated_at").endswith("+00:00")
    return dict(document)


def test_reconcile_finds_injected_drift_and_fixes_it(
    cloud: Cloud, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given the reviews CSV ingested: u1 and u3 valid on two days, u2 rejected
    cloud.register(REVIEWS)
    version = cloud.upload(REVIEWS_KEY, (FIXTURES / "reviews-batch-1.csv").read_bytes(), "reviews")
    JobRunner(ingest_main, GLUE_ARGS, capsys)(*ingest_args("reviews", REVIEWS_KEY, version))
    ingested = cloud.entries()
    reconcile = ReconcileRunner(capsys)

    # When reconcile compares the index with the objects, there is no drift
    clean = reconcile("--correlation-id", "rec-1")

    assert clean == {
        "report": f"s3://{REPORTS}/reconcile/reviews/rec-1.json",
        "missing": 0,
        "stale": 0,
        "wrong_rows": 0,
        "fixed": False,
    }
    assert _report(cloud, "rec-1") == {
        "dataset_id": "reviews",
        "correlation_id": "rec-1",
        "objects_scanned": 4,  # the raw CSV, two day files, the quarantine file
        "objects_hidden": 0,
        "entries_expected": 6,
        "entries_found": 6,
        "missing": NO_DRIFT,
        "stale": NO_DRIFT,
        "wrong_rows": NO_DRIFT,
        "fixed": False,
    }

    # Given drift: u1's entry of the day 1 file is lost, an entry names an object that does not
    # exist, and u3's raw entry counts 5 rows
    cloud.index.delete_item(Key={"subject_hash": h("u1"), "object_url": DAY1_URL})
    ghost = IndexEntry(
        subject_hash=h("ghost"),
        object_url=GONE_URL,
        dataset_id="reviews",
        zone=Zone.LAKE,
        format="parquet",
        rows=3,
    )
    cloud.index.put_item(Item=ghost.to_item())
    cloud.index.update_item(
        Key={"subject_hash": h("u3"), "object_url": RAW_URL},
        UpdateExpression="SET #rows = :n",
        ExpressionAttributeNames={"#rows": "rows"},
        ExpressionAttributeValues={":n": 5},
    )

    # When reconcile runs with --fix
    fixing = reconcile("--correlation-id", "rec-2", "--fix")

    # Then the report names each drifted pair by its hash only
    assert fixing == {
        "report": f"s3://{REPORTS}/reconcile/reviews/rec-2.json",
        "missing": 1,
        "stale": 1,
        "wrong_rows": 1,
        "fixed": True,
    }
    assert _report(cloud, "rec-2") == {
        "dataset_id": "reviews",
        "correlation_id": "rec-2",
        "objects_scanned": 4,
        "objects_hidden": 0,
        "entries_expected": 6,
        "entries_found": 6,
        "missing": {"count": 1, "sample": [{"object_url": DAY1_URL, "subject_hash": h("u1")}]},
        "stale": {"count": 1, "sample": [{"object_url": GONE_URL, "subject_hash": h("ghost")}]},
        "wrong_rows": {
            "count": 1,
            "sample": [
                {
                    "object_url": RAW_URL,
                    "subject_hash": h("u3"),
                    "expected_rows": 1,
                    "found_rows": 5,
                }
            ],
        },
        "fixed": True,
    }
    # and the index is again what ingestion wrote
    assert cloud.entries() == ingested

    # When a delete marker hides the day 2 file, and reconcile runs again
    cloud.s3.delete_object(Bucket=LAKE, Key=DAY2_KEY)
    again = reconcile("--correlation-id", "rec-3")

    # Then there is no drift: the hidden file's entry is left to erasure and expiry
    assert (again["missing"], again["stale"], again["wrong_rows"]) == (0, 0, 0)
    report = _report(cloud, "rec-3")
    assert (report["objects_scanned"], report["objects_hidden"]) == (3, 1)
    assert (report["entries_expected"], report["entries_found"]) == (5, 6)


def test_the_scan_groups_small_objects_into_tasks_with_the_same_expected_entries(
    cloud: Cloud, capsys: pytest.CaptureFixture[str], spark: SparkSession
) -> None:
    # Given the reviews CSV ingested: 4 small objects (raw CSV, two day files, quarantine)
    cloud.register(REVIEWS)
    version = cloud.upload(REVIEWS_KEY, (FIXTURES / "reviews-batch-1.csv").read_bytes(), "reviews")
    JobRunner(ingest_main, GLUE_ARGS, capsys)(*ingest_args("reviews", REVIEWS_KEY, version))
    dataset = parse_dataset(REVIEWS)
    buckets = Buckets(raw=RAW, lake=LAKE)
    scan = scan_dataset(S3ObjectStore(cloud.s3), dataset, buckets)
    ctx = ExpectSettings(dataset, buckets, "rec-tasks", HASH_KEY)

    # When the scan computes what each object should hold
    expected = expected_entries(spark, scan.objects, ctx)

    # Then the objects, with the sizes the listing gave, share tasks (one per core of local[2])
    assert [o.size for o in scan.objects] == [
        cloud.s3.head_object(Bucket=o.bucket, Key=o.key)["ContentLength"] for o in scan.objects
    ]
    assert (len(scan.objects), expected.rdd.getNumPartitions()) == (4, 2)
    # and the entries are those of one task per object, and the ones ingestion wrote
    alone = [r for o in scan.objects for r in expected_entries(spark, [o], ctx).collect()]
    assert sorted(expected.collect()) == sorted(alone)
    assert sorted(tuple(r) for r in alone) == sorted((e[1], e[0], e[4]) for e in cloud.entries())
