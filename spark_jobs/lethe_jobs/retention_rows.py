"""The row-removal core of retention (lethe_shared.datasets.retention): which rows of one object
are past the dataset's retention period, and the object rewritten without them. Pure functions on
local files, like lethe_jobs.erase_rows, whose rewriters it reuses unchanged (the predicate is
the only new part):

- the rows are read with the readers the index and erasure use (`readers.read_raw` for raw CSV
  and JSON Lines, the Parquet reader for raw and lake Parquet, quarantine files line by line),
  with the same coordinates (the physical line a record starts on; the row index), so the
  rewrite (`erase_rows.text.rewrite_raw_text`, `rewrite_lines`, `erase_rows.parquet`) keeps
  every other byte, line and row group as an erasure does;
- a row expires when `RetentionRule.expired` holds for its value of the retention column (a
  lake file's Hive partition value when the column is a partition column; a field found by the
  one name rule, lethe_shared.datasets.field_names); a value that cannot be read as a date is
  kept and named as a gap (`unparseable_records`), a null one is kept (nothing to expire by);
  by object age every row expires;
- **legal holds**: rows of held subjects are kept. They are found with the erase job's own
  matcher (`erase_rows.match_rows` with the held hashes), so a held subject's rows are exactly
  the rows an erasure of that subject would find. When the held subjects cannot be told apart
  in an object (a subject column missing or ambiguous), nothing of it expires (fail closed) and
  the gap says why.

`RetentionMatcher` is this rule as an `erase_rows.RowPredicate`: given to the erase job's
per-object machinery (lethe_jobs.erase_core.erase_object, erase_verify) in place of a subject
matcher, the expired rows are removed with the same conditional write, writes ledger and purge
of every older version as an erasure, and verified the same way.

`expire_rows` returns an `erase_rows.EraseResult`: `written` when some rows were removed and
some remain (the target holds the rewrite), `rows_after == 0` when every row expired (the caller
deletes the key), nothing removed otherwise. `verify_expired` checks an object after the run.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any

from lethe_jobs.erase_rows import (
    EraseResult,
    ErasureVerificationError,
    RowMatches,
    RowPredicate,
    match_rows,
)
from lethe_jobs.erase_rows.gzip_members import gzip_file, unwrapped_parquet
from lethe_jobs.erase_rows.match import open_parquet
from lethe_jobs.erase_rows.model import Gap, SubjectMatcher
from lethe_jobs.erase_rows.parquet import _rewrite_parquet
from lethe_jobs.erase_rows.text import rewrite_lines, rewrite_raw_text
from lethe_jobs.errors import UnreadableFileError, UnreadableObjectError
from lethe_jobs.objects import ObjectKind
from lethe_jobs.readers import read_raw
from lethe_jobs.validate import POSITION, RECORD
from lethe_shared.datasets.document import DataFormat, Dataset, hive_partition_values
from lethe_shared.datasets.field_names import AmbiguousFieldError, find_field
from lethe_shared.datasets.retention import RetentionRule

_DAY = re.compile(r"\s*([+-]?\d{4,})-(\d{1,2})-(\d{1,2})(?:$|[T ])")
_UNREAD = object()  # a value that is there but cannot be read as a date


@dataclass(frozen=True)
class _Rows:
    """Every row of an object: its coordinates, and each row's retention value (None: null;
    _UNREAD: unreadable) in the same order."""

    coordinates: list[int]
    values: list[Any]


def as_moment(value: Any) -> object:
    """A retention column's value as a date or datetime (None: null; _UNREAD: not a date)."""
    if value is None or isinstance(value, datetime | date):
        return value
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        try:
            return datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            found = _DAY.match(text)
            if found:
                try:
                    return date(*(int(g) for g in found.groups()))
                except ValueError:
                    return _UNREAD
    return _UNREAD


def _json_value(text: Any, column: str) -> Any:
    """The column's value of one JSON record (text or object), by the one name rule."""
    record = text
    if isinstance(text, str):
        try:
            record = json.loads(text)
        except ValueError:
            return _UNREAD
    if not isinstance(record, dict):
        return _UNREAD
    try:
        name = find_field(record, column)
    except AmbiguousFieldError:
        return _UNREAD
    return record.get(name) if name is not None else None


def _raw_text_rows(path: Path, dataset: Dataset, column: str | None, workdir: Path) -> _Rows:
    try:
        records = read_raw(path, dataset, workdir)
    except UnreadableFileError as exc:
        raise UnreadableObjectError(f"unreadable raw object: {exc.reason}") from exc
    table = records.table
    coordinates = [int(p) for p in table.column(POSITION).to_pylist()]
    if column is None:
        values: list[Any] = [None] * len(coordinates)
    elif records.json_text:
        values = [_json_value(t, column) for t in table.column(RECORD).to_pylist()]
    else:
        try:
            name = find_field(records.columns, column)
        except AmbiguousFieldError:
            name = None
        values = (
            table.column(name).to_pylist()
            if name in table.column_names
            else [None] * len(coordinates)
        )
    rejected = [r.position for r in records.rejected]
    return _Rows(coordinates + rejected, values + [_UNREAD] * len(rejected))


def _parquet_rows(
    path: Path, object_key: str, dataset: Dataset, column: str | None, *, raw: bool
) -> _Rows:
    parquet = open_parquet(path)
    rows = int(parquet.metadata.num_rows)
    coordinates = list(range(rows))
    if column is None:
        return _Rows(coordinates, [None] * rows)
    constants = {} if raw else hive_partition_values(object_key, dataset)
    if column in constants:
        return _Rows(coordinates, [as_moment(constants[column])] * rows)
    try:
        name = find_field(parquet.schema_arrow.names, column)
    except AmbiguousFieldError:
        return _Rows(coordinates, [_UNREAD] * rows)
    if name is None:
        return _Rows(coordinates, [None] * rows)
    values = parquet.read(columns=[name]).column(0).to_pylist()
    return _Rows(coordinates, values)


def _quarantine_rows(path: Path, column: str | None) -> _Rows:
    coordinates: list[int] = []
    values: list[Any] = []
    try:
        with path.open(encoding="utf-8", newline="") as lines:
            for number, line in enumerate(lines, start=1):
                if not line.strip():
                    continue
                coordinates.append(number)
                if column is None:
                    values.append(None)
                    continue
                try:
                    document = json.loads(line)
                except ValueError:
                    values.append(_UNREAD)
                    continue
                record = document.get("record") if isinstance(document, dict) else None
                values.append(_json_value(record, column) if record is not None else _UNREAD)
    except UnicodeDecodeError as exc:
        raise UnreadableObjectError(f"not UTF-8 text: {exc}") from exc
    return _Rows(coordinates, values)


def _rows(
    kind: ObjectKind, path: Path, object_key: str, dataset: Dataset, column: str | None, *,
    workdir: Path,
) -> _Rows:  # fmt: skip
    if kind is ObjectKind.NO_ROWS:
        return _Rows([], [])
    if kind is ObjectKind.QUARANTINE_ROWS:
        return _quarantine_rows(path, column)
    if kind is ObjectKind.LAKE_PARQUET:
        return _parquet_rows(path, object_key, dataset, column, raw=False)
    if dataset.format is DataFormat.PARQUET:
        with tempfile.TemporaryDirectory(dir=workdir) as scratch:
            local, _ = unwrapped_parquet(path, dataset, Path(scratch))
            return _parquet_rows(local, object_key, dataset, column, raw=True)
    return _raw_text_rows(path, dataset, column, workdir)


def _held(
    kind: ObjectKind, path: Path, object_key: str, held: SubjectMatcher | None, workdir: Path
) -> tuple[frozenset[int], tuple[Gap, ...], bool]:
    """The coordinates of held subjects' rows, the gaps of that search, and whether the held
    subjects could be told apart at all (False: keep everything)."""
    if held is None or not held.hashes:
        return frozenset(), (), True
    found = match_rows(kind, path, object_key, held, workdir=workdir)
    blind = any(
        g.reason in {"missing_subject_column", "ambiguous_subject_column"} for g in found.gaps
    )
    return frozenset(found.positions), found.gaps, not blind


def expired_rows(
    kind: ObjectKind,
    path: Path,
    object_key: str,
    dataset: Dataset,
    rule: RetentionRule,
    *,
    held: SubjectMatcher | None = None,
    workdir: Path,
) -> RowMatches:
    """The rows of the object at `path` past the retention (module docstring): their
    coordinates ascending, held subjects' rows left out; `gaps` names what was kept because it
    could not be decided. Raises UnreadableObjectError."""
    rows = _rows(kind, path, object_key, dataset, rule.column, workdir=workdir)
    total = len(rows.coordinates)
    kept, held_gaps, distinguishable = _held(kind, path, object_key, held, workdir)
    if not distinguishable:
        return RowMatches(total, (), gaps=(
            Gap("missing_subject_column", total,
                "the held subjects' rows cannot be told apart in this object: nothing of it "
                "expired (legal hold)"),
            *held_gaps,
        ))  # fmt: skip
    expired: list[int] = []
    unreadable: list[int] = []
    for coordinate, value in zip(rows.coordinates, rows.values, strict=True):
        if coordinate in kept:
            continue
        if rule.column is None:
            expired.append(coordinate)
            continue
        moment = as_moment(value)
        if moment is _UNREAD:
            unreadable.append(coordinate)
        elif rule.expired(moment if isinstance(moment, date | datetime) else None):
            expired.append(coordinate)
    gaps: tuple[Gap, ...] = ()
    if unreadable:
        gaps = (
            Gap("unparseable_records", len(unreadable),
                f"{len(unreadable)} row(s) whose {rule.column} cannot be read as a date (first "
                f"at {min(unreadable)}): kept"),
        )  # fmt: skip
    return RowMatches(total, tuple(sorted(expired)), gaps=gaps)


def expire_rows(
    kind: ObjectKind,
    source: Path,
    target: Path,
    object_key: str,
    dataset: Dataset,
    *,
    rule: RetentionRule,
    held: SubjectMatcher | None = None,
    workdir: Path,
) -> EraseResult:
    """Write to `target` the object at `source` without its expired rows, when some are removed
    and some remain (module docstring)."""
    if source.resolve() == target.resolve():
        raise ValueError("the target must be another file than the source")
    matches = expired_rows(kind, source, object_key, dataset, rule, held=held, workdir=workdir)
    if not 0 < matches.matched < matches.rows:
        return EraseResult.of(matches, written=False)
    drop = frozenset(matches.positions)
    if kind is ObjectKind.QUARANTINE_ROWS:
        rewrite_lines(source, target, drop)
    elif kind is ObjectKind.LAKE_PARQUET or dataset.format is DataFormat.PARQUET:
        _rewrite_parquet_object(kind, source, target, dataset, matches.positions, workdir=workdir)
    else:
        rewrite_raw_text(source, target, dataset, drop)
    return EraseResult.of(matches, written=True)


def _rewrite_parquet_object(
    kind: ObjectKind, source: Path, target: Path, dataset: Dataset, drop: Iterable[int], *,
    workdir: Path,
) -> None:  # fmt: skip
    with tempfile.TemporaryDirectory(dir=workdir) as scratch:
        local, header = (source, None)
        if kind is ObjectKind.RAW:
            local, header = unwrapped_parquet(source, dataset, Path(scratch))
        out = target if header is None else Path(scratch) / "expired.parquet"
        _rewrite_parquet(local, out, tuple(drop))
        if header is not None:
            gzip_file(out, target, header)


def verify_expired(
    kind: ObjectKind,
    path: Path,
    object_key: str,
    dataset: Dataset,
    rule: RetentionRule,
    *,
    expected_rows: int,
    held: SubjectMatcher | None = None,
    workdir: Path,
) -> RowMatches:
    """Check an object after the run: no expired row is left, and it holds `expected_rows`
    rows. Raises ErasureVerificationError (counts and coordinates only, never values)."""
    matches = expired_rows(kind, path, object_key, dataset, rule, held=held, workdir=workdir)
    if matches.positions:
        raise ErasureVerificationError(
            f"{object_key}: {matches.matched} expired row(s) left, at {list(matches.positions)}"
        )
    if matches.rows != expected_rows:
        raise ErasureVerificationError(
            f"{object_key}: holds {matches.rows} row(s), expected {expected_rows}"
        )
    return matches


@dataclass(frozen=True)
class RetentionMatcher(RowPredicate):
    """The retention rule of one dataset as the erase job's matcher: `rule` selects the expired
    rows, `held_hashes` (keyed subject hashes under `key`) keeps the held subjects' rows. Its
    own `hashes` stay empty: no subject is erased by it."""

    rule: RetentionRule = field(kw_only=True)
    held_hashes: frozenset[str] = field(default=frozenset(), kw_only=True)

    def _held(self) -> SubjectMatcher | None:
        if not self.held_hashes:
            return None
        return SubjectMatcher(self.dataset, self.held_hashes, self.key)

    def match(self, kind: ObjectKind, path: Path, object_key: str, *, workdir: Path) -> RowMatches:
        return expired_rows(
            kind, path, object_key, self.dataset, self.rule, held=self._held(), workdir=workdir
        )

    def erase(
        self, kind: ObjectKind, source: Path, target: Path, object_key: str, *, workdir: Path
    ) -> EraseResult:
        return expire_rows(
            kind, source, target, object_key, self.dataset, rule=self.rule, held=self._held(),
            workdir=workdir,
        )  # fmt: skip


def retention_matcher(
    dataset: Dataset, rule: RetentionRule, key: bytes, held_hashes: Iterable[str] = ()
) -> RetentionMatcher:
    """The erase job's matcher for a retention run of `dataset`."""
    return RetentionMatcher(
        dataset, frozenset(), key, rule=rule, held_hashes=frozenset(held_hashes)
    )
