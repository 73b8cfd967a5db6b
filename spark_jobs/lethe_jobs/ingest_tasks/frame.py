"""The ingest job's task frame: its meta fields and row kinds, the summaries the writers
yield, what travels with every task (`TaskSettings`, `BatchObject`), and the S3 metadata of
what the job writes."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from pyspark.sql import types as T

from lethe_jobs import layout, pieces
from lethe_jobs.errors import UnreadableFileError
from lethe_jobs.ingest_tasks.typed import typed_fields
from lethe_jobs.readers import BATCH_ROWS, RESERVED_PREFIX, JsonNames, declared_names
from lethe_jobs.validate import NAMED, POSITION, RECORD
from lethe_shared.aws.s3 import CORRELATION_METADATA, PRODUCER_METADATA
from lethe_shared.datasets.document import DataFormat, Dataset
from lethe_shared.index.maintenance import INGEST_PRODUCER
from lethe_shared.index.opening import IndexLocation
from lethe_shared.index.subject_index import MAX_ROW_HINTS

LOG = logging.getLogger("lethe.ingest")


KIND = "_lethe_kind"


OBJECT = "_lethe_object"


PREREASONS = "_lethe_prereasons"


INFO = "_lethe_info"


PART = "_lethe_partition"


PACKED = "_lethe_packed"  # a run of plain rows, as an Arrow IPC stream (ingest_tasks.packed)


ROW, PIECE, ENTRY, PACKED_ROWS = 0, 1, 2, 3


PACK_ROWS = 4096  # rows of one packed run at most (ingest_tasks.packed): about half a megabyte


HINTS_KEPT = MAX_ROW_HINTS + 1  # one more than stored: IndexEntry then says hints are incomplete


MAX_KEY_BYTES = 1024  # S3's longest object key and DynamoDB's longest sort key, UTF-8 bytes


ROW_GROUP_ROWS = 131_072  # rows a lake file's row group holds at most (what a writer buffers)


PARQUET_CONTENT_TYPE = "application/vnd.apache.parquet"


JSONL_CONTENT_TYPE = "application/x-ndjson"


def ingest_metadata(correlation_id: str) -> dict[str, str]:
    """The S3 metadata of every lake object the job writes, for people who read its headers:
    `lethe-producer` says a job wrote it (nothing trusts it: the object events path leaves the
    indexing of these writes to this job because the writes ledger records them,
    lethe_shared.catalog.writes_ledger), and `lethe-correlation-id` names the run (the
    execution's name), so `lethe trace s3://<lake object>` finds the story that wrote it."""
    return {PRODUCER_METADATA: INGEST_PRODUCER, CORRELATION_METADATA: correlation_id}


META_FIELDS = (
    T.StructField(KIND, T.ByteType(), False),
    T.StructField(OBJECT, T.IntegerType(), False),
    T.StructField(POSITION, T.LongType()),
    T.StructField(PREREASONS, T.ArrayType(T.StringType())),
    T.StructField(RECORD, T.StringType()),
    T.StructField(INFO, T.StringType()),
    T.StructField(PACKED, T.BinaryType()),
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


WRITE_SUMMARY = T.StructType(  # one row per lake or quarantine file written (write_files)
    [*_SUMMARY_FIELDS, T.StructField("kind", T.StringType())]
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
    index: IndexLocation  # the subject index (lethe_shared.index.opening)
    correlation_id: str
    now: str  # ISO time of the run: quarantine records say when they were rejected
    objects: dict[int, BatchObject]
    hash_key: bytes = field(repr=False)
    batch_rows: int = BATCH_ROWS
    piece_bytes: int = pieces.PIECE_BYTES
    catalog_table: str = ""  # the writes ledger's table: every lake write is recorded there
    time_zone: str = ""  # the Spark session's time zone (`typed`: timestamps converted in UTC)
    pack_rows: int = PACK_ROWS  # rows of a packed run at most; 0: no row is packed (`packed`)

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


TEXT_PREFIX = "_lethe_text_"


def text_column(index: int) -> str:
    """The frame column that carries schema column `index`'s CSV text through validation, for
    the quarantine records rebuilt from it (`record_columns`)."""
    return f"{TEXT_PREFIX}{index}"


def record_columns(columns: Sequence[str], dataset: Dataset) -> list[tuple[str, str]] | None:
    """For a CSV file whose header holds `columns`: when a record's JSON text (RECORD, kept in
    quarantine) can be rebuilt from the frame's text columns, the (header name, text column)
    pairs, in header order, to rebuild it with (`jackson_json`); else None. It can when every
    column the readers keep (not RESERVED_PREFIX) is a schema column by the field-name rule and
    none of them holds JSON text the reader conforms (a struct): the text columns then hold
    each record's values exactly as read. The read task leaves RECORD null for such a file's
    records (building it for every row cost a Python call per row; only rejected rows need it),
    and the quarantine writer rebuilds it, byte for byte the same."""
    if dataset.format is not DataFormat.CSV:
        return None
    kept = [c for c in columns if not c.startswith(RESERVED_PREFIX)]
    try:
        found = declared_names(kept, dataset, "header")
    except UnreadableFileError:
        return None
    by_file = {file_name: declared for declared, file_name in found.items()}
    if len(by_file) != len(kept) or any(c not in by_file for c in kept):
        return None
    names = JsonNames(dataset)
    if any(names.nested(by_file[c]) for c in kept):
        return None
    index = {column.name: i for i, column in enumerate(dataset.schema_)}
    return [(c, text_column(index[by_file[c]])) for c in kept]


def frame_schema(dataset: Dataset, parquet_fields: Sequence[T.StructField] = ()) -> T.StructType:
    """The read tasks' output: `META_FIELDS`, then the data columns: the schema's columns as
    text for CSV (then the typed columns of those the read task converts: `typed`), NAMED
    for JSON Lines (RECORD holds the line; NAMED the line with the
    schema's names, where its own differ in case: `readers.json_names`), the file's for
    Parquet."""
    if dataset.format is DataFormat.CSV:
        data = [T.StructField(c.name, T.StringType()) for c in dataset.schema_]
        data += typed_fields(dataset)
    elif dataset.format is DataFormat.PARQUET:
        data = list(parquet_fields)
    else:
        data = [T.StructField(NAMED, T.StringType())]
    return T.StructType([*META_FIELDS, *data])
