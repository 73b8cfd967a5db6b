"""Raw files into Arrow tables, every record with its source coordinate.

A reader returns `RawRecords`: the records Spark validates (an Arrow table whose first column is
the coordinate), the records the reader already rejected (a CSV row with the wrong number of
fields, a JSON Lines line that is not an object) and the data column names the file holds.
A file that cannot be read at all raises `UnreadableFileError`; the job quarantines it whole.

Coordinates: CSV and JSON Lines records are located by the physical line they start on (1-based;
a CSV header is line 1), Parquet rows by their 0-based index.

Choices written down:
- gzip is recognised by its magic number (1f 8b) when compression is "auto", never by the key;
- a file that is empty after decompression is an empty dataset file (no rows, not an error), for
  CSV and JSON Lines; a CSV file with content but no header row is unreadable;
- blank lines are skipped in both text formats; a UTF-8 byte order mark is allowed;
- a CSV record from a row with too many fields keeps the surplus values under "_extra_fields";
  a JSON Lines line that is not an object is kept as text under "_raw".
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import shutil
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

import pyarrow as pa
import pyarrow.parquet as pq

from lethe_jobs.arrow_bridge import to_spark_compatible
from lethe_jobs.errors import UnreadableFileError
from lethe_jobs.validate import POSITION, RECORD
from lethe_shared.datasets import Compression, CsvOptions, DataFormat, Dataset

GZIP_MAGIC = b"\x1f\x8b"
CSV_FIELD_LIMIT = 64 * 1024 * 1024
_BOM = "\ufeff"
_GZIP_ERRORS = (gzip.BadGzipFile, EOFError, zlib.error)


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


def read_raw(path: Path, dataset: Dataset, workdir: Path) -> RawRecords:
    """Read the raw file at `path` as `dataset` declares it. Raises UnreadableFileError."""
    readers: dict[DataFormat, Callable[[IO[bytes], Dataset, Path], RawRecords]] = {
        DataFormat.CSV: _read_csv,
        DataFormat.JSONL: _read_jsonl,
        DataFormat.PARQUET: _read_parquet,
    }
    try:
        with open_payload(path, dataset.compression) as payload:
            return readers[dataset.format](payload, dataset, workdir)
    except _GZIP_ERRORS as exc:
        raise UnreadableFileError(f"not a valid gzip stream: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise UnreadableFileError(f"not UTF-8 text: {exc}") from exc


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

    def add(self, line: int, row: list[str]) -> None:
        if len(row) != len(self.names):
            reason = f"expected {len(self.names)} fields, found {len(row)}"
            self.rejected.append(RejectedRecord(line, (reason,), _csv_record(self.names, row)))
            return
        self.positions.append(line)
        for column, value in zip(self.values, row, strict=True):
            column.append(value)

    def records(self) -> RawRecords:
        arrays = [pa.array(self.positions, pa.int64())]
        arrays += [pa.array(column, pa.string()) for column in self.values]
        table = pa.table(arrays, names=[POSITION, *self.names])
        return RawRecords(table, "line", list(self.names), self.rejected)


def _csv_header(reader: Any, dataset: Dataset) -> list[str] | None:
    """The column names; None for an empty file. Raises UnreadableFileError."""
    if not dataset.csv.header:
        return [c.name for c in dataset.schema_]
    header = next((row for row in reader if row), None)
    if header is None:
        if reader.line_num == 0:
            return None
        raise UnreadableFileError("missing header: the file has only blank lines")
    duplicates = sorted({name for name in header if header.count(name) > 1})
    if duplicates:
        raise UnreadableFileError(f"the header repeats column(s) {', '.join(duplicates)}")
    return list(header)


def _read_csv(payload: IO[bytes], dataset: Dataset, _workdir: Path) -> RawRecords:
    text = io.TextIOWrapper(payload, encoding="utf-8-sig", newline="")
    reader = csv_reader(text, dataset.csv)
    try:
        names = _csv_header(reader, dataset)
        if names is None:
            return _CsvCollector([c.name for c in dataset.schema_]).records()
        collector = _CsvCollector(names)
        last_line = reader.line_num
        for row in reader:
            if row:  # a blank line is no record
                collector.add(last_line + 1, row)
            last_line = reader.line_num
    except csv.Error as exc:
        raise UnreadableFileError(f"not valid CSV (line {reader.line_num}): {exc}") from exc
    return collector.records()


# ------------------------------------------------------------------------------ JSON Lines


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _parse_object(text: str) -> dict[str, Any] | str:
    """The JSON object on one line, or the reason it is none."""
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except ValueError as exc:
        return f"not a JSON object: {exc}"
    if not isinstance(value, dict):
        return f"not a JSON object: found a JSON {type(value).__name__}"
    return value


def _read_jsonl(payload: IO[bytes], _dataset: Dataset, _workdir: Path) -> RawRecords:
    positions: list[int] = []
    texts: list[str] = []
    names: dict[str, None] = {}  # an ordered set: keys in order of first appearance
    rejected: list[RejectedRecord] = []
    for number, raw in enumerate(payload, start=1):
        text = raw.decode("utf-8").removesuffix("\n").removesuffix("\r")
        if number == 1:
            text = text.removeprefix(_BOM)
        if not text.strip():
            continue
        parsed = _parse_object(text)
        if isinstance(parsed, str):
            record = json.dumps({"_raw": text}, ensure_ascii=False)
            rejected.append(RejectedRecord(number, (parsed,), record))
            continue
        names.update(dict.fromkeys(parsed))
        positions.append(number)
        texts.append(text)
    table = pa.table(
        [pa.array(positions, pa.int64()), pa.array(texts, pa.string())], names=[POSITION, RECORD]
    )
    return RawRecords(table, "line", list(names), rejected, json_text=True)


# --------------------------------------------------------------------------------- Parquet


def _read_parquet(payload: IO[bytes], _dataset: Dataset, workdir: Path) -> RawRecords:
    source: Any = payload
    if not payload.seekable() or isinstance(payload, gzip.GzipFile):
        local = workdir / "payload.parquet"  # Parquet needs random access: decompress first
        with local.open("wb") as out:
            shutil.copyfileobj(payload, out, length=1024 * 1024)
        source = str(local)
    try:
        table = pq.ParquetFile(source, coerce_int96_timestamp_unit="us").read()
    except (pa.ArrowException, OSError) as exc:
        raise UnreadableFileError(f"not a Parquet file: {exc}") from exc
    try:
        table = to_spark_compatible(table)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise UnreadableFileError(f"unsupported Parquet column: {exc}") from exc
    positions = pa.array(range(table.num_rows), pa.int64())
    columns = list(table.column_names)
    table = pa.table([positions, *table.columns], names=[POSITION, *columns])
    return RawRecords(table, "row", columns)
