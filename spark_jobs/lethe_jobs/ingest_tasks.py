"""What the ingest job's Spark tasks do: scan large objects for split points, read pieces of
raw objects, write lake files, write quarantine, write the raw objects' index entries.

The functions that Spark runs over a partition (`mapInArrow`) take Arrow batches and yield
Arrow batches. No task holds an object whole: readers yield `readers.BATCH_ROWS` records at a
time, writers stream row groups of `ROW_GROUP_ROWS` to a local file before one upload, and the
driver only sees the small summary rows these tasks yield.

The frame the read tasks produce (`frame_schema`) carries, per row, its kind: a record of an
object (`ROW`), the summary of one piece (`PIECE`: rows read, columns, or why the object is
unreadable), or one subject's partial index entry over one batch of records (`ENTRY`: rows and
first row hints), which Spark then adds up per object and subject.
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import types as T

from lethe_jobs import layout, pieces
from lethe_jobs.arrow_bridge import arrow_schema
from lethe_jobs.errors import UnreadableFileError
from lethe_jobs.indexing import entries_of_rows, quarantine_subject_rows, raw_subject_rows
from lethe_jobs.readers import BATCH_ROWS, RawRecords, Slice, iter_raw, read_parquet_batches
from lethe_jobs.session import configure_logging
from lethe_jobs.validate import POSITION, REASONS, RECORD, schema_of
from lethe_shared.aws.s3 import (
    CORRELATION_METADATA,
    PRODUCER_METADATA,
    S3ObjectStore,
    get_version,
    s3_url,
)
from lethe_shared.catalog.object_catalog import Zone
from lethe_shared.datasets.document import DataFormat, Dataset, hive_partition_values
from lethe_shared.index.arrow_entries import ObjectRef, entries_from_table
from lethe_shared.index.maintenance import INGEST_PRODUCER, replace_entries
from lethe_shared.index.subject_index import MAX_ROW_HINTS, DynamoSubjectIndex, IndexEntry

LOG = logging.getLogger("lethe.ingest")
KIND = "_lethe_kind"
OBJECT = "_lethe_object"
PREREASONS = "_lethe_prereasons"
INFO = "_lethe_info"
PART = "_lethe_partition"
ROW, PIECE, ENTRY = 0, 1, 2
HINTS_KEPT = MAX_ROW_HINTS + 1  # one more than stored: IndexEntry then says hints are incomplete
MAX_KEY_BYTES = 1024  # S3's longest object key and DynamoDB's longest sort key, UTF-8 bytes
ROW_GROUP_ROWS = 131_072  # rows a lake file's row group holds at most (what a writer buffers)
PARQUET_CONTENT_TYPE = "application/vnd.apache.parquet"
JSONL_CONTENT_TYPE = "application/x-ndjson"


def ingest_metadata(correlation_id: str) -> dict[str, str]:
    """The S3 metadata of every lake object the job writes. `lethe-producer` says a job wrote
    it: the object events path sees these writes too, and leaves their indexing to this job
    (lethe_shared.index.maintenance.indexed_by_writer). `lethe-correlation-id` names the run
    (the execution's name), so `lethe trace s3://<lake object>` finds the story that wrote it."""
    return {PRODUCER_METADATA: INGEST_PRODUCER, CORRELATION_METADATA: correlation_id}


META_FIELDS = (
    T.StructField(KIND, T.ByteType(), False),
    T.StructField(OBJECT, T.IntegerType(), False),
    T.StructField(POSITION, T.LongType()),
    T.StructField(PREREASONS, T.ArrayType(T.StringType())),
    T.StructField(RECORD, T.StringType()),
    T.StructField(INFO, T.StringType()),
)
_SUMMARY_FIELDS = [
    T.StructField("object", T.IntegerType()),
    T.StructField("url", T.StringType()),
    T.StructField("rows", T.LongType()),
    T.StructField("version", T.StringType()),
    T.StructField("etag", T.StringType()),
    T.StructField("entries", T.LongType()),
]
LAKE_SUMMARY = T.StructType(_SUMMARY_FIELDS)  # one row per lake file written
FILE_SUMMARY = T.StructType(_SUMMARY_FIELDS)  # one row per quarantine file written
RAW_SUMMARY = T.StructType(
    [T.StructField("object", T.IntegerType()), T.StructField("entries", T.LongType())]
)

# Jackson's escaping, as Spark's to_json writes a string: short escapes for \b \t \n \f \r,
# \u00XX (upper-case hex) for other control characters, and " and \ escaped.
_JACKSON = {i: f"\\u{i:04X}" for i in range(0x20)} | {
    0x08: "\\b",
    0x09: "\\t",
    0x0A: "\\n",
    0x0C: "\\f",
    0x0D: "\\r",
    0x22: '\\"',
    0x5C: "\\\\",
}


@dataclass(frozen=True)
class BatchObject:
    """One raw object version of the batch, as the driver found it."""

    index: int  # its place in the batch: how tasks and summaries name it
    dataset_id: str
    key: str
    version_id: str
    etag: str
    size: int
    url: str


@dataclass(frozen=True)
class TaskSettings:
    """What every task of one dataset's pipeline needs; travels with the tasks."""

    dataset: Dataset
    raw_bucket: str
    lake_bucket: str
    index_table: str
    correlation_id: str
    now: str  # ISO time of the run: quarantine records say when they were rejected
    objects: dict[int, BatchObject]
    hash_key: bytes = field(repr=False)
    batch_rows: int = BATCH_ROWS
    piece_bytes: int = pieces.PIECE_BYTES

    def digest(self, index: int) -> str:
        return layout.object_hash(self.raw_bucket, self.objects[index].key)


def jackson_json(names: Sequence[str], values: Sequence[str]) -> str:
    """`to_json(struct(...))` of string columns without nulls, byte for byte as Spark writes it
    (how a CSV record was always kept in quarantine)."""
    pairs = (
        f'"{n.translate(_JACKSON)}":"{v.translate(_JACKSON)}"'
        for n, v in zip(names, values, strict=True)
    )
    return "{" + ",".join(pairs) + "}"


# ---------------------------------------------------------------------------------- pieces


def piece_spec(piece: pieces.Piece) -> dict[str, Any]:
    part = piece.part
    return {
        "object_index": piece.object_index,
        "part": {
            "first_line": part.first_line,
            "header": list(part.header) if part.header is not None else None,
            "row_groups": list(part.row_groups) if part.row_groups is not None else None,
            "first_row": part.first_row,
        },
        "byte_range": list(piece.byte_range) if piece.byte_range is not None else None,
        "size": piece.size,
    }


def piece_from_spec(spec: dict[str, Any]) -> pieces.Piece:
    part = spec["part"]
    groups = part["row_groups"]
    byte_range = spec["byte_range"]
    return pieces.Piece(
        object_index=spec["object_index"],
        part=Slice(
            first_line=part["first_line"],
            header=tuple(part["header"]) if part["header"] is not None else None,
            row_groups=(groups[0], groups[1]) if groups is not None else None,
            first_row=part["first_row"],
        ),
        byte_range=(byte_range[0], byte_range[1]) if byte_range is not None else None,
        size=spec["size"],
    )


def scan_object(index: int, settings: TaskSettings) -> str:
    """A scan task: the pieces of one large text object (JSON list of piece specs). The object
    is streamed once; memory is one scan chunk. An object that may not be cut (gzip, a CSV
    escape the parity scan cannot follow) is one piece, which its reader streams."""
    configure_logging(settings.correlation_id)
    obj = settings.objects[index]
    dataset = settings.dataset
    client: Any = boto3.client("s3")
    whole = [piece_spec(pieces.Piece(index, size=obj.size))]

    def body() -> Any:
        return get_version(client, settings.raw_bucket, obj.key, obj.version_id)["Body"]

    head = get_version(client, settings.raw_bucket, obj.key, obj.version_id, byte_range=(0, 3))[
        "Body"
    ].read()
    if not pieces.splittable_text(dataset, head):
        LOG.info("%s is not splittable: one piece, streamed", obj.url)
        return json.dumps(whole)
    csv = dataset.format is DataFormat.CSV
    header = None
    if csv:
        stream = body()
        try:
            header = pieces.csv_header(stream, dataset)
        except (UnicodeDecodeError, ValueError):
            return json.dumps(whole)  # the reader of the whole object says what is wrong
        finally:
            stream.close()
    stream = body()
    try:
        splits = pieces.scan_splits(
            stream,
            piece_bytes=settings.piece_bytes,
            quote=dataset.csv.quote.encode() if csv else None,
            csv_lines=csv,
        )
    finally:
        stream.close()
    if csv and dataset.csv.header and header is None:
        return json.dumps(whole)
    found = pieces.text_pieces(index, obj.size, splits, header)
    return json.dumps([piece_spec(p) for p in found])


# ---------------------------------------------------------------------------------- reading


def frame_schema(dataset: Dataset, parquet_fields: Sequence[T.StructField] = ()) -> T.StructType:
    """The read tasks' output: `META_FIELDS`, then the data columns: the schema's columns as
    text for CSV, none for JSON Lines (RECORD holds the line), the file's for Parquet."""
    if dataset.format is DataFormat.CSV:
        data = [T.StructField(c.name, T.StringType()) for c in dataset.schema_]
    elif dataset.format is DataFormat.PARQUET:
        data = list(parquet_fields)
    else:
        data = []
    return T.StructType([*META_FIELDS, *data])


def read_pieces(
    batches: Iterable[pa.RecordBatch], settings: TaskSettings, schema: T.StructType
) -> Iterator[pa.RecordBatch]:
    """A read task: each input row holds the JSON list of a group's piece specs; yields their
    records, their partial index entries, and one summary per piece."""
    configure_logging(settings.correlation_id)
    client = boto3.client("s3")
    target = arrow_schema(schema)
    for batch in batches:
        for text in batch.column(0).to_pylist():
            for spec in json.loads(text):
                yield from _read_piece(client, piece_from_spec(spec), settings, target)


def _records(
    client: Any, piece: pieces.Piece, settings: TaskSettings, workdir: Path
) -> Iterator[RawRecords]:
    obj = settings.objects[piece.object_index]
    if piece.part.row_groups is not None:  # Parquet row groups: ranged reads of the version
        with pieces.open_range_file(
            client, settings.raw_bucket, obj.key, obj.version_id, obj.size
        ) as handle:
            yield from read_parquet_batches(handle, piece.part, settings.batch_rows)
        return
    local = workdir / "piece"
    if piece.byte_range is not None:
        pieces.download_range(
            client, settings.raw_bucket, obj.key, obj.version_id,
            byte_range=piece.byte_range, target=local,
        )  # fmt: skip
    elif (
        S3ObjectStore(client).download(settings.raw_bucket, obj.key, obj.version_id, local) is None
    ):
        raise UnreadableFileError("the object version went away while it was being read")
    yield from iter_raw(
        local, settings.dataset, workdir, part=piece.part, batch_rows=settings.batch_rows
    )


def _read_piece(
    client: Any, piece: pieces.Piece, settings: TaskSettings, target: Any
) -> Iterator[pa.RecordBatch]:
    obj = settings.objects[piece.object_index]
    rows_read, unreadable = 0, None
    columns: list[str] = []
    with tempfile.TemporaryDirectory(prefix="lethe-ingest-") as tmp:
        try:
            for records in _records(client, piece, settings, Path(tmp)):
                rows_read += records.rows_read
                columns = columns or list(records.columns)
                yield from _row_batches(records, obj, settings.dataset, target)
                yield _entry_batch(records, obj, settings, target)
        except UnreadableFileError as exc:
            unreadable = exc.reason
    info = {"rows_read": rows_read, "columns": columns, "unreadable": unreadable}
    yield _info_batch(PIECE, obj.index, [json.dumps(info)], target)


def _blank(count: int, kind: int, index: int, target: Any) -> dict[str, Any]:
    columns: dict[str, Any] = {n: pa.nulls(count, target.field(n).type) for n in target.names}
    columns[KIND] = pa.array([kind] * count, pa.int8())
    columns[OBJECT] = pa.array([index] * count, pa.int32())
    return columns


def _batch(columns: dict[str, Any], target: Any) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([columns[n] for n in target.names], schema=target)


def _info_batch(kind: int, index: int, infos: list[str], target: Any) -> pa.RecordBatch:
    columns = _blank(len(infos), kind, index, target)
    columns[INFO] = pa.array(infos, pa.string())
    return _batch(columns, target)


def _row_batches(
    records: RawRecords, obj: BatchObject, dataset: Dataset, target: Any
) -> Iterator[pa.RecordBatch]:
    table = records.table.combine_chunks()
    count = table.num_rows
    if count:
        columns = _blank(count, ROW, obj.index, target)
        columns[POSITION] = _chunk(table, POSITION)
        columns[PREREASONS] = pa.array([[]] * count, pa.list_(pa.string()))
        data = target.names[len(META_FIELDS) :]
        if dataset.format is DataFormat.JSONL:
            columns[RECORD] = _chunk(table, RECORD)
        elif dataset.format is DataFormat.CSV:
            names = [n for n in table.column_names if n != POSITION]
            values = [table.column(n).to_pylist() for n in names]
            records_json = [jackson_json(names, row) for row in zip(*values, strict=True)]
            columns[RECORD] = pa.array(records_json if names else ["{}"] * count, pa.string())
            for name in data:
                if name in table.column_names:
                    columns[name] = _chunk(table, name)
        else:
            for name in data:
                if name in table.column_names:
                    columns[name] = _chunk(table, name).cast(target.field(name).type)
        yield _batch(columns, target)
    if records.rejected:
        yield _rejected_batch(records, obj, target)


def _chunk(table: Any, name: str) -> Any:
    column = table.column(name)
    return column.chunk(0) if column.num_chunks == 1 else pa.concat_arrays(column.chunks)


def _rejected_batch(records: RawRecords, obj: BatchObject, target: Any) -> pa.RecordBatch:
    """Records the reader rejected (a CSV row of the wrong length, a line that is no JSON
    object): they travel with the rows, their reasons set, so that quarantine keeps one order."""
    rejected = records.rejected
    columns = _blank(len(rejected), ROW, obj.index, target)
    columns[POSITION] = pa.array([r.position for r in rejected], pa.int64())
    columns[PREREASONS] = pa.array([list(r.reasons) for r in rejected], pa.list_(pa.string()))
    columns[RECORD] = pa.array([r.record_json for r in rejected], pa.string())
    return _batch(columns, target)


def _entry_batch(
    records: RawRecords, obj: BatchObject, settings: TaskSettings, target: Any
) -> pa.RecordBatch:
    """The raw object's index entries over this batch of its records (every record, valid or
    rejected, typed as the index job types them): per subject, rows and its first hints."""
    ref = ObjectRef(obj.url, Zone.RAW, settings.dataset.format.value, obj.version_id, obj.etag)
    rows = raw_subject_rows(records, settings.dataset)
    entries = entries_of_rows(rows, settings.dataset, ref, key=settings.hash_key)
    infos = [
        json.dumps({"s": e.subject_hash, "r": e.rows, "h": list(e.row_hints[:HINTS_KEPT])})
        for e in entries
    ]
    return _info_batch(ENTRY, obj.index, infos, target)


# ---------------------------------------------------------------------------------- writing


class EntryAccumulator:
    """Index entries of one object built a batch at a time: rows added up, the first hints
    kept (one more than stored, so that the entry knows its hints are incomplete)."""

    def __init__(self) -> None:
        self.rows: dict[str, int] = {}
        self.hints: dict[str, list[int]] = {}

    def add(self, subject: str, rows: int, hints: Iterable[int]) -> None:
        self.rows[subject] = self.rows.get(subject, 0) + rows
        kept = self.hints.setdefault(subject, [])
        if len(kept) < HINTS_KEPT:
            kept.extend(list(hints)[: HINTS_KEPT - len(kept)])

    def add_entries(self, entries: Iterable[IndexEntry], offset: int = 0) -> None:
        for entry in entries:
            self.add(entry.subject_hash, entry.rows, (h + offset for h in entry.row_hints))

    def entries(self, ref: ObjectRef, dataset_id: str) -> list[IndexEntry]:
        return [
            IndexEntry(
                subject_hash=subject,
                object_url=ref.object_url,
                dataset_id=dataset_id,
                zone=ref.zone,
                format=ref.format,
                rows=rows,
                row_hints=tuple(sorted(self.hints[subject])[:HINTS_KEPT]),
                version_id=ref.version_id,
                etag=ref.etag,
            )
            for subject, rows in sorted(self.rows.items())
        ]


def _connect(settings: TaskSettings) -> tuple[S3ObjectStore, DynamoSubjectIndex]:
    configure_logging(settings.correlation_id)
    table = boto3.resource("dynamodb").Table(settings.index_table)
    return S3ObjectStore(boto3.client("s3")), DynamoSubjectIndex(table)


def partition_paths(
    batches: Iterable[pa.RecordBatch], partition_by: Sequence[str]
) -> Iterator[pa.RecordBatch]:
    """Add PART, each row's Hive partition path as layout renders it ("" unpartitioned): rows
    whose values render alike (null and "") share a file, as they always did."""
    for batch in batches:
        values = [batch.column(batch.schema.get_field_index(n)).to_pylist() for n in partition_by]
        paths = (
            [layout.partition_path(partition_by, v) for v in zip(*values, strict=True)]
            if partition_by
            else [""] * batch.num_rows
        )
        yield batch.append_column(PART, pa.array(paths, pa.string()))


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
    KeyTooLongError or DynamoDB's ValidationException."""
    dataset = settings.dataset
    partition_by = list(dataset.partition_by)
    for rendered in partition_paths(batches, partition_by):
        parts = rendered.column(PART).to_pylist()
        reasons = rendered.column(REASONS).to_pylist()
        objects = rendered.column(OBJECT).to_pylist()
        changed = False
        for row, (part, found) in enumerate(zip(parts, reasons, strict=True)):
            if found:
                parts[row] = None
                continue
            if not partition_by:
                continue  # <dataset id>/part-<h>.parquet: under 100 bytes
            key = layout.lake_key(dataset.dataset_id, part, settings.digest(objects[row]))
            problem = key_problem(settings.lake_bucket, key)
            if problem is not None:
                reasons[row], parts[row], changed = [problem], None, True
        index = rendered.schema.get_field_index(PART)
        placed = rendered.set_column(index, PART, pa.array(parts, pa.string()))
        if changed:
            index = placed.schema.get_field_index(REASONS)
            field = placed.schema.field(index)
            placed = placed.set_column(index, field, pa.array(reasons, field.type))
        yield placed


def _runs(table: Any, keys: Sequence[str]) -> Iterator[tuple[tuple[Any, ...], int, int]]:
    """Runs of equal `keys` in a sorted table: (key values, start, length)."""
    columns = [table.column(k).to_pylist() for k in keys]
    start = 0
    for row in range(1, table.num_rows + 1):
        if row == table.num_rows or any(c[row] != c[start] for c in columns):
            yield tuple(c[start] for c in columns), start, row - start
            start = row


def _summary(values: dict[str, Any], schema: T.StructType) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([values], schema=arrow_schema(schema))


class _LakeFile:
    """One lake file being written: rows buffered into row groups, entries accumulated."""

    def __init__(self, settings: TaskSettings, index: int, part: str, workdir: Path) -> None:
        obj = settings.objects[index]
        dataset = settings.dataset
        self.settings, self.index, self.part = settings, index, part
        self.key = layout.lake_key(dataset.dataset_id, part, settings.digest(index))
        fields = [f for f in arrow_schema(schema_of(dataset)) if f.name not in dataset.partition_by]
        self.schema = pa.schema(fields).with_metadata(
            {"lethe.source_object": obj.url, "lethe.source_version_id": obj.version_id}
        )
        self.path = workdir / "part.parquet"
        self.writer = pq.ParquetWriter(self.path, self.schema, compression="snappy")
        self.pending: list[Any] = []
        self.pending_rows = self.rows = 0
        self.entries = EntryAccumulator()
        self.ref = ObjectRef(
            s3_url(settings.lake_bucket, self.key), Zone.LAKE, "parquet",
            constants=hive_partition_values(self.key, dataset),
        )  # fmt: skip

    def add(self, table: Any) -> None:
        self.pending.append(table.select(self.schema.names).cast(self.schema))
        self.pending_rows += table.num_rows
        if self.pending_rows >= ROW_GROUP_ROWS:
            self._flush()

    def _flush(self) -> None:
        if not self.pending:
            return
        chunk = pa.concat_tables(self.pending)
        self.writer.write_table(chunk, row_group_size=ROW_GROUP_ROWS)
        dataset, key = self.settings.dataset, self.settings.hash_key
        self.entries.add_entries(entries_from_table(chunk, dataset, self.ref, key=key), self.rows)
        self.rows += chunk.num_rows
        self.pending, self.pending_rows = [], 0

    def finish(self, store: S3ObjectStore, index: DynamoSubjectIndex) -> dict[str, Any]:
        self._flush()
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
        entries = self.entries.entries(ref, self.settings.dataset.dataset_id)
        replace_entries(index, store, self.settings.lake_bucket, self.key, entries)
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
    store, index = _connect(settings)
    current: _LakeFile | None = None
    with tempfile.TemporaryDirectory(prefix="lethe-lake-") as tmp:
        for batch in batches:
            table = pa.Table.from_batches([batch])
            for (obj, part), start, length in _runs(table, [OBJECT, PART]):
                if current is None or (current.index, current.part) != (obj, part):
                    if current is not None:
                        yield _summary(current.finish(store, index), LAKE_SUMMARY)
                    current = _LakeFile(settings, obj, part, Path(tmp))
                current.add(table.slice(start, length))
        if current is not None:
            yield _summary(current.finish(store, index), LAKE_SUMMARY)


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

    def __init__(self, settings: TaskSettings, index: int, workdir: Path) -> None:
        self.settings, self.index = settings, index
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
                table.column(RECORD).to_pylist(),
                strict=True,
            )
        ]
        self.out.writelines(written)
        dataset = self.settings.dataset
        rows = quarantine_subject_rows(written, dataset)
        ref = ObjectRef(s3_url(self.settings.lake_bucket, self.key), Zone.LAKE, "jsonl")
        found = entries_of_rows(rows, dataset, ref, key=self.settings.hash_key)
        self.entries.add_entries(found, offset=self.lines)
        self.lines += len(written)

    def finish(self, store: S3ObjectStore, index: DynamoSubjectIndex) -> dict[str, Any]:
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
        entries = self.entries.entries(ref, self.settings.dataset.dataset_id)
        replace_entries(index, store, lake, self.key, entries)
        LOG.info("quarantined %d rows to %s", self.lines, url)
        self.path.unlink()
        return {
            "object": self.index, "url": url, "rows": self.lines,
            "version": stored.version_id, "etag": stored.etag, "entries": len(entries),
        }  # fmt: skip


def write_quarantine(
    batches: Iterable[pa.RecordBatch], settings: TaskSettings
) -> Iterator[pa.RecordBatch]:
    """A write task over rejected rows sorted by (object, position): one quarantine file of
    JSON Lines per object, streamed; yields one summary row per file."""
    store, index = _connect(settings)
    current: _QuarantineFile | None = None
    with tempfile.TemporaryDirectory(prefix="lethe-quarantine-") as tmp:
        for batch in batches:
            table = pa.Table.from_batches([batch])
            for (obj,), start, length in _runs(table, [OBJECT]):
                if current is None or current.index != obj:
                    if current is not None:
                        yield _summary(current.finish(store, index), FILE_SUMMARY)
                    current = _QuarantineFile(settings, obj, Path(tmp))
                current.add(table.slice(start, length))
        if current is not None:
            yield _summary(current.finish(store, index), FILE_SUMMARY)


def write_raw_entries(
    batches: Iterable[pa.RecordBatch], settings: TaskSettings
) -> Iterator[pa.RecordBatch]:
    """A task over the raw objects' added-up entries (object, subject, rows, hints) sorted by
    object: each object's entries become its index entries; one summary row per object."""
    store, index = _connect(settings)
    accumulator, current = EntryAccumulator(), None

    def done(obj: int, found: EntryAccumulator) -> pa.RecordBatch:
        raw = settings.objects[obj]
        ref = ObjectRef(raw.url, Zone.RAW, settings.dataset.format.value, raw.version_id, raw.etag)
        entries = found.entries(ref, settings.dataset.dataset_id)
        replace_entries(index, store, settings.raw_bucket, raw.key, entries)
        return _summary({"object": obj, "entries": len(entries)}, RAW_SUMMARY)

    for batch in batches:
        table = pa.Table.from_batches([batch])
        for (obj,), start, length in _runs(table, ["object"]):
            if current is not None and current != obj:
                yield done(current, accumulator)
                accumulator = EntryAccumulator()
            current = obj
            chunk = table.slice(start, length)
            for subject, rows, hints in zip(
                chunk.column("subject").to_pylist(),
                chunk.column("rows").to_pylist(),
                chunk.column("hints").to_pylist(),
                strict=True,
            ):
                accumulator.add(subject, rows, hints)
    if current is not None:
        yield done(current, accumulator)
