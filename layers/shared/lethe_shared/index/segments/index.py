"""`SegmentSubjectIndex`: the `SubjectIndex` Protocol over segments in S3 and a DynamoDB
manifest (lethe_shared.index.segments: format, manifest, rules, store, lookup, compaction,
erase). The same meanings as `DynamoSubjectIndex`; where they are reached differently:

- `replace_object(s)` writes one level-0 segment whose item records the objects it describes;
  its commit (the item `active`) is its only manifest write besides the pending put: the
  object's pointer is derived (`rules.effective`), no pointer item is written. The entries of
  subjects the new version no longer holds are the older writes' rows, which the rule now
  flags `deleted` (no write to them).
- `flag_deleted`, `prune_flagged`, `remove_object` write the object's override item only (one
  conditional update, retried while another writer changes it): `deleted`, `floor`,
  `current`.
- `remove_subjects` and `remove_unchanged` rewrite the segments holding the hashes (erasure:
  the hashes leave S3).
- counts (`replace_object`'s flagged, `flag_deleted`, `prune_flagged`, `remove_object`,
  `remove_subjects`) are exact: each reads the object's entries first (`object_entries`: the
  object tables of the dataset's active segments, and the row groups of those listing it).

`hash_bytes` (recorded per dataset at its first write): 32 stores full digests; 6 stores 48-bit
prefixes (the shared-prefix rule, `segments.format` and the notes): lookups by a full hash return
every entry sharing its prefix, named by the hash asked for; by-object reads without subjects
name a subject by its 12-hex-digit prefix; erasure keeps a row two subjects of one object
version share (`SegmentErasure.kept_shared`). `by_object_files`: level-1 segments get a file
sorted by object, so one object's entries cost its own row groups (`reader.by_object`); off
by default: they cost more than the index itself (docs/INDEX_SEGMENTS.md, "Storage").

The dataset of an object URL is its key's first segment (`s3://<bucket>/<dataset_id>/...`,
`datasets.registry.dataset_of_key`) unless a `dataset_of` is given; entries of another dataset
are refused (ValueError).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa

from lethe_shared.aws.s3 import NULL_VERSION
from lethe_shared.datasets.registry import dataset_of_key
from lethe_shared.errors import LetheError
from lethe_shared.index.counted_entries import CountedEntries
from lethe_shared.index.entry_removal import EntryState, Removal
from lethe_shared.index.segments.compaction import CompactionReport, Compactor
from lethe_shared.index.segments.erase import Eraser, SegmentErasure, state_of
from lethe_shared.index.segments.format import (
    DEFAULT_PARTITION_BITS,
    HASH_BYTES,
    ROW_GROUP_ENTRIES,
    ObjectPart,
    check_width,
    new_seq,
    object_part,
    seq_after,
    subject_ids,
)
from lethe_shared.index.segments.lookup import SegmentLookup, to_entry
from lethe_shared.index.segments.manifest import Manifest, now_iso
from lethe_shared.index.segments.reader import SegmentReader
from lethe_shared.index.segments.s3_ranges import FooterCache, ReadCounter, SegmentFiles
from lethe_shared.index.segments.store import SegmentWriter, no_objects
from lethe_shared.index.subject_index import EntryBatch, FoundEntry, IndexEntry

POINTER_ATTEMPTS = 8


class PointerKeptChangingError(LetheError):
    """Other writers kept moving an object's pointer (POINTER_ATTEMPTS conditional updates
    failed). Error texts name no object URL: a key can hold a raw subject id."""


def dataset_of_url(object_url: str) -> str | None:
    """`s3://<bucket>/<dataset_id>/...` -> dataset_id."""
    if not object_url.startswith("s3://"):
        return None
    _, _, key = object_url[len("s3://") :].partition("/")
    return dataset_of_key(key)


def object_write(
    object_url: str, entries: Iterable[IndexEntry] | EntryBatch | CountedEntries
) -> tuple[dict[str, str], str | None, list[str], list[int]]:
    """An object's entries as (shared fields, dataset, hashes, rows). Raises ValueError for an
    entry of another object, a flagged entry, or entries that disagree on a shared field."""
    if isinstance(entries, EntryBatch | CountedEntries):  # columns: validated once
        if entries.object_url != object_url:
            raise ValueError("every entry must belong to the object being replaced")
        first = entries._template
        fields = _fields(first)
        return fields, entries.dataset_id, list(entries.subject_hashes), list(entries.rows)
    wanted = list(entries)
    if any(e.object_url != object_url for e in wanted):
        raise ValueError("every entry must belong to the object being replaced")
    if any(e.deleted for e in wanted):
        raise ValueError("a written entry describes the current version: it is not flagged")
    by_hash = {e.subject_hash: e for e in wanted}
    kinds = {
        tuple((k, v) for k, v in _fields(e).items() if k != "updated_at") for e in by_hash.values()
    }
    if len(kinds) > 1:
        raise ValueError("an object's entries share one version, zone, format and pin")
    datasets = {e.dataset_id for e in by_hash.values()}
    if len(datasets) > 1:
        raise ValueError("an object's entries belong to one dataset")
    fields = _fields(next(iter(by_hash.values()))) if by_hash else _empty_fields()
    return fields, next(iter(datasets), None), list(by_hash), [e.rows for e in by_hash.values()]


def _fields(entry: IndexEntry) -> dict[str, str]:
    return {
        "object_url": entry.object_url,
        "version_id": entry.version_id,
        "etag": entry.etag,
        "zone": entry.zone.value,
        "format": entry.format,
        "origin_seq": "",
        "matching_fingerprint": entry.matching_fingerprint,
        "key_fingerprint": entry.key_fingerprint,
        "updated_at": entry.updated_at,
    }


def _empty_fields() -> dict[str, str]:
    return dict.fromkeys(
        (
            "object_url",
            "version_id",
            "etag",
            "zone",
            "format",
            "origin_seq",
            "matching_fingerprint",
            "key_fingerprint",
            "updated_at",
        ),
        "",
    ) | {"version_id": NULL_VERSION, "updated_at": now_iso()}


class SegmentSubjectIndex:
    """The subject index as immutable sorted segments in S3 (module docstring)."""

    def __init__(
        self,
        s3: Any,
        bucket: str,
        table: Any,
        *,
        partition_bits: int = DEFAULT_PARTITION_BITS,
        row_group: int = ROW_GROUP_ENTRIES,
        dataset_of: Callable[[str], str | None] = dataset_of_url,
        counter: ReadCounter | None = None,
        footers: FooterCache | None = None,
        pending_timeout_seconds: float = 3600.0,
        settle_seconds: float = 60.0,
        hash_bytes: int = HASH_BYTES,
        by_object_files: bool = False,
        declared_bits: Callable[[str], int | None] | None = None,
    ) -> None:
        self.manifest = Manifest(table, declared_bits)
        self.files = SegmentFiles(s3, bucket, counter or ReadCounter(), footers or FooterCache())
        self.reader = SegmentReader(self.files)
        self.reads = SegmentLookup(self.manifest, self.reader)
        self.writer = SegmentWriter(self.manifest, self.files, row_group, by_object_files)
        self.eraser = Eraser(self.manifest, self.reader, self.writer, self.reads)
        self.compactor = Compactor(
            self.manifest,
            self.reader,
            self.writer,
            pending_timeout_seconds=pending_timeout_seconds,
            settle_seconds=settle_seconds,
        )
        self._bits = partition_bits
        self._hash_bytes = check_width(hash_bytes)
        self._dataset_of = dataset_of

    @property
    def counter(self) -> ReadCounter:
        return self.files.counter

    def dataset(self, object_url: str) -> str:
        found = self._dataset_of(object_url)
        if not found:
            raise ValueError("the object URL is under no dataset (s3://<bucket>/<dataset_id>/...)")
        return found

    # -- writes
    def replace_object(self, object_url: str, entries: Iterable[IndexEntry] | EntryBatch) -> int:
        return self.replace_objects([(object_url, entries)])[object_url]

    def replace_objects(
        self, batches: Iterable[tuple[str, Iterable[IndexEntry] | EntryBatch] | EntryBatch]
    ) -> dict[str, int]:
        """Write ONE level-0 segment for many objects of one dataset (ingestion's run) and commit
        it: no write per object. Returns, per object, how many entries the write flagged: the
        pointers of all the objects are read at once (one listing, BatchGetItems of overrides),
        the entries of those with a live pointer one object at a time."""
        seq = new_seq()
        parts: list[ObjectPart] = []
        empty: list[dict[str, str]] = []
        writes: dict[str, tuple[list[str], int]] = {}  # the hashes written, the key width
        dataset: str | None = None
        for batch in batches:
            url, entries = (batch.object_url, batch) if isinstance(batch, EntryBatch) else batch
            if url in writes:
                raise ValueError("an object is written twice in one segment")
            fields, of_entries, hashes, rows = object_write(url, entries)
            owner = self.dataset(url)
            if of_entries not in (None, owner) or dataset not in (None, owner):
                raise ValueError("one segment holds the objects of one dataset")
            dataset = owner
            fields = {**fields, "object_url": url, "origin_seq": seq}
            self.manifest.ensure_dataset(owner, self._bits, self._hash_bytes)
            width = self.manifest.hash_width(owner)
            writes[url] = (hashes, width)
            if hashes:
                parts.append(object_part(hashes, rows, fields, width))
            else:
                empty.append(fields)
        if dataset is None:
            return {}
        pointers = self.reads.pointers(dataset, writes)
        flagged: dict[str, int] = {}
        for url, (hashes, width) in writes.items():
            pointer = pointers[url]
            if pointer is None or not pointer.live:  # a new object: nothing to flag
                flagged[url] = 0
                continue
            before = set(self.reads.object_entries(dataset, url)[1])
            flagged[url] = len(before - set(subject_ids(hashes, width)))
        objects_only = pa.Table.from_pylist(empty, schema=no_objects().schema) if empty else None
        segment = self.writer.write(dataset, 0, None, parts, seq=seq, objects_only=objects_only)
        self.writer.commit(segment)
        return flagged

    def _known(self, dataset_id: str) -> bool:
        return self.manifest.partition_bits(dataset_id) is not None

    def flag_deleted(self, object_url: str, deleted: bool = True) -> int:
        """The override's `deleted` for the current write: every live entry of the object reads
        flagged. Unflagging (`deleted=False`) clears the pointer's flag only: entries of older
        writes stay flagged (DynamoSubjectIndex unflags those too; no caller unflags)."""
        dataset = self.dataset(object_url)
        for _ in range(POINTER_ATTEMPTS):
            read, pointer, entries = self.reads.object_state(dataset, object_url)
            if pointer is None or not pointer.live:
                return 0
            if self.manifest.write_override(dataset, read, replace(pointer, deleted=deleted)):
                return len(entries)
        raise PointerKeptChangingError("an object's pointer kept changing under flag_deleted")

    def _raise_floor(self, dataset_id: str, object_url: str, floor: str, remove: bool) -> None:
        """floor := max(floor, `floor`); `remove`: current := "" too (the override's current;
        a write newer than the floor stays current, derived from its segment)."""
        for _ in range(POINTER_ATTEMPTS):
            read, pointer, _ = self.reads.object_state(dataset_id, object_url)
            if pointer is None:
                return
            update = replace(pointer, floor=max(pointer.floor, floor))
            if remove and pointer.current < floor:
                update = replace(update, current="", deleted=False)
            if update == pointer or self.manifest.write_override(dataset_id, read, update):
                return
        raise PointerKeptChangingError("an object's pointer kept changing")

    def prune_flagged(self, object_url: str) -> int:
        """floor := current (rows of older writes die); when the pointer is `deleted` (every
        entry flagged), floor := just above current (every row dies)."""
        dataset = self.dataset(object_url)
        pointer, entries = self.reads.object_entries(dataset, object_url)
        flagged = [e for e in entries.values() if e.deleted]
        if pointer is None or not flagged:
            return 0
        floor = seq_after(pointer.current) if pointer.deleted else pointer.current
        self._raise_floor(dataset, object_url, floor, remove=False)
        return len(flagged)

    def remove_object(self, object_url: str) -> int:
        """Every row of the object as read dies: floor := just above current, current := ""
        (a newer write meanwhile stays: its origin is above the floor)."""
        dataset = self.dataset(object_url)
        pointer, entries = self.reads.object_entries(dataset, object_url)
        if pointer is None or not pointer.live:
            return 0
        self._raise_floor(dataset, object_url, seq_after(pointer.current), remove=True)
        return len(entries)

    def remove_subjects(self, object_url: str, subject_hashes: Iterable[str]) -> int:
        dataset = self.dataset(object_url)
        wanted = sorted(set(subject_hashes))
        present = self.reads.object_entries(dataset, object_url, wanted)[1]
        if not self._known(dataset) or not wanted:
            return 0
        self.eraser.erase(dataset, {object_url: dict.fromkeys(wanted)})
        return len(present)

    def remove_unchanged(self, object_url: str, expected: Iterable[EntryState]) -> Removal:
        dataset = self.dataset(object_url)
        states = {s.subject_hash: s for s in expected}
        if not states or not self._known(dataset):
            return Removal()
        done = self.eraser.erase(dataset, {object_url: states})
        return Removal(
            tuple(sorted((s for _, s in done.removed), key=lambda s: s.subject_hash)),
            tuple(sorted((s for _, s in done.changed), key=lambda s: s.subject_hash)),
        )

    def erase_entries(
        self,
        dataset_id: str,
        removals: Mapping[str, Iterable[EntryState]],
        *,
        drop_pointers: Iterable[str] = (),
    ) -> SegmentErasure:
        """Remove these entries (each only while it describes the state given) and their
        hashes' dead rows from every segment of the dataset (lethe_shared.index.segments.erase)."""
        targets = {url: {s.subject_hash: s for s in states} for url, states in removals.items()}
        return self.eraser.erase(dataset_id, targets, drop_pointers)

    def compact(self, dataset_id: str) -> CompactionReport:
        return self.compactor.compact(dataset_id)

    # -- reads
    def lookup(self, subject_hash: str) -> list[IndexEntry]:
        per_dataset = self.reads.lookup_across(self.manifest.datasets(), [subject_hash])
        found = [e for entries in per_dataset.values() for e in entries[subject_hash]]
        return sorted(found, key=lambda e: e.object_url)

    def lookup_many(self, subject_hashes: Iterable[str]) -> dict[str, list[IndexEntry]]:
        """`lookup` of each hash (the same entries, flagged ones included, in the same order),
        in ONE read: the dataset listing, per dataset its partitions and ONE segment listing,
        each segment consulted read once for all the hashes it may hold (manifest reads and
        segment reads concurrently: `segments.lookup`), the pointers in shared BatchGetItems.
        Every hash asked for is a key (no entry: an empty list). Raises when any segment
        cannot be read: never fewer entries."""
        wanted = list(dict.fromkeys(subject_hashes))
        if not wanted:
            return {}
        per_dataset = self.reads.lookup_across(self.manifest.datasets(), wanted)
        return {
            h: sorted(
                (e for entries in per_dataset.values() for e in entries[h]),
                key=lambda e: e.object_url,
            )
            for h in wanted
        }

    def lookup_in(
        self, dataset_id: str, subject_hashes: Iterable[str]
    ) -> dict[str, list[IndexEntry]]:
        return self.reads.lookup_in(dataset_id, subject_hashes)

    def subjects_of(self, object_url: str) -> set[str]:
        return set(self.reads.object_entries(self.dataset(object_url), object_url)[1])

    def entry_states(
        self, object_url: str, subjects: Iterable[str] | None = None
    ) -> list[EntryState]:
        wanted = None if subjects is None else list(subjects)
        entries = self.reads.object_entries(self.dataset(object_url), object_url, wanted)[1]
        return sorted((state_of(e) for e in entries.values()), key=lambda s: s.subject_hash)

    def described_versions(self, object_url: str) -> set[str]:
        dataset = self.dataset(object_url)
        pointer, entries = self.reads.object_entries(dataset, object_url)
        if pointer is None or not pointer.live or pointer.deleted:
            return set()
        return {e.row.version_id for e in entries.values() if not e.deleted}

    def describes_version(
        self, object_url: str, subjects: Sequence[str], *, version_id: str, etag: str
    ) -> bool:
        """Each of `subjects` must have a current, unflagged entry of this version (a pointer
        naming another write, or none, leaves none: the current write's rows are the only
        unflagged ones, and they carry its version)."""
        if not subjects:
            return True
        dataset = self.dataset(object_url)
        pointer, entries = self.reads.object_entries(dataset, object_url, subjects)
        if pointer is None or not pointer.live or pointer.deleted:
            return False
        return all(
            s in entries
            and not entries[s].deleted
            and (entries[s].row.version_id, entries[s].row.etag) == (version_id, etag)
            for s in subjects
        )

    def entries_of_dataset(self, dataset_id: str) -> Iterator[FoundEntry]:
        found = self.reads.dataset_entries(dataset_id)
        for (h, url), entry in sorted(found.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            yield FoundEntry(url, h, entry.row.rows, entry.deleted)

    def entries(self, dataset_id: str) -> list[IndexEntry]:
        """Every entry of the dataset as IndexEntry models (tests, migration checks)."""
        return [to_entry(dataset_id, e) for e in self.reads.dataset_entries(dataset_id).values()]
