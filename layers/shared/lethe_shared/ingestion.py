"""Starting ingestion for a raw object version, exactly once per version.

The execution name is derived from the object version, so a retried or duplicated start is
refused by Step Functions (ExecutionAlreadyExists) instead of ingesting twice.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from lethe_shared.catalog import CatalogItem
from lethe_shared.executions import execution_name, version_digest


def ingestion_execution_name(item: CatalogItem) -> str:
    """`<dataset>-<hash of object url and version>`: one execution per raw object version."""
    return execution_name(
        item.dataset_id or "object", version_digest(item.object_url, item.version_id, 40)
    )


def ingestion_input(item: CatalogItem) -> dict[str, Any]:
    return {
        "dataset_id": item.dataset_id,
        "bucket": item.bucket,
        "key": item.key,
        "version_id": item.version_id,
        "object_url": item.object_url,
    }


class IngestionStarter(Protocol):
    def start(self, item: CatalogItem) -> bool:
        """Ask for `item` to be ingested. True when its execution is running or was started now
        (Step Functions answers a repeated start of a running execution with that execution);
        False when this version's ingestion already finished."""


class StepFunctionsIngestionStarter:
    def __init__(self, client: Any, state_machine_arn: str) -> None:
        self._client = client  # a boto3 stepfunctions client
        self._arn = state_machine_arn

    def start(self, item: CatalogItem) -> bool:
        try:
            self._client.start_execution(
                stateMachineArn=self._arn,
                name=ingestion_execution_name(item),
                input=json.dumps(ingestion_input(item), sort_keys=True),
            )
        except self._client.exceptions.ExecutionAlreadyExists:
            return False
        return True
