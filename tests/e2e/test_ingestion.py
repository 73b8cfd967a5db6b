"""Issue 3 on the running local cloud: uploads of every format become lake rows or quarantine,
with nothing to do but upload. Uses the samples the demo uploads."""

from __future__ import annotations

import io
import json
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.localcloud_support import SAMPLES, LocalCloud, catalog_items, wait_for

UPLOADS = {  # raw key -> sample; keys do not reveal the format
    "reviews/2026/11/21/batch-001.csv": "reviews-2026-11-21.csv",
    "reviews/2026/11/22/batch-002.csv": "reviews-dirty.csv",
    "orders/2026/11/21/orders-0001": "orders-2026-11-21.jsonl.gz.bin",
    "clicks/2026/11/21/part-0001.parquet": "clicks-2026-11-21.parquet",
    "clicks/2026/11/21/part-0002.parquet": "clicks-broken.parquet",
}
TERMINAL = {"INGESTED", "QUARANTINED", "FAILED"}


def _latest(cloud: LocalCloud, key: str) -> dict[str, Any] | None:
    items = catalog_items(cloud, key)
    return max(items, key=lambda i: i["sequencer"]) if items else None


@pytest.fixture(scope="module")
def ingested(registered: LocalCloud) -> dict[str, dict[str, Any]]:
    s3 = registered.client("s3")
    for key, sample in UPLOADS.items():
        s3.put_object(
            Bucket=registered.outputs["RawBucketName"],
            Key=key,
            Body=(SAMPLES / sample).read_bytes(),
        )

    def settled() -> dict[str, dict[str, Any]] | None:
        items = {key: _latest(registered, key) for key in UPLOADS}
        done = all(i is not None and i["status"] in TERMINAL for i in items.values())
        return {k: v for k, v in items.items() if v is not None} if done else None

    return wait_for(settled, timeout=600, what="ingestion of every sample")


def _lake_keys(cloud: LocalCloud, prefix: str) -> list[str]:
    listing = cloud.client("s3").list_objects_v2(
        Bucket=cloud.outputs["LakeBucketName"], Prefix=prefix
    )
    return sorted(o["Key"] for o in listing.get("Contents", []))


def _read(cloud: LocalCloud, key: str) -> bytes:
    body = cloud.client("s3").get_object(Bucket=cloud.outputs["LakeBucketName"], Key=key)["Body"]
    return bytes(body.read())


@pytest.mark.parametrize(
    ("key", "status", "read", "written", "quarantined"),
    [
        ("reviews/2026/11/21/batch-001.csv", "INGESTED", 3, 3, 0),
        ("reviews/2026/11/22/batch-002.csv", "INGESTED", 4, 1, 3),
        ("orders/2026/11/21/orders-0001", "INGESTED", 4, 3, 1),
        ("clicks/2026/11/21/part-0001.parquet", "INGESTED", 3, 3, 0),
        ("clicks/2026/11/21/part-0002.parquet", "QUARANTINED", 0, 0, 0),
    ],
)
def test_catalog_status_and_counts(
    ingested: dict[str, dict[str, Any]],
    key: str,
    status: str,
    read: int,
    written: int,
    quarantined: int,
) -> None:
    item = ingested[key]

    assert item["status"] == status
    assert (int(item["rows_read"]), int(item["rows_written"]), int(item["rows_quarantined"])) == (
        read,
        written,
        quarantined,
    )


def test_reviews_are_partitioned_by_date(
    registered: LocalCloud, ingested: dict[str, dict[str, Any]]
) -> None:
    partitions = {k.split("/")[1] for k in _lake_keys(registered, "reviews/review_date=")}

    assert partitions == {
        "review_date=2026-11-20",
        "review_date=2026-11-21",
        "review_date=2026-11-22",
    }
    (clean,) = _lake_keys(registered, "reviews/review_date=2026-11-20/")
    table = pq.read_table(io.BytesIO(_read(registered, clean)))
    assert table.column_names == ["user_id", "stars", "text"]
    assert table.to_pylist() == [
        {"user_id": "u-1001", "stars": 5, "text": "Great, would buy again"}
    ]


def test_dirty_rows_are_quarantined_with_reasons_and_lines(
    registered: LocalCloud, ingested: dict[str, dict[str, Any]]
) -> None:
    quarantine = [k for k in _lake_keys(registered, "reviews/_quarantine/") if k.endswith(".jsonl")]

    (key,) = quarantine
    rows = [json.loads(line) for line in _read(registered, key).decode().splitlines()]
    assert [(r["source"]["line"], r["reasons"]) for r in rows] == [
        (2, ["column stars: 'five' is not a valid int"]),
        (3, ["column review_date: '2026-13-45' is not a valid date"]),
        (5, ["expected 4 fields, found 3"]),
    ]
    raw = registered.outputs["RawBucketName"]
    assert {r["source"]["object"] for r in rows} == {f"s3://{raw}/reviews/2026/11/22/batch-002.csv"}


def test_gzip_without_extension_and_a_missing_nested_subject(
    registered: LocalCloud, ingested: dict[str, dict[str, Any]]
) -> None:
    partitions = {k.split("/")[1] for k in _lake_keys(registered, "orders/order_date=")}
    (quarantine,) = [
        k for k in _lake_keys(registered, "orders/_quarantine/") if k.endswith(".jsonl")
    ]
    (rejected,) = [json.loads(line) for line in _read(registered, quarantine).decode().splitlines()]

    assert partitions == {"order_date=2026-11-20", "order_date=2026-11-21"}
    assert rejected["source"]["line"] == 4
    assert rejected["reasons"] == ["subject column customer.id is missing"]


def test_parquet_is_ingested_and_a_broken_file_is_quarantined_whole(
    registered: LocalCloud, ingested: dict[str, dict[str, Any]]
) -> None:
    lake = [k for k in _lake_keys(registered, "clicks/") if not k.startswith("clicks/_quarantine/")]
    (broken,) = [
        k for k in _lake_keys(registered, "clicks/_quarantine/") if k.endswith(".file.json")
    ]
    report = json.loads(_read(registered, broken))

    assert len(lake) == 1
    table = pq.read_table(io.BytesIO(_read(registered, lake[0])))
    assert table.num_rows == 3
    assert str(table.schema.field("user_id").type) == "int64"
    assert report["source"]["object"].endswith("clicks/2026/11/21/part-0002.parquet")
    assert "parquet" in report["reason"].lower()


def test_uploading_the_same_bytes_again_adds_no_rows(
    registered: LocalCloud, ingested: dict[str, dict[str, Any]]
) -> None:
    key = "reviews/2026/11/21/batch-001.csv"
    before = _lake_keys(registered, "reviews/review_date=")
    put = registered.client("s3").put_object(
        Bucket=registered.outputs["RawBucketName"],
        Key=key,
        Body=(SAMPLES / UPLOADS[key]).read_bytes(),
    )

    def reingested() -> dict[str, Any] | None:
        item = _latest(registered, key)
        good = item and item["version_id"] == put["VersionId"] and item["status"] in TERMINAL
        return item if good else None

    item = wait_for(reingested, timeout=300, what="the second version's ingestion")
    assert item["status"] == "INGESTED"
    assert _lake_keys(registered, "reviews/review_date=") == before
    rows = sum(
        pq.read_table(io.BytesIO(_read(registered, k))).num_rows
        for k in before
        if "review_date=2026-11-2" in k and "2026-11-22" not in k
    )
    assert rows == 3


def test_objects_list_shows_raw_and_lake_objects(
    registered: LocalCloud, ingested: dict[str, dict[str, Any]]
) -> None:
    listed = json.loads(registered.lethe("objects", "list", "--dataset", "clicks", "--json").stdout)

    raw = [(o["key"], o["status"], o["rows"]) for o in listed if o["zone"] == "raw"]
    assert raw == [
        ("clicks/2026/11/21/part-0001.parquet", "INGESTED", 3),
        ("clicks/2026/11/21/part-0002.parquet", "QUARANTINED", 0),
    ]
    lake = [o for o in listed if o["zone"] == "lake" and "_quarantine" not in o["key"]]
    assert [(o["status"], o["rows"]) for o in lake] == [("STORED", 3)]
    assert {"zone", "bucket", "key", "version_id", "status", "rows"} <= set(listed[0])


def test_trace_follows_an_upload_from_its_event_into_the_spark_job(
    registered: LocalCloud, ingested: dict[str, dict[str, Any]]
) -> None:
    key = "clicks/2026/11/21/part-0001.parquet"
    url = f"s3://{registered.outputs['RawBucketName']}/{key}"
    execution = ingested[key]["ingest_correlation_id"]  # what the ingest job recorded

    def finished() -> dict[str, Any] | None:  # the catalog says INGESTED before the end
        story = json.loads(registered.lethe("trace", url, "--json").stdout)
        runs = [e for e in story["executions"] if e["name"] == execution]
        return story if runs and runs[0]["status"] != "RUNNING" else None

    story = wait_for(finished, timeout=120, what=f"execution {execution} to end")

    assert story["terms"][0] == url
    assert execution in story["terms"]
    (run,) = [e for e in story["executions"] if e["name"] == execution]
    assert run["status"] == "SUCCEEDED"
    assert "ingestion" in run["state_machine"].lower()
    assert run["job_runs"], "the Spark job run the execution submitted"
    lines = story["lines"]
    assert [line for line in lines if not line["time"]] == []
    assert [line["time"] for line in lines] == sorted(line["time"] for line in lines)
    events = [line["text"] for line in lines if not line["source"].startswith("spark-")]
    # the object events function: the S3 event of the upload, then the batch it started
    assert any(url in text and "object event recorded" in text for text in events)
    assert any(execution in text and "ingestion batch" in text for text in events)
    # the Spark job's own lines carry the execution's name as their correlation id
    spark = [line["text"] for line in lines if line["source"].startswith("spark-")]
    assert any(f"[{execution}]" in text for text in spark)
    # the samples' other uploads are in the same batch or not; the REST API's lines are not
    assert not any("datasets" in line["source"].lower() for line in lines)

    # a lake object written by that run leads back to the same story (its S3 metadata)
    lake = registered.lethe("objects", "list", "--dataset", "clicks", "--json").stdout
    (written,) = [
        o for o in json.loads(lake) if o["zone"] == "lake" and "_quarantine" not in o["key"]
    ]
    back = json.loads(
        registered.lethe(
            "trace", f"s3://{registered.outputs['LakeBucketName']}/{written['key']}", "--json"
        ).stdout
    )
    assert execution in back["terms"]
    assert [e["name"] for e in back["executions"]] == [execution]


def test_trace_of_an_unknown_id_exits_not_found(registered: LocalCloud) -> None:
    result = registered.lethe("trace", "batch-no-such-execution-0000", check=False)
    assert result.returncode == 3, result.stderr
    assert "no execution and no log line mention batch-no-such-execution-0000" in result.stderr
