"""The segment format: sequence ids, partitions, S3 keys and the two Parquet files of a segment.

A segment is two immutable Parquet files (docs in /work notes, "Segment format"):

- entries (`<key>.parquet`): `subject_hash` fixed_size_binary(w): the subject's key, the first
  w bytes of the HMAC-SHA256 digest, w = the dataset's `hash_bytes` (32: the full digest; 6: a
  48-bit prefix, PREFIX_BYTES, written PLAIN without a dictionary: zstd then packs the sorted
  prefixes to about 2.4 bytes per entry); `object_id` int32 (a row of the object table); `rows`
  int32; `subjects` int32 (how many distinct subjects of the object version share this key:
  1 unless two digests of one object share a prefix); sorted by (subject_hash, object_id), zstd,
  row-group statistics on, ROW_GROUP_ENTRIES entries per row group. Row hints are not stored
  (advisory, unused by erasure): an entry read back has `row_hints=()`.
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ROW_GROUP_ENTRIES = 4096  # entries per row group of an entries file (bench/segment_bench.py)
OBJECT_ROW_GROUP = 1024  # objects per row group of an object table
DEFAULT_PARTITION_BITS = 4  # 16 partitions
MAX_PARTITION_BITS = 16  # a partition is named by 4 hex digits
HASH_BYTES = 32  # a full digest
PREFIX_BYTES = 6  # a 48-bit prefix (hash_bytes=6)
HASH_WIDTHS = (HASH_BYTES, PREFIX_BYTES)

# in memory the key is variable binary (its width is the dataset's); on disk fixed_size_binary(w)
ENTRIES_SCHEMA = pa.schema(
    [
        pa.field("subject_hash", pa.binary(), nullable=False),
        pa.field("object_id", pa.int32(), nullable=False),
        pa.field("rows", pa.int32(), nullable=False),
        pa.field("subjects", pa.int32(), nullable=False),
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
    + [ENTRIES_SCHEMA.field("subjects")]
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


def partition_bounds(partition: int, bits: int, width: int = HASH_BYTES) -> tuple[bytes, bytes]:
    """The smallest and largest key (`width` bytes) of a partition."""
    low = partition << (16 - bits)
    high = low + (1 << (16 - bits)) - 1
    pad = width - 2
    return low.to_bytes(2, "big") + b"\x00" * pad, high.to_bytes(2, "big") + b"\xff" * pad


# ------------------------------------------------------------------------------ keys


def entries_key(dataset_id: str, level: int, partition: int | None, seq: str) -> str:
    if level == 0:
        return f"segments/{dataset_id}/L0/{seq}.parquet"
    if partition is None:
        raise ValueError("a level-1 segment has a partition")
    return f"segments/{dataset_id}/L1/{partition_name(partition)}/{seq}.parquet"


def objects_key(entries: str) -> str:
    return entries.removesuffix(".parquet") + ".objects.parquet"


def by_object_key(entries: str) -> str:
    """A level-1 segment's by-object file: its entries sorted by (object_id, subject_hash)."""
    return entries.removesuffix(".parquet") + ".by_object.parquet"


def by_object(entries: pa.Table) -> pa.Table:
    """An entries table sorted by object: what the by-object file holds."""
    return entries.sort_by([("object_id", "ascending"), ("subject_hash", "ascending")])


def check_dataset_id(dataset_id: str) -> str:
    if not dataset_id or "/" in dataset_id or "#" in dataset_id or dataset_id in {".", ".."}:
        raise ValueError("a dataset id is non-empty, without '/' or '#'")
    return dataset_id


# ------------------------------------------------------------------------------ tables


def check_width(width: int) -> int:
    if width not in HASH_WIDTHS:
        raise ValueError(f"hash_bytes is one of {HASH_WIDTHS}")
    return width


def subject_key(subject: str, width: int = HASH_BYTES) -> bytes:
    """The stored key of a subject: the first `width` bytes of its digest. `subject` is the
    full hash (64 hex digits) or, with prefixes, the 2*width hex digits a by-object read
    returns (ValueError otherwise)."""
    if len(subject) not in {2 * HASH_BYTES, 2 * width}:
        raise ValueError("a subject hash is 64 hex digits")
    return bytes.fromhex(subject)[:width]


def subject_id(subject: str, width: int = HASH_BYTES) -> str:
    """What by-object reads call a subject: its key as hex (64 or 12 digits)."""
    return subject_key(subject, width).hex()


_HEX_DIGITS = b"0123456789abcdef"


def _joined_hex(hashes: Sequence[str]) -> str | None:
    """The hashes end to end when every one is 64 lowercase hex digits (what the subject
    hashing gives), checked once for the whole column (ASCII, and nothing left once the hex
    digits are deleted); else None."""
    if set(map(len, hashes)) != {2 * HASH_BYTES}:
        return None
    joined = "".join(hashes)
    if not joined.isascii() or joined.encode("ascii").translate(None, _HEX_DIGITS):
        return None
    return joined


def _full_hashes(hashes: Sequence[str]) -> bool:
    """Every hash is 64 lowercase hex digits: then a key is the hash's first bytes, and its id
    its first digits."""
    return not hashes or _joined_hex(hashes) is not None


def subject_ids(hashes: Sequence[str], width: int = HASH_BYTES) -> list[str]:
    """`subject_id` of each hash (ValueError for the hashes `subject_key` refuses)."""
    if _full_hashes(hashes):
        return list(hashes) if width == HASH_BYTES else [h[: 2 * width] for h in hashes]
    return [subject_id(h, width) for h in hashes]


def _distinct_keys(hashes: Sequence[str], width: int) -> pa.Array | None:
    """The keys of `hashes` (`subject_key` of each, as one binary column, without a Python
    call per hash) when every hash is 64 lowercase hex digits and no two share a key; else
    None (`object_part` then adds up the hashes that share a key, one by one)."""
    joined = _joined_hex(hashes) if hashes else None
    if joined is None:
        return None
    count = len(hashes)
    if width == HASH_BYTES:
        data = bytes.fromhex(joined)
    else:
        step = 2 * HASH_BYTES
        data = bytes.fromhex(
            "".join([joined[i : i + 2 * width] for i in range(0, len(joined), step)])
        )
    offsets = pa.array(range(0, count * width + 1, width), pa.int32())
    keys = pa.Array.from_buffers(
        pa.binary(), count, [None, offsets.buffers()[1], pa.py_buffer(data)]
    )
    return keys if pc.count_distinct(keys).as_py() == count else None


def hash_bytes(hashes: Sequence[str], width: int = HASH_BYTES) -> pa.Array:
    """Hex subject hashes as the key column (ValueError for anything but 64 hex digits, or the
    2*width digits of a prefix)."""
    return pa.array([subject_key(h, width) for h in hashes], pa.binary())


def empty_wide() -> pa.Table:
    return WIDE_SCHEMA.empty_table()


@dataclass(frozen=True)
class ObjectPart:
    """The wide rows of one object version before its fields are inlined in every row
    (`object_part`): its keys, row counts and subject counts, and its fields once.
    `build_segment_of` builds a segment from several without a row of fields per entry."""

    fields: Mapping[str, str]
    keys: pa.Array  # binary
    rows: pa.Array  # int32
    subjects: pa.Array  # int32

    def wide(self) -> pa.Table:
        """The wide rows (`wide_rows`)."""
        count = len(self.keys)
        columns: dict[str, pa.Array] = {
            "subject_hash": self.keys,
            "rows": self.rows,
            "subjects": self.subjects,
        }
        for name in OBJECT_FIELDS:
            columns[name] = pa.array([self.fields[name]] * count, pa.string())
        return pa.Table.from_pydict({n: columns[n] for n in WIDE_SCHEMA.names}, schema=WIDE_SCHEMA)


def object_part(
    hashes: Sequence[str], rows: Sequence[int], fields: Mapping[str, str], width: int = HASH_BYTES
) -> ObjectPart:
    """One object version's keys and row counts (`wide_rows` before its fields are inlined).
    Digests of the version that share a key (a prefix collision) are one row: rows summed,
    `subjects` counting them."""
    keys = _distinct_keys(hashes, width)
    if keys is not None:  # one row per hash, in their order (what the loop below gives)
        count = len(keys)
        if len(rows) != count:
            raise ValueError("one row count per hash")
        ones = pc.fill_null(pa.nulls(count, pa.int32()), 1)
        return ObjectPart(fields, keys, pa.array(rows, pa.int32()), ones)
    keyed: dict[bytes, list[int]] = {}
    seen: set[str] = set()
    for h, n in zip(hashes, rows, strict=True):
        held = keyed.setdefault(subject_key(h, width), [0, 0])
        held[0] += n
        held[1] += 0 if h in seen else 1
        seen.add(h)
    return ObjectPart(
        fields,
        pa.array(list(keyed), pa.binary()),
        pa.array([v[0] for v in keyed.values()], pa.int32()),
        pa.array([v[1] for v in keyed.values()], pa.int32()),
    )


def wide_rows(
    hashes: Sequence[str], rows: Sequence[int], fields: Mapping[str, str], width: int = HASH_BYTES
) -> pa.Table:
    """The wide rows of one object version: its hashes' keys and row counts, its shared fields.
    Digests of the version that share a key (a prefix collision) are one row: rows summed,
    `subjects` counting them."""
    return object_part(hashes, rows, fields, width).wide()


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
        [wide["subject_hash"], object_ids, wide["rows"], wide["subjects"]], schema=ENTRIES_SCHEMA
    ).sort_by([("subject_hash", "ascending"), ("object_id", "ascending")])
    return entries, table


def build_segment_of(
    parts: Sequence[ObjectPart], objects_only: pa.Table | None = None
) -> tuple[pa.Table, pa.Table]:
    """`build_segment` of the parts' wide rows (`ObjectPart.wide`, end to end), equal table
    for table, built from each part's fields once instead of from a row of fields per entry."""
    versions = [tuple(str(p.fields[n]) for n in OBJECT_FIELDS) for p in parts]
    others: list[tuple[str, ...]] = []
    if objects_only is not None and objects_only.num_rows:
        columns = [objects_only[n].cast(pa.string()).to_pylist() for n in OBJECT_FIELDS]
        others = list(zip(*columns, strict=True))
    url, origin = OBJECT_FIELDS.index("object_url"), OBJECT_FIELDS.index("origin_seq")
    distinct = sorted(set(versions) | set(others), key=lambda v: (v[url], v[origin]))
    if len({(v[url], v[origin]) for v in distinct}) != len(distinct):
        raise ValueError("one object version (url, origin) has two sets of fields")
    ids = {version: i for i, version in enumerate(distinct)}
    table = pa.Table.from_arrays(
        [pa.array(range(len(distinct)), pa.int32())]
        + [pa.array([v[i] for v in distinct], pa.string()) for i in range(len(OBJECT_FIELDS))],
        schema=OBJECTS_SCHEMA,
    )
    object_ids = [
        pc.fill_null(pa.nulls(len(p.keys), pa.int32()), ids[v])
        for p, v in zip(parts, versions, strict=True)
    ]
    entries = pa.Table.from_arrays(
        [
            _joined_arrays([p.keys for p in parts], pa.binary()),
            _joined_arrays(object_ids, pa.int32()),
            _joined_arrays([p.rows for p in parts], pa.int32()),
            _joined_arrays([p.subjects for p in parts], pa.int32()),
        ],
        schema=ENTRIES_SCHEMA,
    ).sort_by([("subject_hash", "ascending"), ("object_id", "ascending")])
    return entries, table


def _joined_arrays(arrays: Sequence[pa.Array], kind: pa.DataType) -> pa.Array:
    if not arrays:
        return pa.array([], kind)
    return pa.concat_arrays([a.cast(kind) for a in arrays])


def widen(entries: pa.Table, objects: pa.Table) -> pa.Table:
    """The wide rows of a segment (entries joined to their object table)."""
    if entries.num_rows == 0:
        return empty_wide()
    positions = pc.index_in(entries["object_id"], value_set=objects["object_id"])
    if positions.null_count:
        raise ValueError("an entry names an object id its object table does not hold")
    picked = objects.take(positions)
    columns = {
        "subject_hash": entries["subject_hash"],
        "rows": entries["rows"],
        "subjects": entries["subjects"],
    }
    for name in OBJECT_FIELDS:
        columns[name] = picked[name]
    return pa.table({n: columns[n] for n in WIDE_SCHEMA.names}).cast(WIDE_SCHEMA)


def to_parquet(table: pa.Table, row_group: int, width: int | None = None) -> bytes:
    """A table as Parquet bytes: zstd, statistics on, `row_group` rows per row group. An
    entries table's `subject_hash` is written as fixed_size_binary(`width`); with prefixes
    PLAIN, without a dictionary (sorted prefixes: zstd packs them best so)."""
    options: dict[str, object] = {}
    if width is not None:
        at = table.schema.get_field_index("subject_hash")
        table = table.set_column(
            at,
            pa.field("subject_hash", pa.binary(width), nullable=False),
            table["subject_hash"].cast(pa.binary(width)),
        )
        if width == PREFIX_BYTES:
            options["use_dictionary"] = [n for n in table.column_names if n != "subject_hash"]
    sink = io.BytesIO()
    pq.write_table(
        table,
        sink,
        row_group_size=max(1, row_group),
        compression="zstd",
        write_statistics=True,
        store_schema=False,
        **options,
    )
    return sink.getvalue()


def from_parquet(data: bytes, schema: pa.Schema) -> pa.Table:
    return pq.read_table(pa.BufferReader(data)).cast(schema)


def writer_name() -> str:
    """Who writes (a manifest attribute): the Lambda function, or the host and process."""
    return os.environ.get("AWS_LAMBDA_FUNCTION_NAME") or f"pid-{os.getpid()}"
