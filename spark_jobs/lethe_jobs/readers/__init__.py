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
  a JSON Lines line that is not an object is kept as text under "_raw";
- field names follow the one rule of `lethe_shared.datasets.field_names` (the exact name, else
  the one case variant, never by position): a CSV header or Parquet file that makes a schema
  column's name ambiguous is unreadable, and so is a Parquet file with two columns whose names
  differ only in case (Spark cannot hold both); a JSON Lines line where a declared name, at
  any depth, is ambiguous is rejected with the reason, and one whose declared names are
  present only as case variants is kept with its text under the declared names
  (`RawRecords.named`, `json_names`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from lethe_jobs.errors import UnreadableFileError
from lethe_jobs.readers.csv_fast import csv_reader
from lethe_jobs.readers.csv_text import RecordLines, read_csv
from lethe_jobs.readers.json_names import JsonNames
from lethe_jobs.readers.jsonl import complete_members, read_jsonl
from lethe_jobs.readers.parquet import parquet_data_columns, read_parquet, read_parquet_batches
from lethe_jobs.readers.payload import (
    GZIP_ERRORS,
    GZIP_MAGIC,
    cut_of,
    is_gzip,
    is_salvaging,
    open_payload,
    salvaging,
)
from lethe_jobs.readers.records import (
    BATCH_ROWS,
    CSV_FIELD_LIMIT,
    MAX_JSON_DEPTH,
    RESERVED_PREFIX,
    TRUNCATED,
    TRUNCATED_TAIL,
    WHOLE,
    RawRecords,
    RejectedRecord,
    Slice,
    concat_records,
    declared_names,
    is_blank_row,
)
from lethe_shared.datasets.document import DataFormat, Dataset

__all__ = [
    "BATCH_ROWS",
    "CSV_FIELD_LIMIT",
    "GZIP_MAGIC",
    "MAX_JSON_DEPTH",
    "RESERVED_PREFIX",
    "TRUNCATED",
    "TRUNCATED_TAIL",
    "WHOLE",
    "JsonNames",
    "RawRecords",
    "RecordLines",
    "RejectedRecord",
    "Slice",
    "complete_members",
    "concat_records",
    "csv_reader",
    "cut_of",
    "declared_names",
    "is_blank_row",
    "is_gzip",
    "is_salvaging",
    "iter_raw",
    "open_payload",
    "parquet_data_columns",
    "read_parquet_batches",
    "read_raw",
    "salvaging",
]


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
        DataFormat.CSV: read_csv,
        DataFormat.JSONL: read_jsonl,
        DataFormat.PARQUET: read_parquet,
    }
    try:
        with open_payload(source, dataset.compression) as opened:
            # text is read up to a cut; Parquet needs its footer, at the end
            payload = opened if dataset.format is DataFormat.PARQUET else salvaging(opened)
            yield from readers[dataset.format](payload, dataset, workdir, part, batch_rows)
    except GZIP_ERRORS as exc:
        raise UnreadableFileError(f"not a valid gzip stream: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise UnreadableFileError(f"not UTF-8 text: {exc}") from exc


def read_raw(path: Path, dataset: Dataset, workdir: Path) -> RawRecords:
    """The whole raw file at `path` at once (small objects: the index job, erasure). Raises
    UnreadableFileError."""
    return concat_records(list(iter_raw(path, dataset, workdir)))
