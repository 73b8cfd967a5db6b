"""statemachines/index_backfill.asl.json and index_reconcile.asl.json with
SparkEngine=EMR_SERVERLESS, executed from the deployed files with the real Spark jobs.

A lake that existed before Lethe: Parquet files written straight into the lake bucket (and one
into the raw bucket) while no dataset owned their prefix, so the object events handler only
recorded them as IGNORED; then the dataset is registered. The backfill indexes them in batches
on a Distributed Map that lists each zone itself (ItemReader) and batches the listing
(ItemBatcher, emulated by the local cloud's hooks); the "objects" mode indexes exactly the
objects it is given; a job that fails is retried, caught, notified and fails the execution;
reconcile reports drift and fixes it."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lethe_shared.index.subject_ids import ids_of
from lethe_shared.subject_hashing.keys import hash_of_id, key_fingerprint, key_from_secret
from tests.sfn.conftest import Cloud, entered_states, start_cloud

DATASET = "legacy_sales"
DOCUMENT = {
    "dataset_id": DATASET,
    "format": "parquet",
    "compression": "auto",
    "subject_columns": ["user_id"],
    "partition_by": ["day"],
    "schema": [
        {"name": "user_id", "type": "string"},
        {"name": "day", "type": "date"},
        {"name": "amount", "type": "int"},
    ],
}
# Hive-partitioned lake files, without the partition column: key -> (user_id, amount) rows.
LAKE_FILES: dict[str, list[tuple[str | None, int]]] = {
    f"{DATASET}/day=2026-01-01/part-0.parquet": [("u-1", 10), ("u-2", 5), ("u-1", 7)],
    f"{DATASET}/day=2026-01-01/part-1.parquet": [("u-3", 1)],
    f"{DATASET}/day=2026-01-02/part-0.parquet": [("u-2", 2), ("u-2", 3)],
    f"{DATASET}/day=2026-01-03/part-0.parquet": [("u-1", 4), ("u-3", 4), (None, 1)],
    f"{DATASET}/day=2026-01-04/part-0.parquet": [("u-4", 9)],
}
# A raw export in the dataset's format, partition column included.
RAW_FILES: dict[str, list[tuple[str | None, int]]] = {
    f"{DATASET}/2026/01/05/export.parquet": [("u-1", 1), ("u-5", 2), ("u-5", 3)],
}
# What the index must hold afterwards, written down from the files above: (zone, key) ->
# {subject id: rows}. The null user_id is nobody's row.
EXPECTED: dict[tuple[str, str], dict[str, int]] = {
    ("lake", f"{DATASET}/day=2026-01-01/part-0.parquet"): {"u-1": 2, "u-2": 1},
    ("lake", f"{DATASET}/day=2026-01-01/part-1.parquet"): {"u-3": 1},
    ("lake", f"{DATASET}/day=2026-01-02/part-0.parquet"): {"u-2": 2},
    ("lake", f"{DATASET}/day=2026-01-03/part-0.parquet"): {"u-1": 1, "u-3": 1},
    ("lake", f"{DATASET}/day=2026-01-04/part-0.parquet"): {"u-4": 1},
    ("raw", f"{DATASET}/2026/01/05/export.parquet"): {"u-1": 1, "u-5": 2},
}
BACKFILL_TIMEOUT = 240.0


def _parquet(rows: list[tuple[str | None, int]], *, day: str | None = None) -> bytes:
    columns: dict[str, Any] = {
        "user_id": pa.array([r[0] for r in rows], pa.string()),
        "amount": pa.array([r[1] for r in rows], pa.int32()),
    }
    if day is not None:
        columns["day"] = pa.array([day] * len(rows), pa.string())
    sink = io.BytesIO()
    pq.write_table(pa.table(columns), sink)
    return sink.getvalue()


class Workflows:
    """The module's cloud, plus what the tests need to run and inspect the index workflows."""

    def __init__(self, cloud: Cloud) -> None:
        self.cloud = cloud
        self.outputs = cloud.outputs
        self.raw = cloud.outputs["RawBucketName"]
        self.lake = cloud.outputs["LakeBucketName"]
        secret = cloud.client("secretsmanager").get_secret_value(
            SecretId=cloud.outputs["SubjectHashKeySecretArn"]
        )["SecretString"]
        self.key = key_from_secret(secret)
        self.dynamodb = cloud.client("dynamodb")
        self.sfn = cloud.client("stepfunctions")

    def bucket(self, zone: str) -> str:
        return self.raw if zone == "raw" else self.lake

    def url(self, zone: str, key: str) -> str:
        return f"s3://{self.bucket(zone)}/{key}"

    def execute(self, output: str, name: str, document: dict[str, Any]) -> dict[str, Any]:
        arn = self.sfn.start_execution(
            stateMachineArn=self.outputs[output], name=name, input=json.dumps(document)
        )["executionArn"]
        deadline = time.monotonic() + BACKFILL_TIMEOUT
        while time.monotonic() < deadline:
            described = self.sfn.describe_execution(executionArn=arn)
            if described["status"] != "RUNNING":
                history = self.sfn.get_execution_history(executionArn=arn, maxResults=1000)
                return {"execution": described, "history": history["events"]}
            time.sleep(0.5)
        raise AssertionError(f"execution {name} still running after {BACKFILL_TIMEOUT} s")

    @property
    def segments(self) -> bool:
        return self.outputs["IndexStore"] == "segments"

    def entries(self) -> dict[tuple[str, str], dict[str, int]]:
        """The dataset's index entries as (zone, key) -> {subject: rows}, each subject as the
        store names it (a full hash; a 48-bit prefix in a segment dataset: `hashed`)."""
        found: dict[tuple[str, str], dict[str, int]] = {}
        if self.segments:
            for entry in self.cloud.subject_index().entries(DATASET):
                bucket, key = entry.object_url[len("s3://") :].split("/", 1)
                zone = "raw" if bucket == self.raw else "lake"
                found.setdefault((zone, key), {})[entry.subject_hash] = entry.rows
            return found
        kwargs: dict[str, Any] = {
            "TableName": self.outputs["SubjectIndexTableName"],
            "IndexName": "by_dataset",
            "KeyConditionExpression": "dataset_id = :d",
            "ExpressionAttributeValues": {":d": {"S": DATASET}},
        }
        while True:
            page = self.dynamodb.query(**kwargs)
            for item in page["Items"]:
                bucket, key = item["object_url"]["S"][len("s3://") :].split("/", 1)
                zone = "raw" if bucket == self.raw else "lake"
                found.setdefault((zone, key), {})[item["subject_hash"]["S"]] = int(
                    item["rows"]["N"]
                )
            if "LastEvaluatedKey" not in page:
                return found
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def hashed(
        self, expected: dict[tuple[str, str], dict[str, int]]
    ) -> dict[tuple[str, str], dict[str, int]]:
        """`expected` with each subject as `entries` names it."""
        named = ids_of(self.cloud.subject_index(), DATASET) if self.segments else str
        return {
            where: {named(hash_of_id(self.key, s)): rows for s, rows in subjects.items()}
            for where, subjects in expected.items()
        }

    def rows_of(self, zone: str, key: str, subject: str) -> int | None:
        """How many rows the index says `subject` has in the object; None: no entry (a
        look-up, which hides entries flagged deleted)."""
        found = self.cloud.subject_index().lookup_in(DATASET, [hash_of_id(self.key, subject)])
        url = self.url(zone, key)
        rows = [e.rows for entries in found.values() for e in entries if e.object_url == url]
        return rows[0] if rows else None

    def index_item(self, zone: str, key: str, subject: str) -> dict[str, Any] | None:
        """The entry's SubjectIndexTable item (a cloud on the DynamoDB store)."""
        assert not self.segments, "SubjectIndexTable holds no entries: the store is segments"
        item = self.dynamodb.get_item(
            TableName=self.outputs["SubjectIndexTableName"],
            Key={
                "subject_hash": {"S": hash_of_id(self.key, subject)},
                "object_url": {"S": self.url(zone, key)},
            },
            ConsistentRead=True,
        ).get("Item")
        return dict(item) if item else None

    def delete_entry(self, zone: str, key: str, subject: str) -> dict[str, Any]:
        item = self.index_item(zone, key, subject)
        assert item is not None, f"no entry of {subject} in {key}"
        self.dynamodb.delete_item(
            TableName=self.outputs["SubjectIndexTableName"],
            Key={"subject_hash": item["subject_hash"], "object_url": item["object_url"]},
        )
        return item

    def report(self, url: str) -> dict[str, Any]:
        bucket, key = url[len("s3://") :].split("/", 1)
        body = self.cloud.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read()
        return dict(json.loads(body))


def _wait_ignored(cloud: Cloud, bucket: str, key: str, version: str) -> None:
    """The object events handler saw the write and recorded it outside any dataset."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if cloud.catalog_item(bucket, key, version)["status"] == "IGNORED":
                return
        except KeyError:
            pass
        time.sleep(0.25)
    raise AssertionError(f"{key} was not recorded as IGNORED")


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cloud]:
    # the DynamoDB store: these tests read and edit SubjectIndexTable (the segment store has
    # its own e2e and integration tests)
    with start_cloud(
        tmp_path_factory, SparkEngine="EMR_SERVERLESS", IndexStore="dynamodb"
    ) as started:
        yield started


@pytest.fixture(scope="module")
def flows(cloud: Cloud) -> Workflows:
    """The legacy lake written before the dataset was registered, then the dataset."""
    flows = Workflows(cloud)
    s3 = cloud.client("s3")
    written = []
    for key, rows in LAKE_FILES.items():
        put = s3.put_object(Bucket=flows.lake, Key=key, Body=_parquet(rows))
        written.append((flows.lake, key, put["VersionId"]))
    for key, rows in RAW_FILES.items():
        put = s3.put_object(Bucket=flows.raw, Key=key, Body=_parquet(rows, day="2026-01-05"))
        written.append((flows.raw, key, put["VersionId"]))
    for bucket, key, version in written:
        _wait_ignored(cloud, bucket, key, version)
    flows.dynamodb.put_item(
        TableName=cloud.outputs["DatasetsTableName"],
        Item={"dataset_id": {"S": DATASET}, "document": {"S": json.dumps(DOCUMENT)}},
    )
    return flows


@pytest.fixture(scope="module")
def backfilled(flows: Workflows) -> dict[str, Any]:
    """The first backfill of the legacy lake: 5 lake objects, 1 raw, batches of 2, 2 at a time
    (so the lake's Distributed Map runs 3 child executions)."""
    assert flows.entries() == {}, "nothing may have indexed the legacy lake before the backfill"
    return flows.execute(
        "IndexBackfillStateMachineArn",
        "backfill-legacy",
        {"dataset_id": DATASET, "batch_size": 2, "max_concurrency": 2},
    )


def test_backfill_indexes_a_lake_that_existed_before_lethe(
    flows: Workflows, backfilled: dict[str, Any]
) -> None:
    execution = backfilled["execution"]

    assert execution["status"] == "SUCCEEDED", execution.get("cause")
    assert json.loads(execution["output"]) == {
        "dataset_id": DATASET,
        "zones": ["lake", "raw"],
        "status": "COMPLETED",
        "objects": 6,
        "batches": 4,  # ceil(5 / 2) lake batches + ceil(1 / 2) raw batch
    }
    assert flows.entries() == flows.hashed(EXPECTED)


def _objects_argument(run: dict[str, Any]) -> list[dict[str, Any]]:
    arguments = run["jobDriver"]["sparkSubmit"]["entryPointArguments"]
    return list(json.loads(arguments[arguments.index("--objects-json") + 1]))


def test_backfill_reads_each_zone_with_one_distributed_map_in_batches(
    flows: Workflows, backfilled: dict[str, Any]
) -> None:
    history = backfilled["history"]
    execution_arn = backfilled["execution"]["executionArn"]
    map_runs = flows.sfn.list_map_runs(executionArn=execution_arn)["mapRuns"]

    # One Map Run per zone, whose ItemReader lists the zone's prefix; no listing state of ours.
    assert entered_states(history).count("Index Zone") == 2
    assert [e["type"] for e in history].count("MapRunSucceeded") == 2
    described = [flows.sfn.describe_map_run(mapRunArn=r["mapRunArn"]) for r in map_runs]
    # DescribeMapRun counts objects as items and batches as child executions.
    assert sorted((d["itemCounts"]["total"], d["executionCounts"]["total"]) for d in described) == [
        (1, 1),  # raw: 1 object, 1 batch
        (5, 3),  # lake: 5 objects in batches of 2
    ]
    assert all(d["itemCounts"]["succeeded"] == d["itemCounts"]["total"] for d in described)
    assert sum(d["executionCounts"]["failed"] for d in described) == 0


def test_each_batch_is_one_job_run_over_its_objects_with_their_sizes(
    flows: Workflows, backfilled: dict[str, Any]
) -> None:
    emr = flows.cloud.client("emr-serverless")
    application = flows.outputs["SparkApplicationId"]
    s3 = flows.cloud.client("s3")
    runs = {
        run["name"]: emr.get_job_run(applicationId=application, jobRunId=run["id"])["jobRun"]
        for run in emr.list_job_runs(applicationId=application)["jobRuns"]
        if run.get("name", "").startswith("backfill-legacy-")
    }

    # Named by zone and by the listing index of the batch's first object.
    assert sorted(runs) == [
        "backfill-legacy-lake-0",
        "backfill-legacy-lake-2",
        "backfill-legacy-lake-4",
        "backfill-legacy-raw-0",
    ]
    assert {run["state"] for run in runs.values()} == {"SUCCESS"}
    lake_keys = sorted(LAKE_FILES)  # the listing's order
    expected = {
        "backfill-legacy-lake-0": [(flows.lake, k) for k in lake_keys[0:2]],
        "backfill-legacy-lake-2": [(flows.lake, k) for k in lake_keys[2:4]],
        "backfill-legacy-lake-4": [(flows.lake, k) for k in lake_keys[4:]],
        "backfill-legacy-raw-0": [(flows.raw, k) for k in RAW_FILES],
    }
    for name, run in runs.items():
        objects = _objects_argument(run)
        assert [(o["bucket"], o["key"]) for o in objects] == expected[name], name
        for o in objects:  # the listing's sizes travel to the job (task grouping by bytes)
            assert o["size"] == s3.head_object(Bucket=o["bucket"], Key=o["key"])["ContentLength"]
            assert set(o) == {"bucket", "key", "size"}


def test_a_second_backfill_finds_everything_indexed(
    flows: Workflows, backfilled: dict[str, Any]
) -> None:
    again = flows.execute(
        "IndexBackfillStateMachineArn", "backfill-legacy-again", {"dataset_id": DATASET}
    )

    assert again["execution"]["status"] == "SUCCEEDED", again["execution"].get("cause")
    assert json.loads(again["execution"]["output"])["batches"] == 2  # one per zone
    assert flows.entries() == flows.hashed(EXPECTED)


def test_a_zone_without_objects_runs_no_child(flows: Workflows) -> None:
    result = flows.execute(
        "IndexBackfillStateMachineArn",
        "backfill-empty",
        {"dataset_id": "nothing_here", "zones": ["raw", "lake"]},
    )

    assert result["execution"]["status"] == "SUCCEEDED", result["execution"].get("cause")
    assert json.loads(result["execution"]["output"]) == {
        "dataset_id": "nothing_here",
        "zones": ["raw", "lake"],
        "status": "COMPLETED",
        "objects": 0,
        "batches": 0,
    }
    assert [e["type"] for e in result["history"]].count("MapRunSucceeded") == 2


def test_objects_mode_indexes_exactly_the_given_objects(
    flows: Workflows, backfilled: dict[str, Any]
) -> None:
    given = f"{DATASET}/day=2026-01-02/part-0.parquet"
    other = f"{DATASET}/day=2026-01-04/part-0.parquet"
    flows.delete_entry("lake", given, "u-2")
    removed = flows.delete_entry("lake", other, "u-4")
    try:
        result = flows.execute(
            "IndexBackfillStateMachineArn",
            "index-one-object",
            {"dataset_id": DATASET, "objects": [{"bucket": flows.lake, "key": given}]},
        )

        assert result["execution"]["status"] == "SUCCEEDED", result["execution"].get("cause")
        assert entered_states(result["history"]) == [
            "Normalise Input",
            "Is Input Valid",
            "Check Spark Artifacts",  # the pre-flight: the index job's artifacts are in S3
            "Spark Artifacts Found",
            "Select Spark Engine",
            "Which Spark Engine",
            "Index Objects On EMR Serverless",
            "Objects Indexed",
        ]
        assert json.loads(result["execution"]["output"]) == {
            "dataset_id": DATASET,
            "zones": ["lake"],
            "status": "COMPLETED",
            "objects": 1,
            "batches": 1,
        }
        entry = flows.index_item("lake", given, "u-2")
        assert entry is not None
        assert entry["rows"] == {"N": "2"}
        assert flows.index_item("lake", other, "u-4") is None  # not given: not indexed
    finally:
        flows.dynamodb.put_item(TableName=flows.outputs["SubjectIndexTableName"], Item=removed)
    assert flows.entries() == flows.hashed(EXPECTED)


def test_a_failing_job_is_retried_then_notified_and_the_backfill_fails(
    flows: Workflows, cloud: Cloud
) -> None:
    notified = cloud.capture(
        "index-backfill-failures", topic=flows.outputs["NotificationsTopicArn"]
    )
    cloud.client("s3").put_object(
        Bucket=flows.lake, Key="ghost/day=2026-01-01/part-0.parquet", Body=_parquet([("u-9", 1)])
    )

    # "ghost" is no registered dataset: the index job exits non-zero on every attempt.
    result = flows.execute(
        "IndexBackfillStateMachineArn", "backfill-ghost", {"dataset_id": "ghost", "zones": ["lake"]}
    )

    execution = result["execution"]
    assert execution["status"] == "FAILED"
    assert execution["error"] == "IndexBackfillFailed"
    assert entered_states(result["history"])[-4:] == [
        "Count Batches",
        "Every Batch Indexed",
        "Notify Failure",
        "Backfill Failed",
    ]
    emr = cloud.client("emr-serverless")
    runs = emr.list_job_runs(applicationId=flows.outputs["SparkApplicationId"])["jobRuns"]
    batch_runs = [r for r in runs if r.get("name") == "backfill-ghost-lake-0"]
    assert len(batch_runs) == 2  # the first attempt and one retry
    assert {r["state"] for r in batch_runs} == {"FAILED"}
    (message,) = cloud.messages(notified, timeout=15)
    assert message["event"] == "IndexBackfillFailed"
    assert message["dataset_id"] == "ghost"
    assert message["error"] == "States.TaskFailed"
    assert "ghost" in message["cause"]
    assert message["execution"] == execution["executionArn"]


def test_invalid_input_is_refused_and_notified(flows: Workflows, cloud: Cloud) -> None:
    notified = cloud.capture(
        "index-backfill-refusals", topic=flows.outputs["NotificationsTopicArn"]
    )

    result = flows.execute(
        "IndexBackfillStateMachineArn",
        "backfill-invalid",
        {"dataset_id": "Not/A/Dataset", "zones": ["lake", "archive"], "batch_size": 0},
    )

    execution = result["execution"]
    assert execution["status"] == "FAILED"
    assert execution["error"] == "IndexBackfillFailed"
    assert entered_states(result["history"]) == [
        "Normalise Input",
        "Is Input Valid",
        "Notify Failure",
        "Backfill Failed",
    ]
    (message,) = cloud.messages(notified, timeout=15)
    assert message["error"] == "InvalidInput"
    assert [p.split(" must")[0] for p in message["cause"].split("; ")] == [
        "dataset_id",
        "zones",
        "batch_size",
    ]


def _reconcile(flows: Workflows, name: str, *, fix: bool = False) -> dict[str, Any]:
    result = flows.execute(
        "IndexReconcileStateMachineArn", name, {"dataset_id": DATASET, "fix": fix}
    )
    execution = result["execution"]
    assert execution["status"] == "SUCCEEDED", execution.get("cause")
    output = json.loads(execution["output"])
    reports = flows.outputs["ReportsBucketName"]
    assert output == {
        "dataset_id": DATASET,
        "report": f"s3://{reports}/reconcile/{DATASET}/{name}.json",
        "fixed": fix,
    }
    return flows.report(output["report"])


def test_reconcile_reports_drift_and_fixes_it(flows: Workflows, backfilled: dict[str, Any]) -> None:
    entries = sum(len(subjects) for subjects in EXPECTED.values())

    clean = _reconcile(flows, "reconcile-clean")

    assert (clean["objects_scanned"], clean["entries_expected"], clean["entries_found"]) == (
        6,
        entries,
        entries,
    )
    assert [clean[k]["count"] for k in ("missing", "stale", "wrong_rows")] == [0, 0, 0]

    lost = f"{DATASET}/day=2026-01-03/part-0.parquet"
    flows.delete_entry("lake", lost, "u-3")
    drift = _reconcile(flows, "reconcile-drift")

    assert drift["entries_found"] == entries - 1
    assert drift["missing"]["count"] == 1
    assert drift["missing"]["sample"] == [
        {"object_url": flows.url("lake", lost), "subject_hash": hash_of_id(flows.key, "u-3")}
    ]
    assert [drift[k]["count"] for k in ("stale", "wrong_rows")] == [0, 0]
    assert flows.index_item("lake", lost, "u-3") is None  # reported, not fixed

    fixed = _reconcile(flows, "reconcile-fix", fix=True)

    assert fixed["missing"]["count"] == 1
    assert fixed["fixed"] is True
    assert flows.entries() == flows.hashed(EXPECTED)


# ------------------------------------------------- a re-index records its matching generation


def _set_generations(flows: Workflows, matching: int, indexed: int) -> None:
    """What the registry holds after PUTs (lethe_shared.datasets.registry): only the two
    generations matter to the backfill's last step."""
    flows.dynamodb.update_item(
        TableName=flows.outputs["DatasetsTableName"],
        Key={"dataset_id": {"S": DATASET}},
        UpdateExpression="SET matching_generation = :m, indexed_generation = :i",
        ExpressionAttributeValues={":m": {"N": str(matching)}, ":i": {"N": str(indexed)}},
    )


def _generations(flows: Workflows) -> dict[str, Any]:
    item = flows.dynamodb.get_item(
        TableName=flows.outputs["DatasetsTableName"],
        Key={"dataset_id": {"S": DATASET}},
        ConsistentRead=True,
    )["Item"]
    return {k: next(iter(v.values())) for k, v in item.items() if k != "document"}


def test_a_reindex_records_its_generation_while_it_is_the_current_one(
    flows: Workflows, backfilled: dict[str, Any]
) -> None:
    _set_generations(flows, matching=2, indexed=1)

    result = flows.execute(
        "IndexBackfillStateMachineArn",
        "legacy_sales-reindex-g2",
        {"dataset_id": DATASET, "force": True, "generation": 2, "batch_size": 10},
    )

    execution = result["execution"]
    assert execution["status"] == "SUCCEEDED", execution.get("cause")
    assert json.loads(execution["output"]) == {
        "dataset_id": DATASET,
        "zones": ["lake", "raw"],
        "status": "COMPLETED",
        "objects": 6,
        "batches": 2,
        "generation": 2,
        "generation_recorded": True,
    }
    assert entered_states(result["history"])[-3:] == [
        "Generation Given",
        "Record Indexed Generation",
        "Backfill Complete",
    ]
    recorded = _generations(flows)
    assert (recorded["matching_generation"], recorded["indexed_generation"]) == ("2", "2")
    assert recorded["indexed_execution"] == execution["executionArn"]
    assert recorded["indexed_at"].startswith("20")
    assert flows.entries() == flows.hashed(EXPECTED)  # forced: every object indexed again


def test_a_reindex_of_a_superseded_generation_records_nothing(
    flows: Workflows, backfilled: dict[str, Any]
) -> None:
    _set_generations(flows, matching=4, indexed=2)  # generation 3 was overtaken by 4

    result = flows.execute(
        "IndexBackfillStateMachineArn",
        "legacy_sales-reindex-g3",
        {"dataset_id": DATASET, "force": True, "generation": 3, "batch_size": 10},
    )

    execution = result["execution"]
    assert execution["status"] == "SUCCEEDED", execution.get("cause")
    output = json.loads(execution["output"])
    assert (output["generation"], output["generation_recorded"]) == (3, False)
    assert "Record Indexed Generation" in entered_states(result["history"])
    recorded = _generations(flows)
    assert (recorded["matching_generation"], recorded["indexed_generation"]) == ("4", "2")


def test_a_key_reindex_records_the_key_it_was_started_with_and_its_generation(
    flows: Workflows, backfilled: dict[str, Any]
) -> None:
    # Given the dataset indexed for its current generation 5 with an old (or unknown) key: a
    # re-index after a key rotation is started for that same generation, with the key its
    # starter read (lethe datasets reindex)
    _set_generations(flows, matching=5, indexed=5)
    key = key_fingerprint(flows.key)

    result = flows.execute(
        "IndexBackfillStateMachineArn",
        "legacy_sales-reindex-g5-key",
        {
            "dataset_id": DATASET, "force": True, "generation": 5, "key_fingerprint": key,
            "batch_size": 10,
        },
    )  # fmt: skip

    execution = result["execution"]
    assert execution["status"] == "SUCCEEDED", execution.get("cause")
    output = json.loads(execution["output"])
    assert (output["generation"], output["generation_recorded"], output["key_fingerprint"]) == (
        5, True, key,
    )  # fmt: skip
    assert entered_states(result["history"])[-2:] == [
        "Record Indexed Generation",
        "Backfill Complete",
    ]
    recorded = _generations(flows)
    assert (recorded["matching_generation"], recorded["indexed_generation"]) == ("5", "5")
    assert recorded["indexed_key_fingerprint"] == key
    assert recorded["indexed_execution"] == execution["executionArn"]
    assert flows.entries() == flows.hashed(EXPECTED)  # every entry under the secret's key


def test_a_superseded_key_reindex_records_neither_generation_nor_key(
    flows: Workflows, backfilled: dict[str, Any]
) -> None:
    _set_generations(flows, matching=7, indexed=6)  # a PUT moved it on during the re-index
    flows.dynamodb.update_item(
        TableName=flows.outputs["DatasetsTableName"],
        Key={"dataset_id": {"S": DATASET}},
        UpdateExpression="SET indexed_key_fingerprint = :k",
        ExpressionAttributeValues={":k": {"S": "0000000000000000"}},
    )

    result = flows.execute(
        "IndexBackfillStateMachineArn",
        "legacy_sales-reindex-g6-key",
        {
            "dataset_id": DATASET, "force": True, "generation": 6,
            "key_fingerprint": key_fingerprint(flows.key), "batch_size": 10,
        },
    )  # fmt: skip

    execution = result["execution"]
    assert execution["status"] == "SUCCEEDED", execution.get("cause")
    assert json.loads(execution["output"])["generation_recorded"] is False
    recorded = _generations(flows)
    assert (recorded["indexed_generation"], recorded["indexed_key_fingerprint"]) == (
        "6", "0000000000000000",
    )  # fmt: skip


@pytest.mark.parametrize(
    "document",
    [
        {"dataset_id": DATASET, "force": True, "key_fingerprint": "0123456789abcdef"},
        {"dataset_id": DATASET, "force": True, "generation": 2, "key_fingerprint": "0123"},
        {"dataset_id": DATASET, "force": True, "generation": 2, "key_fingerprint": "X" * 16},
    ],
    ids=["no-generation", "short", "not-hex"],
)
def test_a_key_is_recorded_only_as_a_fingerprint_with_its_generation(
    flows: Workflows, document: dict[str, Any], request: pytest.FixtureRequest
) -> None:
    result = flows.execute(
        "IndexBackfillStateMachineArn", f"reindex-key-invalid-{request.node.callspec.id}", document
    )

    execution = result["execution"]
    assert execution["status"] == "FAILED"
    assert entered_states(result["history"])[:3] == [
        "Normalise Input",
        "Is Input Valid",
        "Notify Failure",
    ]
    assert "key_fingerprint must be 16 lowercase hex digits" in execution["cause"]


@pytest.mark.parametrize(
    "document",
    [
        {"dataset_id": DATASET, "generation": 2},  # not forced
        {"dataset_id": DATASET, "force": True, "generation": 2, "zones": ["lake"]},
        {
            "dataset_id": DATASET,
            "force": True,
            "generation": 2,
            "objects": [{"bucket": "b", "key": f"{DATASET}/x.parquet"}],
        },
        {"dataset_id": DATASET, "force": True, "generation": 0},
        {"dataset_id": DATASET, "force": True, "generation": "2"},
    ],
    ids=["not-forced", "one-zone", "objects", "zero", "text"],
)
def test_a_generation_is_recorded_only_by_a_complete_forced_reindex(
    flows: Workflows, document: dict[str, Any], request: pytest.FixtureRequest
) -> None:
    result = flows.execute(
        "IndexBackfillStateMachineArn", f"reindex-invalid-{request.node.callspec.id}", document
    )

    execution = result["execution"]
    assert execution["status"] == "FAILED"
    assert execution["error"] == "IndexBackfillFailed"
    assert entered_states(result["history"])[:3] == [
        "Normalise Input",
        "Is Input Valid",
        "Notify Failure",
    ]
    assert "generation must be a positive integer, given with force true" in execution["cause"]
