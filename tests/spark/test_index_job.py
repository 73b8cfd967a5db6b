"""The index job (`spark_jobs/index.py` main) against the moto server: a lake that existed
before Lethe, idempotent re-runs, changed and deleted objects, and the equality of a backfill
with what ingestion indexed."""

from __future__ import annotations

import gzip
import json
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from index import main as index_main
from ingest import main as ingest_main
from lethe_jobs.errors import InvalidObjectListError
from lethe_shared.errors import DatasetNotFoundError
from tests.spark.cloud import (
    CATALOG,
    COMMON_JOB_ARGS,
    GLUE_ARGS,
    LAKE,
    RAW,
    REPORTS,
    Cloud,
    JobRunner,
    h,
    hk,
    ingest_args,
)

ORDERS = {
    "dataset_id": "orders",
    "format": "parquet",
    "subject_columns": ["customer.id"],
    "partition_by": ["country"],
    "schema": [
        {"name": "customer", "type": "struct<id:string,tier:int>"},
        {"name": "country", "type": "string"},
        {"name": "amount", "type": "double"},
    ],
}
NL = "orders/country=NL/part-00000.parquet"
DE = "orders/country=DE/part-00000.parquet"
SUCCESS = "orders/_SUCCESS"
ACCOUNTS = {
    "dataset_id": "accounts",
    "format": "parquet",
    "subject_columns": ["tenant", "user_id"],
    "partition_by": ["tenant"],
    "schema": [
        {"name": "tenant", "type": "string"},
        {"name": "user_id", "type": "long"},
        {"name": "plan", "type": "string"},
    ],
}
ACME = "accounts/tenant=acme/data.parquet"
GLOBEX = "accounts/tenant=globex/data.parquet"
ACCOUNT_KEY = ["tenant", "user_id"]
PAYMENTS = {
    "dataset_id": "payments",
    "format": "csv",
    "subject_columns": ["tenant", "account"],
    "partition_by": ["day"],
    "schema": [
        {"name": "tenant", "type": "string"},
        {"name": "account", "type": "decimal(10,2)"},
        {"name": "day", "type": "date"},
        {"name": "amount", "type": "int"},
    ],
}
PAYMENTS_KEY = "payments/2026/11/p1.csv"
PAYMENTS_CSV = (
    b"tenant,account,day,amount\n"
    b"acme,12.50,2026-11-22,5\n"  # line 2: (acme, 12.5)
    b"acme,0012.5,2026-11-22,7\n"  # line 3: the same account written otherwise
    b"acme, 12.5 ,2026-11-23,x\n"  # line 4: rejected (amount), its account converts
    b"globex,1e1,2026-11-23,1\n"  # line 5: (globex, 10)
    b"globex,abc,2026-11-23,1\n"  # line 6: rejected (account), indexed as read
    b",12.5,2026-11-22,1\n"  # line 7: "" names no tenant: nobody's (not indexed)
    b"acme,99.999,2026-11-22,1\n"  # line 8: rounds to 100.00
)
EVENTS = {
    "dataset_id": "events",
    "format": "jsonl",
    "subject_columns": ["customer.id"],
    "schema": [
        {"name": "customer", "type": "struct<id:string,tier:int>"},
        {"name": "at", "type": "timestamp"},
    ],
}
EVENTS_KEY = "events/e1.jsonl.gz"
EVENTS_LINES = [
    '{"customer": {"id": "c1", "tier": 2}, "at": "2026-11-22T10:00:00Z"}',
    '{"customer": {"id": 1001, "tier": "gold"}, "at": "2026-11-22T11:00:00Z"}',
    '{"customer": {"tier": 3}}',
    "[1]",
    '{"customer": {"id": "", "tier": 1}}',
    '{"customer": {"id": "1001", "tier": 1}}',
]


class IndexRunner(JobRunner):
    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        super().__init__(index_main, [*COMMON_JOB_ARGS, "--catalog-table", CATALOG], capsys)

    def objects(self, dataset_id: str, objects: list[dict[str, str]], *extra: str) -> Any:
        return self(
            "--dataset-id", dataset_id,
            "--objects-json", json.dumps(objects),
            "--correlation-id", f"index-{dataset_id}",
            *extra,
        )  # fmt: skip


@pytest.fixture
def run_index(cloud: Cloud, capsys: pytest.CaptureFixture[str]) -> IndexRunner:
    return IndexRunner(capsys)


def _lake(key: str) -> dict[str, str]:
    return {"bucket": LAKE, "key": key}


def _entry(
    cloud: Cloud, subject: str, key: str, rows: int, hints: tuple[int, ...], fmt: str = "parquet"
) -> tuple[Any, ...]:
    zone, bucket = ("lake", LAKE) if fmt != "csv" else ("raw", RAW)
    return (
        subject,
        f"s3://{bucket}/{key}",
        zone,
        fmt,
        rows,
        hints,
        *cloud.current(bucket, key),
        False,
    )


def _customers(*ids: str | None) -> pa.Table:
    customer = pa.array(
        [None if i == "<null struct>" else {"id": i, "tier": 1} for i in ids],
        pa.struct([("id", pa.string()), ("tier", pa.int32())]),
    )
    return pa.table({"customer": customer, "amount": [1.5] * len(ids)})


def test_a_lake_from_before_lethe_is_indexed_once_and_kept_current(
    cloud: Cloud, run_index: IndexRunner
) -> None:
    # Given Parquet files written without Lethe: a nested subject, nulls, "" (nobody's, as a
    # null) and "0" as ids
    cloud.register(ORDERS)
    cloud.put_lake_parquet(NL, _customers("c1", "c2", None, "c1", "", "<null struct>"))
    cloud.put_lake_parquet(DE, _customers("0", "c2"))
    cloud.s3.put_object(Bucket=LAKE, Key=SUCCESS, Body=b"")
    objects = [_lake(NL), _lake(DE), _lake(SUCCESS)]

    # When the index job runs over them
    summary = run_index.objects("orders", objects)

    # Then every subject has one entry per file, with its rows in the file
    expected = {
        _entry(cloud, h("c1"), NL, 2, (0, 3)),
        _entry(cloud, h("c2"), NL, 1, (1,)),
        _entry(cloud, h("0"), DE, 1, (0,)),
        _entry(cloud, h("c2"), DE, 1, (1,)),
    }
    assert cloud.entries() == expected
    assert summary == {
        "objects": 3, "indexed": 2, "skipped": 1, "missing": 0, "unreadable": 0,
        "entries_written": 4, "entries_deleted": 0, "rows": 5,
        "rows_without_subject": 3,  # NL's null, "" and null struct
    }  # fmt: skip

    # When it runs again (from a manifest): nothing to do
    manifest = json.dumps(objects).encode()
    cloud.s3.put_object(Bucket=REPORTS, Key="manifests/orders.json", Body=manifest)
    again = run_index(
        "--dataset-id", "orders",
        "--objects-manifest", f"s3://{REPORTS}/manifests/orders.json",
        "--correlation-id", "index-again",
    )  # fmt: skip
    assert (again["indexed"], again["skipped"], again["entries_written"]) == (0, 3, 0)
    assert cloud.entries() == expected

    # When NL is rewritten without c2, and DE is deleted for good
    old_nl = {e for e in expected if e[1].endswith(NL) and e[0] == h("c2")}
    cloud.put_lake_parquet(NL, _customers("c1"))
    cloud.delete_every_version(LAKE, DE)
    changed = run_index.objects("orders", [_lake(NL), _lake(DE)])

    # Then NL's entries describe its new version, c2 stays flagged for the older NL
    # version that still holds their rows (erasure must reach it), and DE has none
    assert cloud.entries() == {_entry(cloud, h("c1"), NL, 1, (0,))} | {
        (*e[:-1], True) for e in old_nl
    }
    assert len(old_nl) == 1
    assert changed == {
        "objects": 2, "indexed": 1, "skipped": 0, "missing": 1, "unreadable": 0,
        "entries_written": 1, "entries_deleted": 3, "rows": 1, "rows_without_subject": 0,
    }  # fmt: skip


def test_a_composite_key_takes_its_partition_value_from_the_path(
    cloud: Cloud, run_index: IndexRunner
) -> None:
    # Given account files whose tenant is only in the Hive path
    cloud.register(ACCOUNTS)
    cloud.put_lake_parquet(ACME, pa.table({"user_id": pa.array([1, 0, None, 1], pa.int64())}))
    cloud.put_lake_parquet(GLOBEX, pa.table({"user_id": pa.array([1], pa.int64())}))

    summary = run_index.objects("accounts", [_lake(ACME), _lake(GLOBEX)])

    # Then (tenant, user_id) pairs are the subjects; user 1 of acme is not user 1 of globex
    assert cloud.entries() == {
        _entry(cloud, hk(ACCOUNT_KEY, tenant="acme", user_id=1), ACME, 2, (0, 3)),
        _entry(cloud, hk(ACCOUNT_KEY, tenant="acme", user_id=0), ACME, 1, (1,)),
        _entry(cloud, hk(ACCOUNT_KEY, tenant="globex", user_id=1), GLOBEX, 1, (0,)),
    }
    assert (summary["indexed"], summary["entries_written"], summary["rows"]) == (2, 3, 4)

    # When a delete marker hides GLOBEX: its data is still in an older version, so its entry
    # stays, flagged deleted (lookups hide it, erasure finds it)
    globex = _entry(cloud, hk(ACCOUNT_KEY, tenant="globex", user_id=1), GLOBEX, 1, (0,))
    cloud.s3.delete_object(Bucket=LAKE, Key=GLOBEX)
    hidden = run_index.objects("accounts", [_lake(GLOBEX)])

    assert (hidden["missing"], hidden["entries_deleted"]) == (1, 0)
    assert cloud.lookup(globex[0]) == [(*globex[:-1], True)]


def _dataset_objects(cloud: Cloud, dataset_id: str) -> list[dict[str, str]]:
    return [
        {"bucket": bucket, "key": key}
        for bucket in (RAW, LAKE)
        for key in cloud.keys(bucket)
        if key.startswith(f"{dataset_id}/")
    ]


def test_a_backfill_gives_the_index_ingestion_gave(
    cloud: Cloud, run_index: IndexRunner, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a CSV and a gzipped JSON Lines file ingested, with rejected rows in both
    cloud.register(PAYMENTS)
    cloud.register(EVENTS)
    ingest = JobRunner(ingest_main, GLUE_ARGS, capsys)
    payments_v = cloud.upload(PAYMENTS_KEY, PAYMENTS_CSV, "payments")
    events_body = gzip.compress(("\n".join(EVENTS_LINES) + "\n").encode())
    events_v = cloud.upload(EVENTS_KEY, events_body, "events")
    ingest(*ingest_args("payments", PAYMENTS_KEY, payments_v))
    ingest(*ingest_args("events", EVENTS_KEY, events_v))
    ingested = cloud.entries()
    # one subject, written three ways, is one subject in the raw file, the lake and quarantine
    acme_12_5 = hk(["tenant", "account"], tenant="acme", account="12.5")
    assert [(e[1].rsplit("/", 2)[-2], e[4], e[5]) for e in cloud.lookup(acme_12_5)] == [
        ("_quarantine", 1, (1,)),  # the quarantine file's line 1
        ("day=2026-11-22", 2, (0, 1)),  # rows 0 and 1 of the day's file
        ("11", 3, (2, 3, 4)),  # lines 2-4 of the raw CSV
    ]
    assert {e[1] for e in cloud.lookup(h("1001"))} == {
        f"s3://{RAW}/{EVENTS_KEY}",
        *[e[1] for e in ingested if "/events/_quarantine/" in e[1]],
        *[e[1] for e in ingested if e[1].startswith(f"s3://{LAKE}/events/part-")],
    }
    # payments: raw 4 subjects, day 22 file 2, day 23 file 1, quarantine 2 (acme 12.5, globex
    # abc), the "" tenant nowhere; events: raw 2 (c1, 1001), lake 2, quarantine 1 (1001; no id,
    # "" and "[1]", none)
    assert len(ingested) == 9 + 5

    # When the index is emptied and rebuilt from the objects by the index job
    cloud.clear_index()
    payments = _dataset_objects(cloud, "payments")
    default = run_index.objects("payments", payments)
    everything = run_index.objects("payments", payments, "--skip-producer", "none")
    run_index.objects("events", _dataset_objects(cloud, "events"), "--skip-producer", "none")

    # Then the index is the one ingestion wrote, pinned alike
    assert cloud.entries() == ingested
    assert cloud.pins() == {cloud.expected_pin(PAYMENTS), cloud.expected_pin(EVENTS)}
    # the first run left what ingestion wrote to ingestion, the second indexed it
    assert (default["objects"], default["indexed"], default["skipped"]) == (4, 1, 3)
    assert (everything["indexed"], everything["skipped"]) == (3, 1)


def _tasks_of_group(spark: SparkSession, group: str) -> int:
    """How many Spark tasks the jobs of a job group ran."""
    tracker = spark.sparkContext.statusTracker()
    stages = [
        stage
        for job in tracker.getJobIdsForGroup(group)
        for stage in tracker.getJobInfo(job).stageIds  # type: ignore[union-attr]
    ]
    return sum(tracker.getStageInfo(s).numTasks for s in stages)  # type: ignore[union-attr]


def test_small_objects_share_spark_tasks_with_the_outcomes_of_one_task_each(
    cloud: Cloud, run_index: IndexRunner, spark: SparkSession
) -> None:
    # Given 12 small lake files (and a _SUCCESS marker), subjects shared between them
    cloud.register(ORDERS)
    keys = [f"orders/country=C{i:02d}/part-00000.parquet" for i in range(12)]
    for i, key in enumerate(keys):
        cloud.put_lake_parquet(key, _customers(f"c{i}", "shared", None, f"c{i % 3}"))
    cloud.s3.put_object(Bucket=LAKE, Key=SUCCESS, Body=b"")
    objects = [*map(_lake, keys), _lake(SUCCESS)]

    # When the index job indexes them in one run (unknown sizes: grouped by count, one task
    # per core of the local[2] session)
    spark.sparkContext.setJobGroup("grouped-index", "13 objects in one run")
    try:
        grouped = run_index.objects("orders", objects)
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    tasks = _tasks_of_group(spark, "grouped-index")
    entries = cloud.entries()

    # Then they ran in 2 tasks, not 13
    assert tasks == 2
    # and the index and the outcomes are those of indexing each object in a run of its own
    cloud.clear_index()
    alone = [run_index.objects("orders", [o], "--force") for o in objects]
    assert cloud.entries() == entries
    assert grouped == {k: sum(a[k] for a in alone) for k in grouped}
    assert (grouped["indexed"], grouped["skipped"], grouped["entries_written"]) == (12, 1, 33)


def test_objects_outside_the_dataset_and_unknown_datasets_fail_the_run(
    cloud: Cloud, run_index: IndexRunner
) -> None:
    cloud.register(ORDERS)
    with pytest.raises(InvalidObjectListError, match="not under dataset 'orders'"):
        run_index.objects("orders", [_lake("accounts/tenant=acme/data.parquet")])
    with pytest.raises(InvalidObjectListError, match="not an object list"):
        run_index.objects("orders", [{"key": NL}])
    with pytest.raises(DatasetNotFoundError, match="nope"):
        run_index.objects("nope", [])
