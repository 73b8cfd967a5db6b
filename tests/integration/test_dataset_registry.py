"""DynamoDatasetRegistry against moto: the matching generation is bumped by conditional writes,
so that concurrent PUTs cannot lose a bump, and a PUT never undoes the recorded
indexed_generation."""

from __future__ import annotations

import json
from typing import Any

import pytest
from botocore.exceptions import ClientError

from lethe_shared.datasets import registry as registry_module
from lethe_shared.datasets.document import Dataset, parse_dataset
from lethe_shared.datasets.matching import matching_fingerprint, next_generations
from lethe_shared.datasets.registry import DynamoDatasetRegistry, RegistryConflictError
from lethe_shared.datasets.reindex import pending_registrations, reindex_pending

pytestmark = pytest.mark.lambda_runtime

DOCUMENT: dict[str, Any] = {
    "dataset_id": "reviews",
    "format": "jsonl",
    "subject_columns": ["user_id"],
    "schema": [
        {"name": "user_id", "type": "string"},
        {"name": "email", "type": "string"},
        {"name": "stars", "type": "int"},
    ],
}


def _dataset(**changes: Any) -> Dataset:
    return parse_dataset({**DOCUMENT, **changes})


@pytest.fixture
def table(lethe_tables: dict[str, Any]) -> Any:
    return lethe_tables["DatasetsTable"]


class Interleaved(DynamoDatasetRegistry):
    """A registry whose next reads are each followed, before it writes, by another PUT (through
    a second registry on the same table): the race of two concurrent PUTs."""

    def __init__(self, table: Any, others: list[Dataset]) -> None:
        super().__init__(table)
        self._other = DynamoDatasetRegistry(table)
        self._others = list(others)
        self.reads = 0

    def _item(self, dataset_id: str) -> dict[str, Any] | None:
        item = super()._item(dataset_id)
        self.reads += 1
        if self._others:
            self._other.register(self._others.pop(0))
        return item


def test_the_stored_item_has_the_fingerprint_and_both_generations(table: Any) -> None:
    registry = DynamoDatasetRegistry(table)

    registered = registry.register(_dataset())
    item = table.get_item(Key={"dataset_id": "reviews"})["Item"]

    assert (registered.created, registered.generation_changed) == (True, False)
    assert item["matching_fingerprint"] == matching_fingerprint(_dataset())
    assert (item["version"], item["matching_generation"], item["indexed_generation"]) == (1, 1, 1)
    assert registry.put(_dataset(description="x")) == 2  # the Protocol's put: the version


def test_a_concurrent_put_between_read_and_write_keeps_both_bumps(table: Any) -> None:
    DynamoDatasetRegistry(table).register(_dataset())
    racing = Interleaved(table, [_dataset(subject_columns=["email"])])

    registered = racing.register(_dataset(subject_columns=["user_id", "email"]))

    # the other PUT won (generation 2); this one read again and applied on top (generation 3)
    assert racing.reads == 2
    registration = registered.registration
    assert (registration.version, registration.matching_generation) == (3, 3)
    assert registration.indexed_generation == 1
    assert registered.generation_changed
    assert registration.dataset.subject_columns == ["user_id", "email"]


def test_two_racing_puts_of_the_same_change_bump_once(table: Any) -> None:
    DynamoDatasetRegistry(table).register(_dataset())
    racing = Interleaved(table, [_dataset(subject_columns=["email"])])

    registered = racing.register(_dataset(subject_columns=["email"]))

    assert registered.registration.matching_generation == 2
    assert not registered.generation_changed  # the other PUT made the change
    assert registered.registration.version == 3


def test_the_write_is_refused_when_the_item_changed_since_it_was_read(table: Any) -> None:
    registry = DynamoDatasetRegistry(table)
    registry.register(_dataset())
    stale = table.get_item(Key={"dataset_id": "reviews"})["Item"]
    registry.register(_dataset(subject_columns=["email"]))
    generations = next_generations(None, "f")

    with pytest.raises(ClientError) as refused:
        registry._write(_dataset(), stale, generations)
    with pytest.raises(ClientError) as created_twice:
        registry._write(_dataset(), None, generations)

    assert refused.value.response["Error"]["Code"] == "ConditionalCheckFailedException"
    assert created_twice.value.response["Error"]["Code"] == "ConditionalCheckFailedException"


def test_endless_contention_gives_up_without_writing(
    table: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    DynamoDatasetRegistry(table).register(_dataset())
    monkeypatch.setattr(registry_module, "REGISTER_ATTEMPTS", 3)
    others = [_dataset(description=str(n)) for n in range(3)]
    racing = Interleaved(table, others)

    with pytest.raises(RegistryConflictError, match="3 concurrent requests"):
        racing.register(_dataset(subject_columns=["email"]))

    stored = DynamoDatasetRegistry(table).require_registration("reviews")
    assert stored.dataset.subject_columns == ["user_id"]
    assert stored.matching_generation == 1


def test_a_put_never_undoes_the_recorded_indexed_generation(table: Any) -> None:
    registry = DynamoDatasetRegistry(table)
    registry.register(_dataset())
    registry.register(_dataset(subject_columns=["email"]))  # generation 2, indexed 1

    class RecordsWhileReading(DynamoDatasetRegistry):
        def _item(self, dataset_id: str) -> dict[str, Any] | None:
            item = super()._item(dataset_id)
            table.update_item(  # the backfill's record lands between this PUT's read and write
                Key={"dataset_id": dataset_id},
                UpdateExpression="SET indexed_generation = :g",
                ConditionExpression="matching_generation = :g",
                ExpressionAttributeValues={":g": 2},
            )
            return item

    registered = RecordsWhileReading(table).register(
        _dataset(subject_columns=["email"], description="only text")
    )

    assert registered.registration.indexed_generation == 2
    assert reindex_pending(registry, ["reviews"]) == []


def test_reindex_pending_reads_the_registry(table: Any) -> None:
    registry = DynamoDatasetRegistry(table)
    registry.register(_dataset())
    registry.register(parse_dataset({**DOCUMENT, "dataset_id": "other"}))
    registry.register(_dataset(subject_columns=["email"]))

    assert reindex_pending(registry, ["other", "reviews", "unknown"]) == [("reviews", 2, 1)]
    listed = {r.dataset.dataset_id: r.matching_generation for r in registry.registrations()}
    assert listed == {"reviews": 2, "other": 1}


# ------------------------------------------------------------------ the subject hash key

OLD_KEY, NEW_KEY = "0123456789abcdef", "fedcba9876543210"  # two keys' fingerprints


def test_a_new_dataset_records_the_key_and_no_later_put_changes_it(table: Any) -> None:
    registry = DynamoDatasetRegistry(table)

    created = registry.register(_dataset(), key_fingerprint=OLD_KEY)
    same = registry.register(_dataset(), key_fingerprint=NEW_KEY)
    changed = registry.register(_dataset(subject_columns=["email"]), key_fingerprint=NEW_KEY)

    assert created.registration.indexed_key_fingerprint == OLD_KEY
    for registered in (same, changed):
        assert registered.registration.indexed_key_fingerprint == OLD_KEY
        assert registered.registration.key_reindex_pending(NEW_KEY)
    assert table.get_item(Key={"dataset_id": "reviews"})["Item"]["indexed_key_fingerprint"] == (
        OLD_KEY
    )
    assert not created.registration.key_reindex_pending(OLD_KEY)
    assert created.registration.summary(OLD_KEY)["key_reindex_pending"] is False
    assert changed.registration.summary(NEW_KEY) | {"version": 0} == {
        "version": 0,
        "generation": 2,
        "indexed_generation": 1,
        "matching_fingerprint": changed.registration.matching_fingerprint,
        "indexed_key_fingerprint": OLD_KEY,
        "key_fingerprint": NEW_KEY,
        "key_reindex_pending": True,
    }


def test_a_dataset_without_a_recorded_key_is_pending_for_every_key(table: Any) -> None:
    registry = DynamoDatasetRegistry(table)
    registry.register(_dataset())  # no key given: unknown
    table.put_item(
        Item={"dataset_id": "old", "document": json.dumps({**DOCUMENT, "dataset_id": "old"})}
    )
    registry.register(parse_dataset({**DOCUMENT, "dataset_id": "keyed"}), key_fingerprint=NEW_KEY)

    pending = pending_registrations(registry, ["keyed", "old", "reviews", "ghost"], NEW_KEY)

    assert [r.dataset.dataset_id for r in pending] == ["old", "reviews"]
    assert [r.indexed_key_fingerprint for r in pending] == ["", ""]
    assert "indexed_key_fingerprint" not in table.get_item(Key={"dataset_id": "reviews"})["Item"]
    # without a key to compare, only generations count (none of these moved)
    assert pending_registrations(registry, ["keyed", "old", "reviews"]) == []
    assert reindex_pending(registry, ["keyed", "old", "reviews"]) == []


def test_the_backfill_s_record_clears_a_key_reindex(table: Any) -> None:
    registry = DynamoDatasetRegistry(table)
    registry.register(_dataset(), key_fingerprint=OLD_KEY)
    # "Record Indexed Generation" of a re-index started with the new key, as DynamoDB applies it
    table.update_item(
        Key={"dataset_id": "reviews"},
        UpdateExpression="SET indexed_generation = :g, indexed_key_fingerprint = :k",
        ConditionExpression="matching_generation = :g",
        ExpressionAttributeValues={":g": 1, ":k": NEW_KEY},
    )

    assert pending_registrations(registry, ["reviews"], NEW_KEY) == []
    assert [
        r.dataset.dataset_id for r in pending_registrations(registry, ["reviews"], OLD_KEY)
    ] == ["reviews"]
    # a later PUT keeps what the backfill recorded
    assert registry.register(
        _dataset(), key_fingerprint=OLD_KEY
    ).registration.indexed_key_fingerprint == (NEW_KEY)
