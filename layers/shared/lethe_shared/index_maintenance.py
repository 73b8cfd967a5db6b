"""Keeping the subject index current as objects are created and deleted (docs/INDEX.md).

Ingestion indexes what it writes itself (its lake objects carry `lethe-producer: ingest`;
`indexed_by_writer` is the one rule that skips them).
Everything else that lands in the lake under a dataset is indexed here: objects up to
`max_lambda_bytes` by the indexer Lambda, larger ones by the Spark index job (the index
backfill state machine in "objects" mode). Deletes:

- a delete marker hides the key but its data stays in older versions until erased or expired:
  the key's entries are flagged `deleted` (lookups hide them, erasure still finds them);
- a permanent delete that leaves no version holding data removes the key's entries;
- a permanent delete that leaves a current version re-indexes the key (its entries must
  describe the version that is current now).
The Spark index job settles a key without a current version with the same function
(`settle_missing_key`), so both paths apply one rule.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from lethe_shared.catalog import CatalogItem, Zone
from lethe_shared.datasets import is_quarantine_key
from lethe_shared.executions import execution_name, version_digest
from lethe_shared.s3 import KeyState, ObjectHead, ObjectStore, ObjectVersion, key_state
from lethe_shared.subjects import SubjectIndex

INGEST_PRODUCER = "ingest"  # lake objects the ingest job wrote (and indexed)


class IndexAction(StrEnum):
    LAMBDA = "index-requested-lambda"
    SPARK = "index-requested-spark"
    INDEXED_BY_INGEST = "indexed-by-ingest"
    GONE = "object-gone"
    FLAGGED = "entries-flagged-deleted"
    REMOVED = "entries-removed"


def indexed_by_writer(head: ObjectHead, skip_producer: str | None = INGEST_PRODUCER) -> bool:
    """The one "written by a Lethe job, skip" rule: an object whose `lethe-producer` metadata
    names the job that wrote it was indexed by that job, so nothing else indexes it. The Spark
    index job passes `skip_producer=None` to backfill every object whatever wrote it."""
    return skip_producer is not None and head.producer == skip_producer


def settle_missing_key(
    index: SubjectIndex, object_url: str, versions: Sequence[ObjectVersion]
) -> tuple[IndexAction, int]:
    """A key without a current version (deleted, or hidden by a delete marker): keep its
    entries, flagged `deleted`, while older versions still hold its data (erasure needs them;
    lookups hide them); remove them when no version holds data any more (`s3.key_state`).
    `versions` are the key's (ObjectStore.versions_of). Returns what was done and to how many
    entries."""
    if key_state(versions) is KeyState.HIDDEN:
        return IndexAction.FLAGGED, index.flag_deleted(object_url)
    return IndexAction.REMOVED, index.remove_object(object_url)


class IndexRequester(Protocol):
    def by_lambda(self, request: dict[str, str]) -> None: ...

    def by_spark(self, name: str, request: dict[str, Any]) -> None: ...


def index_execution_name(item: CatalogItem) -> str:
    """One index backfill execution per object version (`<dataset>-index-<hash>`)."""
    digest = version_digest(item.object_url, item.version_id, 32)
    return execution_name(item.dataset_id or "object", f"index-{digest}")


@dataclass
class IndexMaintainer:
    index: SubjectIndex
    objects: ObjectStore
    requester: IndexRequester
    max_lambda_bytes: int

    def on_created(self, item: CatalogItem) -> IndexAction | None:
        """A lake object under a dataset appeared: index it unless ingestion already did."""
        if item.zone is not Zone.LAKE or item.dataset_id is None:
            return None  # raw objects are indexed by their ingestion
        head = self.objects.head(item.bucket, item.key, item.version_id)
        if head is None:
            return IndexAction.GONE
        if indexed_by_writer(head):
            return IndexAction.INDEXED_BY_INGEST
        return self._request(item, head.size)

    def on_deleted(self, item: CatalogItem) -> IndexAction | None:
        """A version or the key was deleted: settle a key without a current version
        (settle_missing_key), and re-index the version that is current now."""
        if item.dataset_id is None:
            return None
        versions = self.objects.versions_of(item.bucket, item.key)
        if key_state(versions) is not KeyState.CURRENT:
            return settle_missing_key(self.index, item.object_url, versions)[0]
        current = next(v for v in versions if v.is_latest)
        now_current = item.model_copy(update={"version_id": current.version_id})
        if item.zone is Zone.RAW:  # raw formats are parsed by the Spark readers
            return self._request(now_current, self.max_lambda_bytes + 1)
        return self._request(now_current, current.size)

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
