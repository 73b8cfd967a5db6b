"""Erasure removes subject hashes from the segments physically.

`erase(dataset_id, targets)`: targets are, per object URL, the subject hashes to remove with the
state each entry is expected to describe (`EntryState`; None: remove whatever is there).

1. Judge: each target entry is read now (`object_entries`): it describes the expected state ->
   removed; it describes another state (a writer changed it since it was judged) -> it stays and
   is returned as `changed`, as it is now; it is gone -> neither.
2. Scrub: every segment of the dataset in any state (`pending`, `active`, `retired`; level 0 and
   the level-1 segments of the hashes' partitions) whose row groups may hold one of the hashes
   (footer statistics) is read whole; when it holds a row to drop (a removed (hash, object) pair,
   or a dead row of one of the hashes, by `rules.row_status`), it is rewritten without those rows
   under a new seq at the same level and partition, keeping its state, `origin_seq`,
   `absorbed_through` and `created_at`; an object left with no row is dropped from the
   rewritten object table (its item keeps the old `described`: the write is unchanged).
   Commit: one TransactWriteItems, the new item committed and the old
   item deleted on the condition its state and ETag are still the ones read (compaction, a
   writer's commit or another erasure that changed it makes the commit fail: the new files are
   deleted and the segments listed again, up to SCRUB_PASSES times). Then DeleteObject of both
   old files and a HeadObject of each (404: gone). A pass that rewrites nothing ends it.
3. Pointer overrides the caller names (`drop_pointers`: objects whose every version is gone)
   are deleted when no segment's object table lists the URL any more (an object key may hold a
   raw subject id). Level-0 items keep the URL's digest (not the URL).

DynamoDB writes per erasure: one transaction per segment rewritten, whatever its size; S3
bytes: each rewritten segment is copied whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from lethe_shared.errors import LetheError
from lethe_shared.index.entry_removal import EntryState
from lethe_shared.index.segments.format import hash_bytes, partition_of, subject_key, widen
from lethe_shared.index.segments.lookup import SegmentLookup
from lethe_shared.index.segments.manifest import (
    PENDING,
    Manifest,
    SegmentItem,
    TransactionCancelled,
)
from lethe_shared.index.segments.reader import SegmentReader
from lethe_shared.index.segments.rules import LiveEntry, RowStatus, row_status
from lethe_shared.index.segments.s3_ranges import SegmentGoneError
from lethe_shared.index.segments.store import SegmentWriter

SCRUB_PASSES = 8


class ErasureNotSettledError(LetheError):
    """Segments holding an erased hash kept changing under the erasure (SCRUB_PASSES passes):
    the hashes may still be stored. Run the index update again."""


@dataclass(frozen=True)
class SegmentRewrite:
    """One segment rewritten without erased rows: the old one (seq, ETags, keys) and the new
    one (seq, ETags; "" when the old one was dropped instead)."""

    level: int
    partition: int | None
    state: str
    old_seq: str
    old_etag: str
    old_objects_etag: str
    old_keys: tuple[str, ...]  # entries, object table (and by-object file, level 1)
    new_seq: str
    new_key: str
    new_etag: str
    new_objects_etag: str
    rows_dropped: int  # -1: a pending segment dropped whole without being read
    old_keys_gone: bool


@dataclass(frozen=True)
class SegmentErasure:
    """What an erasure did to the segments: the evidence a certificate cites."""

    dataset_id: str
    rewritten: tuple[SegmentRewrite, ...] = ()
    removed: tuple[tuple[str, EntryState], ...] = ()  # (object URL, state removed)
    changed: tuple[tuple[str, EntryState], ...] = ()  # (object URL, state as it is now)
    keys_checked_gone: tuple[str, ...] = ()
    pointers_deleted: tuple[str, ...] = ()
    pointers_kept: tuple[str, ...] = ()  # named by the caller, still listed by a segment
    # prefixes only: entries kept because another subject of the same object version shares
    # their key (the erase job removed this subject's rows, not the other's): (URL, state)
    kept_shared: tuple[tuple[str, EntryState], ...] = ()

    @property
    def complete(self) -> bool:
        """Every old file of every rewritten segment was checked gone."""
        return all(r.old_keys_gone for r in self.rewritten)


def state_of(entry: LiveEntry) -> EntryState:
    return EntryState(
        subject_hash=entry.row.subject_hash,
        version_id=entry.row.version_id,
        etag=entry.row.etag,
        deleted=entry.deleted,
    )


@dataclass
class Eraser:
    manifest: Manifest
    reader: SegmentReader
    writer: SegmentWriter
    lookups: SegmentLookup
    rewrites: list[SegmentRewrite] = field(default_factory=list)

    def erase(
        self,
        dataset_id: str,
        targets: Mapping[str, Mapping[str, EntryState | None]],
        drop_pointers: Iterable[str] = (),
    ) -> SegmentErasure:
        removed: list[tuple[str, EntryState]] = []
        changed: list[tuple[str, EntryState]] = []
        shared: list[tuple[str, EntryState]] = []
        pairs: set[tuple[bytes, str]] = set()
        width = self.manifest.hash_width(dataset_id)
        for url, wanted in sorted(targets.items()):
            _, now = self.lookups.object_entries(dataset_id, url, wanted)
            for h, expected in sorted(wanted.items()):
                current = now.get(h)
                state = state_of(current) if current is not None else None
                if (
                    state is not None
                    and current is not None
                    and current.row.subjects > 1
                    and (expected is None or state == expected)
                ):
                    shared.append((url, state))  # another subject of the object shares the key
                elif expected is None or state == expected:
                    pairs.add((subject_key(h, width), url))
                    if state is not None:
                        removed.append((url, state))
                elif state is not None:
                    changed.append((url, state))
        rewrites = self.scrub(dataset_id, pairs) if pairs else []
        deleted, kept = self._drop_pointers(dataset_id, drop_pointers)
        gone = tuple(k for r in rewrites if r.old_keys_gone for k in r.old_keys)
        return SegmentErasure(
            dataset_id=dataset_id,
            rewritten=tuple(rewrites),
            removed=tuple(removed),
            changed=tuple(changed),
            kept_shared=tuple(shared),
            keys_checked_gone=gone,
            pointers_deleted=deleted,
            pointers_kept=kept,
        )

    def scrub(self, dataset_id: str, pairs: set[tuple[bytes, str]]) -> list[SegmentRewrite]:
        """Rewrite every segment holding a row to drop (module docstring, step 2)."""
        digests = sorted({h for h, _ in pairs})
        bits = self.manifest.partition_bits(dataset_id) or 0
        partitions = {partition_of(h, bits) for h in digests}
        done: list[SegmentRewrite] = []
        clean: set[tuple[str, str, str]] = set()  # (key, etag, state) checked or written clean
        for _ in range(SCRUB_PASSES):
            settled = True
            for segment in self.manifest.all_segments(dataset_id, partitions):
                if (segment.key, segment.etag, segment.state) in clean:
                    continue
                try:
                    outcome = self._rewrite(segment, digests, pairs)
                except (SegmentGoneError, TransactionCancelled):
                    settled = False  # replaced meanwhile: list again
                    continue
                if outcome is None:
                    clean.add((segment.key, segment.etag, segment.state))
                    continue
                done.append(outcome)
                clean.add((outcome.new_key, outcome.new_etag, outcome.state))
                settled = False  # a last pass checks that nothing else holds them
            if settled:
                return done
        raise ErasureNotSettledError(
            f"segments of dataset {dataset_id} kept changing during the erasure"
        )

    def _rewrite(
        self, segment: SegmentItem, digests: list[bytes], pairs: set[tuple[bytes, str]]
    ) -> SegmentRewrite | None:
        try:
            if not self.reader.hash_groups(segment, digests):
                return None
            wide = widen(*self.reader.whole(segment))
        except SegmentGoneError:
            if segment.state != PENDING:
                raise
            return self._drop_pending(segment)
        drop = self._drop_mask(segment.dataset_id, wide, digests, pairs)
        dropped = int(pc.sum(drop).as_py() or 0)
        if not dropped:
            return None
        kept = wide.filter(pc.invert(drop))
        new = self.writer.write(
            segment.dataset_id,
            segment.level,
            segment.partition,
            kept,
            origin_seq=segment.origin_seq,
            absorbed_through=segment.absorbed_through,
            created_at=segment.created_at,
            state=segment.state,
            described=self._described(segment),
        )
        delete_old = {
            "Delete": {
                "TableName": self.manifest.table.name,
                "Key": segment.primary(),
                **segment.unchanged_condition(),
            }
        }
        try:
            self.manifest.transact([self.writer.activate_action(new), delete_old])
        except TransactionCancelled:
            self.writer.discard(new)
            raise
        old_keys = segment.files
        for key in old_keys:
            self.reader.files.delete(key)
        gone = all(self.reader.files.gone(key) for key in old_keys)
        return _rewrite(segment, old_keys, gone, new, dropped)

    def _described(self, segment: SegmentItem) -> bytes | None:
        """A level-0 rewrite keeps the digests of the objects the write describes."""
        return b"".join(sorted(self.lookups.digests(segment))) if segment.level == 0 else None

    def _drop_pending(self, segment: SegmentItem) -> SegmentRewrite | None:
        """A pending segment with a file missing (its writer died between its PUTs, or has not
        written them yet): not readable, so dropped whole (files, then item). A live writer's
        commit then fails and it writes again."""
        old_keys = segment.files
        if all(self.reader.files.gone(key) for key in old_keys):
            return None  # nothing stored yet
        for key in old_keys:
            self.reader.files.delete(key)
        if not self.manifest.delete_segment(segment):
            raise TransactionCancelled([])
        gone = all(self.reader.files.gone(key) for key in old_keys)
        return _rewrite(segment, old_keys, gone)  # dropped whole: no new segment, rows unknown

    def _drop_mask(
        self,
        dataset_id: str,
        wide: pa.Table,
        digests: list[bytes],
        pairs: set[tuple[bytes, str]],
    ) -> pa.Array:
        """Rows of the erased hashes that are removed pairs or dead by the rule."""
        of_hashes = pc.is_in(wide["subject_hash"], value_set=pa.array(digests, pa.binary()))
        mask = of_hashes.to_pylist()
        candidates = [i for i, hit in enumerate(mask) if hit]
        if not candidates:
            return pa.array(mask, pa.bool_())
        picked = wide.take(candidates)
        hashes = picked["subject_hash"].to_pylist()
        urls = picked["object_url"].to_pylist()
        origins = picked["origin_seq"].to_pylist()
        pointers = self.lookups.pointers(dataset_id, set(urls))
        for i, h, url, origin in zip(candidates, hashes, urls, origins, strict=True):
            dead = row_status(origin, pointers.get(url)) is RowStatus.DEAD
            mask[i] = (h, url) in pairs or dead
        return pa.array(mask, pa.bool_())

    def _drop_pointers(
        self, dataset_id: str, urls: Iterable[str]
    ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        wanted = sorted(set(urls))
        if not wanted:
            return (), ()
        listed: set[str] = set()
        for segment in self.manifest.all_segments(dataset_id):
            listed |= self.reader.object_urls(segment) & set(wanted)
        for url in wanted:
            if url not in listed:
                self.manifest.delete_override(dataset_id, url)
        return tuple(u for u in wanted if u not in listed), tuple(u for u in wanted if u in listed)


def hashes_of(targets: Mapping[str, Iterable[str]]) -> list[str]:
    return sorted({h for hs in targets.values() for h in hs})


__all__ = ["Eraser", "ErasureNotSettledError", "SegmentErasure", "SegmentRewrite", "hash_bytes"]


def _rewrite(
    segment: SegmentItem,
    old_keys: tuple[str, ...],
    gone: bool,
    new: SegmentItem | None = None,
    dropped: int = -1,
) -> SegmentRewrite:
    """What the certificate cites for one segment: the old one, and its replacement (none when
    it was dropped whole)."""
    return SegmentRewrite(
        level=segment.level,
        partition=segment.partition,
        state=segment.state,
        old_seq=segment.seq,
        old_etag=segment.etag,
        old_objects_etag=segment.objects_etag,
        old_keys=old_keys,
        new_seq=new.seq if new else "",
        new_key=new.key if new else "",
        new_etag=new.etag if new else "",
        new_objects_etag=new.objects_etag if new else "",
        rows_dropped=dropped,
        old_keys_gone=gone,
    )
