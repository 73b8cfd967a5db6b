"""The whole ingest job (`spark_jobs/ingest.py` main) against a moto server.

The server runs in a thread on 127.0.0.1 (server mode, as the local cloud runs it); the job
reaches it through AWS_ENDPOINT_URL like the local cloud's Spark runner sets it (tests/spark/
cloud.py). Besides the lake, the tests check the subject index entries the job writes.
"""

from __future__ import annotations

import datetime as dt
import gzip
import io
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ingest import main
from lethe_jobs.layout import object_hash
from lethe_shared.catalog.writes_ledger import DynamoWritesLedger
from lethe_shared.errors import HashKeyError
from tests.spark.cloud import GLUE_ARGS, LAKE, RAW, Cloud, JobRunner, h, ingest_args

FIXTURES = Path(__file__).parent / "fixtures"
REVIEWS = json.loads((FIXTURES / "reviews.dataset.json").read_text())
REVIEWS_KEY = "reviews/2026/11/batch-1.csv"
REVIEWS_HASH = "bf6f28df84c0c9eb"  # sha256("lethe-test-raw/reviews/2026/11/batch-1.csv")[:16]
# u1 (line 2) and u3 (lines 4-5, a quoted newline) are valid; u2 (line 3) has stars "abc"
REVIEWS_CSV = (FIXTURES / "reviews-batch-1.csv").read_bytes()
DAY1 = f"reviews/review_date=2026-11-22/part-{REVIEWS_HASH}.parquet"
DAY2 = f"reviews/review_date=2026-11-23/part-{REVIEWS_HASH}.parquet"
REVIEWS_QUARANTINE = f"reviews/_quarantine/{REVIEWS_HASH}.jsonl"
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


IDENTITY = ("dataset_id", "key", "version_id", "object_url")


class IngestRunner:
    """Runs ingest's main() in this process; returns the JSON summary it printed."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self._runner = JobRunner(main, GLUE_ARGS, capsys)

    @property
    def logs(self) -> str:
        return self._runner.logs

    def __call__(
        self, dataset_id: str, key: str, version: str, correlation_id: str = "exec-1"
    ) -> Any:
        summary = self._runner(*ingest_args(dataset_id, key, version, correlation_id))
        (result,) = summary["objects"]
        assert summary["counts"] == {result["status"]: 1}
        assert (result["dataset_id"], result["key"], result["version_id"]) == (
            dataset_id, key, version,
        )  # fmt: skip
        assert result["object_url"] == f"s3://{RAW}/{key}"
        assert (result["error"] is None) == (result["status"] != "FAILED")
        # the outcome as the state machine and the catalog see it (and why, when FAILED)
        return {
            k: v
            for k, v in result.items()
            if (k not in IDENTITY and v is not None) or k == "quarantine_object"
        }


@pytest.fixture
def run_job(cloud: Cloud, capsys: pytest.CaptureFixture[str]) -> IngestRunner:
    return IngestRunner(capsys)


def test_csv_rows_are_partitioned_and_the_bad_row_is_quarantined(
    cloud: Cloud, run_job: IngestRunner
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
        "rows_without_subject": 0,
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


def test_the_batch_counts_go_to_stderr_as_one_embedded_metric_format_line(
    cloud: Cloud, run_job: IngestRunner
) -> None:
    # Given the CSV with two good rows and one bad one, ingested
    cloud.register(REVIEWS)
    version = cloud.upload(REVIEWS_KEY, REVIEWS_CSV, "reviews")
    run_job("reviews", REVIEWS_KEY, version, correlation_id="exec-emf")

    # Then stderr has one EMF document (docs/OPERATIONS.md, Dashboard) with the batch's counts,
    # and neither the key nor the dataset's rows
    documents = [json.loads(line) for line in run_job.logs.splitlines() if line.startswith('{"')]
    (emf,) = [d for d in documents if "_aws" in d]
    assert emf["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "Lethe"
    assert {k: v for k, v in emf.items() if k != "_aws"} == {
        "service": "lethe",
        "ObjectsIngested": 1,
        "ObjectsQuarantined": 0,
        "ObjectsFailed": 0,
        "RowsWritten": 2,
        "RowsQuarantined": 1,
    }


def test_ingestion_indexes_its_lake_files_the_raw_object_and_quarantine(
    cloud: Cloud, run_job: IngestRunner
) -> None:
    # Given the CSV: u1 (line 2) and u3 (line 4) valid on two days, u2 (line 3) rejected
    cloud.register(REVIEWS)
    version = cloud.upload(REVIEWS_KEY, REVIEWS_CSV, "reviews")

    run_job("reviews", REVIEWS_KEY, version)

    raw = f"s3://{RAW}/{REVIEWS_KEY}"
    raw_v = cloud.current(RAW, REVIEWS_KEY)
    day1, day2, quarantine = (cloud.current(LAKE, k) for k in (DAY1, DAY2, REVIEWS_QUARANTINE))
    # Then each subject is found in the lake file (row in the file) and the raw object (line)
    assert raw_v[0] == version
    assert cloud.lookup(h("u1")) == [
        (h("u1"), f"s3://{LAKE}/{DAY1}", "lake", "parquet", 1, (0,), *day1, False),
        (h("u1"), raw, "raw", "csv", 1, (2,), *raw_v, False),
    ]
    assert cloud.lookup(h("u3")) == [
        (h("u3"), f"s3://{LAKE}/{DAY2}", "lake", "parquet", 1, (0,), *day2, False),
        (h("u3"), raw, "raw", "csv", 1, (4,), *raw_v, False),
    ]
    # and the rejected row's subject in the raw object and in quarantine (line 1 there)
    assert cloud.lookup(h("u2")) == [
        (h("u2"), f"s3://{LAKE}/{REVIEWS_QUARANTINE}", "lake", "jsonl", 1, (1,), *quarantine,
         False),
        (h("u2"), raw, "raw", "csv", 1, (3,), *raw_v, False),
    ]  # fmt: skip
    assert len(cloud.entries()) == 6
    # and every entry is pinned to the definition and the key it was computed with
    assert cloud.pins() == {cloud.expected_pin(REVIEWS)}
    # and no raw subject id is stored anywhere in the index
    assert not any({"u1", "u2", "u3"} & {str(v) for e in cloud.entries() for v in e})
    # and every object the job wrote says that ingestion indexed it, and which run wrote it
    for key in (DAY1, DAY2, REVIEWS_QUARANTINE):
        head = cloud.s3.head_object(Bucket=LAKE, Key=key)
        assert head["Metadata"] == {"lethe-producer": "ingest", "lethe-correlation-id": "exec-1"}
        # the metadata is for people; the writes ledger is what Lethe trusts, and it says so too
        ledger = DynamoWritesLedger(cloud.catalog)
        assert ledger.writer_of(LAKE, key, head["VersionId"]) == "ingest"
        assert ledger.intents(LAKE, key) == []


def test_rerunning_the_same_version_overwrites_instead_of_duplicating(
    cloud: Cloud, run_job: IngestRunner
) -> None:
    cloud.register(REVIEWS)
    version = cloud.upload(REVIEWS_KEY, REVIEWS_CSV, "reviews")
    first = run_job("reviews", REVIEWS_KEY, version)
    keys = cloud.lake_keys()

    entries = cloud.entries()

    second = run_job("reviews", REVIEWS_KEY, version, correlation_id="exec-retry")

    assert second == first
    assert cloud.lake_keys() == keys
    # the same entries, now describing the lake files' new versions
    again = cloud.entries()
    assert {e[:6] for e in again} == {e[:6] for e in entries}
    assert len(again) == len(entries) == 6
    assert all(e[6:8] == cloud.current(*e[1][len("s3://") :].split("/", 1)) for e in again)
    day1 = f"reviews/review_date=2026-11-22/part-{REVIEWS_HASH}.parquet"
    assert cloud.lake_parquet(day1).num_rows == 1
    assert cloud.catalog_item(REVIEWS_KEY, version)["ingest_correlation_id"] == "exec-retry"


def test_a_new_version_whose_rows_moved_removes_the_old_partition_file(
    cloud: Cloud, run_job: IngestRunner
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
    # and the index shows only what version 2 holds; what only version 1 and the removed
    # files hold stays, flagged: those versions are still stored, and erasure must reach them
    raw = (f"s3://{RAW}/{REVIEWS_KEY}", "raw", "csv", 1, (2,), *cloud.current(RAW, REVIEWS_KEY))
    lake = (f"s3://{LAKE}/{new_day}", "lake", "parquet", 1, (0,), *cloud.current(LAKE, new_day))
    current = {e for e in cloud.entries() if not e[-1]}
    assert current == {(h("u1"), *raw, False), (h("u1"), *lake, False)}
    flagged = {(e[0], e[1]) for e in cloud.entries() if e[-1]}
    assert flagged == {
        (h("u2"), f"s3://{RAW}/{REVIEWS_KEY}"),
        (h("u3"), f"s3://{RAW}/{REVIEWS_KEY}"),
        (h("u1"), f"s3://{LAKE}/{DAY1}"),
        (h("u3"), f"s3://{LAKE}/{DAY2}"),
        (h("u2"), f"s3://{LAKE}/{REVIEWS_QUARANTINE}"),
    }


def test_an_older_version_ingested_last_is_superseded_and_writes_nothing(
    cloud: Cloud, run_job: IngestRunner
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
        "rows_without_subject": 0,
        "rows_written": 0,
        "rows_quarantined": 0,
        "lake_objects": [],
        "quarantine_object": None,
    }
    assert cloud.lake_keys() == keys
    new_day = f"reviews/review_date=2026-12-01/part-{REVIEWS_HASH}.parquet"
    assert cloud.lake_parquet(new_day).column("comment").to_pylist() == ["changed"]
    assert cloud.catalog_item(REVIEWS_KEY, v1)["status"] == "SUPERSEDED"


def test_gzipped_json_lines_without_gz_in_the_key(cloud: Cloud, run_job: IngestRunner) -> None:
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
    # the "" id (line 2) and the missing one (line 3) name nobody: counted, never indexed
    assert summary["rows_without_subject"] == 2
    assert {e[0] for e in cloud.entries()} == {h("c1")}
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
    cloud: Cloud, run_job: IngestRunner
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


def test_an_unreadable_file_is_quarantined_whole(cloud: Cloud, run_job: IngestRunner) -> None:
    cloud.register(METRICS)
    version = cloud.upload(BROKEN_KEY, b"this is not parquet", "metrics")

    summary = run_job("metrics", BROKEN_KEY, version, correlation_id="exec-broken")

    report_key = f"metrics/_quarantine/{BROKEN_HASH}.file.json"
    assert summary == {
        "status": "QUARANTINED",
        "rows_read": 0,
        "rows_without_subject": 0,
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
    assert cloud.entries() == set()  # no row could be read: nobody's rows
    # the driver's write of that document is in the writes ledger, as the tasks' files are
    written = cloud.s3.head_object(Bucket=LAKE, Key=report_key)["VersionId"]
    assert DynamoWritesLedger(cloud.catalog).writer_of(LAKE, report_key, written) == "ingest"


def test_rows_whose_lake_key_would_pass_s3s_limit_are_quarantined_alone(
    cloud: Cloud, run_job: IngestRunner
) -> None:
    # Given a dataset partitioned by a free-text column: its values become lake key segments
    cloud.register(
        {
            "dataset_id": "longkeys",
            "format": "csv",
            "subject_columns": ["user_id"],
            "partition_by": ["region"],
            "schema": [{"name": "user_id", "type": "string"}, {"name": "region", "type": "string"}],
        }
    )
    key = "longkeys/batch.csv"
    digest = object_hash(RAW, key)
    # the index keys each entry by the lake object's URL, a DynamoDB sort key of at most 1,024
    # bytes: "s3://lethe-test-lake/longkeys/region=<value>/part-<16 hex>.parquet" is 67 bytes
    # besides the value, so the URL's limit comes before S3's on the key (1,024 too)
    at_limit, over = "a" * 957, "a" * 958
    two_byte = "\u00e9" * 480  # 480 characters, 960 bytes: over in bytes, not in characters
    escaped = "/" * 319  # Hive writes each "/" as %2F: 957 bytes, at the limit again
    s3_over = "a" * 979  # a key of 1,025 bytes
    rows = [("subj-lk-1", at_limit), ("subj-lk-2", over), ("subj-lk-3", "eu"),
            ("subj-lk-4", two_byte), ("subj-lk-5", escaped), ("subj-lk-6", s3_over)]  # fmt: skip
    body = "user_id,region\n" + "".join(f"{u},{r}\n" for u, r in rows)
    version = cloud.upload(key, body.encode(), "longkeys")

    # When the job ingests it
    summary = run_job("longkeys", key, version, correlation_id="exec-long")

    # Then the rows whose object fits are in the lake, the limit itself included
    fits = {
        f"longkeys/region={value}/part-{digest}.parquet" for value in (at_limit, "eu", "%2F" * 319)
    }
    assert sorted(len(f"s3://{LAKE}/{k}".encode()) for k in fits) == [69, 1024, 1024]
    quarantine = f"longkeys/_quarantine/{digest}.jsonl"
    assert set(cloud.lake_keys()) == fits | {quarantine}
    assert summary["status"] == "INGESTED"
    assert (summary["rows_read"], summary["rows_written"], summary["rows_quarantined"]) == (6, 3, 3)
    # and each row one byte or more over is quarantined alone, with the reason and its record
    rejected = [json.loads(line) for line in cloud.lake_object(quarantine).splitlines()]
    url = (
        "the partition values make a lake object URL of {} bytes; "
        "the subject index (a DynamoDB sort key) allows at most 1024"
    )
    assert [(r["source"]["line"], r["reasons"], r["record"]["user_id"]) for r in rejected] == [
        (3, [url.format(1025)], "subj-lk-2"),
        (5, [url.format(1027)], "subj-lk-4"),
        (7, ["the partition values make a lake key of 1025 bytes; S3 allows at most 1024"],
         "subj-lk-6"),
    ]  # fmt: skip
    assert rejected[0]["record"]["region"] == over
    # and indexed there and in the raw object, so that an erasure finds them
    for subject in ("subj-lk-2", "subj-lk-4", "subj-lk-6"):
        assert {e[1] for e in cloud.lookup(h(subject))} == {
            f"s3://{LAKE}/{quarantine}",
            f"s3://{RAW}/{key}",
        }
    # and the rows in the lake are indexed under their long URLs
    assert {e[1] for e in cloud.lookup(h("subj-lk-1"))} == {
        f"s3://{LAKE}/longkeys/region={at_limit}/part-{digest}.parquet",
        f"s3://{RAW}/{key}",
    }


def test_unregistered_dataset_and_missing_version_fail_only_that_object(
    cloud: Cloud, run_job: IngestRunner
) -> None:
    version = cloud.upload(REVIEWS_KEY, REVIEWS_CSV, "reviews")
    unregistered = run_job("reviews", REVIEWS_KEY, version)
    assert unregistered["status"] == "FAILED"
    assert unregistered["error"] == "dataset 'reviews' is not registered"
    item = cloud.catalog_item(REVIEWS_KEY, version)
    assert (item["status"], item["ingest_error"]) == ("FAILED", unregistered["error"])

    cloud.register(REVIEWS)
    missing = run_job("reviews", "reviews/never-uploaded.csv", "null")
    assert missing["status"] == "FAILED"
    assert missing["error"] == (
        f"s3://{RAW}/reviews/never-uploaded.csv version null cannot be read: it is not there"
    )
    assert cloud.lake_keys() == []


def test_a_recorded_version_deleted_before_ingestion_ends_deleted_not_failed(
    cloud: Cloud, run_job: IngestRunner
) -> None:
    # Recorded RECEIVED from its Object Created event, then purged (as an erasure purges the
    # versions it rewrote) before the job read it; its Object Deleted event not read yet.
    cloud.register(REVIEWS)
    version = cloud.upload(REVIEWS_KEY, REVIEWS_CSV, "reviews")
    cloud.s3.delete_object(Bucket=RAW, Key=REVIEWS_KEY, VersionId=version)

    outcome = run_job("reviews", REVIEWS_KEY, version, correlation_id="exec-gone")
    assert "was deleted before it could be ingested (S3 no longer has it)" in run_job.logs
    again = run_job("reviews", REVIEWS_KEY, version, correlation_id="exec-again")

    assert outcome["status"] == again["status"] == "DELETED"
    item = cloud.catalog_item(REVIEWS_KEY, version)
    assert (item["status"], item["ingest_correlation_id"]) == ("DELETED", "exec-gone")
    assert "ingest_error" not in item
    assert cloud.lake_keys() == []


def test_a_missing_hash_key_secret_fails_the_run_before_anything_is_written(
    cloud: Cloud, capsys: pytest.CaptureFixture[str]
) -> None:
    cloud.register(REVIEWS)
    version = cloud.upload(REVIEWS_KEY, REVIEWS_CSV, "reviews")
    args = ingest_args("reviews", REVIEWS_KEY, version)
    args[args.index("--hash-key-secret") + 1] = "no-such-secret"

    with pytest.raises(HashKeyError, match="cannot be read: ResourceNotFoundException"):
        JobRunner(main, GLUE_ARGS, capsys)(*args)
    assert cloud.lake_keys() == []


def test_a_version_with_only_rejected_rows_is_quarantined_and_replaces_the_old_rows(
    cloud: Cloud, run_job: IngestRunner
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
        "rows_without_subject": 2,  # lines that are no JSON object hold no subject
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
    # no line names a subject any more: c1's entries are only flagged, for the raw version 1
    # and the lake file's older version that still hold its row
    assert {(e[0], e[1], e[-1]) for e in cloud.entries()} == {
        (h("c1"), f"s3://{RAW}/{EVENTS_KEY}", True),
        (h("c1"), f"s3://{LAKE}/events/part-{EVENTS_HASH}.parquet", True),
    }


def test_a_nullable_column_added_to_the_dataset_appears_in_the_lake(
    cloud: Cloud, run_job: IngestRunner
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
