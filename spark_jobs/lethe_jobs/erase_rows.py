"""The per-object core of the erase job: which rows of one object belong to the subjects being
erased, and the object rewritten without them. Pure functions on local files, no AWS, no Spark:
the job downloads an object version, calls `erase_rows`, puts the result under the same key (or
deletes the key when `rows_after` is 0), and checks what it put with `verify_erased`.

**Matching is the subject index's own notion of a row's subject.** Rows are read, typed and
hashed by the functions that index them (lethe_jobs.indexing, lethe_shared.index.arrow_entries), so
the
rows erasure finds for a subject hash are exactly the row hints the index gives that subject:

- raw CSV and JSON Lines: `readers.read_raw` + `indexing.raw_subject_rows` (rejected records
  too: a row with the wrong field count, a line that is not a JSON object); coordinate = the
  physical line a record starts on (1-based);
- raw Parquet: the reader's Spark-compatible columns + `raw_subject_rows`, one row group at a
  time; coordinate = row index (0-based) in the file;
- lake Parquet: `arrow_index.row_subject_hashes` (the per-row hashing `entries_from_table`
  groups into entries) with the Hive partition values of the key as constants (as
  `lake_object_entries`), one row group at a time; a subject column that is a partition column
  matches every row of the file;
- quarantine JSON Lines: `indexing.quarantine_subject_rows` (each line's "record").

A null subject value (or a null parent struct) is nobody's and never matches; `0` and `""` are
ids like any other. An object that cannot be read raises `UnreadableObjectError`.

**Rewriting keeps everything but the erased rows.**

- CSV, JSON Lines and quarantine files are streamed line by line (only one record's lines are
  held) and come out byte for byte identical apart from the erased records' physical lines: the
  lines csv.reader reads for a record (quoted newlines included), split as the readers split
  them (CSV and quarantine files on \\n, \\r\\n and a lone \\r; raw JSON Lines on \\n). Header,
  byte order mark, line endings, blank lines and a missing final newline stay as they were.
- gzip stays gzip: the original (first) member header is copied verbatim (name, mtime, OS,
  extra field, comment) and the payload deflated again at the level its XFL byte names. A file
  of several gzip members becomes one member; an uncompressed file stays uncompressed.
- Parquet is rewritten one row group at a time (memory bounded by a row group): each row group
  filtered and written as one row group, an emptied one dropped; per column the same codec,
  dictionary encoding, non-dictionary encoding (DELTA_*, BYTE_STREAM_SPLIT), statistics, page
  index and bloom filter presence; the same sorting columns; the key-value metadata copied
  verbatim (ARROW:schema, when the file had one, is the original bytes; none is added when it
  had none); the writer options (format version, INT96 timestamps, decimals as INT32/INT64,
  list element names, TIME adjusted to UTC) chosen by writing the empty schema under each
  candidate, so that the Parquet schema tree (names, repetition, physical and logical types,
  field ids) is the original one. INT96 columns are read at nanosecond precision unless a value
  lies outside the nanosecond range (1677-2262), then at microseconds, so no date wraps around.
  What pyarrow cannot reproduce is reported in `EraseResult.deviations` (schema lines and
  column paths, never values): Spark's legacy list and map layout (writeLegacyFormat), a file
  mixing INT96 and INT64 timestamps or integer and fixed-length decimals, a codec pyarrow
  cannot write (LZO). Not kept, because the footer does not record it or pyarrow cannot set
  it: the root's name (Spark's `spark_schema` becomes `schema`), `created_by` (names the writer
  of the new file), the compression level (the codec's default), the data page version (1.0),
  page checksums, per row group differences of codec or encoding (the first row group's are
  used), row groups above 64 Mi rows (split).
- Raw Parquet wrapped in gzip is unwrapped, rewritten and wrapped again.
"""

from __future__ import annotations

import bisect
import csv
import gzip
import io
import json
import re
import shutil
import struct
import tempfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lethe_jobs.arrow_bridge import to_spark_compatible
from lethe_jobs.errors import UnreadableFileError
from lethe_jobs.indexing import UnreadableObjectError, quarantine_subject_rows, raw_subject_rows
from lethe_jobs.objects import ObjectKind
from lethe_jobs.readers import (
    csv_reader,
    cut_of,
    open_payload,
    read_raw,
    salvaging,
)
from lethe_jobs.validate import POSITION
from lethe_shared.catalog.object_catalog import Zone
from lethe_shared.datasets.document import CsvOptions, DataFormat, Dataset, hive_partition_values
from lethe_shared.index.arrow_entries import ObjectRef
from lethe_shared.subject_hashing.arrow import row_subject_hashes
from lethe_shared.subject_hashing.keys import KEY_MIN_BYTES
from lethe_shared.subject_hashing.records import (
    column_subject_hashes,
    distinct_safe,
    subject_hashes_of_rows,
)

_HASH = re.compile(r"[0-9a-f]{64}")
_BOM = "\ufeff"
_GZIP_ERRORS = (gzip.BadGzipFile, EOFError, zlib.error)
_PARQUET_ERRORS = (pa.ArrowException, OSError, TypeError, ValueError)
_COPY_CHUNK = 1024 * 1024


# ---------------------------------------------------------------------------------- API


@dataclass(frozen=True)
class SubjectMatcher:
    """The rows to erase: those of `dataset` whose subject hashes (HMAC-SHA256 hex under `key`,
    as the subject index stores them) are in `hashes`."""

    dataset: Dataset
    hashes: frozenset[str]
    key: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if len(self.key) < KEY_MIN_BYTES:
            raise ValueError(f"the subject hash key must have at least {KEY_MIN_BYTES} bytes")
        if not all(_HASH.fullmatch(h) for h in self.hashes):
            raise ValueError("subject hashes are 64 lowercase hexadecimal characters")


@dataclass(frozen=True)
class RowMatches:
    """What an object holds: `rows` rows as the index counts them (rejected records included),
    and the coordinates of the matching ones, ascending (CSV, JSON Lines and quarantine files:
    the 1-based physical line a record starts on; Parquet: the 0-based row index)."""

    rows: int
    positions: tuple[int, ...]

    @property
    def matched(self) -> int:
        return len(self.positions)


@dataclass(frozen=True)
class EraseResult:
    """The outcome of `erase_rows`. `written` is True when the target was written, which is
    exactly when some rows were removed and some remain (no row left: the caller deletes the
    object; nothing removed: the object stays as it is)."""

    rows_before: int
    positions: tuple[int, ...]  # coordinates of the removed rows in the source object
    written: bool
    deviations: tuple[str, ...] = ()  # Parquet properties the rewrite could not keep

    @property
    def rows_removed(self) -> int:
        return len(self.positions)

    @property
    def rows_after(self) -> int:
        return self.rows_before - self.rows_removed


class ErasureVerificationError(Exception):
    """A rewritten object still holds a matching row, or not the rows it should."""


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
        return _parquet_matches(path, object_key, matcher, raw=False)
    if matcher.dataset.format is DataFormat.PARQUET:
        with tempfile.TemporaryDirectory(dir=workdir) as scratch:
            local, _ = _unwrapped_parquet(path, matcher.dataset, Path(scratch))
            return _parquet_matches(local, object_key, matcher, raw=True)
    return _raw_text_matches(path, object_key, matcher, workdir)


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
    if source.resolve() == target.resolve():
        raise ValueError("the target must be another file than the source")
    if kind is ObjectKind.NO_ROWS:
        return EraseResult(0, (), written=False)
    if kind is ObjectKind.LAKE_PARQUET or matcher.dataset.format is DataFormat.PARQUET:
        return _erase_parquet(kind, source, target, object_key, matcher, workdir=workdir)
    matches = match_rows(kind, source, object_key, matcher, workdir=workdir)
    if not _rewrite_needed(matches):
        return EraseResult(matches.rows, matches.positions, written=False)
    drop = frozenset(matches.positions)
    if kind is ObjectKind.QUARANTINE_ROWS:
        _rewrite_lines(source, target, drop)
    else:
        _rewrite_raw_text(source, target, matcher.dataset, drop)
    return EraseResult(matches.rows, matches.positions, written=True)


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


def _rewrite_needed(matches: RowMatches) -> bool:
    return 0 < matches.matched < matches.rows


# ----------------------------------------------------------------------------- matching


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


def _open_parquet(path: Path, int96_unit: str | None = None) -> Any:
    try:
        return pq.ParquetFile(path, coerce_int96_timestamp_unit=int96_unit)
    except _PARQUET_ERRORS as exc:
        raise UnreadableObjectError(f"not a readable Parquet file: {exc}") from exc


def _parquet_matches(
    path: Path, object_key: str, matcher: SubjectMatcher, *, raw: bool
) -> RowMatches:
    """Matches one row group at a time, reading only the subject columns."""
    dataset = matcher.dataset
    parquet = _open_parquet(path)
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
    except _PARQUET_ERRORS as exc:
        raise UnreadableObjectError(f"not a readable Parquet file: {exc}") from exc
    return RowMatches(offset, tuple(found))


def _group_matches(group: Any, offset: int, ref: ObjectRef, matcher: SubjectMatcher) -> list[int]:
    dataset = matcher.dataset
    if ref.zone is Zone.RAW:  # as readers._read_parquet gives the rows to raw_subject_rows
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


# ------------------------------------------------------------------------ text rewriting


def _rewrite_raw_text(source: Path, target: Path, dataset: Dataset, drop: frozenset[int]) -> None:
    """A truncated gzip stream (readers.salvaging) is copied up to its cut. Its last record is
    the reader's cut tail: kept, the new member is written without its trailer, so that the
    object reads as the same records, the same tail included; dropped (the tail held an erased
    subject), the new member is complete: there is no cut left."""
    try:
        with open_payload(source, dataset.compression) as payload:
            header = _gzip_header(source) if isinstance(payload, gzip.GzipFile) else None
            stream = salvaging(payload)
            last: list[int | None] = [None]  # the last record's line, once copied

            def complete() -> bool:  # no cut, or the record at the cut was erased
                return cut_of(stream) is None or last[0] in drop

            with _sink(target, header, trailer=complete) as write:
                if dataset.format is DataFormat.CSV:
                    last[0] = _copy_csv(stream, write, dataset.csv, drop)
                else:
                    last[0] = _copy_jsonl(stream, write, drop)
    except (*_GZIP_ERRORS, UnicodeDecodeError, csv.Error, UnreadableFileError) as exc:
        raise UnreadableObjectError(f"unreadable raw object: {exc}") from exc


class _LineTap:
    """Feeds csv.reader the lines of a text stream and keeps every line it takes, as read
    (the byte order mark stays in the kept line; csv.reader sees the text without it, as
    the reader's utf-8-sig decoding gives it)."""

    def __init__(self, lines: Iterable[str]) -> None:
        self._lines = iter(lines)
        self._first = True
        self.taken: list[str] = []

    def __iter__(self) -> _LineTap:
        return self

    def __next__(self) -> str:
        line = next(self._lines)
        self.taken.append(line)
        if self._first:
            self._first = False
            return line.removeprefix(_BOM)
        return line


def _copy_csv(
    payload: IO[bytes], write: Callable[[bytes], object], options: CsvOptions, drop: frozenset[int]
) -> int | None:
    """Copy every record but those starting on a line in `drop`, with all their lines. Lines
    and record starts are counted as readers._read_csv counts them. Returns the line the last
    row starts on (None: no row)."""
    # newline="": lines split on \n, \r\n and \r and kept as they are, as the reader splits;
    # bytes that are not UTF-8 (a record the reader rejected) pass through as they are
    text = io.TextIOWrapper(payload, encoding="utf-8", errors="surrogateescape", newline="")
    tap = _LineTap(text)
    reader = csv_reader(cast(IO[str], tap), options)  # csv.reader takes any line iterator
    last_line = 0
    start = None
    for row in reader:
        start, last_line = last_line + 1, int(reader.line_num)
        if not (row and start in drop):
            write("".join(tap.taken).encode("utf-8", "surrogateescape"))
        tap.taken.clear()
    write("".join(tap.taken).encode("utf-8", "surrogateescape"))
    return start


def _copy_jsonl(
    payload: IO[bytes], write: Callable[[bytes], object], drop: frozenset[int]
) -> int | None:
    """Copy every line but those in `drop`; lines end at \\n, as readers._read_jsonl reads.
    Returns the number of the last line (None: no line)."""
    number = None
    for number, line in enumerate(payload, start=1):
        if number not in drop:
            write(line)
    return number


def _rewrite_lines(source: Path, target: Path, drop: frozenset[int]) -> None:
    """A quarantine file without the lines in `drop`, counted as its indexer counts them (text
    mode: \\n, \\r\\n and a lone \\r end a line)."""
    try:
        with source.open(encoding="utf-8", newline="") as lines, _sink(target, None) as write:
            for number, line in enumerate(lines, start=1):
                if number not in drop:
                    write(line.encode("utf-8"))
    except UnicodeDecodeError as exc:
        raise UnreadableObjectError(f"not UTF-8 text: {exc}") from exc


@contextmanager
def _sink(
    target: Path, gzip_header: bytes | None, trailer: Callable[[], bool] = lambda: True
) -> Iterator[Callable[[bytes], object]]:
    """A writer of `target`'s payload: gzip-compressed behind `gzip_header` when given, with
    the member's trailer unless `trailer()` says no when it closes. A target left incomplete by
    an error is removed."""
    try:
        with target.open("wb") as out:
            if gzip_header is None:
                yield out.write
            else:
                member = _GzipMember(out, gzip_header)
                yield member.write
                member.close(trailer=trailer())
    except BaseException:
        target.unlink(missing_ok=True)
        raise


# ---------------------------------------------------------------------------------- gzip

_FHCRC, _FEXTRA, _FNAME, _FCOMMENT = 0x02, 0x04, 0x08, 0x10
_LEVEL_OF_XFL = {2: 9, 4: 1}  # RFC 1952: 2 = maximum compression, 4 = fastest


def _zero_terminated(stream: IO[bytes]) -> bytes:
    data = bytearray()
    while (byte := stream.read(1)) and byte != b"\0":
        data += byte
    return bytes(data) + byte


def _gzip_header(path: Path) -> bytes:
    """The first member header of a gzip file, verbatim: magic, method, flags, mtime, XFL, OS,
    and the optional extra field, file name, comment and header CRC."""
    with path.open("rb") as stream:
        head = stream.read(10)
        flags = head[3]
        parts = [head]
        if flags & _FEXTRA:
            size = stream.read(2)
            parts += [size, stream.read(int.from_bytes(size, "little"))]
        for flag in (_FNAME, _FCOMMENT):
            if flags & flag:
                parts.append(_zero_terminated(stream))
        if flags & _FHCRC:
            parts.append(stream.read(2))
    return b"".join(parts)


class _GzipMember:
    """One gzip member behind a given header: raw deflate, then CRC-32 and size (RFC 1952)."""

    def __init__(self, out: IO[bytes], header: bytes) -> None:
        level = _LEVEL_OF_XFL.get(header[8], 6)
        self._out = out
        self._deflate = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
        self._crc = 0
        self._size = 0
        out.write(header)

    def write(self, data: bytes) -> None:
        self._crc = zlib.crc32(data, self._crc)
        self._size += len(data)
        self._out.write(self._deflate.compress(data))

    def close(self, *, trailer: bool = True) -> None:
        """Ends the deflate stream; without `trailer` the member stops there, cut as a
        truncated one is (CRC-32 and size missing)."""
        self._out.write(self._deflate.flush())
        if trailer:
            self._out.write(struct.pack("<II", self._crc, self._size & 0xFFFFFFFF))


def _gzip_file(source: Path, target: Path, header: bytes) -> None:
    with source.open("rb") as stream, _sink(target, header) as write:
        while chunk := stream.read(_COPY_CHUNK):
            write(chunk)


# ------------------------------------------------------------------------------- Parquet


def _unwrapped_parquet(source: Path, dataset: Dataset, scratch: Path) -> tuple[Path, bytes | None]:
    """A raw Parquet object as a Parquet file, and its gzip header when it was wrapped in gzip
    (decided as readers.open_payload decides: by the magic number, never by the key)."""
    try:
        with open_payload(source, dataset.compression) as payload:
            if not isinstance(payload, gzip.GzipFile):
                return source, None
            local = scratch / "source.parquet"
            with local.open("wb") as out:
                shutil.copyfileobj(payload, out, length=_COPY_CHUNK)
    except (*_GZIP_ERRORS, UnreadableFileError) as exc:
        raise UnreadableObjectError(f"unreadable raw object: {exc}") from exc
    return local, _gzip_header(source)


def _erase_parquet(
    kind: ObjectKind,
    source: Path,
    target: Path,
    object_key: str,
    matcher: SubjectMatcher,
    *,
    workdir: Path,
) -> EraseResult:
    raw = kind is ObjectKind.RAW
    with tempfile.TemporaryDirectory(dir=workdir) as scratch:
        local, header = (source, None)
        if raw:
            local, header = _unwrapped_parquet(source, matcher.dataset, Path(scratch))
        matches = _parquet_matches(local, object_key, matcher, raw=raw)
        if not _rewrite_needed(matches):
            return EraseResult(matches.rows, matches.positions, written=False)
        out = target if header is None else Path(scratch) / "erased.parquet"
        try:
            deviations = _rewrite_parquet(local, out, matches.positions)
        except BaseException:
            out.unlink(missing_ok=True)
            raise
        if header is not None:
            _gzip_file(out, target, header)
    return EraseResult(matches.rows, matches.positions, written=True, deviations=deviations)


@dataclass(frozen=True)
class _ParquetPlan:
    """How to write a file like the source: the writer's options and the INT96 read unit."""

    int96_unit: str | None
    options: Mapping[str, Any]


def _rewrite_parquet(source: Path, out: Path, drop: Sequence[int]) -> tuple[str, ...]:
    plan = _plan(source)
    parquet = _open_parquet(source, plan.int96_unit)
    schema = parquet.schema_arrow.remove_metadata()
    offset = 0
    # store_schema=False: the key-value metadata, ARROW:schema included, is the source's own
    with pq.ParquetWriter(str(out), schema, store_schema=False, **plan.options) as writer:
        for index in range(parquet.num_row_groups):
            group = parquet.read_row_group(index)
            kept = group.filter(_keep_mask(offset, int(group.num_rows), drop))
            offset += int(group.num_rows)
            if kept.num_rows:
                writer.write_table(kept, row_group_size=kept.num_rows)
        if parquet.metadata.metadata:
            writer.add_key_value_metadata(parquet.metadata.metadata)
    return tuple(_deviations(parquet.metadata, pq.ParquetFile(out).metadata))


def _keep_mask(offset: int, count: int, drop: Sequence[int]) -> Any:
    """False for the rows of the row group starting at `offset` whose index is in `drop`."""
    low, high = bisect.bisect_left(drop, offset), bisect.bisect_left(drop, offset + count)
    keep = np.ones(count, dtype=bool)
    keep[np.asarray(drop[low:high], dtype=np.int64) - offset] = False
    return pa.array(keep)


def _plan(source: Path) -> _ParquetPlan:
    parquet = _open_parquet(source)
    unit = _int96_unit(source, parquet.schema)
    schema = _open_parquet(source, unit).schema_arrow.remove_metadata()
    layout = _schema_options(schema, parquet.schema, parquet.metadata.format_version)
    return _ParquetPlan(unit, {**layout, **_column_options(parquet.metadata)})


def _int96_unit(source: Path, parquet_schema: Any) -> str | None:
    """How to read INT96 timestamps: nanoseconds (exact) unless a value lies outside what
    nanoseconds since 1970 hold, then microseconds (what Spark writes), so none wraps around."""
    columns = [parquet_schema.column(i) for i in range(len(parquet_schema))]
    heads = sorted({c.path.split(".")[0] for c in columns if c.physical_type == "INT96"})
    if not heads:
        return None
    parquet = _open_parquet(source, "us")
    for index in range(parquet.num_row_groups):
        group = parquet.read_row_group(index, columns=heads)
        if not all(_fits_nanoseconds(chunk) for c in group.columns for chunk in c.chunks):
            return "us"
    return "ns"


def _fits_nanoseconds(array: Any) -> bool:
    for leaf in _timestamp_leaves(array):
        try:
            pc.cast(leaf, pa.timestamp("ns", leaf.type.tz))
        except pa.ArrowInvalid:
            return False
    return True


_LIST_TYPES = (
    pa.types.is_list,
    pa.types.is_large_list,
    pa.types.is_fixed_size_list,
    pa.types.is_map,
)


def _timestamp_leaves(array: Any) -> Iterator[Any]:
    kind = array.type
    if pa.types.is_timestamp(kind):
        yield array
    elif pa.types.is_struct(kind):
        for index in range(kind.num_fields):
            yield from _timestamp_leaves(array.field(index))
    elif any(check(kind) for check in _LIST_TYPES):
        yield from _timestamp_leaves(array.flatten())


def _schema_options(arrow_schema: Any, parquet_schema: Any, version: str) -> dict[str, Any]:
    """The writer options under which `arrow_schema` is written as `parquet_schema`, found by
    writing the empty schema under each candidate; when none gives it exactly, the closest (the
    difference is then reported by `_deviations`)."""
    columns = [parquet_schema.column(i) for i in range(len(parquet_schema))]
    fixed = {
        "use_deprecated_int96_timestamps": any(c.physical_type == "INT96" for c in columns),
        "store_decimal_as_integer": any(
            c.logical_type.type == "DECIMAL" and c.physical_type in {"INT32", "INT64"}
            for c in columns
        ),
        "write_time_adjusted_to_utc": any(
            c.logical_type.type == "TIME"
            and json.loads(c.logical_type.to_json())["isAdjustedToUTC"]
            for c in columns
        ),
    }
    versions = ("1.0",) if version == "1.0" else ("2.6", "2.4")
    wanted = _schema_lines(parquet_schema)
    # the choice depends on these alone: probed once per shape in a process (a task's objects
    # of one dataset share it)
    shape = (arrow_schema.serialize().to_pybytes(), tuple(wanted), versions, *fixed.values())
    if shape not in _SCHEMA_OPTIONS:
        if len(_SCHEMA_OPTIONS) >= _SCHEMA_OPTIONS_KEPT:
            _SCHEMA_OPTIONS.clear()
        _SCHEMA_OPTIONS[shape] = _probed_options(arrow_schema, wanted, fixed, versions)
    return dict(_SCHEMA_OPTIONS[shape])


_SCHEMA_OPTIONS: dict[tuple[Any, ...], Mapping[str, Any]] = {}
_SCHEMA_OPTIONS_KEPT = 256


def _probed_options(
    arrow_schema: Any, wanted: list[str], fixed: Mapping[str, Any], versions: tuple[str, ...]
) -> Mapping[str, Any]:
    candidates = [
        {**fixed, "version": v, "use_compliant_nested_type": compliant}
        for v in versions
        for compliant in (True, False)
    ]

    def differences(options: Mapping[str, Any]) -> int:
        found = _schema_lines(_probe(arrow_schema, options))
        return 0 if found == wanted else 1 + len(set(wanted) - set(found))

    return min(candidates, key=differences)  # the first of the closest ones


def _probe(arrow_schema: Any, options: Mapping[str, Any]) -> Any:
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, arrow_schema, store_schema=False, **options):
        pass
    return pq.ParquetFile(pa.BufferReader(sink.getvalue())).schema


def _schema_lines(parquet_schema: Any) -> list[str]:
    """The Parquet schema tree as text, one node a line: names, repetition, physical and logical
    types, field ids, group annotations (ParquetSchema.equals compares leaf columns only, not
    the names of the groups above them). Not the root's name, which pyarrow cannot set (Spark
    writes `spark_schema`; no reader uses it)."""
    lines = [line.strip() for line in str(parquet_schema).splitlines() if line.strip()]
    return lines[2:] if lines and lines[0].startswith("<") else lines[1:]


_WRITABLE_CODECS = frozenset({"NONE", "SNAPPY", "GZIP", "BROTLI", "LZ4", "ZSTD"})
_PLAIN_ENCODINGS = frozenset({"PLAIN", "RLE", "BIT_PACKED", "PLAIN_DICTIONARY", "RLE_DICTIONARY"})
_COLUMN_ENCODINGS = frozenset(
    {"DELTA_BINARY_PACKED", "DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY", "BYTE_STREAM_SPLIT"}
)


def _codec(name: str) -> str:
    codec = "NONE" if name == "UNCOMPRESSED" else name
    return codec if codec in _WRITABLE_CODECS else "SNAPPY"  # reported as a deviation


def _column_encoding(chunk: Any) -> str | None:
    special = set(chunk.encodings) - _PLAIN_ENCODINGS
    if chunk.has_dictionary_page or len(special) != 1 or not special <= _COLUMN_ENCODINGS:
        return None
    return str(special.pop())


def _column_options(metadata: Any) -> dict[str, Any]:
    """Per column options as the first row group shows them: codec, dictionary, encoding,
    statistics, page index, bloom filter; and the row groups' sorting columns."""
    if metadata.num_row_groups == 0:
        return {}
    group = metadata.row_group(0)
    chunks = [group.column(j) for j in range(group.num_columns)]
    encodings = {c.path_in_schema: _column_encoding(c) for c in chunks}
    most_rows = max(metadata.row_group(i).num_rows for i in range(metadata.num_row_groups))
    bloom = {"ndv": max(1, int(most_rows))}  # at most one distinct value per row
    blooms = {c.path_in_schema: bloom for c in chunks if c.bloom_filter_offset is not None}
    return {
        "compression": {c.path_in_schema: _codec(c.compression) for c in chunks},
        "use_dictionary": [c.path_in_schema for c in chunks if c.has_dictionary_page],
        "column_encoding": {p: e for p, e in encodings.items() if e} or None,
        "write_statistics": [c.path_in_schema for c in chunks if c.is_stats_set],
        "write_page_index": any(c.has_column_index for c in chunks),
        "sorting_columns": group.sorting_columns or None,
        "bloom_filter_options": blooms or None,
    }


def _deviations(before: Any, after: Any) -> list[str]:
    """What the rewritten file does not keep of the source: schema lines, format version,
    key-value metadata keys, codecs (column paths and types only, never values)."""
    found: list[str] = []
    old_schema, new_schema = _schema_lines(before.schema), _schema_lines(after.schema)
    if new_schema != old_schema:
        kept = set(new_schema)
        lost = [line for line in old_schema if line not in kept]
        found += [f"schema: {line!r} is written differently" for line in lost] or ["schema"]
    if after.format_version != before.format_version:
        found.append(f"format version {before.format_version} became {after.format_version}")
    if (after.metadata or {}) != (before.metadata or {}):
        keys = sorted({*(before.metadata or {}), *(after.metadata or {})})
        found.append(f"key-value metadata differs (keys {keys})")
    if before.num_row_groups and after.num_row_groups:
        found += _codec_deviations(before.row_group(0), after.row_group(0))
    return found


def _codec_deviations(before: Any, after: Any) -> list[str]:
    old = {before.column(j).path_in_schema: before.column(j) for j in range(before.num_columns)}
    found = []
    for j in range(after.num_columns):
        chunk = after.column(j)
        original = old.get(chunk.path_in_schema)
        if original is not None and original.compression != chunk.compression:
            found.append(
                f"column {chunk.path_in_schema}: codec {original.compression} "
                f"became {chunk.compression}"
            )
    return found
