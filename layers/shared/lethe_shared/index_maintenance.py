"""Keeping the subject index current as objects are created and deleted (docs/INDEX.md).

Ingestion indexes what it writes itself (its lake objects carry `lethe-producer: ingest`).
Everything else that lands in the lake under a dataset is indexed here: objects up to
`max_lambda_bytes` by the indexer Lambda, larger ones by the Spark index job (the index
backfill state machine in "objects" mode). Deletes:

- a delete marker hides the key but its data stays in older versions until erased or expired:
  the key's entries are flagged `deleted` (lookups hide them, erasure still finds them);
- a permanent delete that leaves no version of the key removes the key's entries;
- a permanent delete of the current version that leaves older ones re-indexes the key (its
  entries must describe the version that is now current), or flags it when that is a marker.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from lethe_shared.catalog import CatalogItem, Zone
from lethe_shared.datasets import is_quarantine_key
from lethe_shared.subjects import SubjectIndex

PRODUCER_METADATA = "lethe-producer"  # S3 user metadata (x-amz-meta-lethe-producer)
INGEST_PRODUCER = "ingest"


class IndexAction(StrEnum):
    LAMBDA = "index-requested-lambda"
    SPARK = "index-requested-spark"
    INDEXED_BY_INGEST = "indexed-by-ingest"
    GONE = "object-gone"
    FLAGGED = "entries-flagged-deleted"
    REMOVED = "entries-removed"


class IndexRequester(Protocol):
    def by_lambda(self, request: dict[str, str]) -> None: ...

    def by_spark(self, name: str, request: dict[str, Any]) -> None: ...


def index_execution_name(item: CatalogItem) -> str:
    digest = hashlib.sha256(f"{item.object_url}#{item.version_id}".encode()).hexdigest()[:32]
    return f"{(item.dataset_id or 'object')[:40]}-index-{digest}"


@dataclass
class IndexMaintainer:
    index: SubjectIndex
    s3: Any  # boto3 S3 client
    requester: IndexRequester
    max_lambda_bytes: int

    def on_created(self, item: CatalogItem) -> IndexAction | None:
        """A lake object under a dataset appeared: index it unless ingestion already did."""
        if item.zone is not Zone.LAKE or item.dataset_id is None:
            return None  # raw objects are indexed by their ingestion
        head = self._head(item.bucket, item.key, item.version_id)
        if head is None:
            return IndexAction.GONE
        if head.get("Metadata", {}).get(PRODUCER_METADATA) == INGEST_PRODUCER:
            return IndexAction.INDEXED_BY_INGEST
        return self._request(item, int(head["ContentLength"]))

    def on_deleted(self, item: CatalogItem) -> IndexAction | None:
        if item.dataset_id is None:
            return None
        if item.delete_marker:
            self.index.flag_deleted(item.object_url)
            return IndexAction.FLAGGED
        current = self._current_version(item.bucket, item.key)
        if current is None:
            self.index.remove_object(item.object_url)
            return IndexAction.REMOVED
        if current.get("IsDeleteMarker"):
            self.index.flag_deleted(item.object_url)
            return IndexAction.FLAGGED
        older = item.model_copy(update={"version_id": current["VersionId"]})
        size = int(current.get("Size", self.max_lambda_bytes + 1))
        if item.zone is Zone.RAW:  # raw formats are parsed by the Spark readers
            return self._request(older, self.max_lambda_bytes + 1)
        return self._request(older, size)

    def _request(self, item: CatalogItem, size: int) -> IndexAction:
        if size <= self.max_lambda_bytes and not is_quarantine_key(item.key):
            self.requester.by_lambda(
                {
                    "dataset_id": item.dataset_id or "",
                    "bucket": item.bucket,
                    "key": item.key,
                    "version_id": item.version_id,
                }
            )
            return IndexAction.LAMBDA
        self.requester.by_spark(
            index_execution_name(item),
            {"dataset_id": item.dataset_id, "objects": [{"bucket": item.bucket, "key": item.key}]},
        )
        return IndexAction.SPARK

    def _head(self, bucket: str, key: str, version_id: str) -> dict[str, Any] | None:
        kwargs = {"Bucket": bucket, "Key": key}
        if version_id != "null":
            kwargs["VersionId"] = version_id
        try:
            return dict(self.s3.head_object(**kwargs))
        except self.s3.exceptions.ClientError as error:
            if error.response.get("Error", {}).get("Code") in {"404", "NoSuchKey", "NoSuchVersion"}:
                return None
            raise

    def _current_version(self, bucket: str, key: str) -> dict[str, Any] | None:
        """The key's current version or delete marker (IsLatest), None when nothing is left.
        Lists by prefix and keeps the exact key only: never another key sharing the prefix."""
        kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": key}
        while True:
            page = self.s3.list_object_versions(**kwargs)
            entries = [(v, False) for v in page.get("Versions", [])] + [
                (m, True) for m in page.get("DeleteMarkers", [])
            ]
            for entry, is_marker in entries:
                if entry["Key"] == key and entry.get("IsLatest"):
                    return {**entry, "IsDeleteMarker": is_marker}
            if not page.get("IsTruncated"):
                return None
            kwargs["KeyMarker"] = page.get("NextKeyMarker")
            kwargs["VersionIdMarker"] = page.get("NextVersionIdMarker")


@dataclass(frozen=True)
class AwsIndexRequester:
    """Asynchronous Lambda invocation, or a Step Functions execution named per object version
    (a repeated request for the same version is answered with the same execution)."""

    lambda_client: Any
    function_name: str
    sfn_client: Any
    backfill_state_machine_arn: str

    def by_lambda(self, request: dict[str, str]) -> None:
        self.lambda_client.invoke(
            FunctionName=self.function_name,
            InvocationType="Event",
            Payload=json.dumps(request).encode(),
        )

    def by_spark(self, name: str, request: dict[str, Any]) -> None:
        # ExecutionAlreadyExists: this version's indexing already ran.
        with contextlib.suppress(self.sfn_client.exceptions.ExecutionAlreadyExists):
            self.sfn_client.start_execution(
                stateMachineArn=self.backfill_state_machine_arn,
                name=name,
                input=json.dumps(request, sort_keys=True),
            )
