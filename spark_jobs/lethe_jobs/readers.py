"""Raw files into Arrow tables, every record with its source coordinate.

A reader returns `RawRecords`: the records Spark validates (an Arrow table whose first column is
the coordinate), the records the reader already rejected (a CSV row with the wrong number of
fields, a JSON Lines line that is not an object) and the data column names the file holds.
A file that cannot be read at all raises `UnreadableFileError`; the job quarantines it whole.

Coordinates: CSV and JSON Lines records are located by the physical line they start on (1-based;
a CSV header is line 1), Parquet rows by their 0-based index, in the whole object also when a
reader reads one slice of it (`Slice`: a piece of a large object, lethe_jobs.pieces).

Readers stream: `iter_raw` yields the records a batch at a time (`BATCH_ROWS`), so that memory
is bounded by a batch, not by the object; `read_raw` gathers them for small objects.

Choices written down:
- gzip is recognised by its magic number (1f 8b) when compression is "auto", never by the key;
- a file that is empty after decompression is an empty dataset file (no rows, not an error), for
  CSV and JSON Lines; a CSV file with content but no header row is unreadable;
- blank lines are skipped in both text formats; a UTF-8 byte order mark is allowed; a CSV
  header is the first row with a field that is not only whitespace (a file of whitespace lines
  misses its header, as one of blank lines does);
- a truncated gzip stream (CSV, JSON Lines) is read up to its cut: the records before it are
  read as usual, and the last record (the one the cut falls in, or the last one before it: the
  missing trailer cannot tell) is rejected as the stream's `TRUNCATED` tail, keeping its text
  under "_raw" and, as its columns, only the fields the cut did not reach (a CSV field followed
  by a delimiter, a JSON member followed by "," or "}"), so that a subject whose id is complete
  is indexed there; a stream cut before its first record is unreadable. Truncated gzip-wrapped
  Parquet is unreadable (its footer is at the end);
- bytes that are not UTF-8 reject the record they are in (the CSV record, the JSON Lines line),
  not the file: the record keeps them as `\\xNN` escapes; in a CSV header they make the file
  unreadable;
- a JSON Lines line nested deeper than MAX_JSON_DEPTH is rejected, not a crash;
- a CSV or Parquet column whose name starts with RESERVED_PREFIX (the job's own columns:
  POSITION, RECORD, ...) is not read, like any column the schema does not declare (it stays in
  `columns`, which names what the file holds); a Parquet file that repeats a column name is
  unreadable, like a CSV header that does;
- a CSV record from a row with too many fields keeps the surplus values under "_extra_fields";
  a JSON Lines line that is not an object is kept as text under "_raw".
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
import shutil
import zlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

import pyarrow as pa
import pyarrow.parquet as pq

from lethe_jobs.arrow_bridge import to_spark_compatible
from lethe_jobs.errors import UnreadableFileError
from lethe_jobs.validate import POSITION, RECORD
from lethe_shared.datasets.document import Compression, CsvOptions, DataFormat, Dataset

GZIP_MAGIC = b"\x1f\x8b"
CSV_FIELD_LIMIT = 64 * 1024 * 1024
_BOM = "\ufeff"
RESERVED_PREFIX = "_lethe_"  # the ingest frame's own columns start so (validate.POSITION, ...)
MAX_JSON_DEPTH = 500  # JSON Lines: deeper lines are rejected (_parse_object)
_JSON_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKETS = re.compile(r"[\[\]{}]")
_UNDECODED = re.compile("[\udc80-\udcff]")  # bytes that were not UTF-8 (surrogateescape)
_GZIP_ERRORS = (gzip.BadGzipFile, EOFError, zlib.error)
TRUNCATED = "truncated gzip stream"
TRUNCATED_TAIL = (
    f"{TRUNCATED}: the record at the cut may be incomplete (only the fields before the cut"
    " are read; its text is kept under _raw)"
)


@dataclass(frozen=True)
class RejectedRecord:
    """A record the reader rejected before validation."""

    position: int
    reasons: tuple[str, ...]
    record_json: str  # the record as read, a JSON object


@dataclass(frozen=True)
class RawRecords:
    """What a reader found in one raw file."""

    table: Any  # pa.Table: POSITION (int64) first, then data columns (or RECORD for JSON Lines)
    coordinate: str  # "line" or "row"
    columns: list[str]  # data column names found in the file, in file order
    rejected: list[RejectedRecord] = field(default_factory=list)
    json_text: bool = False  # True when RECORD holds each record's JSON text (JSON Lines)

    @property
    def rows_read(self) -> int:
        return int(self.table.num_rows) + len(self.rejected)


def is_gzip(path: Path) -> bool:
    with path.open("rb") as stream:
        return stream.read(2) == GZIP_MAGIC


@contextmanager
def open_payload(path: Path, compression: Compression) -> Iterator[IO[bytes]]:
    """The object's bytes, decompressed when gzip is declared or (for "auto") detected."""
    gzipped = is_gzip(path)
    if compression is Compression.GZIP and not gzipped:
        raise UnreadableFileError(
            "compression is declared as gzip but the object is not gzip (no 1f 8b magic number)"
        )
    if gzipped and compression is not Compression.NONE:
        with gzip.open(path, "rb") as stream:
            yield cast(IO[bytes], stream)
    else:
        with path.open("rb") as stream:
            yield stream


class _SalvagingGzip(io.RawIOBase):
    """A gzip stream that ends where a truncated stream is cut instead of raising: every byte
    decompressed before the cut is read (deflate output is a prefix of the original; the CRC
    that would confirm it is in the missing trailer), and `truncated` says why it ended. A
    stream that is not deflate still raises."""

    def __init__(self, stream: gzip.GzipFile) -> None:
        self._stream = stream
        self.truncated: str | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.truncated is not None:
            return 0
        try:
            data = self._stream.read1(len(buffer))  # one read: no data held when it raises
        except EOFError as exc:
            self.truncated = f"{TRUNCATED}: {exc}"
            return 0
        buffer[: len(data)] = data
        return len(data)


def salvaging(payload: IO[bytes]) -> IO[bytes]:
    """`payload` read to the cut when it is a truncated gzip stream (see `cut_of`); any other
    payload as it is."""
    if not isinstance(payload, gzip.GzipFile):
        return payload
    return cast(IO[bytes], io.BufferedReader(_SalvagingGzip(payload)))


def cut_of(payload: IO[bytes]) -> str | None:
    """Why a `salvaging` payload ended early (a truncated gzip stream), once it was read to its
    end; None when it ended as a stream should."""
    raw = getattr(payload, "raw", None)
    return raw.truncated if isinstance(raw, _SalvagingGzip) else None


def is_salvaging(payload: IO[bytes]) -> bool:
    return isinstance(getattr(payload, "raw", None), _SalvagingGzip)


@dataclass(frozen=True)
class Slice:
    """The part of an object a reader reads: all of it, or one piece of a large object
    (lethe_jobs.pieces). Coordinates stay those of the whole object."""

    first_line: int = 1  # text: the number, in the whole object, of the slice's first line
    header: tuple[str, ...] | None = None  # CSV: the columns, for a slice without the header
    row_groups: tuple[int, int] | None = None  # Parquet: row groups [start, end) only
    first_row: int = 0  # Parquet: the index, in the whole object, of the slice's first row

    @property
    def whole(self) -> bool:
        return self.first_line == 1 and self.row_groups is None


WHOLE = Slice()
BATCH_ROWS = 65_536  # records a reader yields at a time: what one batch costs in memory


def iter_raw(
    source: Path,
    dataset: Dataset,
    workdir: Path,
    *,
    part: Slice = WHOLE,
    batch_rows: int = BATCH_ROWS,
) -> Iterator[RawRecords]:
    """Read the raw file (or the slice of one) at `source` as `dataset` declares it, a batch of
    at most `batch_rows` records at a time, so that no reader holds a large object whole.
    Raises UnreadableFileError, possibly after earlier batches (the caller discards them)."""
    readers: dict[DataFormat, Callable[..., Iterator[RawRecords]]] = {
        DataFormat.CSV: _read_csv,
        DataFormat.JSONL: _read_jsonl,
        DataFormat.PARQUET: _read_parquet,
    }
    try:
        with open_payload(source, dataset.compression) as opened:
            # text is read up to a cut; Parquet needs its footer, at the end
            payload = opened if dataset.format is DataFormat.PARQUET else salvaging(opened)
            yield from readers[dataset.format](payload, dataset, workdir, part, batch_rows)
    except _GZIP_ERRORS as exc:
        raise UnreadableFileError(f"not a valid gzip stream: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise UnreadableFileError(f"not UTF-8 text: {exc}") from exc


def is_blank_row(row: list[str]) -> bool:
    """A CSV row with no field that holds more than whitespace: never a header."""
    return not any(value.strip() for value in row)


def _escaped(text: str) -> str:
    """Text decoded with surrogateescape, its undecodable bytes written as \\xNN."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def read_raw(path: Path, dataset: Dataset, workdir: Path) -> RawRecords:
    """The whole raw file at `path` at once (small objects: the index job, erasure). Raises
    UnreadableFileError."""
    return concat_records(list(iter_raw(path, dataset, workdir)))


def concat_records(parts: list[RawRecords]) -> RawRecords:
    """Batches of one reader as one RawRecords (columns in order of first appearance)."""
    first = parts[0]
    columns = list(dict.fromkeys(c for p in parts for c in p.columns))
    return RawRecords(
        pa.concat_tables([p.table for p in parts]) if len(parts) > 1 else first.table,
        first.coordinate,
        columns,
        [r for p in parts for r in p.rejected],
        first.json_text,
    )


# ------------------------------------------------------------------------------------ CSV


def csv_reader(text: IO[str], options: CsvOptions) -> Any:
    csv.field_size_limit(max(csv.field_size_limit(), CSV_FIELD_LIMIT))
    return csv.reader(
        text,
        delimiter=options.delimiter,
        quotechar=options.quote,
        escapechar=None if options.escape == options.quote else options.escape,
        doublequote=True,
        strict=False,
    )


def _csv_record(names: list[str], values: list[str]) -> str:
    values = [_escaped(v) if _UNDECODED.search(v) else v for v in values]
    record: dict[str, Any] = dict(zip(names, values, strict=False))
    if len(values) > len(names):
        record["_extra_fields"] = values[len(names) :]
    return json.dumps(record, ensure_ascii=False)


class _CsvCollector:
    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.positions: list[int] = []
        self.values: list[list[str]] = [[] for _ in names]
        self.rejected: list[RejectedRecord] = []

    def __len__(self) -> int:
        return len(self.positions) + len(self.rejected)

    def add(self, line: int, row: list[str]) -> None:
        reasons = []
        if len(row) != len(self.names):
            reasons.append(f"expected {len(self.names)} fields, found {len(row)}")
        reasons += [
            f"column {self.names[i]}: not UTF-8 text" if i < len(self.names) else
            f"field {i + 1}: not UTF-8 text"
            for i, value in enumerate(row)
            if _UNDECODED.search(value)
        ]  # fmt: skip
        if reasons:
            record = _csv_record(self.names, row)
            self.rejected.append(RejectedRecord(line, tuple(reasons), record))
            return
        self.positions.append(line)
        for column, value in zip(self.values, row, strict=True):
            column.append(value)

    def records(self) -> RawRecords:
        kept = [i for i, name in enumerate(self.names) if not name.startswith(RESERVED_PREFIX)]
        arrays = [pa.array(self.positions, pa.int64())]
        arrays += [pa.array(self.values[i], pa.string()) for i in kept]
        table = pa.table(arrays, names=[POSITION, *[self.names[i] for i in kept]])
        return RawRecords(table, "line", list(self.names), self.rejected)


def _csv_header(reader: Any, dataset: Dataset) -> list[str] | None:
    """The column names; None for an empty file. Raises UnreadableFileError."""
    if not dataset.csv.header:
        return [c.name for c in dataset.schema_]
    header = next((row for row in reader if not is_blank_row(row)), None)
    if header is None:
        if reader.line_num == 0:
            return None
        raise UnreadableFileError("missing header: the file has only blank lines")
    if any(_UNDECODED.search(name) for name in header):
        raise UnreadableFileError("not UTF-8 text: the header holds bytes that are not UTF-8")
    duplicates = sorted({name for name in header if header.count(name) > 1})
    if duplicates:
        raise UnreadableFileError(f"the header repeats column(s) {', '.join(duplicates)}")
    return list(header)


class RecordLines:
    """Feeds csv.reader the lines of a text stream and keeps the lines it takes since `clear`:
    after a row, the text of that row's record, as read."""

    def __init__(self, lines: Iterable[str]) -> None:
        self._lines = iter(lines)
        self.taken: list[str] = []

    def __iter__(self) -> RecordLines:
        return self

    def __next__(self) -> str:
        line = next(self._lines)
        self.taken.append(line)
        return line

    def clear(self) -> str:
        text = "".join(self.taken)
        self.taken.clear()
        return text


def _csv_tail(
    names: list[str], line: int, row: list[str], text: str, reason: str
) -> RejectedRecord:
    """The record a truncated stream's cut falls in: every field but the last (which the cut
    may have shortened) as its columns, and its text under "_raw"."""
    complete = [_escaped(v) if _UNDECODED.search(v) else v for v in row[:-1]]
    record: dict[str, Any] = dict(zip(names, complete, strict=False))
    record["_raw"] = _escaped(text)
    return RejectedRecord(line, (reason,), json.dumps(record, ensure_ascii=False))


def _read_csv(
    payload: IO[bytes], dataset: Dataset, _workdir: Path, part: Slice, batch_rows: int
) -> Iterator[RawRecords]:
    encoding = "utf-8-sig" if part.first_line == 1 else "utf-8"
    # undecodable bytes become surrogates, and reject only the record that holds them
    text = io.TextIOWrapper(payload, encoding=encoding, errors="surrogateescape", newline="")
    # a stream that may be cut: each record's text is kept, and the last one held back
    tap = RecordLines(text) if is_salvaging(payload) else None
    reader = csv_reader(cast(IO[str], text if tap is None else tap), dataset.csv)
    offset = part.first_line - 1  # a slice's local line n is line n + offset of the object
    try:
        names = list(part.header) if part.header is not None else _csv_header(reader, dataset)
        if names is None:
            _refuse_cut(payload, "before the header")
            yield _CsvCollector([c.name for c in dataset.schema_]).records()
            return
        collector = _CsvCollector(names)
        last = _Last()
        rows = _csv_rows(reader, tap, offset)
        for line, row, _ in rows if tap is None else last.held_back(rows):
            if row:  # a blank line is no record
                collector.add(line, row)
            if len(collector) >= batch_rows:
                yield collector.records()
                collector = _CsvCollector(names)
    except csv.Error as exc:
        line = reader.line_num + offset
        raise UnreadableFileError(f"not valid CSV (line {line}): {exc}") from exc
    if last.item is None:
        _refuse_cut(payload, "before the first record")
    elif cut_of(payload) is None:
        if last.item[1]:
            collector.add(last.item[0], last.item[1])
    else:
        line, row, record_text = last.item
        collector.rejected.append(_csv_tail(names, line, row, record_text, TRUNCATED_TAIL))
    yield collector.records()


def _csv_rows(
    reader: Any, tap: RecordLines | None, offset: int
) -> Iterator[tuple[int, list[str], str]]:
    """Each row with the line it starts on and (with a tap) its text."""
    if tap is not None:
        tap.clear()  # the header's
    last_line = reader.line_num
    for row in reader:
        yield last_line + 1 + offset, row, tap.clear() if tap is not None else ""
        last_line = reader.line_num


class _Last:
    """Holds back the last item of an iteration (the record a cut may fall in)."""

    def __init__(self) -> None:
        self.item: Any = None

    def held_back(self, items: Iterable[Any]) -> Iterator[Any]:
        for item in items:
            if self.item is not None:
                yield self.item
            self.item = item


def _refuse_cut(payload: IO[bytes], where: str) -> None:
    """Raises UnreadableFileError when `payload` is a gzip stream cut `where` (no record)."""
    cut = cut_of(payload)
    if cut is not None:
        raise UnreadableFileError(f"{cut} ({where})")


# ------------------------------------------------------------------------------ JSON Lines


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _nesting(text: str) -> int:
    """How deep the arrays and objects of a JSON text nest (brackets inside strings aside)."""
    depth = deepest = 0
    for bracket in _BRACKETS.findall(_JSON_STRINGS.sub("", text)):
        depth += 1 if bracket in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def _parse_object(text: str) -> dict[str, Any] | str:
    """The JSON object on one line, or the reason it is none. A line nested deeper than
    MAX_JSON_DEPTH is refused before parsing: Python's parser would run out of recursion at a
    depth that depends on the interpreter, and Spark's JSON parser refuses more than 1,000."""
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH and _nesting(text) > MAX_JSON_DEPTH:
        return f"not a JSON object: nested deeper than {MAX_JSON_DEPTH} levels"
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except ValueError as exc:
        return f"not a JSON object: {exc}"
    except RecursionError:
        return "not a JSON object: nested too deeply to parse"
    if not isinstance(value, dict):
        return f"not a JSON object: found a JSON {type(value).__name__}"
    return value


class _JsonlCollector:
    def __init__(self) -> None:
        self.positions: list[int] = []
        self.texts: list[str] = []
        self.names: dict[str, None] = {}  # an ordered set: keys in order of first appearance
        self.rejected: list[RejectedRecord] = []

    def __len__(self) -> int:
        return len(self.positions) + len(self.rejected)

    def records(self) -> RawRecords:
        table = pa.table(
            [pa.array(self.positions, pa.int64()), pa.array(self.texts, pa.string())],
            names=[POSITION, RECORD],
        )
        return RawRecords(table, "line", list(self.names), self.rejected, json_text=True)


def complete_members(text: str) -> dict[str, Any]:
    """The members of a JSON object cut short that the cut did not reach: read from the start,
    each `"key": value` followed by "," or "}" (a value at the very end may be cut: "12" of
    "123"). Stops at the first member that is not complete or not valid JSON."""
    decoder = json.JSONDecoder(parse_constant=_reject_constant)
    members: dict[str, Any] = {}
    if _nesting(text) > MAX_JSON_DEPTH:
        return members
    at = len(text) - len(text.lstrip())
    if not text.startswith("{", at):
        return members
    at += 1
    try:
        while True:
            at = _skip_space(text, at)
            key, at = decoder.raw_decode(text, at)
            at = _skip_space(text, at)
            if not isinstance(key, str) or not text.startswith(":", at):
                return members
            value, at = decoder.raw_decode(text, _skip_space(text, at + 1))
            at = _skip_space(text, at)
            if at >= len(text) or text[at] not in ",}":
                return members
            members[key] = value
            if text[at] == "}":
                return members
            at += 1
    except (ValueError, RecursionError):
        return members


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at] in " \t\r\n":
        at += 1
    return at


def _jsonl_tail(number: int, text: str, reason: str) -> RejectedRecord:
    members = complete_members(text)
    members.pop("_raw", None)
    record = json.dumps({**members, "_raw": text}, ensure_ascii=False)
    return RejectedRecord(number, (reason,), record)


def _read_jsonl(
    payload: IO[bytes], _dataset: Dataset, _workdir: Path, part: Slice, batch_rows: int
) -> Iterator[RawRecords]:
    collector = _JsonlCollector()
    last = _Last()
    lines = enumerate(payload, start=part.first_line)
    for number, raw in last.held_back(lines) if is_salvaging(payload) else lines:
        _add_jsonl_line(collector, number, raw)
        if len(collector) >= batch_rows:
            yield collector.records()
            collector = _JsonlCollector()
    if last.item is None:
        _refuse_cut(payload, "before the first record")
    elif cut_of(payload) is None:
        _add_jsonl_line(collector, *last.item)
    else:
        number, raw = last.item
        collector.rejected.append(_jsonl_tail(number, _line_text(number, raw)[0], TRUNCATED_TAIL))
    yield collector.records()


def _line_text(number: int, raw: bytes) -> tuple[str, str | None]:
    """A line's text (undecodable bytes as \\xNN) and why it is no UTF-8 text, if it is not."""
    try:
        text, problem = raw.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        text, problem = raw.decode("utf-8", "backslashreplace"), f"not UTF-8 text: {exc}"
    text = text.removesuffix("\n").removesuffix("\r")
    if number == 1:
        text = text.removeprefix(_BOM)
    return text, problem


def _add_jsonl_line(collector: _JsonlCollector, number: int, raw: bytes) -> None:
    text, problem = _line_text(number, raw)
    if not text.strip():
        return
    parsed = problem or _parse_object(text)
    if isinstance(parsed, str):
        record = json.dumps({"_raw": text}, ensure_ascii=False)
        collector.rejected.append(RejectedRecord(number, (parsed,), record))
    else:
        collector.names.update(dict.fromkeys(parsed))
        collector.positions.append(number)
        collector.texts.append(text)


# --------------------------------------------------------------------------------- Parquet


def _read_parquet(
    payload: IO[bytes], _dataset: Dataset, workdir: Path, part: Slice, batch_rows: int
) -> Iterator[RawRecords]:
    source: Any = payload
    if not payload.seekable() or isinstance(payload, gzip.GzipFile):
        local = workdir / "payload.parquet"  # Parquet needs random access: decompress first
        with local.open("wb") as out:
            shutil.copyfileobj(payload, out, length=1024 * 1024)
        source = str(local)
    yield from read_parquet_batches(source, part, batch_rows)


def read_parquet_batches(source: Any, part: Slice, batch_rows: int) -> Iterator[RawRecords]:
    """Parquet rows (of `part`'s row groups) a batch at a time; `source` is a path or a
    seekable file (a ranged S3 reader: only the footer and those row groups are fetched)."""
    try:
        parquet = pq.ParquetFile(source, coerce_int96_timestamp_unit="us")
        names = list(parquet.schema_arrow.names)
        kept = parquet_data_columns(names)
        groups = range(*part.row_groups) if part.row_groups else range(parquet.num_row_groups)
        batches = parquet.iter_batches(
            batch_size=batch_rows,
            row_groups=list(groups),
            columns=None if kept == names else kept,
        )
        position = part.first_row
        produced = False
        for batch in batches:
            table = _spark_compatible(pa.Table.from_batches([batch]))
            positions = pa.array(range(position, position + table.num_rows), pa.int64())
            position += table.num_rows
            columns = list(table.column_names)
            yield RawRecords(
                pa.table([positions, *table.columns], names=[POSITION, *columns]), "row", names
            )
            produced = True
        if not produced:
            empty = _spark_compatible(parquet.schema_arrow.empty_table().select(kept))
            columns = list(empty.column_names)
            positions = pa.array([], pa.int64())
            yield RawRecords(
                pa.table([positions, *empty.columns], names=[POSITION, *columns]), "row", names
            )
    except (pa.ArrowException, OSError) as exc:
        raise UnreadableFileError(f"not a Parquet file: {exc}") from exc


def parquet_data_columns(names: list[str]) -> list[str]:
    """The columns of a Parquet file the readers read: all but those named with
    RESERVED_PREFIX. Raises UnreadableFileError when a name repeats (which one the schema
    means cannot be told)."""
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise UnreadableFileError(f"the file repeats column(s) {', '.join(duplicates)}")
    return [name for name in names if not name.startswith(RESERVED_PREFIX)]


def _spark_compatible(table: Any) -> Any:
    try:
        return to_spark_compatible(table)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise UnreadableFileError(f"unsupported Parquet column: {exc}") from exc
