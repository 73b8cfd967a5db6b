"""IngestionStepsFunction against moto DynamoDB, driven by the events in events/: the ingestion
workflow's catalog transitions (INGESTING, then FAILED for a failed batch) and the outcome read,
each through DynamoObjectCatalog, with the conditions the workflow relies on (a DELETED or
uncatalogued version is not marked; an outcome the job recorded is not overwritten)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from lethe_shared.catalog.object_catalog import (
    CatalogItem,
    DynamoObjectCatalog,
    IngestionRecord,
    ObjectStatus,
    Zone,
    normalize_sequencer,
)
from tests.conftest import FakeLambdaContext, load_function_module
from tests.integration.conftest import RAW

pytestmark = pytest.mark.lambda_runtime

Event = Callable[[str], dict[str, Any]]
REVIEWS = ("reviews/2026/11/22/reviews-001.jsonl", "3HL4kqtJlcpXroDTDmJ.rmSpXd3dIbrHY")
ORDERS = ("orders/2026/11/22/orders-001.csv", "Wq3.gSXYp8Dq8Y1XkLzV9Ht0cJbYQh7r")


@pytest.fixture
def catalog(lethe_tables: dict[str, Any]) -> DynamoObjectCatalog:
    return DynamoObjectCatalog(lethe_tables["ObjectCatalogTable"])


@pytest.fixture
def app(catalog: DynamoObjectCatalog, handler_env: Callable[[str], None]) -> Any:
    handler_env("IngestionStepsFunction")
    return load_function_module("ingestion_steps")


def received(catalog: DynamoObjectCatalog, key: str, version: str, status: ObjectStatus) -> None:
    catalog.put_if_newer(
        CatalogItem(
            bucket=RAW,
            key=key,
            version_id=version,
            zone=Zone.RAW,
            status=status,
            sequencer=normalize_sequencer("10"),
            dataset_id=key.split("/", maxsplit=1)[0],
        )
    )


def status(catalog: DynamoObjectCatalog, key: str, version: str) -> ObjectStatus | None:
    item = catalog.get(RAW, key, version)
    return item.status if item else None


def test_mark_ingesting_marks_each_catalogued_version_by_the_execution(
    app: Any, catalog: DynamoObjectCatalog, load_event: Event, lethe_tables: dict[str, Any]
) -> None:
    received(catalog, *REVIEWS, ObjectStatus.RECEIVED)
    received(catalog, *ORDERS, ObjectStatus.FAILED)  # a re-run of a FAILED version
    event = load_event("ingestion_steps_mark_ingesting.json")

    result = app.handler(event, FakeLambdaContext())

    assert result == {"marked": 2}
    assert status(catalog, *REVIEWS) == status(catalog, *ORDERS) == ObjectStatus.INGESTING
    item = lethe_tables["ObjectCatalogTable"].get_item(
        Key={"object_url": f"s3://{RAW}/{REVIEWS[0]}", "version_id": REVIEWS[1]}
    )["Item"]
    assert item["ingest_execution"] == event["execution"]
    # a retry of the step marks them again, with the same result
    assert app.handler(event, FakeLambdaContext()) == {"marked": 2}


def test_mark_ingesting_leaves_deleted_and_uncatalogued_versions(
    app: Any, catalog: DynamoObjectCatalog, load_event: Event
) -> None:
    received(catalog, *REVIEWS, ObjectStatus.DELETED)  # ORDERS: never catalogued

    result = app.handler(load_event("ingestion_steps_mark_ingesting.json"), FakeLambdaContext())

    assert result == {"marked": 0}
    assert status(catalog, *REVIEWS) is ObjectStatus.DELETED
    assert status(catalog, *ORDERS) is None  # no item made up for it


def test_mark_failed_fails_only_versions_still_ingesting(
    app: Any, catalog: DynamoObjectCatalog, load_event: Event
) -> None:
    received(catalog, *REVIEWS, ObjectStatus.RECEIVED)
    received(catalog, *ORDERS, ObjectStatus.RECEIVED)
    app.handler(load_event("ingestion_steps_mark_ingesting.json"), FakeLambdaContext())
    record = IngestionRecord(
        ObjectStatus.INGESTED, 3, 3, 0, [], None, "ingest-1", datetime(2026, 11, 22, tzinfo=UTC)
    )
    catalog.record_ingestion(f"s3://{RAW}/{ORDERS[0]}", ORDERS[1], record)  # the job got there
    event = load_event("ingestion_steps_mark_failed.json")

    result = app.handler(event, FakeLambdaContext())

    assert result == {"failed": 1}
    failed = catalog.get(RAW, *REVIEWS)
    assert failed is not None
    assert (failed.status, failed.ingest_error) == (ObjectStatus.FAILED, event["error"])
    assert status(catalog, *ORDERS) is ObjectStatus.INGESTED  # its outcome stays


@pytest.mark.parametrize(
    ("stored", "expected"),
    [
        (ObjectStatus.INGESTED, {"outcome": "recorded", "status": "INGESTED", "rows_read": 3,
                                 "rows_written": 3, "rows_quarantined": 0}),
        (ObjectStatus.FAILED, {"outcome": "failed", "status": "FAILED",
                               "ingest_error": "dataset 'reviews' is not registered"}),
        (ObjectStatus.DELETED, {"outcome": "gone", "status": "DELETED"}),
        (ObjectStatus.INGESTING, {"outcome": "missing", "status": "INGESTING"}),
        (None, {"outcome": "gone"}),
    ],
)  # fmt: skip
def test_read_outcome_says_what_the_job_recorded(
    app: Any,
    catalog: DynamoObjectCatalog,
    load_event: Event,
    stored: ObjectStatus | None,
    expected: dict[str, Any],
) -> None:
    url = f"s3://{RAW}/{REVIEWS[0]}"
    if stored is not None:
        received(catalog, *REVIEWS, ObjectStatus.RECEIVED)
        catalog.start_ingestion(url, REVIEWS[1], "arn:execution")
    if stored is ObjectStatus.INGESTED:
        record = IngestionRecord(stored, 3, 3, 0, [], None, "ingest-1", datetime.now(UTC))
        catalog.record_ingestion(url, REVIEWS[1], record)
    elif stored is ObjectStatus.FAILED:
        catalog.record_failure(
            url, REVIEWS[1], "dataset 'reviews' is not registered", "ingest-1", datetime.now(UTC)
        )
    elif stored is ObjectStatus.DELETED:
        catalog.record_gone(url, REVIEWS[1], "ingest-1")

    result = app.handler(load_event("ingestion_steps_read_outcome.json"), FakeLambdaContext())

    assert result == expected


def test_a_step_without_its_objects_is_refused(app: Any) -> None:
    with pytest.raises(ValueError, match="objects"):
        app.handler(
            {"step": "mark_failed", "execution": "arn:x", "objects": [], "error": "e"},
            FakeLambdaContext(),
        )
