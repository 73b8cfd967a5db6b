"""Keeping the subject index current as objects are created and deleted (docs/INDEX.md).

Ingestion and erasure index what they write themselves; the writes ledger
(lethe_shared.catalog.writes_ledger) records which object versions they wrote, and
`indexed_by_writer` over its answer is the one rule that skips them. The `lethe-producer`
metadata those jobs still write decides nothing: a copy of their objects, with that metadata,
under any key, is indexed like any other object.
Everything else that lands in the lake under a dataset is indexed here: objects up to
`max_lambda_bytes` by the indexer Lambda, larger ones by the Spark index job (the index
backfill state machine in "objects" mode). Deletes:

- a delete marker hides the key but its data stays in older versions until erased or expired:
  the key's entries are flagged `deleted` (lookups hide them, erasure still finds them);
- a permanent delete that leaves no version holding data removes the key's entries;
- a permanent delete that leaves a current version re-indexes the key when the index does not
  describe that version yet (the deleted version was the current one), and prunes the entries
  flagged `deleted` once no older version is left that could hold their rows.
The Spark index job settles a key without a current version with the same function
(`settle_missing_key`), so both paths apply one rule.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from lethe_shared.aws.executions import execution_name, version_digest
from lethe_shared.aws.s3 import KeyState, ObjectHead, ObjectStore, ObjectVersion, key_state, s3_url
from lethe_shared.catalog.object_catalog import CatalogItem, Zone
from lethe_shared.catalog.writes_ledger import Writer, WritesLedger, event_time
from lethe_shared.datasets.document import is_quarantine_key
from lethe_shared.datasets.registry import dataset_of_key
from lethe_shared.index.counted_entries import CountedEntries
from lethe_shared.index.subject_index import EntryBatch, IndexEntry, SubjectIndex

INGEST_PRODUCER = Writer.INGEST.value  # lake objects the ingest job wrote (and indexed)
ERASE_PRODUCER = Writer.ERASE.value  # object versions an erasure rewrote (it updates the index)
SELF_INDEXING_PRODUCERS = frozenset({INGEST_PRODUCER, ERASE_PRODUCER})


class IndexAction(StrEnum):
    LAMBDA = "index-requested-lambda"
    SPARK = "index-requested-spark"
    INDEXED_BY_WRITER = "indexed-by-writer"  # ingestion or erasure wrote it, and indexed it
    GONE = "object-gone"
    FLAGGED = "entries-flagged-deleted"
    REMOVED = "entries-removed"
    PRUNED = "flagged-entries-pruned"  # the last older version went: its entries go too
    UNCHANGED = "index-unchanged"


def indexed_by_writer(
    writer: str | None, producers: frozenset[str] = SELF_INDEXING_PRODUCERS
) -> bool:
    """The one "written by a Lethe job, skip" rule: an object version that the writes ledger
    says a job wrote (`writer`, `WritesLedger.writer_of`) which maintains the index for what it
    writes (ingestion, erasure) is not indexed by anything else. Never the version's metadata.
    The Spark index job passes no producers to re-index every object whatever wrote it (a
    forced backfill)."""
    return writer is not None and writer in producers


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


def has_older_data(versions: Sequence[ObjectVersion]) -> bool:
    """Whether a key keeps a version holding data besides its current one."""
    return any(not v.is_latest and not v.delete_marker for v in versions)


def replace_entries(
    index: SubjectIndex,
    objects: ObjectStore,
    bucket: str,
    key: str,
    entries: Sequence[IndexEntry],
) -> int:
    """Make `entries` the object's current entries (`SubjectIndex.replace_object`), and when
    that flagged entries of subjects the current version no longer holds while no older
    version is left to hold them, remove those. Returns how many entries were flagged or
    removed."""
    url = s3_url(bucket, key)
    flagged = index.replace_object(url, entries)
    if flagged and not has_older_data(objects.versions_of(bucket, key)):
        index.prune_flagged(url)
    return flagged


@runtime_checkable
class ObjectsReplacer(Protocol):
    """A store that writes the entries of many objects at once (SegmentSubjectIndex: ONE
    level-0 segment for all of them)."""

    def replace_objects(
        self, batches: Sequence[tuple[str, Sequence[IndexEntry]]]
    ) -> dict[str, int]: ...


def replace_many(
    index: SubjectIndex,
    objects: ObjectStore,
    writes: Sequence[tuple[str, str, Sequence[IndexEntry]]],
) -> dict[str, int]:
    """`replace_entries` of many objects, (bucket, key, entries) each. A store that writes many
    objects at once (`ObjectsReplacer`) gets ONE write per dataset (a segment holds one
    dataset's objects: one segment, no write per object); any other store one
    `replace_object` per object. Flagged entries no older version holds are pruned per object,
    as replace_entries does. Returns, per object URL, how many entries the write flagged."""
    if not writes:
        return {}
    if not isinstance(index, ObjectsReplacer):
        return {s3_url(b, k): replace_entries(index, objects, b, k, e) for b, k, e in writes}
    by_dataset: dict[str | None, list[tuple[str, Sequence[IndexEntry]]]] = {}
    for bucket, key, entries in writes:
        # entries as columns stay columns: the store writes them without a model per entry
        held = entries if isinstance(entries, EntryBatch | CountedEntries) else list(entries)
        by_dataset.setdefault(dataset_of_key(key), []).append((s3_url(bucket, key), held))
    flagged: dict[str, int] = {}
    for group in by_dataset.values():
        flagged.update(index.replace_objects(group))
    for bucket, key, _ in writes:
        url = s3_url(bucket, key)
        if flagged.get(url) and not has_older_data(objects.versions_of(bucket, key)):
            index.prune_flagged(url)
    return flagged


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
    ledger: WritesLedger

    def on_created(self, item: CatalogItem) -> IndexAction | None:
        """A lake object under a dataset appeared: index it unless the writes ledger says the
        job that wrote it (ingestion, erasure) indexed it. Raises WriteNotSettledError while a
        job that may have written it has not recorded it yet (the event is read again)."""
        if item.zone is not Zone.LAKE or item.dataset_id is None:
            return None  # raw objects are indexed by their ingestion
        head = self.objects.head(item.bucket, item.key, item.version_id)
        if head is None:
            return IndexAction.GONE
        writer = self.ledger.settled_writer_of(
            item.bucket, item.key, head.version_id, created_at=event_time(item.event_time)
        )
        if indexed_by_writer(writer):
            return IndexAction.INDEXED_BY_WRITER
        return self._request(item, head.size)

    def on_deleted(self, item: CatalogItem) -> IndexAction | None:
        """A version or the key was deleted: settle a key without a current version
        (settle_missing_key); otherwise re-index the current version unless the index already
        describes it (or the job that wrote it indexed it), and prune the flagged entries once
        no older version is left to hold them."""
        if item.dataset_id is None:
            return None
        versions = self.objects.versions_of(item.bucket, item.key)
        if key_state(versions) is not KeyState.CURRENT:
            return settle_missing_key(self.index, item.object_url, versions)[0]
        action = IndexAction.UNCHANGED
        if not has_older_data(versions) and self.index.prune_flagged(item.object_url):
            action = IndexAction.PRUNED
        head = self.objects.head(item.bucket, item.key)
        if head is None or self._indexed_by_writer(item, head):
            return action
        if head.version_id in self.index.described_versions(item.object_url):
            return action
        now_current = item.model_copy(update={"version_id": head.version_id})
        if item.zone is Zone.RAW:  # raw formats are parsed by the Spark readers
            return self._request(now_current, self.max_lambda_bytes + 1)
        return self._request(now_current, head.size)

    def _indexed_by_writer(self, item: CatalogItem, head: ObjectHead) -> bool:
        """Whether the ledger says a self-indexing job wrote the key's current version (which
        has its own Object Created event: a writer not recorded yet is not waited for here)."""
        return indexed_by_writer(self.ledger.writer_of(item.bucket, item.key, head.version_id))

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
