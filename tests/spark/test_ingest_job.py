"""The whole ingest job (`spark_jobs/ingest.py` main) against a moto server.

The server runs in a thread on 127.0.0.1 (server mode, as the local cloud runs it); the job
reaches it through AWS_ENDPOINT_URL like the local cloud's Spark runner sets it. Tables have the
keys of template.yaml's DatasetsTable and ObjectCatalogTable.
"""

from __future__ import annotations

import datetime as dt
import gzip
import io
import json
import logging
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import requests
from moto.server import ThreadedMotoServer
from pyspark.sql import SparkSession

from ingest import main
from lethe.localcloud.template import load_template
from lethe_jobs.errors import RawObjectNotFoundError
from lethe_shared.catalog import CatalogItem, ObjectStatus, Zone, normalize_sequencer
from lethe_shared.datasets import parse_dataset
from lethe_shared.errors import DatasetNotFoundError
from lethe_shared.registry import DynamoDatasetRegistry

REGION = "us-east-1"
RAW = "lethe-test-raw"
LAKE = "lethe-test-lake"
DATASETS = "lethe-test-datasets"
CATALOG = "lethe-test-object-catalog"

FIXTURES = Path(__file__).parent / "fixtures"
REVIEWS = json.loads((FIXTURES / "reviews.dataset.json").read_text())
REVIEWS_KEY = "reviews/2026/11/batch-1.csv"
REVIEWS_HASH = "bf6f28df84c0c9eb"  # sha256("lethe-test-raw/reviews/2026/11/batch-1.csv")[:16]
# u1 (line 2) and u3 (lines 4-5, a quoted newline) are valid; u2 (line 3) has stars "abc"
REVIEWS_CSV = (FIXTURES / "reviews-batch-1.csv").read_bytes()
EVENTS = {
    "dataset_id": "events",
    "format": "jsonl",
    "compression": "auto",
    "subject_columns": ["customer.id"],
    "schema": [
        {"name": "customer", "type": "struct<id:string,tier:int>"},
        {"name": "at", "type": "timestamp"},
        {"name": "tags", "type": "array<string>"},
    ],
}
EVENTS_KEY = "events/2026/11/e1.jsonl"
EVENTS_HASH = "6d0dd704a2d14734"
METRICS = {
    "dataset_id": "metrics",
    "format": "parquet",
    "subject_columns": ["device"],
    "partition_by": ["site"],
    "schema": [
        {"name": "device", "type": "long"},
        {"name": "site", "type": "string"},
        {"name": "value", "type": "double"},
        {"name": "firmware", "type": "string"},
    ],
}
METRICS_KEY = "metrics/m1.parquet"
METRICS_HASH = "98646f181d6ad04c"
BROKEN_KEY = "metrics/broken.parquet"
BROKEN_HASH = "034583dcf346b19a"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@dataclass
class Cloud:
    endpoint: str
    s3: Any
    datasets: Any
    catalog: Any

    def register(self, document: dict[str, Any]) -> None:
        DynamoDatasetRegistry(self.datasets).put(parse_dataset(document))

    def upload(self, key: str, body: bytes, dataset_id: str, sequencer: str = "1") -> str:
        """Put a raw object and record it in the catalog as the object events handler does."""
        version = self.s3.put_object(Bucket=RAW, Key=key, Body=body)["VersionId"]
        item = CatalogItem(
            bucket=RAW,
            key=key,
            version_id=version,
            zone=Zone.RAW,
            status=ObjectStatus.RECEIVED,
            sequencer=normalize_sequencer(sequencer),
            dataset_id=dataset_id,
            size=len(body),
        )
        self.catalog.put_item(Item=item.to_item())
        return str(version)

    def lake_keys(self) -> list[str]:
        listing = self.s3.list_objects_v2(Bucket=LAKE)
        return sorted(o["Key"] for o in listing.get("Contents", []))

    def lake_object(self, key: str) -> bytes:
        return bytes(self.s3.get_object(Bucket=LAKE, Key=key)["Body"].read())

    def lake_parquet(self, key: str) -> pa.Table:
        return pq.read_table(io.BytesIO(self.lake_object(key)))

    def catalog_item(self, key: str, version: str) -> dict[str, Any]:
        found = self.catalog.get_item(
            Key={"object_url": f"s3://{RAW}/{key}", "version_id": version}
        )
        return dict(found["Item"])


def _create_table(dynamodb: Any, logical_id: str, name: str) -> Any:
    props = load_template()["Resources"][logical_id]["Properties"]
    kwargs: dict[str, Any] = {
        "TableName": name,
        "KeySchema": props["KeySchema"],
        "AttributeDefinitions": props["AttributeDefinitions"],
        "BillingMode": "PAY_PER_REQUEST",
    }
    if props.get("GlobalSecondaryIndexes"):
        kwargs["GlobalSecondaryIndexes"] = props["GlobalSecondaryIndexes"]
    return dynamodb.create_table(**kwargs)


@pytest.fixture
def cloud(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch, spark: SparkSession) -> Cloud:
    """A fresh moto state: versioned raw and lake buckets, the datasets and catalog tables."""
    requests.post(f"{moto_endpoint}/moto-api/reset", timeout=10).raise_for_status()
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    s3 = boto3.client("s3", region_name=REGION)
    for bucket in (RAW, LAKE):
        s3.create_bucket(Bucket=bucket)
        s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    dynamodb = boto3.resource("dynamodb", region_name=REGION)
    return Cloud(
        moto_endpoint,
        s3,
        _create_table(dynamodb, "DatasetsTable", DATASETS),
        _create_table(dynamodb, "ObjectCatalogTable", CATALOG),
    )


class JobRunner:
    """Runs main() in this process, as the local cloud's runner would run the script."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self._capsys = capsys
        self.logs = ""  # stderr of the last run

    def __call__(
        self, dataset_id: str, key: str, version: str, correlation_id: str = "exec-1"
    ) -> Any:
        """Returns the JSON summary the job printed on stdout."""
        self._capsys.readouterr()
        try:
            code = main(
                [
                    "--dataset-id", dataset_id,
                    "--raw-bucket", RAW,
                    "--key", key,
                    "--version-id", version,
                    "--lake-bucket", LAKE,
                    "--datasets-table", DATASETS,
                    "--catalog-table", CATALOG,
                    "--correlation-id", correlation_id,
                    "--JOB_ID", "j_123", "--job-bookmark-option", "job-bookmark-disable",
                ]
            )  # fmt: skip
        finally:
            captured = self._capsys.readouterr()
            self.logs = captured.err
        assert code == 0
        lines = captured.out.strip().splitlines()
        assert len(lines) == 1
        return json.loads(lines[0])


@pytest.fixture
def run_job(cloud: Cloud, capsys: pytest.CaptureFixture[str]) -> JobRunner:
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # the moto server's request log
    return JobRunner(capsys)


def test_csv_rows_are_partitioned_and_the_bad_row_is_quarantined(
    cloud: Cloud, run_job: JobRunner
) -> None:
    # Given a CSV with two good rows on two days and one row whose stars are not a number
    cloud.register(REVIEWS)
    version = cloud.upload(REVIEWS_KEY, REVIEWS_CSV, "reviews")

    # When the job ingests that version
    summary = run_job("reviews", REVIEWS_KEY, version, correlation_id="exec-csv")

    # Then each day has its Parquet file, named after the raw key
    day1 = f"reviews/review_date=2026-11-22/part-{REVIEWS_HASH}.parquet"
    day2 = f"reviews/review_date=2026-11-23/part-{REVIEWS_HASH}.parquet"
    quarantine = f"reviews/_quarantine/{REVIEWS_HASH}.jsonl"
    assert cloud.lake_keys() == [quarantine, day1, day2]
    assert summary == {
        "status": "INGESTED",
        "rows_read": 3,
        "rows_written": 2,
        "rows_quarantined": 1,
        "lake_objects": [f"s3://{LAKE}/{day1}", f"s3://{LAKE}/{day2}"],
        "quarantine_object": f"s3://{LAKE}/{quarantine}",
    }
    # with the declared types and without the partition column
    first = cloud.lake_parquet(day1)
    assert first.schema == pa.schema(
        [
            pa.field("user_id", pa.string(), nullable=False),
            ("stars", pa.int32()),
            ("amount", pa.decimal128(10, 2)),
            ("comment", pa.string()),
        ]
    ).with_metadata(first.schema.metadata)
    assert first.to_pylist() == [
        {"user_id": "u1", "stars": 5, "amount": Decimal("12.50"), "comment": "great, really"}
    ]
    assert cloud.lake_parquet(day2).to_pylist() == [
        {"user_id": "u3", "stars": 4, "amount": Decimal("7.25"), "comment": "two\nlines"}
    ]
    # and the rejected row is in quarantine with its line, reason and values as read
    rejected = [json.loads(line) for line in cloud.lake_object(quarantine).splitlines()]
    assert len(rejected) == 1
    assert rejected[0]["source"] == {
        "object": f"s3://{RAW}/{REVIEWS_KEY}",
        "version_id": version,
        "line": 3,
    }
    assert rejected[0]["reasons"] == ["column stars: 'abc' is not a valid int"]
    assert rejected[0]["record"] == {
        "user_id": "u2",
        "stars": "abc",
        "review_date": "2026-11-22",
        "amount": "3.00",
        "comment": "meh",
    }
    assert rejected[0]["correlation_id"] == "exec-csv"
    assert dt.datetime.fromisoformat(rejected[0]["rejected_at"]).tzinfo is not None
    # and the catalog item of the raw version says what happened
    item = cloud.catalog_item(REVIEWS_KEY, version)
    assert item["status"] == "INGESTED"
    assert (item["rows_read"], item["rows_written"], item["rows_quarantined"]) == (3, 2, 1)
    assert item["lake_objects"] == [f"s3://{LAKE}/{day1}", f"s3://{LAKE}/{day2}"]
    assert item["quarantine_object"] == f"s3://{LAKE}/{quarantine}"
    assert item["ingest_correlation_id"] == "exec-csv"
    assert item["dataset_id"] == "reviews"  # what object_events wrote is kept
    # and every log line of the run carries the correlation id
    log_lines = [line for line in run_job.logs.splitlines() if " lethe." in line]
    assert any("INFO [exec-csv] lethe.ingest: ingesting" in line for line in log_lines)
    assert all("[exec-csv]" in line for line in log_lines)


def test_rerunning_the_same_version_overwrites_instead_of_duplicating(
    cloud: Cloud, run_job: JobRunner
) -> None:
    cloud.register(REVIEWS)
    version = cloud.upload(REVIEWS_KEY, REVIEWS_CSV, "reviews")
    first = run_job("reviews", REVIEWS_KEY, version)
    keys = cloud.lake_keys()

    second = run_job("reviews", REVIEWS_KEY, version, correlation_id="exec-retry")

    assert second == first
    assert cloud.lake_keys() == keys
    day1 = f"reviews/review_date=2026-11-22/part-{REVIEWS_HASH}.parquet"
    assert cloud.lake_parquet(day1).num_rows == 1
    assert cloud.catalog_item(REVIEWS_KEY, version)["ingest_correlation_id"] == "exec-retry"


def test_a_new_version_whose_rows_moved_removes_the_old_partition_file(
    cloud: Cloud, run_job: JobRunner
) -> None:
    # Given version 1 ingested into two days, with one row quarantined
    cloud.register(REVIEWS)
    v1 = cloud.upload(REVIEWS_KEY, REVIEWS_CSV, "reviews", sequencer="1")
    run_job("reviews", REVIEWS_KEY, v1)

    # When version 2 of the same key holds only rows of another day, all valid
    v2_body = b"user_id,stars,review_date,amount,comment\nu1,3,2026-12-01,1.00,changed\n"
    v2 = cloud.upload(REVIEWS_KEY, v2_body, "reviews", sequencer="2")
    summary = run_job("reviews", REVIEWS_KEY, v2, correlation_id="exec-v2")

    # Then only the new day's file and no quarantine object are current
    new_day = f"reviews/review_date=2026-12-01/part-{REVIEWS_HASH}.parquet"
    assert cloud.lake_keys() == [new_day]
    assert summary["lake_objects"] == [f"s3://{LAKE}/{new_day}"]
    assert summary["quarantine_object"] is None
    assert cloud.lake_parquet(new_day).column("comment").to_pylist() == ["changed"]
    item = cloud.catalog_item(REVIEWS_KEY, v2)
    assert (item["status"], item["rows_written"], item["rows_quarantined"]) == ("INGESTED", 1, 0)
    assert "quarantine_object" not in item
    # the first version's item still tells what its run wrote
    assert len(cloud.catalog_item(REVIEWS_KEY, v1)["lake_objects"]) == 2


def test_an_older_version_ingested_last_is_superseded_and_writes_nothing(
    cloud: Cloud, run_job: JobRunner
) -> None:
    # Given version 2 of a key ingested before the late run of version 1
    cloud.register(REVIEWS)
    v1 = cloud.upload(REVIEWS_KEY, REVIEWS_CSV, "reviews", sequencer="1")
    v2_body = b"user_id,stars,review_date,amount,comment\nu1,3,2026-12-01,1.00,changed\n"
    v2 = cloud.upload(REVIEWS_KEY, v2_body, "reviews", sequencer="2")
    run_job("reviews", REVIEWS_KEY, v2)
    keys = cloud.lake_keys()

    summary = run_job("reviews", REVIEWS_KEY, v1, correlation_id="exec-late")

    assert summary == {
        "status": "SUPERSEDED",
        "rows_read": 0,
        "rows_written": 0,
        "rows_quarantined": 0,
        "lake_objects": [],
        "quarantine_object": None,
    }
    assert cloud.lake_keys() == keys
    new_day = f"reviews/review_date=2026-12-01/part-{REVIEWS_HASH}.parquet"
    assert cloud.lake_parquet(new_day).column("comment").to_pylist() == ["changed"]
    assert cloud.catalog_item(REVIEWS_KEY, v1)["status"] == "SUPERSEDED"


def test_gzipped_json_lines_without_gz_in_the_key(cloud: Cloud, run_job: JobRunner) -> None:
    cloud.register(EVENTS)
    lines = [
        {"customer": {"id": "c1", "tier": 2}, "at": "2026-11-22T10:00:00Z", "tags": ["a"]},
        {"customer": {"id": "", "tier": 1}, "at": "2026-11-22T11:00:00Z", "tags": []},
        {"customer": {"tier": 3}, "at": "2026-11-22T12:00:00Z"},
    ]
    body = gzip.compress(("\r\n".join(json.dumps(x) for x in lines) + "\r\n").encode())
    version = cloud.upload(EVENTS_KEY, body, "events")

    summary = run_job("events", EVENTS_KEY, version)

    lake = f"events/part-{EVENTS_HASH}.parquet"
    quarantine = f"events/_quarantine/{EVENTS_HASH}.jsonl"
    assert summary["status"] == "INGESTED"
    assert (summary["rows_read"], summary["rows_written"], summary["rows_quarantined"]) == (3, 2, 1)
    assert cloud.lake_keys() == [quarantine, lake]
    table = cloud.lake_parquet(lake)
    assert table.schema.field("customer").type == pa.struct(
        [("id", pa.string()), ("tier", pa.int32())]
    )
    assert table.schema.field("at").type == pa.timestamp("us", tz="UTC")
    assert table.to_pylist() == [
        {
            "customer": {"id": "c1", "tier": 2},
            "at": dt.datetime(2026, 11, 22, 10, tzinfo=dt.UTC),
            "tags": ["a"],
        },
        {
            "customer": {"id": "", "tier": 1},
            "at": dt.datetime(2026, 11, 22, 11, tzinfo=dt.UTC),
            "tags": [],
        },
    ]
    rejected = json.loads(cloud.lake_object(quarantine))
    assert rejected["source"]["line"] == 3
    assert rejected["reasons"] == ["subject column customer.id is missing"]
    assert rejected["record"] == lines[2]


def test_parquet_file_with_schema_evolution_and_a_type_conflict(
    cloud: Cloud, run_job: JobRunner
) -> None:
    # Given a Parquet file: device as int32 (declared long), value as text (declared double),
    # no firmware column (declared, nullable) and a column the schema does not know
    cloud.register(METRICS)
    table = pa.table(
        {
            "device": pa.array([1, 2, 3], pa.int32()),
            "site": ["north", "south", "north"],
            "value": ["1.5", "2.5", "high"],
            "debug": ["x", "y", "z"],
        }
    )
    sink = io.BytesIO()
    pq.write_table(table, sink)
    version = cloud.upload(METRICS_KEY, sink.getvalue(), "metrics")

    summary = run_job("metrics", METRICS_KEY, version)

    north = f"metrics/site=north/part-{METRICS_HASH}.parquet"
    south = f"metrics/site=south/part-{METRICS_HASH}.parquet"
    quarantine = f"metrics/_quarantine/{METRICS_HASH}.jsonl"
    assert cloud.lake_keys() == [quarantine, north, south]
    assert (summary["rows_read"], summary["rows_written"], summary["rows_quarantined"]) == (3, 2, 1)
    north_rows = cloud.lake_parquet(north)
    assert north_rows.schema.names == ["device", "value", "firmware"]
    assert north_rows.schema.field("device").type == pa.int64()
    assert north_rows.to_pylist() == [{"device": 1, "value": 1.5, "firmware": None}]
    rejected = json.loads(cloud.lake_object(quarantine))
    assert rejected["source"] == {
        "object": f"s3://{RAW}/{METRICS_KEY}",
        "version_id": version,
        "row": 2,
    }
    assert rejected["reasons"] == ["column value: 'high' is not a valid double"]
    assert rejected["record"] == {"device": 3, "site": "north", "value": "high", "debug": "z"}


def test_an_unreadable_file_is_quarantined_whole(cloud: Cloud, run_job: JobRunner) -> None:
    cloud.register(METRICS)
    version = cloud.upload(BROKEN_KEY, b"this is not parquet", "metrics")

    summary = run_job("metrics", BROKEN_KEY, version, correlation_id="exec-broken")

    report_key = f"metrics/_quarantine/{BROKEN_HASH}.file.json"
    assert summary == {
        "status": "QUARANTINED",
        "rows_read": 0,
        "rows_written": 0,
        "rows_quarantined": 0,
        "lake_objects": [],
        "quarantine_object": f"s3://{LAKE}/{report_key}",
    }
    assert cloud.lake_keys() == [report_key]
    report = json.loads(cloud.lake_object(report_key))
    assert report["source"] == {"object": f"s3://{RAW}/{BROKEN_KEY}", "version_id": version}
    assert report["reason"].startswith("not a Parquet file")
    assert report["correlation_id"] == "exec-broken"
    assert cloud.catalog_item(BROKEN_KEY, version)["status"] == "QUARANTINED"


def test_unregistered_dataset_and_missing_version_fail_the_run(
    cloud: Cloud, run_job: JobRunner
) -> None:
    version = cloud.upload(REVIEWS_KEY, REVIEWS_CSV, "reviews")
    with pytest.raises(DatasetNotFoundError, match="reviews"):
        run_job("reviews", REVIEWS_KEY, version)

    cloud.register(REVIEWS)
    with pytest.raises(RawObjectNotFoundError, match="cannot be read"):
        run_job("reviews", "reviews/never-uploaded.csv", "null")
    assert cloud.lake_keys() == []


def test_a_version_with_only_rejected_rows_is_quarantined_and_replaces_the_old_rows(
    cloud: Cloud, run_job: JobRunner
) -> None:
    # Given version 1 of a JSON Lines object ingested into the lake
    cloud.register(EVENTS)
    good = {"customer": {"id": "c1", "tier": 1}, "at": "2026-11-22T10:00:00Z"}
    v1 = cloud.upload(EVENTS_KEY, (json.dumps(good) + "\n").encode(), "events", sequencer="1")
    assert run_job("events", EVENTS_KEY, v1)["rows_written"] == 1

    # When version 2 holds no JSON object at all
    v2 = cloud.upload(EVENTS_KEY, b"[1]\nnot json\n", "events", sequencer="2")
    summary = run_job("events", EVENTS_KEY, v2)

    # Then the object is QUARANTINED, its lines are in quarantine, and no old rows stay current
    quarantine = f"events/_quarantine/{EVENTS_HASH}.jsonl"
    assert summary == {
        "status": "QUARANTINED",
        "rows_read": 2,
        "rows_written": 0,
        "rows_quarantined": 2,
        "lake_objects": [],
        "quarantine_object": f"s3://{LAKE}/{quarantine}",
    }
    assert cloud.lake_keys() == [quarantine]
    rejected = [json.loads(line) for line in cloud.lake_object(quarantine).splitlines()]
    assert [(r["source"]["line"], r["reasons"], r["record"]) for r in rejected] == [
        (1, ["not a JSON object: found a JSON list"], {"_raw": "[1]"}),
        (2, ["not a JSON object: Expecting value: line 1 column 1 (char 0)"], {"_raw": "not json"}),
    ]
    assert cloud.catalog_item(EVENTS_KEY, v2)["status"] == "QUARANTINED"


def test_a_nullable_column_added_to_the_dataset_appears_in_the_lake(
    cloud: Cloud, run_job: JobRunner
) -> None:
    # Given the events dataset, ingested once with its first schema
    cloud.register(EVENTS)
    first_key = "events/2026/11/before.jsonl"
    first = b'{"customer": {"id": "c-1", "tier": 1}, "at": "2026-11-22T10:00:00", "tags": []}\n'
    run_job("events", first_key, cloud.upload(first_key, first, "events"))
    # When the document gains a nullable column and a file carrying it arrives
    evolved = {**EVENTS, "schema": [*EVENTS["schema"], {"name": "channel", "type": "string"}]}
    cloud.register(evolved)
    second_key = "events/2026/11/after.jsonl"
    second = (
        b'{"customer": {"id": "c-2", "tier": 2}, "at": "2026-11-22T11:00:00", "tags": ["x"],'
        b' "channel": "web"}\n'
    )
    summary = run_job("events", second_key, cloud.upload(second_key, second, "events"))

    # Then the new file's lake object has the column with its value; the old one is untouched
    assert (summary["status"], summary["rows_written"], summary["rows_quarantined"]) == (
        "INGESTED",
        1,
        0,
    )
    (after,) = [cloud.lake_parquet(url.split("/", 3)[3]) for url in summary["lake_objects"]]
    assert after.schema.names == ["customer", "at", "tags", "channel"]
    assert after.column("channel").to_pylist() == ["web"]
    before_keys = [k for k in cloud.lake_keys() if not k.startswith("events/_quarantine")]
    before = [
        cloud.lake_parquet(k)
        for k in before_keys
        if k not in [u.split("/", 3)[3] for u in summary["lake_objects"]]
    ]
    assert [t.schema.names for t in before] == [["customer", "at", "tags"]]
