"""The dataset registry: which datasets exist, what their documents say, and which matching
generation the subject index has been built for (matching.py).

Table `DatasetsTable`, one item per dataset, keyed by `dataset_id` (HASH):

- `document`: the validated JSON document as a string (nested fields keep their exact types);
- `version`: 1 when registered, one more at each PUT; `updated_at`: ISO time of the last PUT;
- `matching_fingerprint`: `matching.matching_fingerprint` of the document;
- `matching_generation`: 1 when registered, one more each time a PUT changes the fingerprint;
- `indexed_generation`: the generation the subject index was built for. The matching generation
  when the dataset is registered (no data yet); after a change, set by the index backfill state
  machine when a forced backfill of that generation succeeds while it is still the current one
  (statemachines/index_backfill.asl.json, "Record Indexed Generation", which also writes
  `indexed_at` and `indexed_execution`);
- `indexed_key_fingerprint`: `subject_hashing.keys.key_fingerprint` of the subject hash key the
  index of the dataset was last completely built with. The current key's when the dataset is
  registered (no data yet); after a rotation of the key, set by the same last step of a forced
  re-index, with the fingerprint of the key captured before its index jobs started (the
  re-index's input `key_fingerprint`: a rotation during the re-index leaves the old one). An
  item without it (written before Lethe recorded it) is *unknown*: a key re-index is pending
  until the dataset is re-indexed once (`lethe datasets reindex --all`).

The table also holds legal holds (lethe_shared.datasets.holds, their owner), items without a
`document` keyed `hold#<id>`: `list` and `registrations` skip them.

A PUT is a read and a write conditional on the version it read (`register`): two concurrent
PUTs cannot both write from the same state, so neither loses the other's generation bump; the
loser reads again and applies its document on top. A PUT never writes `indexed_generation` or
`indexed_key_fingerprint` of an existing item, so it cannot undo the backfill's record. Items
written before generations existed (no `matching_generation`) are read as generation 1,
indexed: the fingerprint of their stored document, as if registered with it (a definition
changed before the upgrade was never tracked; `lethe datasets reindex` re-indexes such a
dataset, and must anyway, once, for its unknown key).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from botocore.exceptions import ClientError

from lethe_shared.aws.dynamo import scan_all
from lethe_shared.aws.errors import is_condition_failed
from lethe_shared.datasets.document import Dataset, parse_dataset
from lethe_shared.datasets.matching import Generations, matching_fingerprint, next_generations
from lethe_shared.errors import DatasetNotFoundError, LetheError

REGISTER_ATTEMPTS = 8  # reads and conditional writes per PUT before it gives up (contention)


class DatasetRegistry(Protocol):
    def get(self, dataset_id: str) -> Dataset | None: ...

    def put(self, dataset: Dataset) -> int:
        """Store the document; returns its new version (1 when the dataset is new)."""

    def list(self) -> Iterator[Dataset]: ...


@dataclass(frozen=True)
class Registration:
    """A registered dataset with its version and matching generations, read in one item (so
    the document is the one the generations describe)."""

    dataset: Dataset
    version: int
    generations: Generations
    indexed_key_fingerprint: str = ""  # "": unknown (an item from before it was recorded)

    @property
    def matching_generation(self) -> int:
        return self.generations.matching

    @property
    def indexed_generation(self) -> int:
        return self.generations.indexed

    @property
    def matching_fingerprint(self) -> str:
        return self.generations.fingerprint

    @property
    def reindex_pending(self) -> bool:
        return self.generations.reindex_pending

    def key_reindex_pending(self, key_fingerprint: str) -> bool:
        """The index was not (or not known to be) built with the key of `key_fingerprint`:
        its `indexed_key_fingerprint` differs, or is unknown (an item from before it was
        recorded)."""
        return not self.indexed_key_fingerprint or self.indexed_key_fingerprint != key_fingerprint

    def summary(self, key_fingerprint: str | None = None) -> dict[str, Any]:
        """The registry's fields besides the document, as the API answers them; with the
        current key's fingerprint, also it and whether a key re-index is pending."""
        found: dict[str, Any] = {
            "version": self.version,
            "generation": self.matching_generation,
            "indexed_generation": self.indexed_generation,
            "matching_fingerprint": self.matching_fingerprint,
            "indexed_key_fingerprint": self.indexed_key_fingerprint or None,
        }
        if key_fingerprint is not None:
            found["key_fingerprint"] = key_fingerprint
            found["key_reindex_pending"] = self.key_reindex_pending(key_fingerprint)
        return found


@dataclass(frozen=True)
class Registered:
    """What a PUT did: the registration it wrote, whether the dataset was new, and whether the
    matching generation moved (the document matches rows differently from the last one)."""

    registration: Registration
    created: bool
    generation_changed: bool


class Registrations(Protocol):
    """Where a dataset's generations are read (DynamoDatasetRegistry; a fake in tests)."""

    def registration(self, dataset_id: str) -> Registration | None: ...


class RegistryConflictError(LetheError):
    """Concurrent PUTs of one dataset kept winning over this one: nothing was written."""


def require_dataset(registry: DatasetRegistry, dataset_id: str) -> Dataset:
    """The dataset, or DatasetNotFoundError."""
    dataset = registry.get(dataset_id)
    if dataset is None:
        raise DatasetNotFoundError(f"dataset {dataset_id!r} is not registered")
    return dataset


def dataset_of_key(key: str) -> str | None:
    """The dataset id a key belongs to by layout (`<dataset_id>/...`), before any lookup."""
    head, sep, rest = key.partition("/")
    return head if sep and head and rest else None


def registration_of_item(item: dict[str, Any]) -> Registration:
    """A DatasetsTable item as a Registration (an item from before generations: generation 1,
    indexed, with the fingerprint of its document)."""
    dataset = parse_dataset(json.loads(item["document"]))
    if "matching_generation" in item:
        matching = int(item["matching_generation"])
        generations = Generations(
            fingerprint=str(item.get("matching_fingerprint", "")),  # none: the next PUT bumps
            matching=matching,
            indexed=int(item.get("indexed_generation", 0)),  # none recorded: not indexed
        )
    else:
        generations = Generations(matching_fingerprint(dataset), 1, 1)
    return Registration(
        dataset,
        int(item.get("version", 0)),
        generations,
        indexed_key_fingerprint=str(item.get("indexed_key_fingerprint", "")),
    )


class DynamoDatasetRegistry:
    def __init__(self, table: Any) -> None:
        self._table = table  # a boto3 dynamodb Table resource

    def _item(self, dataset_id: str) -> dict[str, Any] | None:
        item = self._table.get_item(Key={"dataset_id": dataset_id}, ConsistentRead=True).get("Item")
        return dict(item) if item and "document" in item else None  # a hold's item is no dataset

    def get(self, dataset_id: str) -> Dataset | None:
        item = self._item(dataset_id)
        return parse_dataset(json.loads(item["document"])) if item else None

    def require(self, dataset_id: str) -> Dataset:
        return require_dataset(self, dataset_id)

    def registration(self, dataset_id: str) -> Registration | None:
        """The dataset with its version and generations (a consistent read of one item)."""
        item = self._item(dataset_id)
        return registration_of_item(item) if item else None

    def require_registration(self, dataset_id: str) -> Registration:
        found = self.registration(dataset_id)
        if found is None:
            raise DatasetNotFoundError(f"dataset {dataset_id!r} is not registered")
        return found

    def put(self, dataset: Dataset) -> int:
        return self.register(dataset).registration.version

    def register(self, dataset: Dataset, key_fingerprint: str | None = None) -> Registered:
        """Store the document, bumping the matching generation when its fingerprint changed.
        A new dataset is recorded as indexed with the key of `key_fingerprint` (the current
        key's; None: unknown, so a key re-index is pending); an existing one keeps its own.
        Raises RegistryConflictError when concurrent PUTs won every attempt."""
        fingerprint = matching_fingerprint(dataset)
        for _ in range(REGISTER_ATTEMPTS):
            item = self._item(dataset.dataset_id)
            previous = registration_of_item(item) if item else None
            generations = next_generations(previous.generations if previous else None, fingerprint)
            try:
                written = self._write(dataset, item, generations, key_fingerprint)
            except ClientError as exc:
                if not is_condition_failed(exc):
                    raise
                continue  # another PUT (or a first registration) came between: read again
            registration = registration_of_item(written)
            return Registered(
                registration=registration,
                created=item is None,
                generation_changed=previous is not None
                and generations.matching != previous.matching_generation,
            )
        raise RegistryConflictError(
            f"dataset {dataset.dataset_id!r} was changed by {REGISTER_ATTEMPTS} concurrent "
            "requests while this one was applied; nothing was written, try again"
        )

    def _write(
        self,
        dataset: Dataset,
        item: dict[str, Any] | None,
        generations: Generations,
        key_fingerprint: str | None = None,
    ) -> dict[str, Any]:
        """One conditional UpdateItem: the item must still be the one read (its version; for an
        item from before versions, still without one; for a new dataset, still absent)."""
        names = {
            "#doc": "document",
            "#v": "version",
            "#fp": "matching_fingerprint",
            "#mg": "matching_generation",
            "#ig": "indexed_generation",
        }
        values: dict[str, Any] = {
            ":doc": json.dumps(dataset.document(), sort_keys=True),
            ":now": datetime.now(UTC).isoformat(),
            ":fp": generations.fingerprint,
            ":mg": generations.matching,
            ":ig": generations.indexed,  # only where the item has none: new, or from before
        }
        update = (
            "SET #doc = :doc, updated_at = :now, #v = :next, #fp = :fp, #mg = :mg, "
            "#ig = if_not_exists(#ig, :ig)"
        )
        if item is None:
            condition = "attribute_not_exists(dataset_id)"
            values[":next"] = 1
            if key_fingerprint:  # a new dataset holds no data: indexed with the current key
                names["#kf"] = "indexed_key_fingerprint"
                values[":kf"] = key_fingerprint
                update += ", #kf = :kf"
        elif "version" in item:
            condition = "#v = :read"
            values[":read"] = item["version"]
            values[":next"] = int(item["version"]) + 1
        else:
            condition = "attribute_exists(dataset_id) AND attribute_not_exists(#v)"
            values[":next"] = 1
        result = self._table.update_item(
            Key={"dataset_id": dataset.dataset_id},
            UpdateExpression=update,
            ConditionExpression=condition,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
            ReturnValues="ALL_NEW",
        )
        return dict(result["Attributes"])

    def list(self) -> Iterator[Dataset]:
        for item in scan_all(self._table):
            if "document" in item:  # not a legal hold's item (lethe_shared.datasets.holds)
                yield parse_dataset(json.loads(item["document"]))

    def registrations(self) -> Iterator[Registration]:
        """Every dataset with its version and generations (eventually consistent)."""
        for item in scan_all(self._table):
            if "document" in item:  # not a legal hold's item (lethe_shared.datasets.holds)
                yield registration_of_item(item)
