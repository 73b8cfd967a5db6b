"""ObjectEventsFunction on SQS batches, with in-memory ports: per-record failures, and one
ingestion execution per group of collected raw versions.

The batch is events/object_events_batch.json (the `sam local invoke` sample): two versions of
one `reviews` key, an `orders` object, a lake object, an upload outside any dataset, and a
record whose body is not JSON.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from datetime import timedelta
from types import ModuleType
from typing import Any

import pytest
from botocore.exceptions import ClientError

from lethe_shared.catalog.object_catalog import Buckets, CatalogItem, ObjectStatus
from lethe_shared.catalog.writes_ledger import Writer
from lethe_shared.datasets.document import parse_dataset
from lethe_shared.errors import MalformedEventError
from lethe_shared.index.maintenance import IndexAction
from lethe_shared.ingestion import starter as ingestion
from lethe_shared.ingestion.starter import IngestionGroup, StartOutcome
from tests.conftest import FakeLambdaContext, load_function_module
from tests.fakes import MemoryCatalog, MemoryObjectStore, MemoryRegistry, MemoryWritesLedger

pytestmark = pytest.mark.lambda_runtime

RAW = "lethe-local-raw-123456789012-us-east-1"
LAKE = "lethe-local-lake-123456789012-us-east-1"
REPORTS = "lethe-local-reports-123456789012-us-east-1"
V1, V2 = "3HL4kqtJlcpXroDTDmJ.rmSpXd3dIbrHY", "8kJ2mN4pQ6rS8tU0vW2xY4zA6bC8dE0f"
ORDERS_VERSION = "Qz9yX8wV7uT6sR5qP4oN3mL2kJ1iH0gF"
LAKE_KEY = "reviews/review_date=2026-11-22/part-00000-3f2a.parquet"
Loader = Callable[[str], dict[str, Any]]


def _dataset(dataset_id: str) -> Any:
    return parse_dataset(
        {
            "dataset_id": dataset_id,
            "format": "jsonl",
            "subject_columns": ["user_id"],
            "schema": [{"name": "user_id", "type": "string"}],
        }
    )


class FakeStarter:
    """Step Functions by name: a name starts once; a group holding a version in `failing`
    raises as boto3 does after its retries."""

    def __init__(self, failing: set[str] | None = None) -> None:
        self.failing = failing or set()
        self.started: list[IngestionGroup] = []
        self.refused: list[str] = []

    def start(self, group: IngestionGroup) -> StartOutcome:
        if any(item.version_id in self.failing for item in group.items):
            raise ClientError(
                {"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}},
                "StartExecution",
            )
        if group.name in {g.name for g in self.started}:
            self.refused.append(group.name)
            return StartOutcome.ALREADY_STARTED
        self.started.append(group)
        return StartOutcome.STARTED


class RecordingIndex:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def on_created(self, item: CatalogItem) -> IndexAction | None:
        self.calls.append(("created", item.key))
        return IndexAction.LAMBDA

    def on_deleted(self, item: CatalogItem) -> IndexAction | None:
        self.calls.append(("deleted", item.key))
        return IndexAction.FLAGGED


class World:
    def __init__(self, app: ModuleType, starter: FakeStarter) -> None:
        self.app = app
        self.catalog = MemoryCatalog()
        self.index = RecordingIndex()
        self.starter = starter
        self.objects = MemoryObjectStore()
        self.ledger = MemoryWritesLedger()
        self.deps = app._Dependencies(
            buckets=Buckets(raw=RAW, lake=LAKE),
            registry=MemoryRegistry(_dataset("reviews"), _dataset("orders")),
            catalog=self.catalog,
            starter=starter,
            index=self.index,
            objects=self.objects,
            ledger=self.ledger,
            ignored_retention=timedelta(days=30),
            reports_bucket=REPORTS,
        )

    def handle(self, event: dict[str, Any]) -> dict[str, Any]:
        # S3 sends Object Created once the version exists: the store has every one named.
        for record in event.get("Records", []):
            try:
                body = json.loads(record["body"])
                detail = body["detail"]
                if body["detail-type"] == "Object Created":
                    self.objects.put_version(
                        detail["bucket"]["name"],
                        detail["object"]["key"],
                        detail["object"].get("version-id") or "null",
                    )
            except (ValueError, KeyError, TypeError):
                continue  # a malformed record: the handler says so
        result: dict[str, Any] = self.app.handler(event, FakeLambdaContext())
        return result


# Loaded at collection: the X-Ray SDK Powertools' Tracer imports opens a UDP socket, which the
# unit tier blocks inside tests.
_APP = load_function_module("object_events")


@pytest.fixture
def app(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setattr(_APP.metrics, "namespace", "Lethe")
    return _APP


@pytest.fixture
def world(app: ModuleType, monkeypatch: pytest.MonkeyPatch) -> World:
    world = World(app, FakeStarter())
    monkeypatch.setattr(app, "_dependencies", lambda: world.deps)
    return world


@pytest.fixture
def batch(load_event: Loader) -> dict[str, Any]:
    return load_event("object_events_batch.json")


def _ids(event: dict[str, Any]) -> list[str]:
    return [record["messageId"] for record in event["Records"]]


def _failed(result: dict[str, Any]) -> list[str]:
    return [f["itemIdentifier"] for f in result["batchItemFailures"]]


def _record(body: dict[str, Any] | str, message_id: str) -> dict[str, Any]:
    text = body if isinstance(body, str) else json.dumps(body)
    return {
        "messageId": message_id,
        "receiptHandle": f"handle-{message_id}",
        "body": text,
        "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1795341601000"},
        "messageAttributes": {},
        "md5OfBody": hashlib.md5(text.encode()).hexdigest(),
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:lethe-local-object-events",
        "awsRegion": "us-east-1",
    }


def test_a_batch_records_every_good_record_and_fails_only_the_malformed_one(
    world: World, batch: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    ids = _ids(batch)

    result = world.handle(batch)

    assert _failed(result) == [ids[5]]
    statuses = sorted((i.key, i.version_id, i.status) for i in world.catalog.items.values())
    assert statuses == [
        ("orders/2026/11/22/orders-001.csv", ORDERS_VERSION, ObjectStatus.RECEIVED),
        ("reviews/2026/11/22/reviews-001.jsonl", V1, ObjectStatus.RECEIVED),
        ("reviews/2026/11/22/reviews-001.jsonl", V2, ObjectStatus.RECEIVED),
        (LAKE_KEY, "Vw3bM1nQ8kLp0sR5tU7xZ2aC4dE6fG9h", ObjectStatus.STORED),
        ("scratch/notes.txt", "k9pJq5r2Z8mV0bT3xY1wA6cD4eF7gH2i", ObjectStatus.IGNORED),
    ]
    assert world.index.calls == [("created", LAKE_KEY)]
    (error,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert error.getMessage().startswith("malformed object event")
    assert error.reason.startswith("the record body is not JSON")  # type: ignore[attr-defined]
    assert error.message_id == ids[5]  # type: ignore[attr-defined]


def test_the_raw_versions_of_a_batch_start_one_execution_of_every_dataset_and_version(
    world: World, batch: dict[str, Any]
) -> None:
    ids = _ids(batch)

    world.handle(batch)

    (group,) = world.starter.started
    assert [(i.dataset_id, i.key, i.version_id) for i in group.items] == [
        ("orders", "orders/2026/11/22/orders-001.csv", ORDERS_VERSION),
        ("reviews", "reviews/2026/11/22/reviews-001.jsonl", V1),
        ("reviews", "reviews/2026/11/22/reviews-001.jsonl", V2),
    ]  # both versions of the key: the ingest job supersedes the older one
    assert group.record_ids == {ids[0], ids[1], ids[2]}
    assert group.name.startswith("batch-")  # two datasets
    assert group.execution_input(REPORTS)["manifest"] == (
        f"s3://{REPORTS}/manifests/ingest/{group.name}.json"
    )


def test_the_same_batch_delivered_twice_starts_one_execution(
    world: World, batch: dict[str, Any]
) -> None:
    first = world.handle(batch)
    second = world.handle(batch)

    assert _failed(first) == _failed(second) == [_ids(batch)[5]]
    assert len(world.starter.started) == 1
    assert world.starter.refused == [world.starter.started[0].name]


def test_a_group_that_cannot_start_fails_exactly_the_records_that_asked_for_it(
    world: World, batch: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ingestion, "MAX_BATCH_OBJECTS", 2)  # groups: [orders, v1], [v2]
    world.starter.failing = {V2}
    ids = _ids(batch)

    result = world.handle(batch)

    assert _failed(result) == [ids[1], ids[5]]  # the v2 record and the malformed one
    (started,) = world.starter.started
    assert [i.version_id for i in started.items] == [ORDERS_VERSION, V1]
    # the v2 version stays RECEIVED, so its redelivery asks again and starts it
    world.starter.failing = set()
    redelivered = {"Records": [batch["Records"][1]]}
    assert world.handle(redelivered) == {"batchItemFailures": []}
    assert [i.version_id for i in world.starter.started[1].items] == [V2]


def test_a_record_that_fails_on_a_dependency_is_retried_and_its_version_not_started(
    world: World, batch: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    put = world.catalog.put_if_newer

    def flaky(item: CatalogItem) -> bool:
        if item.dataset_id == "orders":
            raise ClientError(
                {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow"}},
                "UpdateItem",
            )
        return put(item)

    monkeypatch.setattr(world.catalog, "put_if_newer", flaky)
    ids = _ids(batch)

    result = world.handle(batch)

    assert _failed(result) == [ids[2], ids[5]]
    (group,) = world.starter.started
    assert {i.dataset_id for i in group.items} == {"reviews"}
    assert group.name.startswith("reviews-batch-")


def test_a_batch_of_only_bad_records_reports_each_and_starts_nothing(world: World) -> None:
    event = {
        "Records": [_record("not json", "m1"), _record({"detail-type": "Object Created"}, "m2")]
    }

    result = world.handle(event)

    assert _failed(result) == ["m1", "m2"]
    assert world.starter.started == []
    assert world.catalog.items == {}


def test_deletes_and_lake_objects_keep_their_index_maintenance(
    world: World, load_event: Loader
) -> None:
    created = json.loads(load_event("object_created_raw.json")["Records"][0]["body"])
    deleted = json.loads(load_event("object_deleted_raw.json")["Records"][0]["body"])
    lake = json.loads(load_event("object_created_lake.json")["Records"][0]["body"])
    event = {"Records": [_record(deleted, "d"), _record(created, "c"), _record(lake, "l")]}

    result = world.handle(event)

    assert result == {"batchItemFailures": []}
    # the delete came first (sequencer order decides): the version is DELETED, not ingested
    raw_item = world.catalog.get(RAW, "reviews/2026/11/22/reviews-001.jsonl", V1)
    assert raw_item is not None
    assert raw_item.status is ObjectStatus.DELETED
    assert world.starter.started == []
    assert world.index.calls == [
        ("deleted", "reviews/2026/11/22/reviews-001.jsonl"),
        ("created", LAKE_KEY),
    ]


def test_an_event_that_is_not_an_sqs_batch_is_refused(world: World, load_event: Loader) -> None:
    eventbridge_event = json.loads(load_event("object_created_raw.json")["Records"][0]["body"])

    with pytest.raises(MalformedEventError, match=r"^not an SQS event \(no Records list"):
        world.handle(eventbridge_event)
    assert world.catalog.items == {}


def test_a_record_whose_writer_is_not_settled_waits_a_moment_then_is_redelivered(
    world: World,
    load_event: Loader,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # the erase job opened its intent and PUT the version; its event is read before its record
    created = json.loads(load_event("object_created_raw.json")["Records"][0]["body"])
    key = created["detail"]["object"]["key"]
    token = world.ledger.writer(Writer.ERASE, "erasure-er-1").intend(RAW, key, 10)
    pauses: list[float] = []
    monkeypatch.setattr(world.app.time, "sleep", pauses.append)
    event = {"Records": [_record(created, "c")]}

    first = world.handle(event)

    assert _failed(first) == ["c"]  # SQS delivers it again
    assert sum(pauses) == pytest.approx(world.app.SETTLE_WAIT_SECONDS)  # looked again meanwhile
    assert world.catalog.items == {}
    assert world.starter.started == []
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]  # not an error
    # the job records its version; the redelivered record finds it: REWRITTEN, not ingested
    world.ledger.writer(Writer.ERASE, "erasure-er-1").written(RAW, key, token, V1)

    assert world.handle(event) == {"batchItemFailures": []}
    (item,) = world.catalog.items.values()
    assert (item.version_id, item.status) == (V1, ObjectStatus.REWRITTEN)
    assert world.starter.started == []


def test_a_writer_that_records_during_the_batchs_wait_settles_the_record_at_once(
    world: World, load_event: Loader, monkeypatch: pytest.MonkeyPatch
) -> None:
    created = json.loads(load_event("object_created_raw.json")["Records"][0]["body"])
    key = created["detail"]["object"]["key"]
    writes = world.ledger.writer(Writer.ERASE, "erasure-er-1")
    token = writes.intend(RAW, key, 10)
    monkeypatch.setattr(
        world.app.time, "sleep", lambda _: writes.written(RAW, key, token, V1)
    )  # the job's record lands during the first pause

    assert world.handle({"Records": [_record(created, "c")]}) == {"batchItemFailures": []}
    (item,) = world.catalog.items.values()
    assert item.status is ObjectStatus.REWRITTEN
