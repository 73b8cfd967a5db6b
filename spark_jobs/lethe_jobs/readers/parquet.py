"""The Parquet reader: rows located by their index in the whole object, a slice of row groups at
a time, columns converted to what Spark holds."""

from __future__ import annotations

import gzip
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq

from lethe_jobs.arrow_bridge import to_spark_compatible
from lethe_jobs.errors import UnreadableFileError
from lethe_jobs.readers.records import RESERVED_PREFIX, RawRecords, Slice, case_collisions
from lethe_jobs.validate import POSITION
from lethe_shared.datasets.document import Dataset


def read_parquet(
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
    means cannot be told), also ignoring case: Spark, which conforms the rows, resolves column
    names ignoring case and cannot hold two columns whose names differ only in case (and the
    field-name rule could not tell which one a schema column means, unless one is exact)."""
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise UnreadableFileError(f"the file repeats column(s) {', '.join(duplicates)}")
    kept = [name for name in names if not name.startswith(RESERVED_PREFIX)]
    collisions = case_collisions(kept)
    if collisions:
        shown = "; ".join(", ".join(group) for group in collisions)
        raise UnreadableFileError(f"the file has columns that differ only in case: {shown}")
    return kept


def _spark_compatible(table: Any) -> Any:
    try:
        return to_spark_compatible(table)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise UnreadableFileError(f"unsupported Parquet column: {exc}") from exc
