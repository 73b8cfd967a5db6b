"""Which rows of one object belong to the subjects being erased (every format).

**Matching is the subject index's own notion of a row's subject.** Rows are read, typed and
hashed by the functions that index them (lethe_jobs.subject_rows, lethe_shared.subject_hashing),
so the rows erasure finds for a subject hash are exactly the row hints the index gives that subject:

- raw CSV and JSON Lines: `readers.read_raw` + `subject_rows.raw_subject_rows` (rejected records
  too: a row with the wrong field count, a line that is not a JSON object); coordinate = the
  physical line a record starts on (1-based);
- raw Parquet: the reader's Spark-compatible columns + `raw_subject_rows`, one row group at a
  time; coordinate = row index (0-based) in the file;
- lake Parquet: `subject_hashing.arrow.row_subject_hashes` (the per-row hashing
  `entries_from_table` groups into entries) with the Hive partition values of the key as
  constants (as `lake_object_entries`), one row group at a time; a subject column that is a
  partition column matches every row of the file;
- quarantine JSON Lines: `subject_rows.quarantine_subject_rows` (each line's "record").

A null, empty or whitespace-only subject value (or a null parent struct) is nobody's and never
matches (the one subject-id rule, lethe_shared.subject_hashing.canonical); `0` is an id like any
other. An object that cannot be read raises `UnreadableObjectError`.

What could not be searched comes with the matches as `RowMatches.gaps` (`erase_rows.gaps`):
records that could not be parsed and were not removed, a subject column the object lacks or
holds ambiguously (its rows are then not matched at all). A subject column is found by the one
name rule (lethe_shared.datasets.field_names); a CSV or Parquet column found by its case variant
is read under the declared name. `RowMatches.by_subject` counts the matched rows per subject
hash, which the job compares with the index's own count (lethe_jobs.erase_core).
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lethe_jobs.arrow_bridge import to_spark_compatible
from lethe_jobs.erase_rows.gaps import (
    JsonRecords,
    header_fields,
    is_rejected_record,
    json_record_gaps,
    parquet_fields,
    subject_heads,
    unparseable,
)
from lethe_jobs.erase_rows.groups import group_match, hash_counts
from lethe_jobs.erase_rows.gzip_members import unwrapped_parquet
from lethe_jobs.erase_rows.model import Gap, RowMatches, SubjectMatcher, subject_counts
from lethe_jobs.errors import UnreadableFileError, UnreadableObjectError
from lethe_jobs.objects import ObjectKind
from lethe_jobs.readers import RawRecords, read_raw
from lethe_jobs.subject_rows import quarantine_subject_rows, raw_subject_rows
from lethe_jobs.validate import RECORD
from lethe_shared.catalog.object_catalog import Zone
from lethe_shared.datasets.document import DataFormat, Dataset, hive_partition_values
from lethe_shared.datasets.field_names import AmbiguousFieldError
from lethe_shared.index.arrow_entries import ObjectRef
from lethe_shared.subject_hashing.records import (
    SubjectRows,
    json_object,
    subject_hashes_of_rows,
)

PARQUET_ERRORS = (pa.ArrowException, OSError, TypeError, ValueError)


def match_rows(
    kind: ObjectKind, path: Path, object_key: str, matcher: SubjectMatcher, *, workdir: Path
) -> RowMatches:
    """The rows of the object stored at `path` (its S3 key `object_key`) that `matcher`
    selects. Raises UnreadableObjectError when the object cannot be read."""
    if kind is ObjectKind.NO_ROWS:
        return RowMatches(0, ())
    if kind is ObjectKind.QUARANTINE_ROWS:
        return _quarantine_matches(path, object_key, matcher)
    if kind is ObjectKind.LAKE_PARQUET:
        return parquet_matches(path, object_key, matcher, raw=False)
    if matcher.dataset.format is DataFormat.PARQUET:
        with tempfile.TemporaryDirectory(dir=workdir) as scratch:
            local, _ = unwrapped_parquet(path, matcher.dataset, Path(scratch))
            return parquet_matches(local, object_key, matcher, raw=True)
    return _raw_text_matches(path, object_key, matcher, workdir)


def _matched(
    coordinates: Any, hashes: Any, selected: frozenset[str]
) -> tuple[list[int], Counter[str]]:
    """The coordinates of the rows whose subject hash (an Arrow string array, one per row; null:
    nobody's) is selected, ascending, and how many rows each selected hash matched."""
    if not selected or len(hashes) == 0:
        return [], Counter()
    chosen = pc.fill_null(
        pc.is_in(hashes, value_set=pa.array(sorted(selected), pa.string())), False
    )
    located = pa.array(coordinates, pa.int64())
    return sorted(located.filter(chosen).to_pylist()), hash_counts(hashes.filter(chosen))


def _lacks_column(gaps: tuple[Gap, ...]) -> bool:
    """Whether no record has some subject column: no row can be matched."""
    return any(g.reason == "missing_subject_column" for g in gaps)


def _raw_text_matches(
    path: Path, object_key: str, matcher: SubjectMatcher, workdir: Path
) -> RowMatches:
    dataset = matcher.dataset
    try:
        records = read_raw(path, dataset, workdir)
    except UnreadableFileError as exc:
        if isinstance(exc.__cause__, AmbiguousFieldError):
            return RowMatches(0, (), gaps=(_ambiguous_header(exc.__cause__, dataset),))
        raise UnreadableObjectError(f"unreadable raw object: {exc.reason}") from exc
    rejected = [r.position for r in records.rejected]
    parsed = int(records.table.num_rows)
    if records.json_text:
        column = records.table.column(RECORD)
        gaps = json_record_gaps(records.columns, parsed, column.to_pylist, dataset)
        per_record = not _lacks_column(gaps)  # an ambiguous record leaves the others matched
    else:
        fields, gaps = header_fields(records.columns, dataset, parsed)
        records = _declared_columns(records, fields)
        per_record = not gaps
    if not per_record:  # a subject column the object lacks (or holds ambiguously): no match
        return RowMatches(records.rows_read, (), gaps=gaps + unparseable(rejected, ()))
    rows = raw_subject_rows(records, dataset)
    if rows.ambiguous and not any(g.reason == "ambiguous_subject_column" for g in gaps):
        # records whose subject field has several case variants: named, never guessed; the
        # other records are matched (the index lists such a record under every reading). The
        # reader rejected them too: they are named once, as ambiguous, not as unparseable.
        gaps += (_ambiguous_records(rows),)
        rejected = [line for line in rejected if line not in set(rows.ambiguous)]
    rows = rows.unambiguous()
    try:
        hashes = subject_hashes_of_rows(rows, dataset, key=matcher.key)
    except AmbiguousFieldError as exc:  # cannot happen once unambiguous: fail closed anyway
        return _ambiguous_object(records.rows_read, exc, gaps + unparseable(rejected, ()))
    positions, counts = _matched(rows.coordinates, hashes, matcher.hashes)
    return RowMatches(
        records.rows_read, tuple(positions), subject_counts(counts),
        gaps + unparseable(rejected, positions),
    )  # fmt: skip


def _ambiguous_records(rows: SubjectRows) -> Gap:
    """The records of `rows` whose subject field is ambiguous, as one gap (declared name only)."""
    wanted = rows.ambiguity.wanted if rows.ambiguity else "a subject column"
    lines = sorted(set(rows.ambiguous))
    return Gap(
        "ambiguous_subject_column",
        len(lines),
        f"{len(lines)} record(s) hold several fields equal to {wanted!r} ignoring case, none "
        f"exactly (first at {lines[0]}): kept, not matched",
    )


def _ambiguous_header(exc: AmbiguousFieldError, dataset: Dataset) -> Gap:
    """The reader refused a header (or Parquet schema) in which a declared column has several
    case variants and no exact name (lethe_jobs.readers.records.declared_names): no record was
    read, so no row could be matched; how many rows the object holds is not known (count 0).
    The detail names the declared column only, never a name read from the object."""
    subject = exc.wanted in {c.split(".", 1)[0] for c in dataset.subject_columns}
    return Gap(
        "ambiguous_subject_column" if subject else "unparseable_records",
        0,
        f"{len(exc.candidates)} fields equal {'subject ' if subject else ''}column "
        f"{exc.wanted!r} ignoring case, none exactly: the object could not be read, none of "
        "its rows could be matched",
    )


def _declared_columns(records: RawRecords, fields: dict[str, str]) -> RawRecords:
    """`records` with each subject column found by its case variant renamed to the declared
    name, as the index reads it (lethe_shared.datasets.field_names)."""
    renamed = {found: head for head, found in fields.items() if found != head}
    if not renamed:
        return records
    names = [renamed.get(n, n) for n in records.table.column_names]
    return dataclasses.replace(records, table=records.table.rename_columns(names))


def _ambiguous_object(rows: int, exc: AmbiguousFieldError, gaps: tuple[Gap, ...]) -> RowMatches:
    """No row matched: the subjects' hashing refused a record whose subject field is
    ambiguous, so none of the object's rows could be matched."""
    whole = Gap(
        "ambiguous_subject_column",
        rows,
        f"{len(exc.candidates)} fields equal subject column {exc.wanted!r} ignoring case, none "
        f"exactly, in some record: none of the {rows} row(s) could be matched",
    )
    kept = tuple(g for g in gaps if g.reason != "ambiguous_subject_column")
    return RowMatches(rows, (), gaps=(whole, *kept))


class _QuarantineScan:
    """A quarantine file's lines as `quarantine_subject_rows` reads them, but that a line that
    is not a JSON object becomes a blank line (it is counted as a row that cannot be parsed,
    never an error); which lines hold a record the reader could not parse; the records' keys."""

    def __init__(self, dataset: Dataset) -> None:
        self.lines: list[str] = []
        self.unparseable: list[int] = []
        self.broken = 0  # lines that are no JSON object
        self.keys = JsonRecords(subject_heads(dataset))

    def add(self, number: int, line: str) -> None:
        if not line.strip():
            self.lines.append(line)
            return
        document = json_object(line)
        if document is None:
            self.lines.append("\n")
            self.unparseable.append(number)
            self.broken += 1
            return
        self.lines.append(line)
        record = document.get("record")
        if is_rejected_record(record):
            self.unparseable.append(number)
        else:
            self.keys.add(json_object(record) or {})


def _quarantine_matches(path: Path, object_key: str, matcher: SubjectMatcher) -> RowMatches:
    dataset = matcher.dataset
    scan = _QuarantineScan(dataset)
    try:
        with path.open(encoding="utf-8") as lines:  # as indexing.quarantine_entries reads it
            for number, line in enumerate(lines, start=1):
                scan.add(number, line)
    except UnicodeDecodeError as exc:
        raise UnreadableObjectError(f"not UTF-8 text: {exc}") from exc
    gaps = scan.keys.gaps()
    rows = quarantine_subject_rows(scan.lines, dataset)
    count = len(rows.coordinates) + scan.broken
    if _lacks_column(gaps):
        return RowMatches(count, (), gaps=gaps + unparseable(scan.unparseable, ()))
    try:
        hashes = subject_hashes_of_rows(rows, dataset, key=matcher.key)
    except AmbiguousFieldError as exc:
        return _ambiguous_object(count, exc, gaps + unparseable(scan.unparseable, ()))
    positions, counts = _matched(rows.coordinates, hashes, matcher.hashes)
    return RowMatches(
        count, tuple(positions), subject_counts(counts),
        gaps + unparseable(scan.unparseable, positions),
    )  # fmt: skip


def open_parquet(path: Path, int96_unit: str | None = None) -> Any:
    try:
        return pq.ParquetFile(path, coerce_int96_timestamp_unit=int96_unit)
    except PARQUET_ERRORS as exc:
        raise UnreadableObjectError(f"not a readable Parquet file: {exc}") from exc


@dataclass(frozen=True)
class ParquetScan:
    """A Parquet object opened for matching: the file, its reference (zone, partition values),
    the columns holding subject heads (column name -> declared head), its rows, and the gaps
    of subject columns it lacks or holds ambiguously (then no row is matched)."""

    parquet: Any
    ref: ObjectRef
    declared: dict[str, str]
    rows: int
    gaps: tuple[Gap, ...]

    def subject_columns(self, group: Any) -> Any:
        """The subject columns of a row group (read whole, or only them), under the declared
        names."""
        held = [i for i, name in enumerate(group.column_names) if name in self.declared]
        if len(held) < group.num_columns:
            group = group.select(held)
        return group.rename_columns([self.declared.get(n, n) for n in group.column_names])


def scan_parquet(path: Path, object_key: str, matcher: SubjectMatcher, *, raw: bool) -> ParquetScan:
    """Open a Parquet object for matching. Raises UnreadableObjectError."""
    dataset = matcher.dataset
    parquet = open_parquet(path)
    constants = {} if raw else hive_partition_values(object_key, dataset)
    ref = ObjectRef(object_key, Zone.RAW if raw else Zone.LAKE, "parquet", constants=constants)
    try:
        if raw:  # the reader refuses a file with a column Spark cannot hold: no rows indexed
            _spark_holds(parquet.schema_arrow)
        rows = int(parquet.metadata.num_rows)
        fields, gaps = parquet_fields(parquet.schema_arrow, dataset, rows, constants)
    except PARQUET_ERRORS as exc:
        raise UnreadableObjectError(f"not a readable Parquet file: {exc}") from exc
    declared = {column: head for head, column in fields.items()}
    return ParquetScan(parquet, ref, declared, rows, gaps)


@lru_cache(maxsize=64)
def _spark_holds(schema: Any) -> None:
    """Raises pyarrow's error when a column of `schema` cannot be cast to what Spark holds
    (`to_spark_compatible`); checked once per schema in a process (the types decide)."""
    to_spark_compatible(schema.empty_table())


def parquet_matches(
    path: Path, object_key: str, matcher: SubjectMatcher, *, raw: bool
) -> RowMatches:
    """Matches one row group at a time, reading only the subject columns (a case variant under
    the declared name). A subject column the file lacks or holds ambiguously: no row matches,
    and the gap says why."""
    scan = scan_parquet(path, object_key, matcher, raw=raw)
    if scan.gaps:
        return RowMatches(scan.rows, (), gaps=scan.gaps)
    parquet = scan.parquet
    found: list[int] = []
    counts: Counter[str] = Counter()
    offset = 0
    try:
        for index in range(parquet.num_row_groups):
            group = parquet.read_row_group(index, columns=sorted(scan.declared))
            matched = group_match(scan.subject_columns(group), scan.ref, matcher)
            found += matched.positions(offset)
            counts.update(matched.counts)
            offset += int(parquet.metadata.row_group(index).num_rows)
    except PARQUET_ERRORS as exc:
        raise UnreadableObjectError(f"not a readable Parquet file: {exc}") from exc
    return RowMatches(offset, tuple(found), subject_counts(counts))


def _group_matches(group: Any, offset: int, ref: ObjectRef, matcher: SubjectMatcher) -> list[int]:
    """The rows of a row group starting at row `offset` that `matcher` selects."""
    return group_match(group, ref, matcher).positions(offset)
