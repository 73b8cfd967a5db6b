"""What of one erased object the erase job could not be sure of (`report.NotSearched`), and the
action its result names. Erasure fails closed: each of these makes the request INCOMPLETE
(lethe_shared.erasure.completion), and an object with one is never a plain "unchanged".

- what the matcher could not search in the version it read (`erase_rows.gaps`: records that
  could not be parsed, a subject column missing or ambiguous);
- **a check that does not trust the matcher**: when the version erasure read is the very one
  the index described for some of the request's subjects (the manifest's `SubjectRows`, same
  version id and ETag, not flagged as held by older versions only), the rows the matcher found
  for each of those subjects must be the rows the index counted there. Any difference, fewer or
  more, is `rows_differ_from_index`, with both totals (counts only) in its detail: the index and
  erasure do not see that version alike, so what erasure found cannot be taken as complete.
  The version erasure writes in its place carries the difference in its metadata
  (`lethe-index-difference`, counts only), so that a re-run of a job that died after the write
  (which reads erasure's own version, not the one the index described) still reports it;
- **a widened raw version the job cannot read**: a raw key the report added because the index
  cannot know it (`ManifestObject.widened_from`: a FAILED or SUPERSEDED upload, lethe_shared.
  erasure.scope) whose current version is malformed (`UnreadableObjectError`,
  `UnreadableFileError`: often why its ingestion failed) is `ingestion_failed`, with why in
  words (`unreadable_reason`: never a value, a field name read from the data or an exception's
  text) and what the operator can do. Nothing is written: the version stays as it is (older
  versions of the key are still purged) and the verify run accepts it (`accepts_unreadable`).
  An object the index names that cannot be read still fails the run, as before.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from lethe_jobs.erase_rows import EraseResult
from lethe_jobs.erase_rows.model import Gap
from lethe_jobs.errors import UnreadableFileError, UnreadableObjectError
from lethe_shared.erasure.report import (
    ManifestObject,
    NotSearched,
    ObjectAction,
    ObjectResult,
    VersionRef,
)

INDEX_DIFFERENCE_METADATA = "lethe-index-difference"  # request;version;count;detail (ASCII)


def object_gaps(
    item: ManifestObject, read: VersionRef, left: VersionRef | None, erased: EraseResult
) -> tuple[NotSearched, ...]:
    """The gaps of `item` whose version `read` erasure read and erased (`erased`), leaving
    `left` (None: the key was deleted). A gap of the content is named with the version that
    holds it now; the index's difference with the version the index described."""
    holder = (left or read).version_id
    gaps = [
        NotSearched(
            object_url=item.object_url,
            version_id=holder,
            dataset_id=item.dataset_id,
            reason=gap.reason,
            count=gap.count,
            detail=gap.detail,
        )
        for gap in erased.gaps
    ]
    difference = index_difference(item, read, erased)
    return (*gaps, difference) if difference else tuple(gaps)


def _described(item: ManifestObject, read: VersionRef) -> list[tuple[str, int]]:
    """The subjects (hash, rows) the index counted in exactly the version `read`."""
    return [
        (s.subject_hash, s.rows)
        for s in item.subjects
        if not s.older_versions_only
        and s.version_id == read.version_id
        and (not s.etag or not read.etag or s.etag == read.etag)
    ]


def index_difference(
    item: ManifestObject, read: VersionRef, erased: EraseResult
) -> NotSearched | None:
    """`rows_differ_from_index` when the version read is one the index described and the rows
    the matcher found for its subjects differ from the index's count (module docstring)."""
    described = _described(item, read)
    if not described:
        return None
    found = dict(erased.by_subject)
    differ = [(h, rows) for h, rows in described if found.get(h, 0) != rows]
    if not differ:
        return None
    expected = sum(rows for _, rows in described)
    matched = sum(found.get(h, 0) for h, _ in described)
    return NotSearched(
        object_url=item.object_url,
        version_id=read.version_id,
        dataset_id=item.dataset_id,
        reason="rows_differ_from_index",
        count=sum(abs(rows - found.get(h, 0)) for h, rows in differ),
        detail=(
            f"the index counted {expected} row(s) of {len(described)} subject(s) in this "
            f"version, erasure matched {matched}; {len(differ)} subject(s) differ"
        ),
    )


def difference_metadata(request_id: str, difference: NotSearched | None) -> dict[str, str]:
    """The metadata that keeps `difference` on the version erasure writes (none without)."""
    if difference is None:
        return {}
    value = f"{request_id};{difference.version_id};{difference.count};{difference.detail}"
    return {INDEX_DIFFERENCE_METADATA: value}


def earlier_difference(
    item: ManifestObject, metadata: Mapping[str, str], request_id: str
) -> NotSearched | None:
    """The index difference an earlier run of this request found, from the metadata of the
    version it wrote (`difference_metadata`); None when it found none, or it is another
    request's (user metadata is copied to each rewrite)."""
    parts = metadata.get(INDEX_DIFFERENCE_METADATA, "").split(";", 3)
    if len(parts) != 4 or parts[0] != request_id:
        return None
    return NotSearched(
        object_url=item.object_url,
        version_id=parts[1],
        dataset_id=item.dataset_id,
        reason="rows_differ_from_index",
        count=int(parts[2]) if parts[2].isdigit() else 0,
        detail=f"{parts[3]} (found by an earlier run of this erasure)",
    )


def action_of(
    rows_removed: int, left: VersionRef | None, gaps: tuple[NotSearched, ...]
) -> ObjectAction:
    """What became of an object whose current version was read: `incomplete` when nothing was
    removed and something could not be searched (never a plain `unchanged`)."""
    if rows_removed == 0:
        return "incomplete" if gaps else "unchanged"
    return "rewritten" if left else "deleted"


# ------------------------------------------------------------ widened raw versions, unreadable

UNREADABLE = (UnreadableObjectError, UnreadableFileError)
# What the readers say about a file they cannot read, as words a gap may carry: each pattern
# of their message (after its "unreadable raw object: " prefix) and the words that replace it.
# Anything else is said in general terms: exception texts may quote bytes or field names.
_REASONS: tuple[tuple[str, str], ...] = (
    (r"not a valid gzip stream", "not a valid gzip stream"),
    (r"compression is declared as gzip but", "declared gzip, but not gzip"),
    (r"not UTF-8 text", "not UTF-8 text"),
    (r"missing header", "a CSV file without a header"),
    (r"the header repeats column", "a CSV header that repeats column names"),
    (r"not valid CSV \(line (\d+)\)", "not valid CSV (line {0})"),
    (r"line (\d+) is not a JSON object", "line {0} is not a JSON object"),
    (r"not a (readable )?Parquet file", "not a readable Parquet file"),
    (r"the file repeats column", "a Parquet schema that repeats column names"),
    (r"unsupported Parquet column", "a Parquet column of an unsupported type"),
    (r"truncated gzip stream", "a truncated gzip stream"),
)
_PREFIX = "unreadable raw object: "


def unreadable_reason(exc: BaseException) -> str:
    """Why the file cannot be read, in fixed words (line numbers at most)."""
    text = str(getattr(exc, "reason", exc)).removeprefix(_PREFIX)
    for pattern, words in _REASONS:
        found = re.match(pattern, text)
        if found:
            return words.format(*(g for g in found.groups() if g and g.isdigit()))
    return "its content could not be parsed"


def unreadable(item: ManifestObject, version_id: str, exc: BaseException) -> EraseResult:
    """What erasing a widened raw key's unreadable current version `version_id` gives: nothing
    removed, nothing written, and the `ingestion_failed` gap that says why and what to do (the
    erase job names it with that version, `object_gaps`; its action is `incomplete`)."""
    return EraseResult(
        rows_before=0,
        positions=(),
        written=False,
        gaps=(
            Gap(
                reason="ingestion_failed",
                detail=(
                    f"the raw version could not be read: {unreadable_reason(exc)}; a "
                    f"{item.widened_from or 'never-indexed'} upload the index does not know, "
                    "left as it is (its older versions were deleted). Fix the file and "
                    f"re-ingest it (`lethe objects reingest --dataset {item.dataset_id} --key "
                    f"<key> --version-id {version_id}`) or delete this version, then file the "
                    "request again"
                ),
            ),
        ),
    )


def accepts_unreadable(result: ObjectResult, version_id: str, widened: frozenset[str]) -> bool:
    """Whether the verify run accepts that `version_id` of the result's object cannot be read:
    a widened key (`widened`: the manifest's marked objects) whose erase result left exactly
    that version, untouched, and named it as an unreadable `ingestion_failed` gap."""
    after = result.version_after
    return (
        result.object_url in widened
        and result.action == "incomplete"
        and after is not None
        and after.version_id == version_id
        and any(
            g.reason == "ingestion_failed" and g.version_id == version_id
            for g in result.not_searched
        )
    )
