"""ObjectEventsFunction against moto (DynamoDB, S3, Step Functions), driven by the event files in
events/: SQS batches whose records carry EventBridge S3 events."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest

from lethe_shared.aws.s3 import ObjectHead, S3ObjectStore
from lethe_shared.catalog.writes_ledger import DynamoWritesLedger, Writer
from lethe_shared.errors import ConfigurationError, MalformedEventError
from tests.conftest import EVENTS_DIR, REPO_ROOT, FakeLambdaContext, load_function_module

pytestmark = pytest.mark.lambda_runtime

Event = Callable[[str], dict[str, Any]]
RAW = "lethe-local-raw-123456789012-us-east-1"
LAKE = "lethe-local-lake-123456789012-us-east-1"
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


# -- written by Lethe: the writes ledger alone decides, never metadata -------------------------
# (lethe_shared.catalog.writes_ledger; the ledger's own contract: tests/integration/
# test_writes_ledger.py)

BODY = b'{"user_id": "gone"}\n{"user_id": "stay"}\n'
KEY = "reviews/2026/11/22/reviews-009.jsonl"
COPY = "reviews/2026/11/23/copy-of-reviews-009.jsonl"


def _created(
    bucket: str, key: str, version: str, sequencer: str, at: datetime | None = None
) -> dict[str, Any]:
    """An SQS batch of one EventBridge Object Created event, as S3 sends it."""
    body = {
        "version": "0",
        "id": f"evt-{sequencer}",
        "detail-type": "Object Created",
        "source": "aws.s3",
        "account": "123456789012",
        "time": (at or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": "us-east-1",
        "resources": [f"arn:aws:s3:::{bucket}"],
        "detail": {
            "version": "0",
            "bucket": {"name": bucket},
            "object": {
                "key": key,
                "size": 40,
                "etag": "b1946ac92492d2347c6235b4d2611184",
                "version-id": version,
                "sequencer": sequencer,
            },
            "request-id": "R1",
            "requester": "123456789012",
            "source-ip-address": "10.0.0.1",
            "reason": "PutObject",
        },
    }
    text = json.dumps(body)
    return {
        "Records": [
            {
                "messageId": f"m-{sequencer}",
                "receiptHandle": f"h-{sequencer}",
                "body": text,
                "attributes": {
                    "ApproximateReceiveCount": "1",
                    "SentTimestamp": "1795341601000",
                    "SenderId": "AIDA",
                    "ApproximateFirstReceiveTimestamp": "1795341601000",
                },
                "messageAttributes": {},
                "md5OfBody": "0",
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:lethe-local-object-events",
                "awsRegion": "us-east-1",
            }
        ]
    }


def _status(tables: dict[str, Any], key: str, version: str) -> str | None:
    item = tables["ObjectCatalogTable"].get_item(
        Key={"object_url": f"s3://{RAW}/{key}", "version_id": version}, ConsistentRead=True
    )
    return None if "Item" not in item else str(item["Item"]["status"])


def _ingested_versions() -> set[tuple[str, str]]:
    return {(o["key"], o["version_id"]) for e in _executions() for o in e["input"]["objects"]}


def _erase_with_ledger(s3: Any, tables: dict[str, Any], key: str, tmp_path: Path) -> str:
    """The erase job's own rewrite of `key`, as erase_core writes it: the conditional write of
    a store that records in the ledger (erase_core's tasks build theirs so;
    tests/integration/test_erase_object.py runs erase_object itself), with erasure's metadata.
    The version it wrote."""
    current = s3.head_object(Bucket=RAW, Key=key)
    erased = tmp_path / "erased"
    erased.write_bytes(b'{"user_id": "stay"}\n')
    writes = DynamoWritesLedger(tables["ObjectCatalogTable"]).writer(
        Writer.ERASE, "erasure-er-ledger-1"
    )
    written = S3ObjectStore(s3, writes=writes).replace_version(
        RAW,
        key,
        erased,
        like_version=current["VersionId"],
        if_match=current["ETag"].strip('"'),
        metadata={"lethe-producer": "erase", "lethe-erasure": "er-ledger-1"},
    )
    assert written is not None
    return written.version_id


def test_lethes_erase_rewrite_is_rewritten_and_a_copy_of_it_under_a_new_key_is_ingested(
    app: Any, lethe_tables: dict[str, Any], lambda_context: FakeLambdaContext, tmp_path: Path
) -> None:
    s3 = boto3.client("s3")
    s3.put_object(Bucket=RAW, Key=KEY, Body=BODY)
    erased = _erase_with_ledger(s3, lethe_tables, KEY, tmp_path)
    # a producer copies the erased object: CopyObject copies its metadata by default
    copy = str(
        s3.copy_object(Bucket=RAW, Key=COPY, CopySource={"Bucket": RAW, "Key": KEY})["VersionId"]
    )
    metadata = s3.head_object(Bucket=RAW, Key=COPY)["Metadata"]
    assert metadata["lethe-producer"] == "erase"
    assert metadata["lethe-erasure"] == "er-ledger-1"

    ours = app.handler(_created(RAW, KEY, erased, "A1"), lambda_context)
    theirs = app.handler(_created(RAW, COPY, copy, "A2"), lambda_context)

    assert ours == theirs == {"batchItemFailures": []}
    assert _status(lethe_tables, KEY, erased) == "REWRITTEN"
    assert _status(lethe_tables, COPY, copy) == "RECEIVED"
    assert _ingested_versions() == {(COPY, copy)}


def test_a_producers_raw_upload_claiming_to_be_ingestions_is_ingested(
    app: Any, lethe_tables: dict[str, Any], lambda_context: FakeLambdaContext
) -> None:
    s3 = boto3.client("s3")
    version = str(
        s3.put_object(Bucket=RAW, Key=KEY, Body=BODY, Metadata={"lethe-producer": "ingest"})[
            "VersionId"
        ]
    )

    assert app.handler(_created(RAW, KEY, version, "B1"), lambda_context) == {
        "batchItemFailures": []
    }
    assert _status(lethe_tables, KEY, version) == "RECEIVED"
    assert _ingested_versions() == {(KEY, version)}


def test_an_event_before_the_writers_record_is_redelivered_then_skipped(
    app: Any,
    lethe_tables: dict[str, Any],
    lambda_context: FakeLambdaContext,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(app, "SETTLE_WAIT_SECONDS", 0.0)  # no look again within the batch
    s3 = boto3.client("s3")
    writes = DynamoWritesLedger(lethe_tables["ObjectCatalogTable"]).writer(
        Writer.ERASE, "erasure-er-2"
    )
    token = writes.intend(RAW, KEY, len(BODY))  # the erase job's intent, then its PUT
    version = str(
        s3.put_object(Bucket=RAW, Key=KEY, Body=BODY, Metadata={"lethe-producer": "erase"})[
            "VersionId"
        ]
    )
    event = _created(RAW, KEY, version, "C1")

    first = app.handler(event, lambda_context)

    assert first == {"batchItemFailures": [{"itemIdentifier": "m-C1"}]}  # SQS redelivers it
    assert _status(lethe_tables, KEY, version) is None  # nothing written yet
    writes.written(RAW, KEY, token, version)  # the PUT returned: the job records it

    assert app.handler(event, lambda_context) == {"batchItemFailures": []}
    assert _status(lethe_tables, KEY, version) == "REWRITTEN"
    assert _executions() == []


def test_an_event_held_by_an_expired_intent_is_ingested(
    app: Any, lethe_tables: dict[str, Any], lambda_context: FakeLambdaContext
) -> None:
    s3 = boto3.client("s3")
    long_ago = datetime.now(UTC) - timedelta(hours=1)
    dead = DynamoWritesLedger(lethe_tables["ObjectCatalogTable"], lambda: long_ago)
    dead.writer(Writer.ERASE, "erasure-er-3").intend(RAW, KEY, 10)  # never resolved
    version = str(
        s3.put_object(Bucket=RAW, Key=KEY, Body=BODY, Metadata={"lethe-producer": "erase"})[
            "VersionId"
        ]
    )

    result = app.handler(_created(RAW, KEY, version, "D1", at=long_ago), lambda_context)

    assert result == {"batchItemFailures": []}
    assert _status(lethe_tables, KEY, version) == "RECEIVED"
    assert _ingested_versions() == {(KEY, version)}


def test_a_copy_of_an_ingested_lake_file_is_sent_to_the_indexer(
    app: Any, lethe_tables: dict[str, Any], lambda_context: FakeLambdaContext
) -> None:
    s3 = boto3.client("s3")
    lake_key = "reviews/review_date=2026-11-22/part-0123456789abcdef.parquet"
    copy_key = "reviews/review_date=2026-11-23/part-copied.parquet"
    writes = DynamoWritesLedger(lethe_tables["ObjectCatalogTable"]).writer(Writer.INGEST, "exec-1")
    store = S3ObjectStore(s3, writes=writes)  # the ingest job's task store
    ours = store.put_bytes(
        LAKE, lake_key, b"PAR1", content_type="x",
        metadata={"lethe-producer": "ingest", "lethe-correlation-id": "exec-1"},
    )  # fmt: skip
    copy = str(
        s3.copy_object(Bucket=LAKE, Key=copy_key, CopySource={"Bucket": LAKE, "Key": lake_key})[
            "VersionId"
        ]
    )
    invoked: list[dict[str, Any]] = []
    app._dependencies().index.requester.lambda_client.invoke = lambda **kw: invoked.append(kw)

    first = app.handler(_created(LAKE, lake_key, ours.version_id, "E1"), lambda_context)
    second = app.handler(_created(LAKE, copy_key, copy, "E2"), lambda_context)

    assert first == second == {"batchItemFailures": []}
    assert [json.loads(c["Payload"])["key"] for c in invoked] == [copy_key]
