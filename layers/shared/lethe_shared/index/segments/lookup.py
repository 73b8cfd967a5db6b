"""Reading entries: a lookup of hashes, one object's entries, a dataset's entries.

Which segments a lookup consults, per partition of the hashes: the partition's `active`
level-1 segment and every `active` level-0 segment whose `origin_seq` is above the level-1's
`absorbed_through` (one Query per partition and one for level 0). `pending` and `retired`
segments are not read: a pending write is not committed, a retired segment's rows are in its
successor. Then the rule (`rules.live_entries`) over the rows read and the pointers of their
objects: each derived (`rules.effective`) from the digests of the active level-0 items of the
SAME listing, the carried pointers that listing names (`segments.carried`: what retired
level-0 segments said; the rows of the objects' digests) and the objects' override items, read
after the listing (BatchGetItem, consistent; a compaction commits the carried file holding the
level-0 items it retires before it retires them).
When a segment file named by the manifest is gone (compaction or an erasure replaced it
meanwhile), the whole read starts again from the manifest, up to READ_ATTEMPTS times.

A lookup over many datasets (`lookup_across`, what `SegmentSubjectIndex.lookup_many` runs for
all the hashes of a request at once) runs its reads in two concurrent steps, each in a bounded
pool of READ_THREADS threads (`concurrent_reads.run_all`): the manifest reads of every dataset
(partitions, then the ONE Query listing its segments), then the reads of every segment
consulted (footer, the row groups holding the hashes, their object rows: one segment's reads
stay in one thread, in the same order as before). It reads exactly the segments and row groups
a sequential read does. Fail closed: when any read raises, the lookup raises the error a
sequential run of the same step would have raised first (the earliest failing read in its
order), after the reads still running have ended; it never answers with the entries of the
segments it could read.
`SegmentGoneError` from any segment restarts the whole lookup from the manifest as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TypeVar

from lethe_shared.catalog.zones import Zone
from lethe_shared.index.concurrent_reads import READ_THREADS, run_all
from lethe_shared.index.segments.carried import CarriedPointers
from lethe_shared.index.segments.described import DescribedCache, Level0, level0_of
from lethe_shared.index.segments.format import (
    HASH_BYTES,
    hash_bytes,
    partition_of,
    subject_id,
    widen,
)
from lethe_shared.index.segments.manifest import ACTIVE, Listing, Manifest, SegmentItem
from lethe_shared.index.segments.reader import SegmentReader, rows_of
from lethe_shared.index.segments.rules import LiveEntry, Pointer, Row, live_entries
from lethe_shared.index.segments.s3_ranges import SegmentGoneError
from lethe_shared.index.subject_index import IndexEntry

READ_ATTEMPTS = 5
T = TypeVar("T")


def to_entry(dataset_id: str, found: LiveEntry) -> IndexEntry:
    """The entry as an IndexEntry. With prefixes a by-object read names the subject by its 12
    hex digits, which IndexEntry's 64-digit pattern refuses: such an entry is built unvalidated
    (`entries`, migration checks); lookups name it by the hash asked for."""
    row = found.row
    build = IndexEntry if len(row.subject_hash) == 64 else IndexEntry.model_construct
    return build(
        subject_hash=row.subject_hash,
        object_url=row.object_url,
        dataset_id=dataset_id,
        zone=Zone(row.zone),
        format=row.format,
        rows=row.rows,
        row_hints=(),
        version_id=row.version_id,
        etag=row.etag,
        deleted=found.deleted,
        updated_at=row.updated_at,
        matching_fingerprint=row.matching_fingerprint,
        key_fingerprint=row.key_fingerprint,
    )


def active_level1(items: Iterable[SegmentItem]) -> SegmentItem | None:
    active = [s for s in items if s.state == ACTIVE]
    return max(active, key=lambda s: s.seq) if active else None


def relabel(rows: Iterable[Row], wanted: Iterable[str], width: int) -> list[Row]:
    """Rows read by key, each named by the subject hash asked for (with prefixes, every hash
    asked for that shares the row's key gets the row: the shared-prefix rule)."""
    by_key: dict[str, list[str]] = {}
    for h in wanted:
        by_key.setdefault(subject_id(h, width), []).append(h)
    return [
        row if h == row.subject_hash else replace(row, subject_hash=h)
        for row in rows
        for h in by_key.get(row.subject_hash, ())
    ]


def split_consulted(
    listed: Iterable[SegmentItem], partitions: Iterable[int]
) -> dict[int, list[SegmentItem]]:
    """Per partition: its active level-1 segment, then every active level-0 segment whose origin
    is above that level-1's `absorbed_through`."""
    items = list(listed)
    level0 = [s for s in items if s.level == 0 and s.state == ACTIVE]
    out: dict[int, list[SegmentItem]] = {}
    for p in sorted(set(partitions)):
        top = active_level1(s for s in items if s.level == 1 and s.partition == p)
        through = top.absorbed_through if top else ""
        out[p] = ([top] if top else []) + [s for s in level0 if s.origin_seq > through]
    return out


@dataclass(frozen=True)
class HashReads:
    """What a lookup of hashes reads in one dataset: its key width and, per segment consulted
    (in the order a sequential read takes them), the keys wanted from it."""

    dataset_id: str
    width: int
    segments: tuple[tuple[SegmentItem, frozenset[bytes]], ...]
    level0: Level0 = field(default_factory=Level0)


@dataclass
class SegmentLookup:
    manifest: Manifest
    reader: SegmentReader
    threads: int = READ_THREADS
    described: DescribedCache | None = None

    def __post_init__(self) -> None:
        if self.described is None:
            self.described = DescribedCache(self.reader.files.whole)

    def digests(self, segment: SegmentItem) -> frozenset[bytes]:
        """The digests of the objects a level-0 segment describes (its item, or its file)."""
        assert self.described is not None
        file_key = segment.described_key if segment.described_file else ""
        return self.described.digests(segment.key, segment.described, file_key)

    def level0(self, listed: Iterable[SegmentItem]) -> Level0:
        """The active level-0 segments of a listing, by the objects they describe, and the
        listing's carried pointers (`carried`: read by digest when a pointer is asked for)."""
        held = listed.active_carried if isinstance(listed, Listing) else ()
        return level0_of(
            ((s.origin_seq, self.digests(s)) for s in listed if s.level == 0 and s.state == ACTIVE),
            CarriedPointers(self.reader.files, held) if held else None,
        )

    def pointers(self, dataset_id: str, urls: Iterable[str]) -> dict[str, Pointer | None]:
        """The objects' pointers now: ONE listing, then their overrides (and the carried
        pointers of the listing: a carried file replaced meanwhile restarts the read)."""
        wanted = set(urls)

        def read() -> dict[str, Pointer | None]:
            level0 = self.level0(self.manifest.listing(dataset_id))
            return level0.pointers(self.manifest.overrides(dataset_id, wanted), wanted)

        return self.retrying(read)

    def pointer(self, dataset_id: str, object_url: str) -> Pointer | None:
        return self.pointers(dataset_id, [object_url])[object_url]

    def retrying(self, read: Callable[[], T]) -> T:
        for attempt in range(READ_ATTEMPTS):
            try:
                return read()
            except SegmentGoneError:
                if attempt == READ_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    # -- which segments
    def consulted(self, dataset_id: str, partitions: Iterable[int]) -> dict[int, list[SegmentItem]]:
        """Per partition, the segments a reader of its hashes consults (module docstring), from
        ONE Query of the dataset's segment items. That Query returns the level-0 items before
        the level-1 items (sort key order), on purpose: a compaction committing while it runs
        leaves either the old level-1 (and the level-0 segments it had not absorbed, already
        read) or the new one (which absorbed them); reading level 1 first could pair an old
        level-1 with a level-0 list from which the retired inputs are already gone."""
        return split_consulted(self.manifest.listing(dataset_id), partitions)

    def consulted_with(
        self, dataset_id: str, partitions: Iterable[int]
    ) -> tuple[dict[int, list[SegmentItem]], Level0]:
        """`consulted`, and the level-0 digests of the same listing."""
        listed = self.manifest.listing(dataset_id)
        return split_consulted(listed, partitions), self.level0(listed)

    # -- by hash
    def hash_reads(self, dataset_id: str, hashes: Iterable[str]) -> HashReads:
        """The manifest's part of a lookup in one dataset: its partitions (cached after the
        first read) and ONE Query of its segment items; nothing read when it has no segment
        configuration or no hash is wanted."""
        bits = self.manifest.partition_bits(dataset_id)
        wanted = sorted(set(hashes))
        if bits is None or not wanted:
            return HashReads(dataset_id, HASH_BYTES, ())
        by_partition: dict[int, list[str]] = {}
        for h in wanted:
            by_partition.setdefault(partition_of(h, bits), []).append(h)
        width = self.manifest.hash_width(dataset_id)
        per_segment: dict[str, tuple[SegmentItem, set[bytes]]] = {}
        consulted, level0 = self.consulted_with(dataset_id, by_partition)
        for p, segments in consulted.items():
            digests = set(hash_bytes(by_partition[p], width).to_pylist())
            for segment in segments:
                held = per_segment.setdefault(segment.key, (segment, set()))
                held[1].update(digests)
        return HashReads(
            dataset_id,
            width,
            tuple((segment, frozenset(digests)) for segment, digests in per_segment.values()),
            level0,
        )

    def rows_for_hashes(self, dataset_id: str, hashes: Iterable[str]) -> list[Row]:
        return self.rows_across([dataset_id], hashes)[0][dataset_id]

    def rows_across(
        self, datasets: Iterable[str], hashes: Iterable[str]
    ) -> tuple[dict[str, list[Row]], dict[str, Level0]]:
        """Per dataset, the rows of the hashes in the segments consulted (each named by the hash
        asked for), and its level-0 digests as listed: the manifest reads of every dataset
        concurrently, then the reads of every segment concurrently (module docstring)."""
        wanted = sorted(set(hashes))
        names = list(dict.fromkeys(datasets))
        plans = run_all([partial(self.hash_reads, d, wanted) for d in names], self.threads)
        reads = [(plan, segment, keys) for plan in plans for segment, keys in plan.segments]
        found = run_all(
            [partial(self.reader.by_hashes, segment, keys) for _, segment, keys in reads],
            self.threads,
        )
        rows: dict[str, list[Row]] = {d: [] for d in names}
        for (plan, _, _), read in zip(reads, found, strict=True):
            rows[plan.dataset_id] += read
        widths = {plan.dataset_id: plan.width for plan in plans}
        level0 = {plan.dataset_id: plan.level0 for plan in plans}
        return {d: relabel(rows[d], wanted, widths[d]) for d in names}, level0

    def lookup_in(self, dataset_id: str, hashes: Iterable[str]) -> dict[str, list[IndexEntry]]:
        """Every entry (flagged ones included) of each hash in the dataset."""
        return self.lookup_across([dataset_id], hashes)[dataset_id]

    def lookup_across(
        self, datasets: Iterable[str], hashes: Iterable[str]
    ) -> dict[str, dict[str, list[IndexEntry]]]:
        """Per dataset, every entry of each hash: the rows of every dataset first, then the
        overrides of all their objects in shared BatchGetItems."""
        wanted = sorted(set(hashes))
        names = sorted(set(datasets))

        def read() -> dict[str, dict[str, list[IndexEntry]]]:
            rows, level0 = self.rows_across(names, wanted)
            overrides = self.manifest.overrides_of(
                (d, r.object_url) for d in names for r in rows[d]
            )
            # the carried pointers of every dataset read concurrently (a footer and row groups)
            derived = run_all(
                [partial(level0[d].pointers, overrides.get(d, {})) for d in names], self.threads
            )
            out: dict[str, dict[str, list[IndexEntry]]] = {}
            for d, pointers in zip(names, derived, strict=True):
                found: dict[str, list[IndexEntry]] = {h: [] for h in wanted}
                for (h, _), entry in sorted(live_entries(rows[d], pointers).items()):
                    found[h].append(to_entry(d, entry))
                out[d] = found
            return out

        return self.retrying(read)

    # -- by object
    def object_segments(
        self, listed: list[SegmentItem], pointer: Pointer, partitions: Iterable[int] | None
    ) -> list[SegmentItem]:
        """The active segments of a listing that can hold the object's live rows: level 0 whose
        origin lies between the pointer's floor and current; level 1 of `partitions` (every
        one: None)."""
        wanted = None if partitions is None else set(partitions)
        found = [
            s
            for s in listed
            if s.level == 0
            and s.state == ACTIVE
            and pointer.floor <= s.origin_seq <= pointer.current
        ]
        tops: dict[int, list[SegmentItem]] = {}
        for s in listed:
            if (
                s.level == 1
                and s.partition is not None
                and (wanted is None or s.partition in wanted)
            ):
                tops.setdefault(s.partition, []).append(s)
        for p in sorted(tops):
            top = active_level1(tops[p])
            if top is not None:
                found.append(top)
        return found

    def object_entries(
        self, dataset_id: str, object_url: str, hashes: Iterable[str] | None = None
    ) -> tuple[Pointer | None, dict[str, LiveEntry]]:
        """The object's pointer and its entries by subject hash (of `hashes` only, when given).
        Cost: ONE listing, the override item, the object tables of the dataset's active segments
        (footers cached) and, in each segment listing the object, the row groups whose object
        id range holds it."""
        _, pointer, entries = self.object_state(dataset_id, object_url, hashes)
        return pointer, entries

    def object_state(
        self, dataset_id: str, object_url: str, hashes: Iterable[str] | None = None
    ) -> tuple[Pointer | None, Pointer | None, dict[str, LiveEntry]]:
        """`object_entries` with the override item as read (the condition of a write to it)."""
        wanted = None if hashes is None else sorted(set(hashes))

        def read() -> tuple[Pointer | None, Pointer | None, dict[str, LiveEntry]]:
            listed = self.manifest.listing(dataset_id)  # first: the rules docstring
            override = self.manifest.override(dataset_id, object_url)
            pointer = self.level0(listed).pointer(object_url, override)
            if pointer is None or not pointer.live or (wanted is not None and not wanted):
                return override, pointer, {}
            bits = self.manifest.partition_bits(dataset_id) or 0
            width = self.manifest.hash_width(dataset_id)
            digests = None if wanted is None else hash_bytes(wanted, width).to_pylist()
            partitions = None if wanted is None else {partition_of(h, bits) for h in wanted}
            rows: list[Row] = []
            for segment in self.object_segments(listed, pointer, partitions):
                rows += self.reader.by_object(segment, object_url, digests)
            if wanted is not None:
                rows = relabel(rows, wanted, width)
            entries = live_entries(rows, {object_url: pointer})
            return override, pointer, {h: e for (h, _), e in entries.items()}

        return self.retrying(read)

    # -- a dataset
    def all_pointers(self, dataset_id: str) -> dict[str, Pointer]:
        """Every object of the dataset with a pointer (benchmarks, checks): its override items'
        and those of the URLs the object tables of its active segments list (an object whose
        rows were all erased is listed by none: it shows only when it has an override). ONE
        listing, then the overrides (one Query), then each object table."""

        def read() -> dict[str, Pointer]:
            listed = self.manifest.listing(dataset_id)
            level0 = self.level0(listed)
            overrides = self.manifest.all_overrides(dataset_id)
            urls = set(overrides)
            for segment in listed:
                if segment.state == ACTIVE:
                    urls |= self.reader.object_urls(segment)
            found = level0.pointers(overrides, sorted(urls))
            return {u: p for u, p in found.items() if p is not None}

        return self.retrying(read)

    def dataset_entries(self, dataset_id: str) -> dict[tuple[str, str], LiveEntry]:
        """Every entry of the dataset: every consulted segment read whole, every override."""

        def read() -> dict[tuple[str, str], LiveEntry]:
            bits = self.manifest.partition_bits(dataset_id)
            if bits is None:
                return {}
            segments: dict[str, SegmentItem] = {}
            consulted, level0 = self.consulted_with(dataset_id, range(1 << bits))
            for group in consulted.values():
                segments.update((s.key, s) for s in group)
            rows: list[Row] = []
            for segment in segments.values():
                rows += rows_of(widen(*self.reader.whole(segment)))
            overrides = self.manifest.all_overrides(dataset_id)
            pointers = level0.pointers(overrides, {r.object_url for r in rows})
            return live_entries(rows, pointers)

        return self.retrying(read)
