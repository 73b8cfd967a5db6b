"""The documents of one erasure, in the reports bucket under `erasure/<request_id>/`:

    manifest.json      the frozen report: every object (and every stored version) that holds the
                       request's subjects, from the index, with version ids and ETags taken from
                       the objects themselves; its SHA-256 is stored on the request and shown to
                       the approver, and the erase job refuses a manifest that does not match it
    summary.txt/.html  what the approver reads: the datasets looked up, counts per dataset and
                       zone, the subjects not looked up in a dataset; never keys or ids
    results.json       what the erase job did to each object (before/after versions, rows)
    verification.json  what the verify run found when it read every object again
    audit.json         the append-only audit record (written once, never overwritten)
    certificate.json   the signed erasure certificate, and certificate.html its rendering

`build_manifest` reads the index and S3 through their owners; the rendering is pure. Hashes are
per dataset (lethe_shared.erasure.subjects): the manifest keeps an index entry only when its
hash is one of its dataset's (`Manifest.hashes_for`), and the erase job matches each object
with its dataset's hashes alone.

**Pins** (lethe_shared.erasure.pins): the frozen report records what its rows were matched with,
so the erase job can refuse to match with anything else: `Manifest.key_fingerprint` (the subject
hash key the request's ids were hashed with, recorded at intake), `Manifest.dataset_pins` (each
dataset's matching generation and fingerprint, read from the registry when the report was
frozen) and, per index entry, the matching and key fingerprints it was computed with
(`SubjectRows`). Manifests made before pins have none: the erase job refuses every object of
them (`report_unpinned`).
"""

from __future__ import annotations

import hashlib
import html
import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Literal

from pydantic import ConfigDict, Field

from lethe_shared.aws.s3 import KeyState, ObjectStore, ObjectVersion, key_state, split_s3_url
from lethe_shared.catalog.zones import Zone
from lethe_shared.datasets.retention import RetentionSpec
from lethe_shared.erasure.subjects import HashGroup, NotLookedUp, hashes_in
from lethe_shared.index.subject_index import IndexEntry, SubjectIndex
from lethe_shared.models import Model

# 2: hashes per dataset (hash_groups), the request's scope, the subjects not looked up
# 3: pins (key_fingerprint, dataset_pins, each SubjectRows' fingerprints)
MANIFEST_VERSION = 3
REPORT_PREFIX = "erasure"


def report_key(request_id: str, name: str) -> str:
    """Where a document of the request lives in the reports bucket."""
    return f"{REPORT_PREFIX}/{request_id}/{name}"


def canonical_json(document: Any) -> bytes:
    """Sorted keys, no insignificant whitespace, UTF-8: the bytes that are hashed and stored."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class StoredVersionRef(Model):
    model_config = ConfigDict(frozen=True)

    version_id: str
    etag: str = ""
    size: int = 0
    is_latest: bool = False
    delete_marker: bool = False
    last_modified: str = ""


class SubjectRows(Model):
    """What the index says about one subject in one object."""

    model_config = ConfigDict(frozen=True)

    subject_hash: str
    rows: int
    older_versions_only: bool  # the entry is flagged: the rows are in older versions
    version_id: str
    etag: str
    # the pin of the index entry (IndexEntry.matching_fingerprint, .key_fingerprint): what its
    # rows were computed with; "" in an entry written before pins, and in older manifests
    matching_fingerprint: str = ""
    key_fingerprint: str = ""


class DatasetPin(Model):
    """A dataset's matching definition as the registry held it when the report was frozen
    (Registration.matching_generation, .matching_fingerprint): what the erase job must still
    find, or refuse the dataset's objects (lethe_shared.erasure.pins)."""

    model_config = ConfigDict(frozen=True)

    dataset_id: str
    matching_generation: int
    matching_fingerprint: str


class ManifestObject(Model):
    model_config = ConfigDict(frozen=True)

    object_url: str
    bucket: str
    key: str
    dataset_id: str
    zone: Zone
    format: str
    state: KeyState
    expected_rows: int  # the subjects' rows in the current version, as the index counts them
    subjects: tuple[SubjectRows, ...]
    versions: tuple[StoredVersionRef, ...]  # every version and delete marker, newest first
    # "" for an object the index names; for a raw key the report added because the index
    # cannot know it (erasure/scope.py widen), the catalog status that put it there (FAILED,
    # SUPERSEDED): the erase job names an unreadable current version of such a key as a gap
    # (`ingestion_failed`) instead of failing the run. Absent in older manifests.
    widened_from: str = ""

    @property
    def size(self) -> int:
        return max((v.size for v in self.versions if v.is_latest), default=0)


class HeldPlace(Model):
    """What a legal hold kept out of the report when it was frozen (lethe_shared.erasure.
    legal_holds): a whole dataset (`subject_hashes` empty), or these of the request's subject
    hashes in the dataset."""

    model_config = ConfigDict(frozen=True)

    hold_id: str
    dataset_id: str
    subject_hashes: tuple[str, ...] = ()


class Manifest(Model):
    model_config = ConfigDict(frozen=True)

    manifest_version: int = MANIFEST_VERSION
    request_id: str
    created_at: str
    subject_hashes: tuple[str, ...]
    subject_count: int
    # each dataset looked up in and the hashes its rows are matched with; () in a manifest of a
    # request filed before hashes were per dataset: every hash in every dataset
    hash_groups: tuple[HashGroup, ...] = ()
    scope: tuple[str, ...] = ()  # the datasets the request named; (): every registered one
    not_looked_up: tuple[NotLookedUp, ...] = ()
    objects: tuple[ManifestObject, ...]
    # raw versions older than the request that this erasure cannot search (still being
    # ingested, quarantined whole, archived): named, never silently left (erasure/scope.py)
    not_searched: tuple[NotSearched, ...] = ()
    # the pins (module docstring; "" and (): a manifest made before pins, refused by the job)
    key_fingerprint: str = ""
    dataset_pins: tuple[DatasetPin, ...] = ()
    # what legal holds kept out of this report (named in not_searched as `legal_hold` too)
    legal_holds: tuple[HeldPlace, ...] = ()
    # a retention run's report (lethe_shared.erasure.retention_run): per dataset, the rule the
    # erase job applies instead of subject hashes; () in an erasure's
    retention: tuple[RetentionSpec, ...] = ()

    def bytes(self) -> bytes:
        return canonical_json(self.model_dump(mode="json"))

    def hashes_for(self, dataset_id: str) -> tuple[str, ...]:
        """The hashes the rows of `dataset_id` are matched with (none outside the request's
        datasets): what the erase job matches each object of that dataset with."""
        return hashes_in(self.hash_groups, self.subject_hashes, dataset_id)

    def pin_of(self, dataset_id: str) -> DatasetPin | None:
        """The dataset's pin (None: the report recorded none for it)."""
        return next((p for p in self.dataset_pins if p.dataset_id == dataset_id), None)

    @property
    def looked_up(self) -> tuple[str, ...]:
        """The datasets the subjects were looked up in (() : every dataset, hashes as given)."""
        return tuple(sorted(d for g in self.hash_groups for d in g.datasets))


class DatasetCount(Model):
    model_config = ConfigDict(frozen=True)

    dataset_id: str
    zone: Zone
    objects: int
    versions: int
    rows: int


def dataset_counts(manifest: Manifest) -> list[DatasetCount]:
    """Per dataset and zone: objects, stored versions holding data, and the subjects' rows in
    the current versions (older versions are scanned when erasing: their rows are not known)."""
    groups: dict[tuple[str, Zone], list[ManifestObject]] = defaultdict(list)
    for item in manifest.objects:
        groups[(item.dataset_id, item.zone)].append(item)
    return [
        DatasetCount(
            dataset_id=dataset,
            zone=zone,
            objects=len(items),
            versions=sum(1 for o in items for v in o.versions if not v.delete_marker),
            rows=sum(o.expected_rows for o in items),
        )
        for (dataset, zone), items in sorted(groups.items())
    ]


def version_ref(version: ObjectVersion) -> StoredVersionRef:
    """A stored version (or delete marker) as the manifest lists it."""
    return StoredVersionRef(
        version_id=version.version_id,
        etag=version.etag,
        size=version.size,
        is_latest=version.is_latest,
        delete_marker=version.delete_marker,
        last_modified=version.last_modified.isoformat() if version.last_modified else "",
    )


def _manifest_object(
    object_url: str, entries: Sequence[IndexEntry], versions: Sequence[ObjectVersion]
) -> ManifestObject:
    bucket, key = split_s3_url(object_url)
    first = entries[0]
    return ManifestObject(
        object_url=object_url,
        bucket=bucket,
        key=key,
        dataset_id=first.dataset_id,
        zone=first.zone,
        format=first.format,
        state=key_state(versions),
        expected_rows=sum(e.rows for e in entries if not e.deleted),
        subjects=tuple(
            SubjectRows(
                subject_hash=e.subject_hash,
                rows=e.rows,
                older_versions_only=e.deleted,
                version_id=e.version_id,
                etag=e.etag,
                matching_fingerprint=e.matching_fingerprint,
                key_fingerprint=e.key_fingerprint,
            )
            for e in sorted(entries, key=lambda e: e.subject_hash)
        ),
        versions=tuple(version_ref(v) for v in versions),
    )


def build_manifest(
    request_id: str,
    subject_hashes: Sequence[str],
    subject_count: int,
    *,
    index: SubjectIndex,
    objects: ObjectStore,
    now: datetime,
    hash_groups: Sequence[HashGroup] = (),
    scope: Sequence[str] = (),
    not_looked_up: Sequence[NotLookedUp] = (),
) -> Manifest:
    """Every object the index names for any of the subjects in its dataset (an entry counts
    when its hash is one of its dataset's, `hash_groups`; without groups, any of the hashes),
    flagged entries included (their rows sit in older versions), with every stored version of
    each exact key as S3 lists it now. Objects of which no version is left are kept, marked
    `gone`: nothing to erase, but their index entries go when the request completes."""
    union = tuple(sorted(set(subject_hashes)))
    wanted: dict[str, frozenset[str]] = {}
    by_object: dict[str, list[IndexEntry]] = defaultdict(list)
    found = index.lookup_many(union)  # one read for every subject (lookup of each)
    for subject in union:
        for entry in found[subject]:
            dataset = entry.dataset_id
            if dataset not in wanted:
                wanted[dataset] = frozenset(hashes_in(hash_groups, union, dataset))
            if entry.subject_hash in wanted[dataset]:
                by_object[entry.object_url].append(entry)
    items = []
    for url in sorted(by_object):
        bucket, key = split_s3_url(url)
        items.append(_manifest_object(url, by_object[url], objects.versions_of(bucket, key)))
    return Manifest(
        request_id=request_id,
        created_at=now.isoformat(),
        subject_hashes=union,
        subject_count=subject_count,
        hash_groups=tuple(hash_groups),
        scope=tuple(scope),
        not_looked_up=tuple(not_looked_up),
        objects=tuple(items),
    )


def report_notes(manifest: Manifest) -> list[str]:
    """What the approver must read besides the counts: the datasets the subjects were looked
    up in, and the subjects no value of a dataset's subject column type equals (not looked up
    there). Counts, dataset ids and column types only."""
    notes: list[str] = []
    if manifest.scope:
        notes.append(f"Datasets: {', '.join(manifest.scope)} (named in the request)")
    elif manifest.hash_groups:
        looked_up = manifest.looked_up
        notes.append(
            f"Datasets: all {len(looked_up)} registered when the request was filed "
            f"({', '.join(looked_up)})"
        )
    notes += [m.line() for m in manifest.not_looked_up]
    for place in manifest.legal_holds:  # lethe_shared.erasure.legal_holds
        held = (
            f"{len(place.subject_hashes)} subject(s) not erased in dataset {place.dataset_id}"
            if place.subject_hashes
            else f"dataset {place.dataset_id} not erased"
        )
        notes.append(f"Legal hold {place.hold_id}: {held}")
    return notes


class ReportSummary(Model):
    """What the request record keeps about its report."""

    model_config = ConfigDict(frozen=True)

    manifest_url: str
    manifest_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    summary_text_url: str
    summary_html_url: str
    objects: int
    versions: int
    rows: int
    datasets: tuple[DatasetCount, ...]
    notes: tuple[str, ...] = ()  # report_notes: the datasets looked up, what was not


def summary_text(manifest: Manifest, sha256: str, requested_by: str) -> str:
    counts = dataset_counts(manifest)
    notes = report_notes(manifest)
    lines = [
        f"Erasure request {manifest.request_id}",
        f"Requested by: {requested_by}",
        f"Subjects: {manifest.subject_count}",
        f"Report created: {manifest.created_at}",
        f"Report SHA-256: {sha256}",
        *(["", *notes] if notes else []),
        "",
        f"{'DATASET':24} {'ZONE':5} {'OBJECTS':>8} {'VERSIONS':>9} {'ROWS':>8}",
    ]
    lines += [
        f"{c.dataset_id:24} {c.zone.value:5} {c.objects:>8} {c.versions:>9} {c.rows:>8}"
        for c in counts
    ]
    if not counts:
        lines.append("(no object holds these subjects)")
    lines += [
        "",
        "Rows are the subjects' rows in the current versions, as the index counts them. Every",
        "stored version of these objects is scanned and rewritten or deleted when erasing.",
    ]
    gaps = _gap_counts(manifest.not_searched)
    if gaps:
        lines += [
            "",
            "NOT SEARCHED: raw versions older than the request that this erasure cannot reach,",
            "and datasets whose re-index is pending (reindex_pending: the whole dataset); the",
            "certificate names them. The manifest says what to do for each.",
            f"{'DATASET':24} {'REASON':22} {'VERSIONS':>9}",
        ]
        lines += [f"{d:24} {r:22} {n:>9}" for (d, r), n in gaps]
    return "\n".join(lines) + "\n"


def _gap_counts(gaps: Iterable[NotSearched]) -> list[tuple[tuple[str, str], int]]:
    """Not-searched versions per (dataset, reason), sorted."""
    counted: dict[tuple[str, str], int] = defaultdict(int)
    for gap in gaps:
        counted[(gap.dataset_id, gap.reason)] += 1
    return sorted(counted.items())


def summary_html(manifest: Manifest, sha256: str, requested_by: str) -> str:
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in report_notes(manifest))
    rows = (
        "".join(
            f"<tr><td>{html.escape(c.dataset_id)}</td><td>{c.zone.value}</td>"
            f'<td class="n">{c.objects}</td><td class="n">{c.versions}</td>'
            f'<td class="n">{c.rows}</td></tr>'
            for c in dataset_counts(manifest)
        )
        or '<tr><td colspan="5">No object holds these subjects.</td></tr>'
    )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>Erasure report {html.escape(manifest.request_id)}</title></head><body>"
        f"<h1>Erasure report {html.escape(manifest.request_id)}</h1>"
        f"<p>Requested by {html.escape(requested_by)}; {manifest.subject_count} subject(s); "
        f"created {html.escape(manifest.created_at)}.</p>"
        f"<p>Report SHA-256: <code>{sha256}</code></p>"
        + (f'<ul id="report-notes">{notes}</ul>' if notes else "")
        + "<table><thead><tr><th>Dataset</th><th>Zone</th><th>Objects</th><th>Versions</th>"
        f"<th>Rows</th></tr></thead><tbody>{rows}</tbody></table>"
        "<p>Rows are the subjects' rows in the current versions, as the index counts them. "
        "Every stored version of these objects is scanned and rewritten or deleted when "
        f"erasing.</p>{_gaps_html(manifest)}</body></html>"
    )


def _gaps_html(manifest: Manifest) -> str:
    gaps = _gap_counts(manifest.not_searched)
    if not gaps:
        return ""
    rows = "".join(
        f'<tr><td>{html.escape(d)}</td><td>{html.escape(r)}</td><td class="n">{n}</td></tr>'
        for (d, r), n in gaps
    )
    return (
        '<h2 id="not-searched">Not searched</h2>'
        "<p>Raw versions older than the request that this erasure cannot reach, and datasets "
        "whose re-index is pending (reindex_pending: the whole dataset); the certificate names "
        "them. The manifest says what to do for each.</p>"
        "<table><thead><tr><th>Dataset</th><th>Reason</th><th>Versions</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
    )


# ------------------------------------------------------------------------- erase results

# "incomplete": the current version was left as it is (nothing of the subjects found in it),
# but not all of it could be searched or what was found is not what the index counted: its
# `not_searched` says why (never a plain "unchanged"). "refused": the erase job did not touch
# the object at all (no version read, written or purged) because the report's pins do not
# hold (lethe_shared.erasure.pins); its `not_searched` says which and what to do.
ObjectAction = Literal[
    "rewritten", "deleted", "unchanged", "incomplete", "purged", "gone", "refused"
]

# Why an object, a version or a dataset was not fully searched for the request's subjects.
# Each makes the request INCOMPLETE (status FAILED, outcome INCOMPLETE) and is named in the
# results, the audit record and the certificate; none is ever reported as "unchanged".
GapReason = Literal[
    "unparseable_records",  # lines or rows that could not be parsed were kept as they are
    "missing_subject_column",  # the object lacks a subject column: its rows cannot be matched
    "ambiguous_subject_column",  # several fields equal the subject column ignoring case
    "rows_differ_from_index",  # the version the index described matched other rows than it said
    "ingestion_in_flight",  # a raw version older than the request was still being ingested
    "ingestion_failed",  # a raw version whose ingestion failed: never indexed
    "quarantined",  # a raw version quarantined whole: never indexed
    "archived",  # a version in an archive storage class: not readable without a restore
    "appeared_after_erase",  # an index entry written after the erase began
    # a dataset whose matching definition changed and whose re-index had not succeeded when the
    # report was frozen: its index describes the old definition's rows, so objects holding the
    # subjects under the current one may not be listed (the whole dataset: object_url is its raw
    # prefix, no version; lethe_shared.erasure.scope)
    "reindex_pending",
    # refused by the erase job, the object untouched (lethe_shared.erasure.pins): the dataset's
    # matching definition is not the one the report was frozen with (definition_changed), the
    # subject hash key is not the one the request's ids were hashed with (hash_key_changed),
    # the object's index entries were computed with another definition or key than the
    # report's pins, or before pins (index_stale), the report records no pins (report_unpinned)
    "definition_changed",
    "hash_key_changed",
    "index_stale",
    "report_unpinned",
    # held (lethe_shared.datasets.holds, Art. 17(3)): a dataset, or subjects of the request in
    # a dataset, under a legal hold: their rows were deliberately not erased
    # (lethe_shared.erasure.legal_holds: left out of the report when it was frozen, the dataset
    # named by its raw prefix; or, for a hold added after the report, the object refused by
    # the erase job, untouched)
    "legal_hold",
]


class NotSearched(Model):
    """One place the request's subjects may still be, and why it was not (fully) searched.
    `detail` is for the operator and never holds a subject id or a raw value; `count` is the
    number of lines or rows concerned where that is known (0: not known)."""

    model_config = ConfigDict(frozen=True)

    object_url: str
    version_id: str = ""
    dataset_id: str = ""
    reason: GapReason
    count: int = 0
    detail: str = ""


class VersionRef(Model):
    model_config = ConfigDict(frozen=True)

    version_id: str
    etag: str = ""


class ObjectResult(Model):
    """What the erase job did to one object of the manifest."""

    model_config = ConfigDict(frozen=True)

    object_url: str
    dataset_id: str
    zone: Zone
    action: ObjectAction
    versions_before: tuple[VersionRef, ...]
    version_after: VersionRef | None  # None: no version of the key is left
    rows_before: int
    rows_removed: int
    rows_after: int
    versions_purged: int
    attempts: int = 1
    deviations: tuple[str, ...] = ()
    not_searched: tuple[NotSearched, ...] = ()  # what of this object was not fully searched

    @property
    def refused(self) -> bool:
        """The erase job refused the object: nothing of it was touched (pins)."""
        return self.action == "refused"


class EraseResults(Model):
    model_config = ConfigDict(frozen=True)

    request_id: str
    manifest_sha256: str
    correlation_id: str
    finished_at: str
    objects: tuple[ObjectResult, ...]

    @property
    def rows_removed(self) -> int:
        return sum(o.rows_removed for o in self.objects)

    @property
    def versions_purged(self) -> int:
        return sum(o.versions_purged for o in self.objects)

    @property
    def not_searched(self) -> tuple[NotSearched, ...]:
        return tuple(gap for o in self.objects for gap in o.not_searched)


class ObjectCheck(Model):
    model_config = ConfigDict(frozen=True)

    object_url: str
    ok: bool
    matching_rows: int
    rows: int | None  # rows of the version left (None: no version left)
    versions_left: int
    problem: str = ""
    # the verify run erased the object again this many times before this check (a producer
    # wrote it after the erase run, or the subjects' rows or older versions were still there),
    # and what each check before a round found; 0 and (): checked once (lethe_jobs.erase_again)
    erased_again: int = 0
    erased_again_because: tuple[str, ...] = ()


class Verification(Model):
    model_config = ConfigDict(frozen=True)

    request_id: str
    correlation_id: str
    verified_at: str
    objects: tuple[ObjectCheck, ...]

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.objects)

    @property
    def matching_rows(self) -> int:
        return sum(o.matching_rows for o in self.objects)


def results_totals(results: Iterable[ObjectResult]) -> dict[str, int]:
    listed = list(results)
    return {
        "objects": len(listed),
        "rewritten": sum(o.action == "rewritten" for o in listed),
        "deleted": sum(o.action == "deleted" for o in listed),
        "rows_removed": sum(o.rows_removed for o in listed),
        "versions_purged": sum(o.versions_purged for o in listed),
    }
