"""The writer tasks: valid rows placed in their lake partitions and written as lake files,
rejected rows written to quarantine, the raw objects' entries written, each with its index
entries."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import boto3
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import types as T

from lethe_jobs import layout
from lethe_jobs.arrow_bridge import arrow_schema
from lethe_jobs.indexing import batch_of_rows
from lethe_jobs.ingest_tasks.entries import EntryAccumulator
from lethe_jobs.ingest_tasks.frame import (
    FILE_SUMMARY,
    JSONL_CONTENT_TYPE,
    LAKE_SUMMARY,
    LOG,
    MAX_KEY_BYTES,
    OBJECT,
    PACKED,
    PARQUET_CONTENT_TYPE,
    PART,
    ROW_GROUP_ROWS,
    WRITE_SUMMARY,
    BatchObject,
    TaskSettings,
    ingest_metadata,
    jackson_json,
)
from lethe_jobs.ingest_tasks.index_writes import TaskIndexWriter, then_flush
from lethe_jobs.ingest_tasks.packed import unpack
from lethe_jobs.session import logging_shown_keys
from lethe_jobs.subject_rows import quarantine_subject_rows
from lethe_jobs.validate import POSITION, REASONS, RECORD, schema_of
from lethe_shared.aws.s3 import S3ObjectStore, s3_url
from lethe_shared.catalog.object_catalog import Zone
from lethe_shared.catalog.writes_ledger import DynamoWritesLedger, Writer
from lethe_shared.datasets.document import DataFormat, hive_partition_values
from lethe_shared.index.arrow_entries import ObjectRef, entry_batch
from lethe_shared.index.opening import open_subject_index

INDEX_ROWS = 1_048_576  # rows of a lake file whose entries are computed at once (`_LakeFile`)


def connect(settings: TaskSettings) -> tuple[S3ObjectStore, TaskIndexWriter]:
    """The task's store records every lake and quarantine file it writes in the writes ledger
    (an intent before the PUT, the version after): how the object events path knows they are
    this job's, which indexed them (lethe_shared.catalog.writes_ledger). The task's index
    entries are written together when it ends (ingest_tasks.index_writes: one segment)."""
    logging_shown_keys(
        settings.correlation_id, settings.hash_key, {settings.dataset.dataset_id: settings.dataset}
    )
    dynamodb = boto3.resource("dynamodb")
    writes = (
        DynamoWritesLedger(dynamodb.Table(settings.catalog_table)).writer(
            Writer.INGEST, settings.correlation_id
        )
        if settings.catalog_table
        else None
    )
    s3 = boto3.client("s3")
    store = S3ObjectStore(s3, writes=writes)
    index = open_subject_index(settings.index, s3=s3, dynamodb=dynamodb, datasets=settings.dataset)
    return store, TaskIndexWriter(index, store)


class TaskConnection:
    """A task's store and index writer (`connect`), opened at their first use: a task that
    writes nothing (a shuffle's spare partitions, a read task of split pieces only) opens no
    AWS client and writes no index segment."""

    def __init__(self, settings: TaskSettings) -> None:
        self.settings = settings
        self.opened: tuple[S3ObjectStore, TaskIndexWriter] | None = None

    def open(self) -> tuple[S3ObjectStore, TaskIndexWriter]:
        if self.opened is None:
            self.opened = connect(self.settings)
        return self.opened

    def finish(self, current: _LakeFile | _QuarantineFile) -> dict[str, Any]:
        return current.finish(*self.open())

    def flush(self) -> None:
        if self.opened is not None:
            self.opened[1].flush()


def partition_paths(
    batches: Iterable[pa.RecordBatch], partition_by: Sequence[str]
) -> Iterator[pa.RecordBatch]:
    """Add PART, each row's Hive partition path as layout renders it ("" unpartitioned): rows
    whose values render alike (null and "") share a file, as they always did."""
    for batch in batches:
        yield batch.append_column(PART, _rendered_paths(batch, partition_by))


def _rendered_paths(batch: pa.RecordBatch, partition_by: Sequence[str]) -> pa.Array:
    """Each row's partition path, rendered once per distinct value (a batch holds few)."""
    if not partition_by:
        return pa.array([""] * batch.num_rows, pa.string())
    if len(partition_by) == 1:
        column = batch.column(batch.schema.get_field_index(partition_by[0]))
        try:
            encoded = pc.dictionary_encode(column)
        except pa.ArrowNotImplementedError:
            encoded = None
        if encoded is not None:
            rendered = [
                layout.partition_path(partition_by, (value,))
                for value in [*encoded.dictionary.to_pylist(), None]
            ]
            nulls = len(rendered) - 1  # a null value's index: the last path, None's
            return pa.array(rendered, pa.string()).take(encoded.indices.fill_null(nulls))
    values = [batch.column(batch.schema.get_field_index(n)).to_pylist() for n in partition_by]
    cache: dict[tuple[Any, ...], str] = {}
    paths = []
    for row in zip(*values, strict=True):
        path = cache.get(row)
        if path is None:
            path = cache[row] = layout.partition_path(partition_by, row)
        paths.append(path)
    return pa.array(paths, pa.string())


def key_problem(bucket: str, key: str) -> str | None:
    """Why a lake object under `key` could not be written or indexed (a row reason, naming no
    value), or None: S3 refuses keys over MAX_KEY_BYTES, and the subject index keys each entry
    by the object's URL, `s3://<bucket>/<key>`, which DynamoDB refuses over MAX_KEY_BYTES as a
    sort key, so the URL is the tighter limit."""
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError:
        return "the partition values make a lake key that is not UTF-8 text"
    url = len(s3_url(bucket, key).encode("utf-8"))
    if size > MAX_KEY_BYTES:
        return (
            f"the partition values make a lake key of {size} bytes; "
            f"S3 allows at most {MAX_KEY_BYTES}"
        )
    if url > MAX_KEY_BYTES:
        return (
            f"the partition values make a lake object URL of {url} bytes; the subject index "
            f"(a DynamoDB sort key) allows at most {MAX_KEY_BYTES}"
        )
    return None


def place_rows(
    batches: Iterable[pa.RecordBatch], settings: TaskSettings
) -> Iterator[pa.RecordBatch]:
    """Over conformed rows (OBJECT, REASONS, the schema's columns, ...): add PART, the lake
    partition path of each valid row (null for a rejected one). A valid row whose partition
    values would give a lake key that cannot be written or indexed (`key_problem`: its URL or
    key longer than MAX_KEY_BYTES, not UTF-8) gets that reason instead, and goes to quarantine
    alone: the object's other rows are written, and the job does not fail on S3's
    KeyTooLongError or DynamoDB's ValidationException. A lake key's length does not depend on
    the object (its digest has a fixed length), so each distinct path is judged once."""
    dataset = settings.dataset
    partition_by = list(dataset.partition_by)
    problems: dict[str, str | None] = {}
    for rendered in partition_paths(batches, partition_by):
        index = rendered.schema.get_field_index(PART)
        reasons = rendered.column(REASONS)
        valid = pc.fill_null(pc.equal(pc.list_value_length(reasons), 0), True)
        paths = rendered.column(PART)
        troubled = False
        if partition_by and len(paths):
            for path in pc.unique(pc.filter(paths, valid)).to_pylist():
                if path not in problems:
                    digest = settings.digest(next(iter(settings.objects)))
                    key = layout.lake_key(dataset.dataset_id, path, digest)
                    problems[path] = key_problem(settings.lake_bucket, key)
                troubled = troubled or problems[path] is not None
        if not troubled:
            parts = pc.if_else(valid, paths, pa.scalar(None, pa.string()))
            yield rendered.set_column(index, PART, parts)
            continue
        yield _placed_one_by_one(rendered, settings, problems)


def _placed_one_by_one(
    rendered: pa.RecordBatch, settings: TaskSettings, problems: dict[str, str | None]
) -> pa.RecordBatch:
    """`place_rows` of a batch where some path has a key problem: row by row."""
    parts = rendered.column(PART).to_pylist()
    reasons = rendered.column(REASONS).to_pylist()
    for row, (part, found) in enumerate(zip(parts, reasons, strict=True)):
        if found:
            parts[row] = None
            continue
        problem = problems[part]
        if problem is not None:
            reasons[row], parts[row] = [problem], None
    index = rendered.schema.get_field_index(PART)
    placed = rendered.set_column(index, PART, pa.array(parts, pa.string()))
    index = placed.schema.get_field_index(REASONS)
    field = placed.schema.field(index)
    return placed.set_column(index, field, pa.array(reasons, field.type))


def _runs(table: Any, keys: Sequence[str]) -> Iterator[tuple[tuple[Any, ...], int, int]]:
    """Runs of equal `keys` in a sorted table: (key values, start, length). The run ends are
    found with Arrow (where a key differs from the row before), not row by row."""
    count = table.num_rows
    if count == 0:
        return
    changed = None
    for key in keys:
        column = table.column(key)
        before, after = column.slice(0, count - 1), column.slice(1)
        differs = pc.fill_null(pc.not_equal(before, after), False)
        # null and a value differ; two nulls do not
        differs = pc.or_(differs, pc.xor(pc.is_null(before), pc.is_null(after)))
        changed = differs if changed is None else pc.or_(changed, differs)
    ends = [int(i) + 1 for i in pc.indices_nonzero(changed).to_pylist()] if count > 1 else []
    starts = [0, *ends]
    ends.append(count)
    columns = [table.column(k) for k in keys]
    for start, end in zip(starts, ends, strict=True):
        yield tuple(c[start].as_py() for c in columns), start, end - start


def _summary(values: dict[str, Any], schema: T.StructType) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([values], schema=arrow_schema(schema))


class _LakeFile:
    """One lake file being written: rows buffered into row groups, entries accumulated.

    Its rows arrive sorted by source position, a packed run of plain rows (`packed`: one
    input row, PACKED set, its POSITION the run's first) among the others: a run and the rows
    that follow it up to the next run (their positions are all above the run's first, and
    below the next run's) are merged by POSITION, so that the file's rows are in source order
    as if every row had arrived on its own."""

    def __init__(self, settings: TaskSettings, index: int, part: str, workdir: Path) -> None:
        obj = settings.objects[index]
        dataset = settings.dataset
        self.settings, self.index, self.part = settings, index, part
        self.key = layout.lake_key(dataset.dataset_id, part, settings.digest(index))
        fields = [f for f in arrow_schema(schema_of(dataset)) if f.name not in dataset.partition_by]
        self.schema = pa.schema(fields).with_metadata(
            {"lethe.source_object": obj.url, "lethe.source_version_id": obj.version_id}
        )
        self.positioned = pa.schema([pa.field(POSITION, pa.int64()), *fields])
        self.window: list[Any] | None = None  # a packed run and the rows after it
        self.path = workdir / "part.parquet"
        self.writer = pq.ParquetWriter(self.path, self.schema, compression="snappy")
        self.pending: list[Any] = []
        self.pending_rows = self.rows = 0
        self.entries = EntryAccumulator()
        # the subject columns of the rows written and not yet indexed (`_index`); a subject
        # that is a partition column comes from the path (`ref.constants`): then one other
        # column carries the rows (Arrow loses the rows of tables without columns)
        heads = {path.split(".")[0] for path in dataset.subject_columns}
        self.subjects = [n for n in self.schema.names if n in heads] or self.schema.names[:1]
        self.unindexed: list[Any] = []
        self.indexed = 0
        self.ref = ObjectRef(
            s3_url(settings.lake_bucket, self.key), Zone.LAKE, "parquet",
            constants=hive_partition_values(self.key, dataset),
        )  # fmt: skip

    def add(self, table: Any) -> None:
        if PACKED not in table.column_names or table.column(PACKED).null_count == len(table):
            self._add_rows(table)
            return
        runs = table.column(PACKED)
        at = 0
        for row in pc.indices_nonzero(pc.is_valid(runs)).to_pylist():
            if row > at:
                self._add_rows(table.slice(at, row - at))
            self._close_window()
            self.window = [unpack(runs[row].as_buffer())]
            at = row + 1
        if at < len(table):
            self._add_rows(table.slice(at))

    def _add_rows(self, table: Any) -> None:
        if self.window is not None:
            self.window.append(table.select(self.positioned.names).cast(self.positioned))
            return
        self._pend(table.select(self.schema.names).cast(self.schema), table.num_rows)

    def _close_window(self) -> None:
        if self.window is None:
            return
        merged = pa.concat_tables(self.window)
        self.window = None
        if len(merged) > 1:
            merged = merged.take(pc.sort_indices(merged.column(POSITION)))
        self._pend(merged.select(self.schema.names).cast(self.schema), merged.num_rows)

    def _pend(self, table: Any, rows: int) -> None:
        self.pending.append(table)
        self.pending_rows += rows
        if self.pending_rows >= ROW_GROUP_ROWS:
            self._flush()

    def _flush(self) -> None:
        if not self.pending:
            return
        chunk = pa.concat_tables(self.pending)
        self.writer.write_table(chunk, row_group_size=ROW_GROUP_ROWS)
        self.unindexed.append(chunk.select(self.subjects))
        self.rows += chunk.num_rows
        self.pending, self.pending_rows = [], 0
        if self.rows - self.indexed >= INDEX_ROWS:
            self._index()

    def _index(self) -> None:
        """The entries of the rows written since the last time, added up: every INDEX_ROWS
        rows (a row group's worth would hash and add up each subject of a large file many
        times over), and at the end."""
        if not self.unindexed:
            return
        rows = pa.concat_tables(self.unindexed)
        dataset, key = self.settings.dataset, self.settings.hash_key
        self.entries.add_batch(entry_batch(rows, dataset, self.ref, key=key), self.indexed)
        self.indexed += rows.num_rows
        self.unindexed = []

    def finish(self, store: S3ObjectStore, index: TaskIndexWriter) -> dict[str, Any]:
        self._close_window()
        self._flush()
        self._index()
        self.writer.close()
        stored = store.upload(
            self.settings.lake_bucket, self.key, self.path,
            content_type=PARQUET_CONTENT_TYPE,
            metadata=ingest_metadata(self.settings.correlation_id),
        )  # fmt: skip
        ref = ObjectRef(
            self.ref.object_url, Zone.LAKE, "parquet", stored.version_id, stored.etag,
            constants=self.ref.constants,
        )  # fmt: skip
        entries = self.entries.entries(ref, self.settings.dataset, self.settings.hash_key)
        index.add(self.settings.lake_bucket, self.key, entries)
        LOG.info("wrote %d rows to %s (version %s)", self.rows, ref.object_url, stored.version_id)
        self.path.unlink()
        return {
            "object": self.index, "url": ref.object_url, "rows": self.rows,
            "version": stored.version_id, "etag": stored.etag, "entries": len(entries),
        }  # fmt: skip


def write_lake_files(
    batches: Iterable[pa.RecordBatch], settings: TaskSettings
) -> Iterator[pa.RecordBatch]:
    """A write task over valid rows sorted by (object, partition path, position): one lake
    file per (object, partition), streamed; yields one summary row per file."""
    connection = TaskConnection(settings)
    return then_flush(_write_lake_files(connection, batches, settings), connection)


def _write_lake_files(
    connection: TaskConnection,
    batches: Iterable[pa.RecordBatch],
    settings: TaskSettings,
) -> Iterator[pa.RecordBatch]:
    current: _LakeFile | None = None
    with tempfile.TemporaryDirectory(prefix="lethe-lake-") as tmp:
        for batch in batches:
            table = pa.Table.from_batches([batch])
            for (obj, part), start, length in _runs(table, [OBJECT, PART]):
                if current is None or (current.index, current.part) != (obj, part):
                    if current is not None:
                        yield _summary(connection.finish(current), LAKE_SUMMARY)
                    current = _LakeFile(settings, obj, part, Path(tmp))
                current.add(table.slice(start, length))
        if current is not None:
            yield _summary(connection.finish(current), LAKE_SUMMARY)


def quarantine_line(
    settings: TaskSettings, obj: BatchObject, position: int, reasons: Sequence[str], record: str
) -> str:
    """One quarantine record; the rejected record's JSON text is kept byte for byte."""
    coordinate = "row" if settings.dataset.format is DataFormat.PARQUET else "line"
    source = {"object": obj.url, "version_id": obj.version_id, coordinate: position}
    head = json.dumps({"source": source, "reasons": list(reasons)}, ensure_ascii=False)
    tail = json.dumps({"correlation_id": settings.correlation_id, "rejected_at": settings.now})
    return f'{head[:-1]}, "record": {record}, {tail[1:]}\n'


class _QuarantineFile:
    """One object's quarantine file being written, line by line, entries accumulated."""

    def __init__(
        self,
        settings: TaskSettings,
        index: int,
        workdir: Path,
        record_columns: list[tuple[str, str]] | None = None,
    ) -> None:
        self.settings, self.index = settings, index
        self.record_columns = record_columns
        self.key = layout.quarantine_rows_key(settings.dataset.dataset_id, settings.digest(index))
        self.path = workdir / "quarantine.jsonl"
        self.out = self.path.open("w", encoding="utf-8")
        self.lines = 0
        self.entries = EntryAccumulator()

    def add(self, table: Any) -> None:
        obj = self.settings.objects[self.index]
        written = [
            quarantine_line(self.settings, obj, position, reasons, record)
            for position, reasons, record in zip(
                table.column(POSITION).to_pylist(),
                table.column(REASONS).to_pylist(),
                self._records(table),
                strict=True,
            )
        ]
        self.out.writelines(written)
        dataset = self.settings.dataset
        rows = quarantine_subject_rows(written, dataset)
        ref = ObjectRef(s3_url(self.settings.lake_bucket, self.key), Zone.LAKE, "jsonl")
        if rows.coordinates:
            found = batch_of_rows(rows, dataset, ref, key=self.settings.hash_key)
            self.entries.add_batch(found, offset=self.lines)
        self.lines += len(written)

    def _records(self, table: Any) -> list[str]:
        """Each row's record as read (JSON text): RECORD, or, where the read task left it null
        (`frame.record_columns`), rebuilt from the text columns, as the read task would have
        built it (`jackson_json`)."""
        records: list[str] = table.column(RECORD).to_pylist()
        if self.record_columns is None or all(r is not None for r in records):
            return records
        names = [name for name, _ in self.record_columns]
        texts = [table.column(column).to_pylist() for _, column in self.record_columns]
        for row, record in enumerate(records):
            if record is None:
                records[row] = jackson_json(names, [values[row] for values in texts])
        return records

    def finish(self, store: S3ObjectStore, index: TaskIndexWriter) -> dict[str, Any]:
        self.out.close()
        lake = self.settings.lake_bucket
        stored = store.upload(
            lake,
            self.key,
            self.path,
            content_type=JSONL_CONTENT_TYPE,
            metadata=ingest_metadata(self.settings.correlation_id),
        )
        url = s3_url(lake, self.key)
        ref = ObjectRef(url, Zone.LAKE, "jsonl", stored.version_id, stored.etag)
        entries = self.entries.entries(ref, self.settings.dataset, self.settings.hash_key)
        index.add(lake, self.key, entries)
        LOG.info("quarantined %d rows to %s", self.lines, url)
        self.path.unlink()
        return {
            "object": self.index, "url": url, "rows": self.lines,
            "version": stored.version_id, "etag": stored.etag, "entries": len(entries),
        }  # fmt: skip


def write_quarantine(
    batches: Iterable[pa.RecordBatch],
    settings: TaskSettings,
    records: dict[int, list[tuple[str, str]] | None] | None = None,
) -> Iterator[pa.RecordBatch]:
    """A write task over rejected rows sorted by (object, position): one quarantine file of
    JSON Lines per object, streamed; yields one summary row per file. `records`: per object,
    how its rows' RECORD is rebuilt where the read task left it null (`frame.record_columns`)."""
    connection = TaskConnection(settings)
    return then_flush(_write_quarantine(connection, batches, settings, records), connection)


def _write_quarantine(
    connection: TaskConnection,
    batches: Iterable[pa.RecordBatch],
    settings: TaskSettings,
    records: dict[int, list[tuple[str, str]] | None] | None = None,
) -> Iterator[pa.RecordBatch]:
    current: _QuarantineFile | None = None
    with tempfile.TemporaryDirectory(prefix="lethe-quarantine-") as tmp:
        for batch in batches:
            table = pa.Table.from_batches([batch])
            for (obj,), start, length in _runs(table, [OBJECT]):
                if current is None or current.index != obj:
                    if current is not None:
                        yield _summary(connection.finish(current), FILE_SUMMARY)
                    rebuild = (records or {}).get(obj)
                    current = _QuarantineFile(settings, obj, Path(tmp), rebuild)
                current.add(table.slice(start, length))
        if current is not None:
            yield _summary(connection.finish(current), FILE_SUMMARY)


def write_files(
    batches: Iterable[pa.RecordBatch],
    settings: TaskSettings,
    records: dict[int, list[tuple[str, str]] | None] | None = None,
) -> Iterator[pa.RecordBatch]:
    """A write task over conformed rows sorted by (object, partition path, position), where a
    rejected row's path is null (so it sorts first): one quarantine file per object of its
    rejected rows and one lake file per (object, partition) of its valid rows, each streamed;
    yields one summary row per file (`WRITE_SUMMARY`: its kind, "lake" or "quarantine").
    `write_lake_files` and `write_quarantine` in one pass over the rows, so that the job
    neither keeps the conformed rows nor reads them twice."""
    connection = TaskConnection(settings)
    return then_flush(_write_files(connection, batches, settings, records), connection)


def _write_files(
    connection: TaskConnection,
    batches: Iterable[pa.RecordBatch],
    settings: TaskSettings,
    records: dict[int, list[tuple[str, str]] | None] | None = None,
) -> Iterator[pa.RecordBatch]:
    current: _LakeFile | _QuarantineFile | None = None
    at: tuple[int, str | None] | None = None
    with tempfile.TemporaryDirectory(prefix="lethe-files-") as tmp:
        for batch in batches:
            table = pa.Table.from_batches([batch])
            for (obj, part), start, length in _runs(table, [OBJECT, PART]):
                if current is None or at != (obj, part):
                    if current is not None:
                        yield _written(current, connection)
                    at = (obj, part)
                    current = (
                        _QuarantineFile(settings, obj, Path(tmp), (records or {}).get(obj))
                        if part is None
                        else _LakeFile(settings, obj, part, Path(tmp))
                    )
                current.add(table.slice(start, length))
        if current is not None:
            yield _written(current, connection)


def _written(current: _LakeFile | _QuarantineFile, connection: TaskConnection) -> pa.RecordBatch:
    kind = "lake" if isinstance(current, _LakeFile) else "quarantine"
    return _summary({**connection.finish(current), "kind": kind}, WRITE_SUMMARY)
