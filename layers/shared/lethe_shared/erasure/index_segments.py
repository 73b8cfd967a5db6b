"""The index update on the segment store: the erased subjects' hashes leave S3 (issue 20).

With `SegmentSubjectIndex` (lethe_shared.index.segments) an entry is a row of immutable Parquet
segments, so removing it means rewriting every segment that holds it. The update
(lethe_shared.erasure.index_update) judges each object's entries exactly as it does for
DynamoDB; what goes is then removed per dataset with ONE erasure of the segments
(`SegmentSubjectIndex.eraser.erase`, what `erase_entries` runs), which:

- removes each going entry while it still describes the state judged (a writer that changed it
  meanwhile wins: it comes back in `changed` and is judged again, as a failed conditional
  delete is);
- also drops every *dead* row of the request's hashes in the dataset (rows of writes that were
  superseded, pruned or removed earlier: invisible to lookups, but still bytes of the hash in
  S3), found through a scrub-only target (`SCRUB_ONLY`, an object URL no bucket can have);
- rewrites each segment holding such a row without it (every state: pending, active, retired;
  level 0 and level 1), deletes the old files and checks each with HeadObject (404: gone);
- deletes the object pointers of keys the erasure deleted with no version left (an object key
  can hold a raw subject id).

Every dataset of the segment manifest is scrubbed for the request's hashes of that dataset,
also those the request's report never named (a subject whose rows left a dataset before the
request still has dead rows there until compaction).

Fail closed: an erasure whose old segment files were not all checked gone raises
`IndexNotErasedError` (the Update Index step fails; nothing is certified), and one whose
segments kept changing raises the store's `ErasureNotSettledError`. The evidence
(`SegmentEvidence`) goes into index_update.json under `segments`; the certificate cites it
(lethe_shared.erasure.certificate_index): segments rewritten or dropped, old files checked gone,
and whether the hashes left the index (no entry of them kept, every old file gone, and, with
48-bit prefixes, no row of a subject's prefix kept because another subject shares it:
`prefix_rows`, per object version, named in the document).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from lethe_shared.errors import LetheError
from lethe_shared.index.entry_removal import EntryState

# An object URL no object can have (a bucket name cannot hold "_"): the target of the request's
# hashes whose only purpose is that their dead rows are dropped from every segment.
SCRUB_ONLY = "s3://_lethe_scrub_only_/{dataset}/"


class IndexNotErasedError(LetheError):
    """The segment store could not prove an erased hash left S3: an old segment file of a
    rewritten segment was not found gone. Nothing is certified; run the index update again."""


@runtime_checkable
class SegmentStore(Protocol):
    """What the update needs of SegmentSubjectIndex (module docstring)."""

    eraser: Any
    manifest: Any


@dataclass
class DatasetEvidence:
    """One dataset's erasure of the segments (counts only: no hash, no object URL)."""

    dataset_id: str
    segments_rewritten: int = 0  # rewritten without the rows
    segments_dropped: int = 0  # pending segments dropped whole (their writer died)
    rows_dropped: int = 0
    old_files_checked_gone: int = 0
    entries_removed: int = 0
    entries_changed: int = 0  # found changed by a writer meanwhile (judged again)
    pointers_deleted: int = 0
    pointers_kept: int = 0
    complete: bool = True
    rewrites: list[dict[str, Any]] = field(default_factory=list)
    # 48-bit prefixes only: rows of a request subject's prefix left in the index because they
    # are (also) another subject's, one per (object, version, why): `shared` (the row's version
    # holds two subjects sharing the prefix, SegmentErasure.kept_shared) or `verified_clean`
    # (the version the erasure left, verified free of the subject's rows on the full hash)
    prefix_rows: list[dict[str, str]] = field(default_factory=list)


@dataclass
class SegmentEvidence:
    """The segment store's part of index_update.json (`document`)."""

    datasets: dict[str, DatasetEvidence] = field(default_factory=dict)

    def of(self, dataset_id: str) -> DatasetEvidence:
        return self.datasets.setdefault(dataset_id, DatasetEvidence(dataset_id))

    def keep_prefix(self, dataset_id: str, object_url: str, version_id: str, why: str) -> None:
        row = {"object_url": object_url, "version_id": version_id, "why": why}
        rows = self.of(dataset_id).prefix_rows
        if row not in rows:
            rows.append(row)

    def prefix_rows(self) -> dict[tuple[str, str], str]:
        """(object URL, version id) -> why, for every kept prefix row ("shared" wins)."""
        found: dict[tuple[str, str], str] = {}
        for d in self.datasets.values():
            for r in d.prefix_rows:
                key = (r["object_url"], r["version_id"])
                if found.get(key) != "shared":
                    found[key] = r["why"]
        return found

    def add(self, dataset_id: str, erasure: Any) -> None:
        found = self.of(dataset_id)
        for r in erasure.rewritten:
            if r.new_key:
                found.segments_rewritten += 1
            else:
                found.segments_dropped += 1
            found.rows_dropped += max(r.rows_dropped, 0)
            found.rewrites.append(
                {
                    "level": r.level, "partition": r.partition, "state": r.state,
                    "old_seq": r.old_seq, "old_etag": r.old_etag,
                    "old_objects_etag": r.old_objects_etag, "old_keys": list(r.old_keys),
                    "new_seq": r.new_seq, "new_key": r.new_key, "new_etag": r.new_etag,
                    "new_objects_etag": r.new_objects_etag, "rows_dropped": r.rows_dropped,
                    "old_keys_gone": r.old_keys_gone,
                }
            )  # fmt: skip
        found.old_files_checked_gone += len(erasure.keys_checked_gone)
        found.entries_removed += len(erasure.removed)
        found.entries_changed += len(erasure.changed)
        found.pointers_deleted += len(erasure.pointers_deleted)
        found.pointers_kept += len(erasure.pointers_kept)
        found.complete = found.complete and bool(erasure.complete)

    def document(self, entries_kept: int) -> dict[str, Any]:
        """`hashes_left_index`: every old file checked gone, no entry of the request's
        subjects kept (a kept entry is a live row of the hash: the certificate names it) and no
        row of a request subject's 48-bit prefix left (`prefix_rows`: the row is also another
        subject's; its bytes equal the subject's prefix)."""
        datasets = [vars(d) | {} for _, d in sorted(self.datasets.items())]
        complete = all(d.complete for d in self.datasets.values())
        rows = self.prefix_rows()
        shared = sum(1 for why in rows.values() if why == "shared")
        return {
            "store": "segments",
            "segments_rewritten": sum(d.segments_rewritten for d in self.datasets.values()),
            "segments_dropped": sum(d.segments_dropped for d in self.datasets.values()),
            "old_files_checked_gone": sum(d.old_files_checked_gone for d in self.datasets.values()),
            "complete": complete,
            "hashes_left_index": complete and entries_kept == 0 and not rows,
            "prefix_rows_kept": len(rows),
            "prefix_rows_shared": shared,
            "prefix_rows_verified_clean": len(rows) - shared,
            "datasets": datasets,
        }


def erase_in_segments(
    index: SegmentStore,
    dataset_id: str,
    going: Mapping[str, Iterable[EntryState]],
    *,
    scrub: Iterable[str],
    drop_pointers: Iterable[str],
    evidence: SegmentEvidence,
) -> tuple[
    list[tuple[str, EntryState]], list[tuple[str, EntryState]], list[tuple[str, EntryState]]
]:
    """One erasure of the dataset's segments: the going entries (each while it describes its
    state) and the dead rows of `scrub` (hashes). Returns (removed, changed, kept_shared) as
    (object URL, state); kept_shared: prefixes only, rows another subject of the same object
    version shares (they stay). Raises IndexNotErasedError when an old file was not checked
    gone."""
    targets: dict[str, dict[str, EntryState | None]] = {
        url: {s.subject_hash: s for s in states} for url, states in going.items()
    }
    hashes = sorted(set(scrub))
    if hashes:
        targets[SCRUB_ONLY.format(dataset=dataset_id)] = dict.fromkeys(hashes)
    if not targets:
        return [], [], []
    erasure = index.eraser.erase(dataset_id, targets, drop_pointers)
    evidence.add(dataset_id, erasure)
    if not erasure.complete:
        raise IndexNotErasedError(
            f"dataset {dataset_id}: an old segment file of the erasure was not found gone; the "
            "hashes may still be stored (run the index update again)"
        )
    shared = list(getattr(erasure, "kept_shared", ()))
    return list(erasure.removed), list(erasure.changed), shared


def scrub_datasets(
    index: SegmentStore,
    subjects: frozenset[str],
    of: Callable[[str], frozenset[str]],
    evidence: SegmentEvidence,
    done: set[str],
) -> None:
    """The request's hashes' dead rows in every dataset of the manifest the update did not
    erase in yet (`done`)."""
    for dataset_id in sorted(set(index.manifest.datasets()) - done):
        hashes = of(dataset_id) & subjects
        if hashes:
            erase_in_segments(
                index, dataset_id, {}, scrub=hashes, drop_pointers=(), evidence=evidence
            )
