"""Keyed hashing of subject ids: canonical forms, composite keys, and the index entry."""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
from decimal import Decimal
from typing import Any

import pytest

from lethe_shared.catalog.object_catalog import Zone
from lethe_shared.index.subject_index import MAX_ROW_HINTS, EntryBatch, IndexEntry, entry_items
from lethe_shared.subject_hashing.canonical import canonical_text, composite_text
from lethe_shared.subject_hashing.keys import (
    hash_of_id,
    hash_of_keys,
    key_from_secret,
    subject_hash,
)

pytestmark = pytest.mark.lambda_runtime

KEY = b"k" * 32


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("u-1001", "u-1001"),
        ("", ""),  # the empty string is an id, not a missing value
        (" padded ", " padded "),
        (0, "0"),
        (1001, "1001"),
        (True, "true"),
        (False, "false"),
        (dt.date(2026, 11, 22), "2026-11-22"),
        (Decimal("12.50"), "12.5"),
        (Decimal("1E+2"), "100"),
        (Decimal("-0.0"), "0"),
    ],
)
def test_canonical_text(value: Any, text: str) -> None:
    assert canonical_text(value) == text


@pytest.mark.parametrize("value", [None, 1.5, dt.datetime(2026, 1, 1), [1]])
def test_values_that_are_no_subject_ids(value: Any) -> None:
    with pytest.raises(TypeError):
        canonical_text(value)


def test_the_hash_is_hmac_sha256_of_the_canonical_text() -> None:
    expected = hmac.new(KEY, b"u-1001", hashlib.sha256).hexdigest()

    assert subject_hash(KEY, ["user_id"], ["u-1001"]) == expected
    assert hash_of_id(KEY, "u-1001") == expected


def test_an_integer_column_matches_the_id_given_as_text() -> None:
    assert subject_hash(KEY, ["user_id"], [1001]) == hash_of_id(KEY, "1001")


def test_zero_and_empty_string_are_distinct_subjects() -> None:
    assert hash_of_id(KEY, "0") != hash_of_id(KEY, "")


def test_a_different_key_gives_a_different_hash() -> None:
    assert hash_of_id(KEY, "u-1001") != hash_of_id(b"j" * 32, "u-1001")


def test_composite_keys_name_their_columns_and_keep_their_order() -> None:
    assert composite_text(["tenant", "user_id"], ["acme", 1001]) == (
        '[["tenant","acme"],["user_id","1001"]]'
    )
    by_keys = hash_of_keys(KEY, ["tenant", "user_id"], {"user_id": "1001", "tenant": "acme"})
    assert by_keys == subject_hash(KEY, ["tenant", "user_id"], ["acme", 1001])
    assert by_keys != hash_of_id(KEY, "acme")


def test_composite_lookup_needs_every_column() -> None:
    with pytest.raises(ValueError, match="subject_keys lacks user_id"):
        hash_of_keys(KEY, ["tenant", "user_id"], {"tenant": "acme"})


def test_short_keys_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 32 bytes"):
        subject_hash(b"short", ["id"], ["x"])
    with pytest.raises(ValueError, match="at least 32 bytes"):
        key_from_secret("short")


def test_index_entry_keeps_a_bounded_number_of_hints() -> None:
    entry = IndexEntry(
        subject_hash=hash_of_id(KEY, "u-1"),
        object_url="s3://lake/reviews/p.parquet",
        dataset_id="reviews",
        zone=Zone.LAKE,
        format="parquet",
        rows=100,
        row_hints=tuple(range(100)),
    )

    item = entry.to_item()

    assert len(item["row_hints"]) == MAX_ROW_HINTS
    assert item["hints_complete"] is False
    assert IndexEntry.from_item(item).row_hints == tuple(range(MAX_ROW_HINTS))


def _batch(url: str = "s3://lake/reviews/p.parquet") -> EntryBatch:
    hashes = sorted(hash_of_id(KEY, f"u-{n}") for n in range(3))
    return EntryBatch(
        object_url=url,
        dataset_id="reviews",
        zone=Zone.LAKE,
        format="parquet",
        version_id="v1",
        etag='"e1"',
        subject_hashes=hashes,
        ends=[1, 1 + MAX_ROW_HINTS, 2 + 2 * MAX_ROW_HINTS],
        row_hints=list(range(2 + 2 * MAX_ROW_HINTS)),
    )


def test_entry_batch_items_are_its_entries_to_item() -> None:
    batch = _batch()

    items = batch.to_items()

    assert items == [e.to_item() for e in batch.entries()]
    assert [list(i) for i in items] == [list(e.to_item()) for e in batch.entries()]  # key order
    assert [i["rows"] for i in items] == [1, MAX_ROW_HINTS, MAX_ROW_HINTS + 1]
    assert [i["hints_complete"] for i in items] == [True, True, False]
    assert items[2]["row_hints"] == list(range(1 + MAX_ROW_HINTS, 1 + 2 * MAX_ROW_HINTS))
    assert [IndexEntry.from_item(i) for i in items[:2]] == batch.entries()[:2]  # all hints
    for entry in batch.entries():  # equal to a validated entry with the same fields
        assert entry == IndexEntry.model_validate(entry.model_dump())


def test_entry_items_of_models_and_of_a_batch() -> None:
    batch = _batch()

    assert entry_items(batch.object_url, batch) == entry_items(batch.object_url, batch.entries())
    for wrong in (batch, batch.entries()):
        with pytest.raises(ValueError, match="every entry must belong"):
            entry_items("s3://lake/reviews/other.parquet", wrong)
    with pytest.raises(ValueError, match="every entry must belong"):  # even without entries
        entry_items("s3://lake/reviews/other.parquet", EntryBatch(**_shared(batch)))
    assert entry_items("s3://lake/reviews/other.parquet", []) == ([], set())


def _shared(batch: EntryBatch) -> dict[str, Any]:
    return {
        "object_url": batch.object_url,
        "dataset_id": batch.dataset_id,
        "zone": batch.zone,
        "format": batch.format,
    }
