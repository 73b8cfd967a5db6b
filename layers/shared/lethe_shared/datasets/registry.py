"""The dataset registry: which datasets exist and what their documents say.

Table `DatasetsTable`: `dataset_id` (HASH) and `document` (the validated JSON document as a
string, so that nested fields keep their exact types), plus `updated_at` and `version`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, Protocol

from lethe_shared.aws.dynamo import scan_all
from lethe_shared.datasets.document import Dataset, parse_dataset
from lethe_shared.errors import DatasetNotFoundError


class DatasetRegistry(Protocol):
    def get(self, dataset_id: str) -> Dataset | None: ...

    def put(self, dataset: Dataset) -> int:
        """Store the document; returns its new version (1 when the dataset is new)."""

    def list(self) -> Iterator[Dataset]: ...


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


class DynamoDatasetRegistry:
    def __init__(self, table: Any) -> None:
        self._table = table  # a boto3 dynamodb Table resource

    def get(self, dataset_id: str) -> Dataset | None:
        item = self._table.get_item(Key={"dataset_id": dataset_id}, ConsistentRead=True).get("Item")
        return parse_dataset(json.loads(item["document"])) if item else None

    def require(self, dataset_id: str) -> Dataset:
        return require_dataset(self, dataset_id)

    def put(self, dataset: Dataset) -> int:
        result = self._table.update_item(
            Key={"dataset_id": dataset.dataset_id},
            UpdateExpression="SET #doc = :doc, updated_at = :now ADD version :one",
            ExpressionAttributeNames={"#doc": "document"},
            ExpressionAttributeValues={
                ":doc": json.dumps(dataset.document(), sort_keys=True),
                ":now": datetime.now(UTC).isoformat(),
                ":one": 1,
            },
            ReturnValues="UPDATED_NEW",
        )
        return int(result["Attributes"]["version"])

    def list(self) -> Iterator[Dataset]:
        for item in scan_all(self._table):
            yield parse_dataset(json.loads(item["document"]))
