"""What the ingest job's Spark tasks do: scan large objects for split points, read pieces of
raw objects, write lake files, write quarantine, write the raw objects' index entries.

The functions that Spark runs over a partition (`mapInArrow`) take Arrow batches and yield
Arrow batches. No task holds an object whole: readers yield `readers.BATCH_ROWS` records at a
time, writers stream row groups of `ROW_GROUP_ROWS` to a local file before one upload, and the
driver only sees the small summary rows these tasks yield.

The frame the read tasks produce (`frame_schema`) carries, per row, its kind: a record of an
object (`ROW`), a packed run of plain CSV rows (`PACKED_ROWS`), the summary of one piece
(`PIECE`: rows read, columns, or why the object is unreadable), or the partial index entries of
one piece of a split object (`ENTRY`: an Arrow IPC stream, per subject its rows and first row
hints), which a writer task adds up per object (`raw_entries`).

Modules: `frame` (the frame, settings and summaries), `scan` (split points of large text
objects), `read` (pieces into the frame), `write` (lake files, quarantine), `raw_entries` (the
raw objects' entries: written by a read task, or added up over a split object's pieces),
`entries` (an object's index entries added up over its batches), `index_writes` (a task's
index writes, together), `typed` (CSV texts converted by the read task), `packed` (plain CSV
rows packed in runs by the read task).
"""

from __future__ import annotations

from lethe_jobs.ingest_tasks.entries import EntryAccumulator, models_like
from lethe_jobs.ingest_tasks.frame import (
    ENTRY,
    FILE_SUMMARY,
    HINTS_KEPT,
    INFO,
    JSONL_CONTENT_TYPE,
    KIND,
    LAKE_SUMMARY,
    MAX_KEY_BYTES,
    META_FIELDS,
    OBJECT,
    PACK_ROWS,
    PACKED,
    PACKED_ROWS,
    PARQUET_CONTENT_TYPE,
    PART,
    PIECE,
    PREREASONS,
    ROW,
    ROW_GROUP_ROWS,
    TEXT_PREFIX,
    WRITE_SUMMARY,
    BatchObject,
    TaskSettings,
    frame_schema,
    ingest_metadata,
    jackson_json,
    record_columns,
    text_column,
)
from lethe_jobs.ingest_tasks.packed import dated_partitions, pack_plan
from lethe_jobs.ingest_tasks.raw_entries import write_raw_entries
from lethe_jobs.ingest_tasks.read import read_pieces
from lethe_jobs.ingest_tasks.scan import (
    TextObject,
    piece_from_spec,
    piece_spec,
    range_count,
    range_specs,
    scan_range,
    splittable_object,
    text_pieces,
)
from lethe_jobs.ingest_tasks.typed import TYPED_PREFIX, typed_column, typed_indexes
from lethe_jobs.ingest_tasks.write import (
    key_problem,
    partition_paths,
    place_rows,
    quarantine_line,
    write_files,
    write_lake_files,
    write_quarantine,
)

__all__ = [
    "ENTRY",
    "FILE_SUMMARY",
    "HINTS_KEPT",
    "INFO",
    "JSONL_CONTENT_TYPE",
    "KIND",
    "LAKE_SUMMARY",
    "MAX_KEY_BYTES",
    "META_FIELDS",
    "OBJECT",
    "PACKED",
    "PACKED_ROWS",
    "PACK_ROWS",
    "PARQUET_CONTENT_TYPE",
    "PART",
    "PIECE",
    "PREREASONS",
    "ROW",
    "ROW_GROUP_ROWS",
    "TEXT_PREFIX",
    "TYPED_PREFIX",
    "WRITE_SUMMARY",
    "BatchObject",
    "EntryAccumulator",
    "TaskSettings",
    "TextObject",
    "dated_partitions",
    "frame_schema",
    "ingest_metadata",
    "jackson_json",
    "key_problem",
    "models_like",
    "pack_plan",
    "partition_paths",
    "piece_from_spec",
    "piece_spec",
    "place_rows",
    "quarantine_line",
    "range_count",
    "range_specs",
    "read_pieces",
    "record_columns",
    "scan_range",
    "splittable_object",
    "text_column",
    "text_pieces",
    "typed_column",
    "typed_indexes",
    "write_files",
    "write_lake_files",
    "write_quarantine",
    "write_raw_entries",
]
