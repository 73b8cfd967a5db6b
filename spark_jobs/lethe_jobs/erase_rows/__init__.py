"""The per-object core of the erase job: which rows of one object belong to the subjects being
erased, and the object rewritten without them. Pure functions on local files, no AWS, no Spark:
the job downloads an object version, calls `erase_rows`, puts the result under the same key (or
deletes the key when `rows_after` is 0), and checks what it put with `verify_erased`.

Split by format, as each handler has its own rules:

- `match`: which rows match (every format), with the subject index's own notion of a row's
  subject (lethe_shared.subject_hashing); an object that cannot be read raises
  `UnreadableObjectError`;
- `text`: CSV, JSON Lines and quarantine files rewritten line by line, byte for byte identical
  apart from the erased records' lines;
- `parquet`: Parquet rewritten one row group at a time, keeping the file's layout, each row
  group read once and matched as it is rewritten;
- `groups`: which rows of a Parquet row group match (each distinct subject value hashed once);
- `gzip_members`: gzip written back as it was (first member header verbatim, same level);
- `gaps`: what of an object could not be searched (records that could not be parsed, a subject
  column missing or ambiguous), returned with the matches and the result (`Gap`), never
  folded into "nothing found";
- `model`: the matcher and the results;
- `predicate`: a matcher that selects rows by something else than their subject hash
  (`RowPredicate`, e.g. retention's expired rows: lethe_jobs.retention_rows), dispatched here.
"""

from __future__ import annotations

import os
from pathlib import Path

from lethe_jobs.erase_rows.match import match_rows as match_subject_rows
from lethe_jobs.erase_rows.model import (
    EraseResult,
    ErasureVerificationError,
    RowMatches,
    SubjectMatcher,
)
from lethe_jobs.erase_rows.parquet import erase_parquet
from lethe_jobs.erase_rows.predicate import RowPredicate
from lethe_jobs.erase_rows.text import erase_text
from lethe_jobs.errors import UnreadableObjectError
from lethe_jobs.objects import ObjectKind
from lethe_shared.datasets.document import DataFormat

__all__ = [
    "EraseResult",
    "ErasureVerificationError",
    "RowMatches",
    "RowPredicate",
    "SubjectMatcher",
    "UnreadableObjectError",
    "erase_rows",
    "match_rows",
    "verify_erased",
]


def erase_rows(
    kind: ObjectKind,
    source: Path,
    target: Path,
    object_key: str,
    matcher: SubjectMatcher,
    *,
    workdir: Path,
) -> EraseResult:
    """Write to `target` the object at `source` without the rows `matcher` selects, when some
    are removed and some remain (see the module docstring for what the rewrite keeps).
    Raises UnreadableObjectError when the object cannot be read."""
    if _same_file(source, target):
        raise ValueError("the target must be another file than the source")
    if kind is ObjectKind.NO_ROWS:
        return EraseResult(0, (), written=False)
    if isinstance(matcher, RowPredicate):  # rows selected otherwise than by subject
        return matcher.erase(kind, source, target, object_key, workdir=workdir)
    if kind is ObjectKind.LAKE_PARQUET or matcher.dataset.format is DataFormat.PARQUET:
        return erase_parquet(kind, source, target, object_key, matcher, workdir=workdir)
    return erase_text(kind, source, target, object_key, matcher, workdir=workdir)


def match_rows(
    kind: ObjectKind, path: Path, object_key: str, matcher: SubjectMatcher, *, workdir: Path
) -> RowMatches:
    """The rows of the object at `path` that `matcher` selects (erase_rows.match; a
    `RowPredicate` selects by its own rule). Raises UnreadableObjectError."""
    if isinstance(matcher, RowPredicate):
        return matcher.match(kind, path, object_key, workdir=workdir)
    return match_subject_rows(kind, path, object_key, matcher, workdir=workdir)


def _same_file(source: Path, target: Path) -> bool:
    """Whether `target` names the file `source` names (a link to it included); compared as
    paths when either is missing."""
    if os.path.exists(source) and os.path.exists(target):
        return os.path.samefile(source, target)
    return source.resolve() == target.resolve() if not os.path.exists(source) else False


def verify_erased(
    kind: ObjectKind,
    path: Path,
    object_key: str,
    matcher: SubjectMatcher,
    *,
    expected_rows: int,
    workdir: Path,
) -> RowMatches:
    """Check an object after erasure: no row matches and it holds `expected_rows` rows.
    Raises ErasureVerificationError (counts and coordinates only, never values)."""
    matches = match_rows(kind, path, object_key, matcher, workdir=workdir)
    if matches.positions:
        raise ErasureVerificationError(
            f"{object_key}: {matches.matched} row(s) still match, at {list(matches.positions)}"
        )
    if matches.rows != expected_rows:
        raise ErasureVerificationError(
            f"{object_key}: holds {matches.rows} row(s), expected {expected_rows}"
        )
    return matches
