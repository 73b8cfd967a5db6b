"""The segment format: sequence ids, partitions, S3 keys and the two Parquet files of a segment.

A segment is two immutable Parquet files (docs in /work notes, "Segment format"):

- entries (`<key>.parquet`): `subject_hash` fixed_size_binary(32) (the full HMAC-SHA256 digest),
  `object_id` int32 (a row of the object table), `rows` int32; sorted by (subject_hash,
  object_id), zstd, row-group statistics on, ROW_GROUP_ENTRIES entries per row group. Row hints
  are not stored (advisory, unused by erasure): an entry read back has `row_hints=()`.
- object table (`<key>.objects.parquet`): one row per (object URL, origin seq) with the fields
  every entry of that object version shares; object ids are assigned in (object_url,
  origin_seq) order, so the table is sorted by object id and by URL at once, and its row-group
  statistics prune by either.

In memory, rows travel "wide" (WIDE_SCHEMA): one row per (subject, object version) with the
object's fields inlined; `build_segment` splits a wide table into the two files' tables and
`widen` joins them back. Pure pyarrow, no AWS.
"""

from __future__ import annotations

import io
import os
import secrets
import time
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ROW_GROUP_ENTRIES = 4096  # entries per row group of an entries file (bench/segment_bench.py)
OBJECT_ROW_GROUP = 1024  # objects per row group of an object table
DEFAULT_PARTITION_BITS = 4  # 16 partitions
MAX_PARTITION_BITS = 16  # a partition is named by 4 hex digits
HASH_BYTES = 32

ENTRIES_SCHEMA = pa.schema(
    [
        pa.field("subject_hash", pa.binary(HASH_BYTES), nullable=False),
        pa.field("object_id", pa.int32(), nullable=False),
        pa.field("rows", pa.int32(), nullable=False),
    ]
)
OBJECT_FIELDS = (
    "object_url",
    "version_id",
    "etag",
    "zone",
    "format",
    "origin_seq",
    "matching_fingerprint",
    "key_fingerprint",
    "updated_at",
)
OBJECTS_SCHEMA = pa.schema(
    [pa.field("object_id", pa.int32(), nullable=False)]
    + [pa.field(name, pa.string(), nullable=False) for name in OBJECT_FIELDS]
)
WIDE_SCHEMA = pa.schema(
    [ENTRIES_SCHEMA.field("subject_hash"), ENTRIES_SCHEMA.field("rows")]
    + [pa.field(name, pa.string(), nullable=False) for name in OBJECT_FIELDS]
)


# ------------------------------------------------------------------------------ sequence ids


def new_seq(now_ns: int | None = None) -> str:
    """A segment's sortable id: 20-digit zero-padded nanoseconds since the epoch, "-", 8 random
    hex digits. Later writes sort later (on one clock; across hosts, up to their skew)."""
    ns = time.time_ns() if now_ns is None else now_ns
    return f"{ns:020d}-{secrets.token_hex(4)}"


def seq_after(seq: str) -> str:
    """The smallest string above `seq` and below every later seq: a floor that makes `seq`'s
    rows dead while keeping every later write's ("~" sorts after every hex digit)."""
    return seq + "~"


def seq_ns(seq: str) -> int:
    return int(seq.partition("-")[0] or 0)


# ------------------------------------------------------------------------------ partitions


def partition_of(subject_hash: str | bytes, bits: int) -> int:
    """A hash's partition: its first `bits` bits (hex text or the 32-byte digest)."""
    if not 0 <= bits <= MAX_PARTITION_BITS:
        raise ValueError(f"partition bits must be 0..{MAX_PARTITION_BITS}")
    head = subject_hash[:2] if isinstance(subject_hash, bytes) else bytes.fromhex(subject_hash[:4])
    return int.from_bytes(head, "big") >> (16 - bits)


def partition_name(partition: int) -> str:
    return f"{partition:04x}"


def partition_bounds(partition: int, bits: int) -> tuple[bytes, bytes]:
    """The smallest and largest 32-byte hash of a partition."""
    low = partition << (16 - bits)
    high = low + (1 << (16 - bits)) - 1
    return low.to_bytes(2, "big") + b"\x00" * 30, high.to_bytes(2, "big") + b"\xff" * 30


# ------------------------------------------------------------------------------ keys


def entries_key(dataset_id: str, level: int, partition: int | None, seq: str) -> str:
    if level == 0:
        return f"segments/{dataset_id}/L0/{seq}.parquet"
    if partition is None:
        raise ValueError("a level-1 segment has a partition")
    return f"segments/{dataset_id}/L1/{partition_name(partition)}/{seq}.parquet"


def objects_key(entries: str) -> str:
    return entries.removesuffix(".parquet") + ".objects.parquet"


def check_dataset_id(dataset_id: str) -> str:
    if not dataset_id or "/" in dataset_id or "#" in dataset_id or dataset_id in {".", ".."}:
        raise ValueError("a dataset id is non-empty, without '/' or '#'")
    return dataset_id


# ------------------------------------------------------------------------------ tables


def hash_bytes(hashes: Sequence[str]) -> pa.Array:
    """Hex subject hashes as the 32-byte column (ValueError for anything but 64 hex digits)."""
    out = []
    for h in hashes:
        if len(h) != 2 * HASH_BYTES:
            raise ValueError("a subject hash is 64 hex digits")
        out.append(bytes.fromhex(h))
    return pa.array(out, pa.binary(HASH_BYTES))


def empty_wide() -> pa.Table:
    return WIDE_SCHEMA.empty_table()


def wide_rows(hashes: Sequence[str], rows: Sequence[int], fields: dict[str, str]) -> pa.Table:
    """The wide rows of one object version: its hashes and row counts, its shared fields."""
    n = len(hashes)
    columns: dict[str, pa.Array] = {
        "subject_hash": hash_bytes(hashes),
        "rows": pa.array(rows, pa.int32()),
    }
    for name in OBJECT_FIELDS:
        columns[name] = pa.array([fields[name]] * n, pa.string())
    return pa.Table.from_pydict(columns, schema=WIDE_SCHEMA)


def build_segment(
    wide: pa.Table, objects_only: pa.Table | None = None
) -> tuple[pa.Table, pa.Table]:
    """Split wide rows into (entries, object table). Object ids follow (object_url, origin_seq)
    order; entries are sorted by (subject_hash, object_id). `objects_only` (OBJECTS_SCHEMA
    without object_id) lists object versions that have no entry (an object written empty) and
    must still be in the object table."""
    wide = wide.cast(WIDE_SCHEMA)
    objects = wide.select(list(OBJECT_FIELDS))
    if objects_only is not None and objects_only.num_rows:
        objects = pa.concat_tables(
            [objects, objects_only.select(list(OBJECT_FIELDS)).cast(objects.schema)]
        )
    distinct = objects.group_by(list(OBJECT_FIELDS), use_threads=False).aggregate([])
    distinct = distinct.select(list(OBJECT_FIELDS)).sort_by(
        [("object_url", "ascending"), ("origin_seq", "ascending")]
    )
    keys = [
        f"{u}\x00{o}"
        for u, o in zip(
            distinct["object_url"].to_pylist(), distinct["origin_seq"].to_pylist(), strict=True
        )
    ]
    if len(set(keys)) != len(keys):
        raise ValueError("one object version (url, origin) has two sets of fields")
    ids = pa.array(range(len(keys)), pa.int32())
    table = distinct.add_column(0, "object_id", ids).cast(OBJECTS_SCHEMA)
    wide_keys = pc.binary_join_element_wise(wide["object_url"], wide["origin_seq"], "\x00")
    object_ids = pc.index_in(wide_keys, value_set=pa.array(keys, pa.string())).cast(pa.int32())
    entries = pa.Table.from_arrays(
        [wide["subject_hash"], object_ids, wide["rows"]], schema=ENTRIES_SCHEMA
    ).sort_by([("subject_hash", "ascending"), ("object_id", "ascending")])
    return entries, table


def widen(entries: pa.Table, objects: pa.Table) -> pa.Table:
    """The wide rows of a segment (entries joined to their object table)."""
    if entries.num_rows == 0:
        return empty_wide()
    positions = pc.index_in(entries["object_id"], value_set=objects["object_id"])
    if positions.null_count:
        raise ValueError("an entry names an object id its object table does not hold")
    picked = objects.take(positions)
    columns = {"subject_hash": entries["subject_hash"], "rows": entries["rows"]}
    for name in OBJECT_FIELDS:
        columns[name] = picked[name]
    return pa.table(columns).cast(WIDE_SCHEMA)


def to_parquet(table: pa.Table, row_group: int) -> bytes:
    """A table as Parquet bytes: zstd, statistics on, `row_group` rows per row group."""
    sink = io.BytesIO()
    pq.write_table(
        table,
        sink,
        row_group_size=max(1, row_group),
        compression="zstd",
        write_statistics=True,
        store_schema=False,
    )
    return sink.getvalue()


def from_parquet(data: bytes, schema: pa.Schema) -> pa.Table:
    return pq.read_table(pa.BufferReader(data)).cast(schema)


def writer_name() -> str:
    """Who writes (a manifest attribute): the Lambda function, or the host and process."""
    return os.environ.get("AWS_LAMBDA_FUNCTION_NAME") or f"pid-{os.getpid()}"
