"""Writing segments: a new level-0 segment for one object or a batch of objects, and the common
steps every writer (compaction, erasure) takes: manifest item first, as `pending`; PUT of the
files; commit.

A level-0 item records the objects its write describes (`described`, `segments.described`),
so its commit (`commit`) is ONE write: the item becomes `active`, on the condition it is still
`pending` with no ETag (an erasure or the sweep may have replaced or removed it: then
SegmentCommitError, write again). No pointer item is written: an object's pointer is derived
from the active level-0 segments describing it and its override item (`rules.effective`), so
the highest origin is current whatever order writers commit in, and an out-of-order older
writer never wins. Until the commit a lookup does not read the segment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from lethe_shared.errors import LetheError
from lethe_shared.index.segments.described import DIGEST_BYTES, MAX_INLINE, pack
from lethe_shared.index.segments.format import (
    OBJECT_ROW_GROUP,
    OBJECTS_SCHEMA,
    ROW_GROUP_ENTRIES,
    ObjectPart,
    build_segment,
    build_segment_of,
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
)
from lethe_shared.index.segments.manifest import TransactionCancelled as Cancelled
from lethe_shared.index.segments.s3_ranges import SegmentFiles


class SegmentCommitError(LetheError):
    """A segment write could not be committed: its pending item was replaced or removed
    (an erasure scrubbed it, or the sweep judged its writer dead). Write again."""


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
        wide: pa.Table | Sequence[ObjectPart],
        *,
        seq: str | None = None,
        objects_only: pa.Table | None = None,
        origin_seq: str = "",
        absorbed_through: str = "",
        created_at: str | None = None,
        state: str = ACTIVE,
        described: bytes | None = None,
    ) -> SegmentItem:
        """Put the pending item, then the files; the item as it is to be once committed (its
        ETags set, in `state`: the caller commits it with `activate_action`). `seq` for a new
        level-0 write is its origin. Level 0: `described` (packed digests) is what the item
        records (None: the objects of `wide` and `objects_only`; an erasure rewrite passes the
        old segment's)."""
        seq = seq or new_seq()
        key = entries_key(dataset_id, level, partition, seq)
        if level == 0 and described is None:
            urls = (
                set(wide["object_url"].to_pylist())
                if isinstance(wide, pa.Table)
                else {str(p.fields["object_url"]) for p in wide}
            )
            if objects_only is not None:
                urls |= set(objects_only["object_url"].to_pylist())
            described = pack(urls)
        digests = described or b""
        in_file = len(digests) > MAX_INLINE * DIGEST_BYTES
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
            described=b"" if in_file else digests,
            described_file=in_file,
        )
        self.manifest.put_pending(pending)
        if in_file:
            self.files.put(pending.described_key, digests)
        entries, objects = (
            build_segment(wide, objects_only)
            if isinstance(wide, pa.Table)
            else build_segment_of(wide, objects_only)
        )
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

    def commit(self, segment: SegmentItem) -> None:
        """Commit a level-0 segment (module docstring): its item becomes `active`, one write."""
        self._activate(segment)

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
