"""The subject index after an erasure (the Update Index step, `workflow.update_index`): what the
erasure made untrue goes; what it never saw stays, and is named.

Per object of results.json, the versions the erasure *saw* are the ones the erase job read
(`versions_before`, its first listing of the key) and the one it left (`version_after`). An
entry describes a seen version when its version id is one of them (for the `null` version of a
key written while versioning was off, its ETag too: every overwrite reuses that id).

- A key erasure deleted (no `version_after`): every entry, of any subject, goes when it
  describes a seen version.
- A key erasure rewrote or found clean: the request's subjects' entries go when they describe a
  seen version (verification found none of their rows in `version_after`); entries flagged
  `deleted` (any subject) go when they describe a version erasure purged (`versions_before`,
  not `version_after`). A flag on `version_after` itself was set by a later version that no
  longer holds that subject; `version_after` still holds its rows, so the entry stays
  (`erasure_version_stored`). Other subjects' unflagged entries are not touched.
- An entry that describes a version erasure never saw: S3 lists the key again. A version no
  longer stored took its rows with it, so the entry goes. A version still stored was written
  after the erasure read the key (a producer, indexed meanwhile): the entry stays
  (`later_version`).
- A key the erase job refused (action `refused`, lethe_shared.erasure.pins: the report's pins
  no longer hold, so nothing of it was touched): no entry of it is touched, of any subject, so
  the subjects stay findable there; the request's subjects' entries are kept items
  (`erasure_refused`), which the erase results already name as not searched (with why and what
  to do), so `not_searched` does not name them again.
- Every removal is conditional (lethe_shared.index.entry_removal): an indexer that rewrites the
  entry between the read and the delete wins, and the entry is judged again as it is now (at
  most MAX_ROUNDS reads; then it stays, `still_changing`).

Last, the index is asked for every entry of the request's subjects. Each one it still holds is
a place the erasure did not clear: a version it never saw (`later_version`), an object not in
its results (`object_not_erased`: indexed after the report was frozen), or a version it saw,
indexed again after its entry was removed (`indexed_again`; a later run removes it). These are
the `kept` items, one per (object, version) with its dataset and the rows the index counts there,
never a subject hash; `not_searched` turns them into report.NotSearched items
(`appeared_after_erase`) for the certificate step. The counts (entries removed, flags pruned,
entries kept by reason, conditional deletes that found the entry changed) are logged and
returned; nothing here logs a subject hash or id.

Run again, it removes nothing more and reports the same kept items.

On a segment dataset of 48-bit prefixes (lethe_shared.erasure.index_segments_update) a row two
subjects of one version share stays and is a kept item (`shared_prefix`: it still counts the
erased subject's rows); a request subject's entry on the version erasure left, which the erase
job verified free of the subject's rows, is another subject's: it stays and is not a kept item.
Both are named in the evidence (`segments.prefix_rows`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from lethe_shared.aws.s3 import NULL_VERSION, ObjectStore, ObjectVersion, split_s3_url
from lethe_shared.erasure.index_segments import SegmentEvidence, SegmentStore
from lethe_shared.erasure.report import EraseResults, NotSearched, ObjectResult, VersionRef
from lethe_shared.erasure.requests import ErasureRequest
from lethe_shared.index.entry_removal import EntryState
from lethe_shared.index.subject_index import SubjectIndex
from lethe_shared.subject_hashing.shown_keys import Namer, RedactingNamer

LOG = logging.getLogger("lethe.erasure")
_KEYLESS: Namer = RedactingNamer()  # where no hash key is given: the dataset prefix only

DOCUMENT = "index_update.json"  # the whole update, kept items all listed, in the reports bucket
KEPT_LISTED = 100  # kept items the request record and the step's output list (the rest: counted)
MAX_ROUNDS = 3  # reads of one object's entries while indexers keep changing them

KeptReason = Literal[
    "later_version",  # a version the erasure never read or wrote, still stored
    "object_not_erased",  # an object not in the erasure's results
    "indexed_again",  # a version the erasure saw, indexed again after its entry was removed
    "erasure_version_stored",  # a flag on the version erasure left, which is still stored
    "still_changing",  # changed on every read (MAX_ROUNDS)
    "erasure_refused",  # an object the erase job refused, untouched (named by its results)
    "shared_prefix",  # 48-bit prefixes: a row the subject shares with another of that version
]
KEPT_REASONS: tuple[KeptReason, ...] = (
    "later_version",
    "object_not_erased",
    "indexed_again",
    "erasure_version_stored",
    "still_changing",
    "erasure_refused",
    "shared_prefix",
)
_DETAILS: Mapping[str, str] = {
    "later_version": (
        "the index names this version for {rows} row(s) of the request's subjects: a version "
        "the erasure never read or wrote (written after it read the key)"
    ),
    "object_not_erased": (
        "the index names this object for {rows} row(s) of the request's subjects: an object "
        "the erasure's report did not list (indexed after the report was frozen)"
    ),
    "indexed_again": (
        "the index names this version for {rows} row(s) of the request's subjects again after "
        "the index update removed it"
    ),
    "shared_prefix": (
        "the subject index keeps a row for this version keyed by the 48-bit prefix of the "
        "subject's keyed hash, because another subject of the same version, still present, "
        "shares that prefix; the row still counts {rows} row(s) of both subjects until the "
        "object is indexed again (the erase job removed this subject's rows)"
    ),
}

_REMOVE, _PRUNE = "remove", "prune"


@dataclass
class IndexUpdate:
    """What the index update did, and what it kept."""

    entries_removed: int = 0  # the request's subjects' entries, and every entry of deleted keys
    flagged_pruned: int = 0  # flagged entries of versions the erasure purged
    conditions_failed: int = 0  # conditional deletes that found the entry changed meanwhile
    kept_reasons: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KEPT_REASONS, 0))
    kept: list[dict[str, Any]] = field(default_factory=list)  # the request's, per version
    # the segment store's evidence (lethe_shared.erasure.index_segments); None with DynamoDB
    segments: SegmentEvidence | None = None

    @property
    def entries_kept(self) -> int:
        return sum(self.kept_reasons.values())

    def segment_document(self) -> dict[str, Any] | None:
        if self.segments is None:
            return None
        return self.segments.document(len(self.kept))

    def document(self) -> dict[str, Any]:
        """Everything, every kept item listed (the reports bucket's index_update.json); with
        the segment store, its evidence under `segments` (every segment rewritten)."""
        found = {**self._counts(), "kept": list(self.kept)}
        segments = self.segment_document()
        if segments is not None:
            found["segments"] = segments
        return found

    def summary(self, document_url: str = "", namer: Namer = _KEYLESS) -> dict[str, Any]:
        """What the request record and the step's output keep: the first KEPT_LISTED kept
        items, each object named by its shown key (the record is shown and kept forever, the
        output goes into the execution history), and how many more the document lists."""
        return {
            **self._counts(),
            "kept": [
                {**item, "object_url": namer.url(str(item["object_url"]))}
                for item in self.kept[:KEPT_LISTED]
            ],
            "kept_unlisted": max(len(self.kept) - KEPT_LISTED, 0),
            "document": document_url,
            **self._segment_counts(),
        }

    def _segment_counts(self) -> dict[str, Any]:
        """The segment evidence's totals (the document has every rewrite)."""
        segments = self.segment_document()
        if segments is None:
            return {}
        return {"segments": {k: v for k, v in segments.items() if k != "datasets"}}

    def _counts(self) -> dict[str, Any]:
        return {
            "entries_removed": self.entries_removed,
            "flagged_pruned": self.flagged_pruned,
            "entries_kept": self.entries_kept,
            "kept_reasons": dict(self.kept_reasons),
            "conditions_failed": self.conditions_failed,
        }


def settle_index(
    results: EraseResults,
    subject_hashes: Iterable[str],
    *,
    index: SubjectIndex,
    objects: ObjectStore,
    hashes_for: Callable[[str], Iterable[str]] | None = None,
    namer: Namer = _KEYLESS,
) -> IndexUpdate:
    """Remove the entries the erasure made untrue, keep the others (module docstring).
    `hashes_for(dataset_id)`: the request's hashes in that dataset (an id canonicalised per
    typed column hashes differently per dataset, and a hash of one dataset's form may be another
    subject in another dataset); None: every hash in every dataset."""
    subjects = frozenset(subject_hashes)

    def of(dataset_id: str) -> frozenset[str]:
        return subjects if hashes_for is None else frozenset(hashes_for(dataset_id)) & subjects

    update = IndexUpdate()
    if isinstance(index, SegmentStore):  # segments: one erasure per dataset (index_segments)
        from lethe_shared.erasure.index_segments_update import settle_segments  # noqa: PLC0415

        settle_segments(results, subjects, of, index, objects=objects, update=update)
    else:
        for result in results.objects:
            if not result.refused:  # a refused object is untouched: every entry of it stays
                _settle_object(result, of(result.dataset_id), index, objects, update)
    _collect_kept(results, subjects, index, update, of)
    LOG.info(
        "index updated: %d entries removed, %d flagged pruned, %d kept (%s), %d conditional "
        "deletes found the entry changed",
        update.entries_removed, update.flagged_pruned, update.entries_kept,
        ", ".join(f"{k} {v}" for k, v in update.kept_reasons.items() if v) or "none",
        update.conditions_failed,
    )  # fmt: skip
    for item in update.kept[:KEPT_LISTED]:
        LOG.warning(
            "still indexed for the request's subjects: %s version %s (%s, %d rows)",
            namer.url(str(item["object_url"])), item["version_id"], item["reason"], item["rows"],
        )  # fmt: skip
    return update


def same_version(version_id: str, etag: str, ref: VersionRef | ObjectVersion) -> bool:
    """Whether (version id, ETag) names the version `ref`: the same id, the same ETag when both
    are known; the `null` version only with both ETags known and equal."""
    if version_id != ref.version_id:
        return False
    if etag and ref.etag:
        return etag == ref.etag
    return version_id != NULL_VERSION


def _target(state: EntryState, result: ObjectResult, subjects: frozenset[str]) -> str | None:
    """What the update may do to the entry: remove it (a key erasure deleted, or the request's
    subject), prune it (another subject's flag), or nothing (None)."""
    if result.version_after is None or state.subject_hash in subjects:
        return _REMOVE
    return _PRUNE if state.deleted else None


def _verdict(state: EntryState, result: ObjectResult, target: str) -> bool | None:
    """True: the entry goes; False: it stays (a flag on the version erasure left); None: the
    erasure never saw its version, S3 decides."""
    after = result.version_after
    if after is not None and same_version(state.version_id, state.etag, after):
        return target == _REMOVE  # verified clean of the subjects; another's rows are there
    if any(same_version(state.version_id, state.etag, v) for v in result.versions_before):
        return True
    return None


def is_stored(state: EntryState, versions: Sequence[ObjectVersion]) -> bool:
    """Whether a version the entry may describe is stored (a delete marker holds nothing). Where
    the ETag cannot tell (an unknown ETag on a `null` version), the version counts as stored."""
    return any(
        not v.delete_marker
        and v.version_id == state.version_id
        and (
            state.version_id != NULL_VERSION or not state.etag or not v.etag or state.etag == v.etag
        )
        for v in versions
    )


def _settle_object(
    result: ObjectResult,
    subjects: frozenset[str],
    index: SubjectIndex,
    objects: ObjectStore,
    update: IndexUpdate,
) -> None:
    url = result.object_url
    found = {s.subject_hash: s for s in index.entry_states(url)}  # by_object: may lag
    found.update((s.subject_hash, s) for s in index.entry_states(url, subjects))  # by key
    pending = list(found.values())
    for _ in range(MAX_ROUNDS):
        going = _judge(pending, result, subjects, objects, update)
        if not going:
            return
        removal = index.remove_unchanged(url, [state for state, _ in going.values()])
        for state in removal.removed:
            if going[state.subject_hash][1] == _REMOVE:
                update.entries_removed += 1
            else:
                update.flagged_pruned += 1
        update.conditions_failed += len(removal.changed)
        pending = list(removal.changed)  # as they are now: judged again
        if not pending:
            return
    for state in pending:
        if _target(state, result, subjects) is not None:
            _keep(update, state, subjects, "still_changing")


def _judge(
    states: Iterable[EntryState],
    result: ObjectResult,
    subjects: frozenset[str],
    objects: ObjectStore,
    update: IndexUpdate,
) -> dict[str, tuple[EntryState, str]]:
    """The entries that go (by subject: the state read and remove or prune); the ones that stay
    are counted. S3 lists the key (again) when an entry describes a version erasure never saw."""
    going: dict[str, tuple[EntryState, str]] = {}
    unseen: list[tuple[EntryState, str]] = []
    for state in states:
        target = _target(state, result, subjects)
        if target is None:
            continue
        verdict = _verdict(state, result, target)
        if verdict is None:
            unseen.append((state, target))
        elif verdict:
            going[state.subject_hash] = (state, target)
        else:
            _keep(update, state, subjects, "erasure_version_stored")
    if unseen:
        stored = objects.versions_of(*split_s3_url(result.object_url))
        for state, target in unseen:
            if is_stored(state, stored):
                _keep(update, state, subjects, "later_version")
            else:
                going[state.subject_hash] = (state, target)
    return going


def _keep(update: IndexUpdate, state: EntryState, subjects: frozenset[str], reason: str) -> None:
    """Count a kept entry of another subject; the request's subjects' kept entries are counted
    once, by what the index still holds at the end (_collect_kept)."""
    if state.subject_hash not in subjects:
        update.kept_reasons[reason] += 1


def _collect_kept(
    results: EraseResults,
    subjects: frozenset[str],
    index: SubjectIndex,
    update: IndexUpdate,
    of: Callable[[str], frozenset[str]],
) -> None:
    """Every entry the index still holds for the request's subjects (in its own dataset: a
    hash another dataset's form of an id gave is another subject there), as kept items."""
    erased = {r.object_url: r for r in results.objects}
    rows: dict[tuple[str, str, str, str], int] = {}
    prefix_rows = update.segments.prefix_rows() if update.segments is not None else {}
    ordered = sorted(subjects)
    found = index.lookup_many(ordered)  # one read for every subject (lookup of each)
    for subject in ordered:
        for entry in found[subject]:
            if subject not in of(entry.dataset_id):
                continue
            result = erased.get(entry.object_url)
            reason: KeptReason
            why = prefix_rows.get((entry.object_url, entry.version_id))
            if why == "verified_clean":
                continue  # another subject's row: the version holds none of this subject's rows
            if why == "shared":
                reason = "shared_prefix"
            elif result is None:
                reason = "object_not_erased"
            elif result.refused:
                reason = "erasure_refused"
            elif _verdict(EntryState(subject, entry.version_id, entry.etag), result, _REMOVE):
                reason = "indexed_again"
            else:
                reason = "later_version"
            update.kept_reasons[reason] += 1
            group = (entry.object_url, entry.version_id, entry.dataset_id, reason)
            rows[group] = rows.get(group, 0) + entry.rows
    update.kept = [
        {"object_url": url, "version_id": version, "dataset_id": dataset, "rows": count,
         "reason": reason}
        for (url, version, dataset, reason), count in sorted(rows.items())
    ]  # fmt: skip


def not_searched(index_update: Mapping[str, Any]) -> tuple[NotSearched, ...]:
    """The kept items of an index update (its summary, as the request record keeps it under
    `index`) as NotSearched items, reason `appeared_after_erase`: one per (object, version),
    and one naming the update's document for the items beyond KEPT_LISTED. Items of objects
    the erase job refused (`erasure_refused`) are not: its results name those objects."""
    found = [
        NotSearched(
            object_url=str(item["object_url"]),
            version_id=str(item.get("version_id", "")),
            dataset_id=str(item.get("dataset_id", "")),
            reason="appeared_after_erase",
            count=int(item.get("rows", 0)),
            detail=_DETAILS.get(str(item.get("reason", "")), _DETAILS["later_version"]).format(
                rows=int(item.get("rows", 0))
            ),
        )
        for item in index_update.get("kept", [])
        if item.get("reason") != "erasure_refused"
    ]
    unlisted = int(index_update.get("kept_unlisted", 0))
    if unlisted:
        found.append(
            NotSearched(
                object_url=str(index_update.get("document", "")),
                reason="appeared_after_erase",
                detail=(
                    f"{unlisted} more object version(s) the index still names for the "
                    "request's subjects are listed in this document"
                ),
            )
        )
    return tuple(found)


def recorded_not_searched(record: ErasureRequest) -> tuple[NotSearched, ...]:
    """`not_searched` of the index update recorded on an erasure request (its `index` field,
    absent before the Update Index step ran); objects by their shown keys, as the record
    names them (the certificate step reads index_update.json, which has the real ones)."""
    return not_searched((record.model_extra or {}).get("index") or {})
