"""ObjectEventsFunction against moto (DynamoDB, S3, Step Functions), driven by the event files in
events/: SQS batches whose records carry EventBridge S3 events."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import boto3
import pytest

from lethe_shared.aws.s3 import ObjectHead, S3ObjectStore
from lethe_shared.errors import ConfigurationError, MalformedEventError
from tests.conftest import EVENTS_DIR, REPO_ROOT, FakeLambdaContext, load_function_module

pytestmark = pytest.mark.lambda_runtime

Event = Callable[[str], dict[str, Any]]
RAW = "lethe-local-raw-123456789012-us-east-1"
RAW_KEY = f"s3://{RAW}/reviews/2026/11/22/reviews-001.jsonl"
REPORTS = "lethe-local-reports-123456789012-us-east-1"
V1, V2 = "3HL4kqtJlcpXroDTDmJ.rmSpXd3dIbrHY", "8kJ2mN4pQ6rS8tU0vW2xY4zA6bC8dE0f"

INGESTION_ARN = "arn:aws:states:us-east-1:123456789012:stateMachine:lethe-local-ingestion"


def _created_versions() -> set[tuple[str, str, str]]:
    """(bucket, key, version id) of every well-formed raw Object Created event in events/."""
    found = set()
    for path in EVENTS_DIR.glob("object_*.json"):
        document = json.loads(path.read_text())
        for record in document.get("Records", []) if isinstance(document, dict) else []:
            try:
                body = json.loads(record["body"])
                obj = body["detail"]["object"]
                bucket = body["detail"]["bucket"]["name"]
                if body["detail-type"] == "Object Created" and bucket == RAW:
                    found.add((bucket, obj["key"], obj.get("version-id", "null")))
            except (ValueError, KeyError, TypeError, AttributeError):
                continue  # a malformed event file
    return found


@pytest.fixture
def uploaded(monkeypatch: pytest.MonkeyPatch) -> set[tuple[str, str, str]]:
    """S3 sends Object Created once the version exists, but moto cannot create a version under
    the id an event file names: a HEAD of one of those versions answers as S3 would, unless a
    test removes it from the set (deleted before its event is read)."""
    versions = _created_versions()
    original = S3ObjectStore.head

    def head(
        self: S3ObjectStore, bucket: str, key: str, version_id: str | None = None
    ) -> ObjectHead | None:
        found = original(self, bucket, key, version_id)
        if found is None and version_id and (bucket, key, version_id) in versions:
            return ObjectHead(version_id, "b1946ac92492d2347c6235b4d2611184", 1024)
        return found

    monkeypatch.setattr(S3ObjectStore, "head", head)
    return versions


@pytest.fixture
def app(
    lethe_tables: dict[str, Any],
    lethe_buckets: Callable[..., None],
    handler_env: Callable[[str], None],
    uploaded: set[tuple[str, str, str]],
) -> Any:
    handler_env("ObjectEventsFunction")
    lethe_buckets()
    boto3.client("s3").create_bucket(Bucket=REPORTS)
    boto3.client("iam").create_role(RoleName="sfn", AssumeRolePolicyDocument="{}")
    boto3.client("stepfunctions").create_state_machine(
        name="lethe-local-ingestion",
        definition=(REPO_ROOT / "statemachines" / "ingestion.asl.json").read_text(),
        roleArn="arn:aws:iam::123456789012:role/sfn",
    )
    module = load_function_module("object_events")
    for dataset_id in ("reviews", "orders"):
        document = {
            "dataset_id": dataset_id,
            "format": "jsonl",
            "subject_columns": ["user_id"],
            "schema": [{"name": "user_id", "type": "string"}],
        }
        lethe_tables["DatasetsTable"].put_item(
            Item={"dataset_id": dataset_id, "document": json.dumps(document)}
        )
    return module


def _body(event: dict[str, Any]) -> dict[str, Any]:
    """The EventBridge event of a one-record SQS batch."""
    (record,) = event["Records"]
    body: dict[str, Any] = json.loads(record["body"])
    return body


def _with_body(event: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    (record,) = event["Records"]
    return {"Records": [{**record, "body": json.dumps(body)}]}


def _executions() -> list[dict[str, Any]]:
    sfn = boto3.client("stepfunctions")
    executions: list[dict[str, Any]] = sfn.list_executions(stateMachineArn=INGESTION_ARN)[
        "executions"
    ]
    return [
        {**e, "input": json.loads(sfn.describe_execution(executionArn=e["executionArn"])["input"])}
        for e in executions
    ]


def _manifest(name: str) -> Any:
    body = boto3.client("s3").get_object(Bucket=REPORTS, Key=f"manifests/ingest/{name}.json")
    return json.loads(body["Body"].read())


def _items(tables: dict[str, Any]) -> list[dict[str, Any]]:
    return sorted(
        tables["ObjectCatalogTable"].scan()["Items"],
        key=lambda i: (i["object_url"], i["sequencer"]),
    )


def test_created_event_writes_one_catalog_item(
    app: Any, lethe_tables: dict[str, Any], load_event: Event, lambda_context: FakeLambdaContext
) -> None:
    result = app.handler(load_event("object_created_raw.json"), lambda_context)

    assert result == {"batchItemFailures": []}
    (item,) = _items(lethe_tables)
    assert (item["object_url"], item["version_id"]) == (RAW_KEY, V1)
    assert (item["status"], item["dataset_id"]) == ("RECEIVED", "reviews")
    assert item["etag"] == "b1946ac92492d2347c6235b4d2611184"
    assert item["size"] == 1024
    assert item["zone"] == "raw"
    assert item["sequencer"] == "00000000000000" + "0062E99A88DC407460"
    assert "expires_at" not in item


def test_same_event_twice_leaves_one_item(
    app: Any, lethe_tables: dict[str, Any], load_event: Event, lambda_context: FakeLambdaContext
) -> None:
    first = app.handler(load_event("object_created_raw.json"), lambda_context)
    second = app.handler(load_event("object_created_raw.json"), lambda_context)

    # The redelivery asks again (the version is still RECEIVED), and the batch of the same
    # version has the same execution name: Step Functions starts nothing new.
    assert first == second == {"batchItemFailures": []}
    assert len(_items(lethe_tables)) == 1
    (execution,) = _executions()
    assert execution["name"].startswith("reviews-batch-")
    assert execution["input"] == {
        "manifest": f"s3://{REPORTS}/manifests/ingest/{execution['name']}.json",
        "objects": [
            {
                "dataset_id": "reviews",
                "bucket": RAW,
                "key": "reviews/2026/11/22/reviews-001.jsonl",
                "version_id": V1,
                "object_url": RAW_KEY,
            }
        ],
    }
    assert _manifest(execution["name"]) == [
        {"dataset_id": "reviews", "key": "reviews/2026/11/22/reviews-001.jsonl", "version_id": V1}
    ]


def test_a_version_deleted_before_its_created_event_is_read_is_deleted_not_ingested(
    app: Any,
    lethe_tables: dict[str, Any],
    load_event: Event,
    lambda_context: FakeLambdaContext,
    uploaded: set[tuple[str, str, str]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # an erasure rewrote the object and purged this version before its event was read
    uploaded.discard((RAW, "reviews/2026/11/22/reviews-001.jsonl", V1))

    first = app.handler(load_event("object_created_raw.json"), lambda_context)
    again = app.handler(load_event("object_created_raw.json"), lambda_context)
    deleted = app.handler(load_event("object_deleted_raw.json"), lambda_context)

    assert first == again == deleted == {"batchItemFailures": []}
    (item,) = _items(lethe_tables)
    assert (item["version_id"], item["status"]) == (V1, "DELETED")
    assert item["sequencer"] > "00000000000000" + "0062E99A88DC407460"  # its delete event's
    assert _executions() == []
    gone = [r for r in caplog.records if "deleted before its event was read" in r.getMessage()]
    assert len(gone) == 2


def test_delete_arriving_before_create_wins(
    app: Any, lethe_tables: dict[str, Any], load_event: Event, lambda_context: FakeLambdaContext
) -> None:
    app.handler(load_event("object_deleted_raw.json"), lambda_context)
    late = app.handler(load_event("object_created_raw.json"), lambda_context)

    assert late == {"batchItemFailures": []}
    (item,) = _items(lethe_tables)
    assert item["status"] == "DELETED"
    assert _executions() == []  # a deleted version is not ingested


def test_delete_marker_adds_a_deleted_version(
    app: Any, lethe_tables: dict[str, Any], load_event: Event, lambda_context: FakeLambdaContext
) -> None:
    app.handler(load_event("object_created_raw.json"), lambda_context)
    app.handler(load_event("object_delete_marker_raw.json"), lambda_context)

    statuses = [(i["version_id"], i["status"], i["delete_marker"]) for i in _items(lethe_tables)]
    assert statuses == [
        ("3HL4kqtJlcpXroDTDmJ.rmSpXd3dIbrHY", "RECEIVED", False),
        ("Xq1w2E3r4T5y6U7i8O9p0AsDfGhJkLzX", "DELETED", True),
    ]


def test_outside_dataset_is_ignored_and_expires(
    app: Any, lethe_tables: dict[str, Any], load_event: Event, lambda_context: FakeLambdaContext
) -> None:
    result = app.handler(load_event("object_created_raw_outside_dataset.json"), lambda_context)

    assert result == {"batchItemFailures": []}
    (item,) = _items(lethe_tables)
    assert item["status"] == "IGNORED"
    assert "dataset_id" not in item
    assert item["expires_at"] > 0


def test_lake_object_is_stored_and_listed_by_dataset(
    app: Any, lethe_tables: dict[str, Any], load_event: Event, lambda_context: FakeLambdaContext
) -> None:
    result = app.handler(load_event("object_created_lake.json"), lambda_context)
    app.handler(load_event("object_created_raw_outside_dataset.json"), lambda_context)

    assert result == {"batchItemFailures": []}
    listed = lethe_tables["ObjectCatalogTable"].query(
        IndexName="by_dataset",
        KeyConditionExpression="dataset_id = :d",
        ExpressionAttributeValues={":d": "reviews"},
    )["Items"]
    assert [(i["zone"], i["status"]) for i in listed] == [("lake", "STORED")]


def test_malformed_event_is_reported_failed_and_writes_nothing(
    app: Any,
    lethe_tables: dict[str, Any],
    load_event: Event,
    lambda_context: FakeLambdaContext,
) -> None:
    event = load_event("object_created_malformed.json")
    records: list[logging.LogRecord] = []
    collector = logging.Handler()
    collector.emit = records.append  # type: ignore[method-assign]
    logging.getLogger("lethe").addHandler(collector)  # Powertools' logger for service "lethe"
    try:
        result = app.handler(event, lambda_context)
    finally:
        logging.getLogger("lethe").removeHandler(collector)

    assert result == {"batchItemFailures": [{"itemIdentifier": event["Records"][0]["messageId"]}]}
    assert _items(lethe_tables) == []
    (error,) = [r for r in records if r.levelno == logging.ERROR]
    assert error.getMessage().startswith("malformed object event")
    assert error.reason == "not an S3 EventBridge event: detail.object.key: Field required"


def test_not_an_sqs_event_raises_and_writes_nothing(
    app: Any, lethe_tables: dict[str, Any], load_event: Event, lambda_context: FakeLambdaContext
) -> None:
    with pytest.raises(MalformedEventError, match="not an SQS event"):
        app.handler(_body(load_event("object_created_raw.json")), lambda_context)
    assert _items(lethe_tables) == []


def test_a_batch_ingests_its_raw_versions_in_one_execution(
    app: Any, lethe_tables: dict[str, Any], load_event: Event, lambda_context: FakeLambdaContext
) -> None:
    batch = load_event("object_events_batch.json")
    ids = [r["messageId"] for r in batch["Records"]]

    result = app.handler(batch, lambda_context)
    again = app.handler(batch, lambda_context)  # SQS delivers at least once

    assert result == again == {"batchItemFailures": [{"itemIdentifier": ids[5]}]}
    assert len(_items(lethe_tables)) == 5
    (execution,) = _executions()
    name = execution["name"]
    orders_url = f"s3://{RAW}/orders/2026/11/22/orders-001.csv"
    assert name.startswith("batch-")
    assert len(name) <= 80
    assert execution["input"] == {
        "manifest": f"s3://{REPORTS}/manifests/ingest/{name}.json",
        "objects": [
            {
                "dataset_id": "orders",
                "bucket": RAW,
                "key": "orders/2026/11/22/orders-001.csv",
                "version_id": "Qz9yX8wV7uT6sR5qP4oN3mL2kJ1iH0gF",
                "object_url": orders_url,
            },
            {
                "dataset_id": "reviews",
                "bucket": RAW,
                "key": "reviews/2026/11/22/reviews-001.jsonl",
                "version_id": V1,
                "object_url": RAW_KEY,
            },
            {
                "dataset_id": "reviews",
                "bucket": RAW,
                "key": "reviews/2026/11/22/reviews-001.jsonl",
                "version_id": V2,
                "object_url": RAW_KEY,
            },
        ],
    }
    assert _manifest(name) == [
        {k: o[k] for k in ("dataset_id", "key", "version_id")}
        for o in execution["input"]["objects"]
    ]


def test_a_failed_start_reports_the_records_of_its_group(
    app: Any, lethe_tables: dict[str, Any], load_event: Event, lambda_context: FakeLambdaContext
) -> None:
    batch = load_event("object_events_batch.json")
    ids = [r["messageId"] for r in batch["Records"]]
    boto3.client("stepfunctions").delete_state_machine(stateMachineArn=INGESTION_ARN)

    result = app.handler(batch, lambda_context)

    # the three raw versions' records, and the malformed one; the others are done
    failed = [f["itemIdentifier"] for f in result["batchItemFailures"]]
    assert failed == [ids[0], ids[1], ids[2], ids[5]]
    statuses = {(i["object_url"], i["version_id"]): i["status"] for i in _items(lethe_tables)}
    assert statuses[(RAW_KEY, V1)] == statuses[(RAW_KEY, V2)] == "RECEIVED"


def test_missing_configuration_fails_at_cold_start(
    lethe_tables: dict[str, Any],
    load_event: Event,
    lambda_context: FakeLambdaContext,
) -> None:
    module = load_function_module("object_events")  # no handler_env: nothing is configured

    with pytest.raises(ConfigurationError, match="CATALOG_TABLE: Field required"):
        module.handler(load_event("object_created_raw.json"), lambda_context)


def test_a_newer_event_keeps_what_ingestion_wrote(
    app: Any, lethe_tables: dict[str, Any], load_event: Event, lambda_context: FakeLambdaContext
) -> None:
    table = lethe_tables["ObjectCatalogTable"]
    app.handler(load_event("object_created_raw.json"), lambda_context)
    key = {"object_url": RAW_KEY, "version_id": "3HL4kqtJlcpXroDTDmJ.rmSpXd3dIbrHY"}
    table.update_item(  # what the ingest job writes
        Key=key,
        UpdateExpression="SET #s = :s, rows_written = :n, lake_objects = :l",
        ExpressionAttributeNames={"#s": "status"},
        ExpressionAttributeValues={
            ":s": "INGESTED",
            ":n": 2,
            ":l": ["s3://lake/reviews/p.parquet"],
        },
    )

    app.handler(load_event("object_deleted_raw.json"), lambda_context)

    item = table.get_item(Key=key)["Item"]
    assert item["status"] == "DELETED"
    assert item["rows_written"] == 2
    assert item["lake_objects"] == ["s3://lake/reviews/p.parquet"]
    assert item["event_reason"] == "DeleteObject"
    assert "size" not in item  # a delete event carries no size: the created size is removed


def test_a_lake_object_from_elsewhere_is_sent_to_the_indexer(
    app: Any, lethe_tables: dict[str, Any], load_event: Event, lambda_context: FakeLambdaContext
) -> None:
    event = load_event("object_created_lake.json")
    body = _body(event)
    put = boto3.client("s3").put_object(
        Bucket=body["detail"]["bucket"]["name"], Key=body["detail"]["object"]["key"], Body=b"x"
    )
    body["detail"]["object"]["version-id"] = put["VersionId"]
    invoked: list[dict[str, Any]] = []
    app._dependencies().index.requester.lambda_client.invoke = lambda **kw: invoked.append(kw)

    result = app.handler(_with_body(event, body), lambda_context)

    assert result == {"batchItemFailures": []}
    (call,) = invoked
    assert call["FunctionName"] == "lethe-local-index-object"
    assert call["InvocationType"] == "Event"
    assert json.loads(call["Payload"]) == {
        "dataset_id": "reviews",
        "bucket": "lethe-local-lake-123456789012-us-east-1",
        "key": "reviews/review_date=2026-11-22/part-00000-3f2a.parquet",
        "version_id": put["VersionId"],
    }


def test_a_delete_marker_flags_the_keys_index_entries(
    app: Any, lethe_tables: dict[str, Any], load_event: Event, lambda_context: FakeLambdaContext
) -> None:
    index = lethe_tables["SubjectIndexTable"]
    entry = {"subject_hash": "a" * 64, "object_url": RAW_KEY, "dataset_id": "reviews", "rows": 1}
    index.put_item(Item=entry)
    # Given the object in S3, then hidden by a delete marker (its data stays in that version)
    bucket, key = RAW_KEY.removeprefix("s3://").split("/", 1)
    s3 = boto3.client("s3")
    s3.put_object(Bucket=bucket, Key=key, Body=b'{"user_id": "u1"}\n')
    s3.delete_object(Bucket=bucket, Key=key)
    app.handler(load_event("object_created_raw.json"), lambda_context)

    result = app.handler(load_event("object_delete_marker_raw.json"), lambda_context)

    assert result == {"batchItemFailures": []}
    stored = index.get_item(Key={"subject_hash": "a" * 64, "object_url": RAW_KEY})["Item"]
    assert stored["deleted"] is True
