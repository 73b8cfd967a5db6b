"""Object catalog items and sequencer ordering."""

from __future__ import annotations

import pytest

from lethe_shared.catalog.ingestion_steps import (
    MAX_ERROR_LENGTH,
    BatchObject,
    Outcome,
    VersionOutcome,
    mark_failed,
    mark_ingesting,
    read_outcome,
)
from lethe_shared.catalog.object_catalog import (
    CatalogItem,
    ObjectStatus,
    Zone,
    latest,
    normalize_sequencer,
)
from tests.fakes import MemoryCatalog

pytestmark = pytest.mark.lambda_runtime


@pytest.mark.parametrize(
    ("earlier", "later"),
    [
        ("0062E99A88DC407460", "0062E99A88DC407470"),
        ("FF", "0100"),  # shorter but numerically smaller: compare by value, not by text
        ("9", "0A"),
        ("0055aed6dcd90281e5", "0055AED6DCD90281E6"),  # case does not matter
    ],
)
def test_normalized_sequencers_order_by_value(earlier: str, later: str) -> None:
    assert normalize_sequencer(earlier) < normalize_sequencer(later)


def test_equal_values_normalize_equal() -> None:
    assert normalize_sequencer("00ff") == normalize_sequencer("FF")


@pytest.mark.parametrize("bad", ["", "xyz", "12G4", "1" * 33])
def test_invalid_sequencer(bad: str) -> None:
    with pytest.raises(ValueError, match="is not a hexadecimal string"):
        normalize_sequencer(bad)


def _item(
    version: str, sequencer: str, status: ObjectStatus = ObjectStatus.RECEIVED
) -> CatalogItem:
    return CatalogItem(
        bucket="raw",
        key="reviews/a.jsonl",
        version_id=version,
        zone=Zone.RAW,
        status=status,
        sequencer=normalize_sequencer(sequencer),
        dataset_id="reviews",
        etag="e",
        size=3,
    )


def test_item_round_trips_through_dynamodb_shape() -> None:
    item = _item("v1", "0A")

    stored = item.to_item()

    assert stored["object_url"] == "s3://raw/reviews/a.jsonl"
    assert stored["sequencer"] == "0" * 30 + "0A"
    assert CatalogItem.from_item(stored) == item


def test_item_without_dataset_has_no_dataset_attribute() -> None:
    item = CatalogItem(
        bucket="raw",
        key="x/y",
        zone=Zone.RAW,
        status=ObjectStatus.IGNORED,
        sequencer=normalize_sequencer("1"),
        expires_at=1_800_000_000,
    )

    stored = item.to_item()

    assert "dataset_id" not in stored  # keeps the by_dataset index sparse
    assert stored["version_id"] == "null"
    assert stored["expires_at"] == 1_800_000_000


def test_latest_is_the_greatest_sequencer() -> None:
    items = [_item("v2", "10"), _item("v3", "0F", ObjectStatus.DELETED), _item("v1", "2")]

    newest = latest(items)

    assert newest is not None
    assert newest.version_id == "v2"
    assert latest([]) is None


def test_an_ingested_item_parses_with_its_counts() -> None:
    stored = {
        **_item("v1", "0A").to_item(),
        "status": "INGESTED",
        "rows_read": 4,
        "rows_written": 3,
        "rows_quarantined": 1,
        "lake_objects": ["s3://lake/reviews/review_date=2026-11-22/part-1.parquet"],
    }

    item = CatalogItem.from_item(stored)

    assert item.status is ObjectStatus.INGESTED
    assert (item.rows_read, item.rows_written, item.rows_quarantined) == (4, 3, 1)


# ------------------------------------------------------- the ingestion workflow's catalog steps


def _catalogued(catalog: MemoryCatalog, version: str, status: ObjectStatus) -> BatchObject:
    catalog.put_if_newer(
        CatalogItem(
            bucket="raw",
            key="reviews/a.csv",
            version_id=version,
            zone=Zone.RAW,
            status=status,
            sequencer=normalize_sequencer("10"),
            dataset_id="reviews",
        )
    )
    return BatchObject(object_url="s3://raw/reviews/a.csv", version_id=version)


def test_the_steps_mark_a_batch_ingesting_then_failed_and_keep_recorded_outcomes() -> None:
    catalog = MemoryCatalog()
    batch = [
        _catalogued(catalog, "v1", ObjectStatus.RECEIVED),
        _catalogued(catalog, "v2", ObjectStatus.DELETED),
        BatchObject(object_url="s3://raw/reviews/a.csv", version_id="never-catalogued"),
    ]

    assert mark_ingesting(catalog, batch, "arn:execution") == 1
    assert mark_failed(catalog, batch, "E: " + "x" * 5000) == 1

    failed = catalog.get("raw", "reviews/a.csv", "v1")
    assert failed is not None
    assert failed.status is ObjectStatus.FAILED
    assert failed.ingest_error == ("E: " + "x" * 5000)[:MAX_ERROR_LENGTH]
    assert read_outcome(catalog, batch[0]).outcome is Outcome.FAILED
    assert read_outcome(catalog, batch[1]).outcome is Outcome.GONE
    assert read_outcome(catalog, batch[2]) == VersionOutcome(outcome=Outcome.GONE)


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        (ObjectStatus.INGESTED, Outcome.RECORDED),
        (ObjectStatus.QUARANTINED, Outcome.RECORDED),
        (ObjectStatus.SUPERSEDED, Outcome.RECORDED),
        (ObjectStatus.FAILED, Outcome.FAILED),
        (ObjectStatus.DELETED, Outcome.GONE),
        (ObjectStatus.INGESTING, Outcome.MISSING),
        (ObjectStatus.RECEIVED, Outcome.MISSING),
    ],
)
def test_each_recorded_status_has_one_outcome(status: ObjectStatus, outcome: Outcome) -> None:
    catalog = MemoryCatalog()
    version = _catalogued(catalog, "v1", status)

    assert read_outcome(catalog, version).outcome is outcome
