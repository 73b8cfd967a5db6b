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

A null subject value (or a null parent struct) is nobody's and never matches; `0` and `""` are
ids like any other. An object that cannot be read raises `UnreadableObjectError`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lethe_jobs.arrow_bridge import to_spark_compatible
from lethe_jobs.erase_rows.gzip_members import unwrapped_parquet
from lethe_jobs.erase_rows.model import RowMatches, SubjectMatcher
from lethe_jobs.errors import UnreadableFileError, UnreadableObjectError
from lethe_jobs.objects import ObjectKind
from lethe_jobs.readers import read_raw
from lethe_jobs.subject_rows import quarantine_subject_rows, raw_subject_rows
from lethe_jobs.validate import POSITION
from lethe_shared.catalog.object_catalog import Zone
from lethe_shared.datasets.document import DataFormat, Dataset, hive_partition_values
from lethe_shared.index.arrow_entries import ObjectRef
from lethe_shared.subject_hashing.arrow import row_subject_hashes
from lethe_shared.subject_hashing.records import (
    column_subject_hashes,
    distinct_safe,
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


def _matched(coordinates: Any, hashes: Any, selected: frozenset[str]) -> list[int]:
    """The coordinates of the rows whose subject hash (an Arrow string array, one per row; null:
    nobody's) is selected, ascending."""
    if not selected or len(hashes) == 0:
        return []
    chosen = pc.is_in(hashes, value_set=pa.array(sorted(selected), pa.string()))
    located = pa.array(coordinates, pa.int64())
    return sorted(located.filter(pc.fill_null(chosen, False)).to_pylist())


def _raw_text_matches(
    path: Path, object_key: str, matcher: SubjectMatcher, workdir: Path
) -> RowMatches:
    dataset = matcher.dataset
    try:
        records = read_raw(path, dataset, workdir)
    except UnreadableFileError as exc:
        raise UnreadableObjectError(f"unreadable raw object: {exc.reason}") from exc
    rows = raw_subject_rows(records, dataset)
    hashes = subject_hashes_of_rows(rows, dataset, key=matcher.key)
    return RowMatches(records.rows_read, tuple(_matched(rows.coordinates, hashes, matcher.hashes)))


def _quarantine_matches(path: Path, object_key: str, matcher: SubjectMatcher) -> RowMatches:
    dataset = matcher.dataset
    try:
        with path.open(encoding="utf-8") as lines:  # as indexing.quarantine_entries reads it
            rows = quarantine_subject_rows(lines, dataset)
    except UnicodeDecodeError as exc:
        raise UnreadableObjectError(f"not UTF-8 text: {exc}") from exc
    hashes = subject_hashes_of_rows(rows, dataset, key=matcher.key)
    return RowMatches(
        len(rows.coordinates), tuple(_matched(rows.coordinates, hashes, matcher.hashes))
    )


def open_parquet(path: Path, int96_unit: str | None = None) -> Any:
    try:
        return pq.ParquetFile(path, coerce_int96_timestamp_unit=int96_unit)
    except PARQUET_ERRORS as exc:
        raise UnreadableObjectError(f"not a readable Parquet file: {exc}") from exc


def parquet_matches(
    path: Path, object_key: str, matcher: SubjectMatcher, *, raw: bool
) -> RowMatches:
    """Matches one row group at a time, reading only the subject columns."""
    dataset = matcher.dataset
    parquet = open_parquet(path)
    names = set(parquet.schema_arrow.names)
    heads = sorted({p.split(".")[0] for p in dataset.subject_columns} & names)
    constants = {} if raw else hive_partition_values(object_key, dataset)
    zone = Zone.RAW if raw else Zone.LAKE
    ref = ObjectRef(object_key, zone, "parquet", constants=constants)
    found: list[int] = []
    offset = 0
    try:
        if raw:  # the reader refuses a file with a column Spark cannot hold: no rows indexed
            to_spark_compatible(parquet.schema_arrow.empty_table())
        for index in range(parquet.num_row_groups):
            group = parquet.read_row_group(index, columns=heads)
            found += _group_matches(group, offset, ref, matcher)
            offset += int(parquet.metadata.row_group(index).num_rows)
    except PARQUET_ERRORS as exc:
        raise UnreadableObjectError(f"not a readable Parquet file: {exc}") from exc
    return RowMatches(offset, tuple(found))


def _group_matches(group: Any, offset: int, ref: ObjectRef, matcher: SubjectMatcher) -> list[int]:
    dataset = matcher.dataset
    if ref.zone is Zone.RAW:  # as readers.parquet.read_parquet gives the rows to raw_subject_rows
        group = to_spark_compatible(group)
    distinct = _distinct_subjects(group, dataset)
    if distinct is not None:  # each distinct value hashed once, rows selected by its code
        values, codes = distinct
        hashes = _subject_hashes(values, ref, matcher)
        chosen = _selected(hashes, matcher.hashes)
        if not len(chosen):
            return []
        rows = pc.indices_nonzero(pc.fill_null(pc.is_in(codes, value_set=chosen), False))
        return [offset + row for row in rows.to_pylist()]
    coordinates = range(offset, offset + int(group.num_rows))
    hashes = _subject_hashes(group, ref, matcher)
    return _matched(coordinates, hashes, matcher.hashes)


def _subject_hashes(table: Any, ref: ObjectRef, matcher: SubjectMatcher) -> Any:
    """The subject hash of each row of `table` (a row group, or its distinct subject values):
    raw rows typed as `raw_subject_rows` types them, lake rows as `lake_object_entries` reads
    them (POSITION keeps the row count without columns)."""
    dataset, key = matcher.dataset, matcher.key
    if ref.zone is Zone.RAW:
        return column_subject_hashes(table, dataset, key=key)
    positions = pa.array(range(int(table.num_rows)), pa.int64())
    located = pa.table([positions, *table.columns], names=[POSITION, *table.column_names])
    return row_subject_hashes(located, dataset, ref.constants, key=key)


def _distinct_subjects(table: Any, dataset: Dataset) -> tuple[Any, Any] | None:
    """For a dataset with one flat subject column of strings or integers in `table`: a table of
    its distinct values and each row's code into it (null for a null value: nobody's). A row's
    subject hash depends on its value alone, so hashing the distinct values selects the same
    rows. None for any other shape (composite keys, nested paths, other types)."""
    if len(dataset.subject_columns) != 1:
        return None
    path = dataset.subject_columns[0]
    if "." in path or path not in table.column_names:
        return None
    column = table.column(path)
    if not distinct_safe(column.type):
        return None
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    encoded = pc.dictionary_encode(array)
    return pa.table({path: encoded.dictionary}), encoded.indices


def _selected(hashes: Any, selected: frozenset[str]) -> Any:
    """The indexes (int32) of the `hashes` (a string array; null: nobody's) that are selected."""
    if not selected or len(hashes) == 0:
        return pa.array([], pa.int32())
    chosen = pc.is_in(hashes, value_set=pa.array(sorted(selected), pa.string()))
    return pc.indices_nonzero(pc.fill_null(chosen, False)).cast(pa.int32())
