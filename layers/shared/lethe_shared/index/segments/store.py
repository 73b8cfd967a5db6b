"""Writing segments: a new level-0 segment for one object or a batch of objects, and the common
steps every writer (compaction, erasure) takes: manifest item first, as `pending`; PUT of both
files; commit.

Commit of a level-0 write:
- one object (`commit_object`): one TransactWriteItems: the item becomes `active` (on the
  condition it is still `pending` with no ETag: an erasure or the sweep may have replaced or
  removed it, then the write fails with SegmentCommitError and is to be retried), and the
  object's pointer gets `current = seq` with the version, ETag and entry count, on the
  condition that its `current` is absent or older than seq and its `floor` not above seq. When
  only the pointer's condition fails (a newer write already committed, or the object was
  removed after this write began), the item is activated alone: its rows are then older (the
  version they describe is an older one: flagged `deleted`) or dead. An out-of-order older
  writer never wins.
- many objects (`commit_objects`): one conditional pointer update per object (same
  condition), then the item becomes `active`. Until then a lookup does not read the segment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
from botocore.exceptions import ClientError

from lethe_shared.aws.errors import is_action_condition_failed, is_condition_failed
from lethe_shared.errors import LetheError
from lethe_shared.index.segments.format import (
    OBJECT_ROW_GROUP,
    OBJECTS_SCHEMA,
    ROW_GROUP_ENTRIES,
    build_segment,
    by_object,
    entries_key,
    new_seq,
    objects_key,
    to_parquet,
    writer_name,
)
from lethe_shared.index.segments.manifest import (
    ACTIVE,
    PENDING,
    Manifest,
    SegmentItem,
    now_iso,
    pointer_pk,
)
from lethe_shared.index.segments.manifest import TransactionCancelled as Cancelled
from lethe_shared.index.segments.s3_ranges import SegmentFiles


class SegmentCommitError(LetheError):
    """A segment write could not be committed: its pending item was replaced or removed
    (an erasure scrubbed it, or the sweep judged its writer dead). Write again."""


@dataclass(frozen=True)
class ObjectWrite:
    """What one object's pointer gets when its segment commits."""

    object_url: str
    version_id: str
    etag: str
    entries: int


@dataclass
class SegmentWriter:
    manifest: Manifest
    files: SegmentFiles
    row_group: int = ROW_GROUP_ENTRIES
    by_object_files: bool = False  # level 1: the by-object file too (off: INDEX_SEGMENTS.md)

    def write(
        self,
        dataset_id: str,
        level: int,
        partition: int | None,
        wide: pa.Table,
        *,
        seq: str | None = None,
        objects_only: pa.Table | None = None,
        origin_seq: str = "",
        absorbed_through: str = "",
        created_at: str | None = None,
        state: str = ACTIVE,
    ) -> SegmentItem:
        """Put the pending item, then both files; the item as it is to be once committed (its
        ETags set, in `state`: the caller commits it with `activate_action`). `seq` for a new
        level-0 write is its origin."""
        seq = seq or new_seq()
        key = entries_key(dataset_id, level, partition, seq)
        pending = SegmentItem(
            dataset_id=dataset_id,
            level=level,
            partition=partition,
            seq=seq,
            key=key,
            objects_key=objects_key(key),
            state=PENDING,
            created_at=created_at or now_iso(),
            writer=writer_name(),
            origin_seq=(origin_seq or seq) if level == 0 else "",
            absorbed_through=absorbed_through,
        )
        self.manifest.put_pending(pending)
        entries, objects = build_segment(wide, objects_only)
        entries_data = to_parquet(entries, self.row_group, self.manifest.hash_width(dataset_id))
        objects_data = to_parquet(objects, OBJECT_ROW_GROUP)
        etag = self.files.put(pending.key, entries_data)
        objects_etag = self.files.put(pending.objects_key, objects_data)
        sidecar_etag, sidecar_bytes = "", 0
        if level == 1 and self.by_object_files:
            sidecar = to_parquet(
                by_object(entries), self.row_group, self.manifest.hash_width(dataset_id)
            )
            sidecar_etag, sidecar_bytes = (
                self.files.put(pending.by_object_key, sidecar),
                len(sidecar),
            )
        return replace(
            pending,
            state=state,
            etag=etag,
            objects_etag=objects_etag,
            by_object_etag=sidecar_etag,
            bytes=len(entries_data) + len(objects_data) + sidecar_bytes,
            entries=entries.num_rows,
            objects=objects.num_rows,
        )

    def activate_action(self, segment: SegmentItem) -> dict[str, Any]:
        """The Update that commits a pending item (still pending, no ETag yet) in the segment's
        state (`active`; a rewritten pending or retired segment keeps its state)."""
        return {
            "Update": {
                "TableName": self.manifest.table.name,
                "Key": segment.primary(),
                "UpdateExpression": "SET #s = :a, etag = :e, objects_etag = :oe, #b = :b, "
                "entries = :n, objects = :o, by_object_etag = :be",
                "ConditionExpression": "attribute_exists(pk) AND #s = :p AND etag = :none",
                "ExpressionAttributeNames": {"#s": "state", "#b": "bytes"},
                "ExpressionAttributeValues": {
                    ":a": segment.state,
                    ":p": PENDING,
                    ":none": "",
                    ":e": segment.etag,
                    ":oe": segment.objects_etag,
                    ":b": segment.bytes,
                    ":n": segment.entries,
                    ":o": segment.objects,
                    ":be": segment.by_object_etag,
                },
            }
        }

    def pointer_update(self, dataset_id: str, seq: str, write: ObjectWrite) -> dict[str, Any]:
        return {
            "TableName": self.manifest.table.name,
            "Key": {"pk": pointer_pk(dataset_id), "sk": write.object_url},
            "UpdateExpression": "SET #c = :s, version_id = :v, etag = :e, deleted = :f, "
            "entries = :n, updated_at = :t",
            "ConditionExpression": "(attribute_not_exists(#c) OR #c < :s) "
            "AND (attribute_not_exists(#fl) OR #fl <= :s)",
            "ExpressionAttributeNames": {"#c": "current", "#fl": "floor"},
            "ExpressionAttributeValues": {
                ":s": seq,
                ":v": write.version_id,
                ":e": write.etag,
                ":f": False,
                ":n": write.entries,
                ":t": now_iso(),
            },
        }

    def commit_object(self, segment: SegmentItem, write: ObjectWrite) -> bool:
        """Commit a one-object level-0 segment (module docstring). True when the pointer now
        names it; False when a newer write (or a removal) kept the pointer."""
        pointer = {"Update": self.pointer_update(segment.dataset_id, segment.seq, write)}
        try:
            self.manifest.transact([self.activate_action(segment), pointer])
        except Cancelled as exc:
            if is_action_condition_failed(exc.reasons[0]):
                raise SegmentCommitError(
                    f"segment {segment.seq} was replaced before its commit"
                ) from exc
            if not is_action_condition_failed(exc.reasons[1]):
                raise
            self._activate(segment)
            return False
        return True

    def commit_objects(self, segment: SegmentItem, writes: Sequence[ObjectWrite]) -> set[str]:
        """Commit a many-object level-0 segment: pointers first, then the item. The URLs whose
        pointer now names it."""
        won: set[str] = set()
        for write in writes:
            try:
                self.manifest.table.update_item(
                    **self.pointer_update(segment.dataset_id, segment.seq, write)
                )
            except ClientError as exc:
                if not is_condition_failed(exc):
                    raise
                continue
            won.add(write.object_url)
        self._activate(segment)
        return won

    def _activate(self, segment: SegmentItem) -> None:
        try:
            self.manifest.transact([self.activate_action(segment)])
        except Cancelled as exc:
            raise SegmentCommitError(
                f"segment {segment.seq} was replaced before its commit"
            ) from exc

    def discard(self, segment: SegmentItem) -> None:
        """Remove a segment whose commit was cancelled: both files, then its item if still
        there as written (pending)."""
        for key in segment.files:
            self.files.delete(key)
        self.manifest.delete_segment(replace(segment, state=PENDING, etag=""))


def no_objects() -> pa.Table:
    return pa.schema([f for f in OBJECTS_SCHEMA if f.name != "object_id"]).empty_table()
