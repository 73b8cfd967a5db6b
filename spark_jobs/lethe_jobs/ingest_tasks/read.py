"""The read task: pieces of raw objects streamed a batch of records at a time into the task
frame, with the raw objects' index entries and one summary per piece.

An object read whole (one piece) has all its entries in the task that reads it: the task writes
them itself, with the entries of its other whole objects (`index_writes.TaskIndexWriter`: one
segment per task), before its last summary leaves it, and the piece's summary says how many it
wrote. The pieces of a split object send their partial entries (one ENTRY row each, the
entries as an Arrow IPC stream), which a writer task adds up per object and subject and writes
(`raw_entries.write_raw_entries`)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import types as T

from lethe_jobs import pieces
from lethe_jobs.arrow_bridge import arrow_schema
from lethe_jobs.errors import UnreadableFileError
from lethe_jobs.indexing import batch_of_rows
from lethe_jobs.ingest_tasks.entries import EntryAccumulator
from lethe_jobs.ingest_tasks.frame import (
    ENTRY,
    INFO,
    KIND,
    META_FIELDS,
    OBJECT,
    PACKED,
    PACKED_ROWS,
    PIECE,
    PREREASONS,
    ROW,
    BatchObject,
    TaskSettings,
    jackson_json,
    record_columns,
)
from lethe_jobs.ingest_tasks.index_writes import then_flush
from lethe_jobs.ingest_tasks.packed import PackPlan, ipc_bytes, pack_plan, pack_rows
from lethe_jobs.ingest_tasks.raw_entries import RawIndexWrites
from lethe_jobs.ingest_tasks.scan import piece_from_spec
from lethe_jobs.ingest_tasks.typed import TYPED_PREFIX, split_texts, typed_column, typed_indexes
from lethe_jobs.readers import (
    JsonNames,
    RawRecords,
    declared_names,
    iter_raw,
    read_parquet_batches,
)
from lethe_jobs.session import logging_shown_keys
from lethe_jobs.subject_rows import raw_subject_rows
from lethe_jobs.validate import NAMED, POSITION, RECORD
from lethe_shared.aws.s3 import S3ObjectStore
from lethe_shared.catalog.object_catalog import Zone
from lethe_shared.datasets.document import DataFormat, parse_type
from lethe_shared.index.arrow_entries import ObjectRef


def read_pieces(
    batches: Iterable[pa.RecordBatch], settings: TaskSettings, schema: T.StructType
) -> Iterator[pa.RecordBatch]:
    """A read task: each input row holds the JSON list of a group's piece specs; yields their
    records, the partial index entries of split objects, and one summary per piece; writes the
    entries of the objects it reads whole (module docstring)."""
    logging_shown_keys(
        settings.correlation_id, settings.hash_key, {settings.dataset.dataset_id: settings.dataset}
    )
    index = RawIndexWrites(settings)
    return then_flush(_read_pieces(batches, settings, schema, index), index)


def _read_pieces(
    batches: Iterable[pa.RecordBatch],
    settings: TaskSettings,
    schema: T.StructType,
    index: RawIndexWrites,
) -> Iterator[pa.RecordBatch]:
    client = boto3.client("s3")
    target = arrow_schema(schema)
    plan = pack_plan(settings)
    for batch in batches:
        for text in batch.column(0).to_pylist():
            for spec in json.loads(text):
                piece = piece_from_spec(spec)
                yield from _read_piece(client, piece, settings, target, index, plan=plan)


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


class _Packing:
    """A read task's packing of plain rows (`packed`): its plan (None: no row is packed) and
    the largest run it packed, in bytes, and the rows it packed, per piece (what the piece's
    summary reports)."""

    def __init__(self, plan: PackPlan | None) -> None:
        self.plan = plan
        self.biggest = 0
        self.rows = 0

    def batches(
        self, columns: dict[str, Any], obj: BatchObject, target: Any
    ) -> Iterator[pa.RecordBatch]:
        """A CSV batch as frame rows: its plain rows as packed runs (one PACKED_ROWS row each:
        POSITION its first row's, INFO its partition path), then its other rows."""
        if self.plan is None:
            yield _batch(columns, target)
            return
        rest, runs = pack_rows(columns, self.plan)
        if runs:
            packed = _blank(len(runs), PACKED_ROWS, obj.index, target)
            packed[POSITION] = pa.array([r.position for r in runs], pa.int64())
            packed[INFO] = pa.array([r.part for r in runs], pa.string())
            packed[PACKED] = pa.array([r.data for r in runs], pa.binary())
            self.biggest = max(self.biggest, *(len(r.data) for r in runs))
            self.rows += sum(r.rows for r in runs)
            yield _batch(packed, target)
        batch = _batch(columns, target)
        if runs:
            batch = batch.filter(rest)
        if batch.num_rows:
            yield batch


def _read_piece(
    client: Any,
    piece: pieces.Piece,
    settings: TaskSettings,
    target: Any,
    index: RawIndexWrites,
    *,
    plan: PackPlan | None = None,
) -> Iterator[pa.RecordBatch]:
    obj = settings.objects[piece.object_index]
    rows_read, without_subject, unreadable = 0, 0, None
    packing = _Packing(plan)
    columns: list[str] = []
    # the piece's index entries, added up over its batches: written by this task when the
    # piece is the whole object, else sent once, one ENTRY row per subject of the piece
    found = EntryAccumulator()
    written: int | None = None  # entries this task wrote for the object
    with tempfile.TemporaryDirectory(prefix="lethe-ingest-") as tmp:
        try:
            for records in _records(client, piece, settings, Path(tmp)):
                rows_read += records.rows_read
                columns = columns or list(records.columns)
                yield from _row_batches(records, obj, settings, target, packing)
                without_subject += _add_entries(found, records, obj, settings)
        except UnreadableFileError as exc:
            unreadable = exc.reason
    if unreadable is None and found:
        if piece.whole:
            written = index.add(obj, found)
        else:
            yield _entry_batch(found, obj, target)
    info = {
        "rows_read": rows_read,
        "rows_without_subject": without_subject,
        "columns": columns,
        "unreadable": unreadable,
        "entries": written,
        "packed_bytes": packing.biggest,
        "packed_rows": packing.rows,
    }
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
    records: RawRecords,
    obj: BatchObject,
    settings: TaskSettings,
    target: Any,
    packing: _Packing | None = None,
) -> Iterator[pa.RecordBatch]:
    dataset = settings.dataset
    table = records.table.combine_chunks()
    count = table.num_rows
    if count:
        columns = _blank(count, ROW, obj.index, target)
        columns[POSITION] = _chunk(table, POSITION)
        columns[PREREASONS] = pa.array([[]] * count, pa.list_(pa.string()))
        data = [n for n in target.names[len(META_FIELDS) :] if not n.startswith(TYPED_PREFIX)]
        if dataset.format is DataFormat.JSONL:
            columns[RECORD] = _chunk(table, RECORD)
            if NAMED in data:
                positions = table.column(POSITION).to_pylist()
                named = [records.named.get(p) for p in positions] if records.named else None
                columns[NAMED] = pa.array(named or [None] * count, pa.string())
        elif dataset.format is DataFormat.CSV:
            _csv_batch(columns, records, table, settings, data)
            if packing is not None:
                yield from packing.batches(columns, obj, target)
                columns = {}
        else:
            for name in data:
                if name in table.column_names:
                    columns[name] = _chunk(table, name).cast(target.field(name).type)
        if columns:
            yield _batch(columns, target)
    if records.rejected:
        yield _rejected_batch(records, obj, target)


def _csv_batch(
    columns: dict[str, Any],
    records: RawRecords,
    table: Any,
    settings: TaskSettings,
    data: list[str],
) -> None:
    """A CSV batch's frame columns: RECORD where it is built here, and the data columns."""
    dataset = settings.dataset
    count = table.num_rows
    names = [n for n in table.column_names if n != POSITION]
    if not names:
        columns[RECORD] = pa.array(["{}"] * count, pa.string())
    elif record_columns(records.columns, dataset) is None:
        values = [table.column(n).to_pylist() for n in names]
        records_json = [jackson_json(names, row) for row in zip(*values, strict=True)]
        columns[RECORD] = pa.array(records_json, pa.string())
    # else RECORD stays null: the quarantine writer rebuilds it for the rejected rows
    by_name = {n: _chunk(table, n) for n in names}
    _csv_columns(columns, settings, by_name, data)


def _csv_columns(
    columns: dict[str, Any], settings: TaskSettings, values: dict[str, pa.Array], data: list[str]
) -> None:
    """The frame's CSV data columns (the schema's, as text): each from the header column the
    field-name rule finds for it (`readers.declared_names`: exact, else the one case
    variant), the reader's Arrow array as it is. A cell that holds a struct as JSON text is
    conformed to the declared names (`readers.JsonNames`; only such columns are turned into
    Python values); a row where such a name is ambiguous is rejected (PREREASONS). A column
    with a typed column has its canonical texts converted there (`typed.split_texts`)."""
    dataset = settings.dataset
    found = declared_names(list(values), dataset, "header")
    typed = {dataset.schema_[i].name: i for i in typed_indexes(dataset)}
    json_names = JsonNames(dataset)
    rejected: dict[int, list[str]] = {}
    for name in data:
        if name not in found:
            continue
        column = values[found[name]]
        if name in typed:
            index = typed[name]
            declared = parse_type(dataset.schema_[index].type)
            texts = column.cast(pa.string())
            columns[typed_column(index)], columns[name] = split_texts(
                texts, declared, settings.time_zone
            )
            continue
        if not json_names.nested(name):
            columns[name] = column.cast(pa.string())
            continue
        texts = column.to_pylist()
        for row, text in enumerate(texts):
            named, reasons = json_names.cell(name, text)
            if reasons:
                rejected.setdefault(row, []).extend(reasons)
            elif named is not None:
                texts[row] = named
        columns[name] = pa.array(texts, pa.string())
    if rejected:
        prereasons = [rejected.get(row, []) for row in range(len(columns[POSITION]))]
        columns[PREREASONS] = pa.array(prereasons, pa.list_(pa.string()))


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


def _add_entries(
    found: EntryAccumulator, records: RawRecords, obj: BatchObject, settings: TaskSettings
) -> int:
    """Add the raw object's index entries over this batch of its records (every record, valid
    or rejected, typed as the index job types them: per subject, rows and its first hints) to
    `found`; returns the number of records that name no subject (a subject column null, empty
    or whitespace only: `subject_hashing.canonical.is_no_subject`), which are not indexed."""
    ref = ObjectRef(obj.url, Zone.RAW, settings.dataset.format.value, obj.version_id, obj.etag)
    rows = raw_subject_rows(records, settings.dataset)
    if not rows.coordinates:
        return 0
    batch = batch_of_rows(rows, settings.dataset, ref, key=settings.hash_key)
    found.add_batch(batch)
    return len(rows.coordinates) - batch.total_rows


def _entry_batch(found: EntryAccumulator, obj: BatchObject, target: Any) -> pa.RecordBatch:
    """The piece's partial entries as ONE ENTRY row: PACKED holds them as an Arrow IPC stream
    (`EntryAccumulator.partial`: per subject its rows and its first hints), POSITION the
    piece's first hint (pieces of an object hold disjoint, ordered ranges of lines)."""
    table = found.partial()
    first = pc.min(pc.list_flatten(table.column("h"))).as_py()
    columns = _blank(1, ENTRY, obj.index, target)
    columns[POSITION] = pa.array([first], pa.int64())
    columns[PACKED] = pa.array([ipc_bytes(table)], pa.binary())
    return _batch(columns, target)
