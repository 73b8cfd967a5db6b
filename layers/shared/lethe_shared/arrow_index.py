"""Index entries of one object, from its rows as an Arrow table.

Used by everything that indexes: the ingest job (lake files, the raw object, quarantine), the
Spark index and reconcile jobs, and the small-object indexer Lambda (`index_lake_object`). One
implementation, so that a backfill gives exactly the index ingestion would. The erase job
matches rows with `row_subject_hashes`, the same computation row by row.

How (docs/INDEX.md, "How entries are computed"): each subject column is dictionary-encoded by
Arrow (one code per distinct value; several columns combine into one code per distinct tuple),
each distinct subject is hashed once with `lethe_shared.subjects`' canonical text and HMAC, rows
are sorted by their subject's hash with a stable Arrow sort (so each subject's rows stay in row
order), and one IndexEntry is built per distinct subject. Python work is per distinct subject,
never per row, except for column types Arrow cannot encode (structs, lists, unions, extension
types, decimal32/64), whose values go through Python as before.

Imports pyarrow, and only pyarrow's compute kernels (no numpy: the indexer Lambda's layer has
pyarrow 20 alone): import this module only where pyarrow is installed (Spark, the indexer
Lambda's layer, tests), never from lethe_shared's other modules.
"""

from __future__ import annotations

import gc
import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lethe_shared.catalog import Zone
from lethe_shared.datasets import Dataset, hive_partition_values, is_quarantine_key
from lethe_shared.index_maintenance import indexed_by_writer, replace_entries, settle_missing_key
from lethe_shared.registry import DatasetRegistry, require_dataset
from lethe_shared.s3 import NULL_VERSION, ObjectStore, s3_url
from lethe_shared.subjects import (
    KEY_MIN_BYTES,
    IndexEntry,
    SubjectIndex,
    canonical_text,
)


@dataclass(frozen=True)
class ObjectRef:
    """The object whose rows are indexed, and how its rows are located."""

    object_url: str
    zone: Zone
    format: str  # csv | jsonl | parquet
    version_id: str = NULL_VERSION
    etag: str = ""
    # Values of columns that are not in the rows, e.g. Hive partition values of a lake file.
    constants: Mapping[str, Any] = field(default_factory=dict)


# ------------------------------------------------------------------------ subject columns


@dataclass(frozen=True)
class _Coded:
    """One subject column: a code per row (null: the row's value is null) and the value of each
    code as `to_pylist` gives it; every code is used by some row."""

    codes: pa.Array  # int32
    values: list[Any]


def _no_values(rows: int) -> _Coded:
    return _Coded(pa.nulls(rows, pa.int32()), [])


def _coded_in_python(values: list[Any]) -> _Coded:
    """Codes for a column Arrow cannot hash (struct, list, union, extension types, decimal32/64):
    equal values of one Python type share a code (keyed with the type: True == 1 in Python),
    an unhashable value (never a valid subject id) gets a code of its own."""
    codes: list[int | None] = []
    distinct: list[Any] = []
    seen: dict[tuple[type, Any], int] = {}
    for value in values:
        if value is None:
            codes.append(None)
            continue
        try:
            code = seen.setdefault((type(value), value), len(distinct))
        except TypeError:
            code = len(distinct)
        if code == len(distinct):
            distinct.append(value)
        codes.append(code)
    return _Coded(pa.array(codes, pa.int32()), distinct)


def _coded(column: Any) -> _Coded:
    """Arrow's dictionary encoding of a column: distinct values in order of first appearance."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if array.null_count == len(array):  # the null type too, whose dictionary holds a null
        return _no_values(len(array))
    if pa.types.is_dictionary(array.type):  # its dictionary may repeat values or hold unused ones
        array = array.dictionary_decode()
    try:
        encoded = pc.dictionary_encode(array)
    except pa.ArrowException:  # no hash kernel for this type
        return _coded_in_python(array.to_pylist())
    return _Coded(encoded.indices, encoded.dictionary.to_pylist())


def _subject_column(table: pa.Table, path: str, constants: Mapping[str, Any]) -> _Coded:
    """The values of one subject column path (`customer.id`) for every row: a missing column or
    struct field is null, a null parent struct makes its fields null; a top-level column that
    is not in the table takes its value from `constants` (a partition value)."""
    rows = table.num_rows
    head, *rest = path.split(".")
    if head not in table.column_names:
        value = constants.get(head) if not rest else None
        if value is None:
            return _no_values(rows)
        return _Coded(pa.repeat(pa.scalar(0, pa.int32()), rows), [value])
    column: Any = table.column(head)
    for part in rest:
        if not pa.types.is_struct(column.type) or column.type.get_field_index(part) < 0:
            return _no_values(rows)
        column = pc.struct_field(column, part)
    return _coded(column)


def _combined(columns: Sequence[_Coded]) -> tuple[pa.Array, list[list[int]]]:
    """One code per row for the tuple of its subject column codes (null when one is null), and
    for each column the member code of every tuple; tuples in order of first appearance."""
    codes = columns[0].codes
    members: list[pa.Array] = [pa.array(range(len(columns[0].values)), pa.int64())]
    for column in columns[1:]:
        size = len(column.values)  # >= 1 (checked by the caller): keys stay below 2**62
        keys = pc.add(pc.multiply(codes.cast(pa.int64()), size), column.codes.cast(pa.int64()))
        encoded = pc.dictionary_encode(keys)
        codes = encoded.indices
        parents = pc.divide(encoded.dictionary, size)
        members = [pc.take(m, parents) for m in members]
        members.append(pc.subtract(encoded.dictionary, pc.multiply(parents, size)))
    return codes, [m.to_pylist() for m in members]


def _hmac_sha256(key: bytes) -> Callable[[Iterable[bytes]], list[str]]:
    """`subject_hash`'s HMAC-SHA256 (RFC 2104, hex) of messages under one key, with the key's
    inner and outer pads hashed once: a third of the cost of `hmac.new` per message. Raises
    ValueError for a short key, as `subject_hash` does."""
    if len(key) < KEY_MIN_BYTES:
        raise ValueError(f"the subject hash key must have at least {KEY_MIN_BYTES} bytes")
    block = hashlib.sha256().block_size
    padded = (hashlib.sha256(key).digest() if len(key) > block else key).ljust(block, b"\0")
    inner = hashlib.sha256(bytes(b ^ 0x36 for b in padded))
    outer = hashlib.sha256(bytes(b ^ 0x5C for b in padded))

    def digests(messages: Iterable[bytes]) -> list[str]:
        new_inner, new_outer = inner.copy, outer.copy
        found = []
        for message in messages:
            first = new_inner()
            first.update(message)
            second = new_outer()
            second.update(first.digest())
            found.append(second.hexdigest())
        return found

    return digests


def _text(value: Any) -> str:
    return value if type(value) is str else canonical_text(value)


def _texts(names: Sequence[str], columns: Sequence[_Coded], members: list[list[int]]) -> list[str]:
    """The canonical text of each distinct subject (`subjects.composite_text`): of each value
    of a single column, or of each tuple of `members` (`_combined`). Each distinct value of a
    column is converted once; a composite key is the JSON array of [column, text] pairs,
    composed from each part's JSON text (as json.dumps of the whole list)."""
    if len(columns) == 1:
        return [_text(v) for v in columns[0].values]
    quoted = [json.dumps(n, ensure_ascii=False) for n in names]
    parts: list[dict[int, str]] = [{} for _ in columns]
    texts = []
    for codes in zip(*members, strict=True):
        pairs = []
        for i, code in enumerate(codes):
            part = parts[i].get(code)
            if part is None:
                value = json.dumps(canonical_text(columns[i].values[code]), ensure_ascii=False)
                part = parts[i][code] = f"[{quoted[i]},{value}]"
            pairs.append(part)
        texts.append(f"[{','.join(pairs)}]")
    return texts


@dataclass(frozen=True)
class RowSubjects:
    """Each row's subject: `ids[row]` indexes `hashes` (null: a subject column is null, the row
    is nobody's). `hashes` are the distinct subject hashes, ascending."""

    ids: pa.Array  # int32, one per row
    hashes: list[str]


def row_subjects(
    table: pa.Table, dataset: Dataset, constants: Mapping[str, Any], *, key: bytes
) -> RowSubjects:
    """The subject of every row of `table` (see the module docstring): one hash per distinct
    subject, the same `subject_hash` gives."""
    rows = table.num_rows
    names = dataset.subject_columns
    columns = [_subject_column(table, path, constants) for path in names]
    if rows == 0 or any(not c.values for c in columns):
        return RowSubjects(_no_values(rows).codes, [])
    members: list[list[int]] = []  # a single column's codes are its values' indexes
    if len(columns) == 1:
        codes, subjects = columns[0].codes, len(columns[0].values)
    else:
        codes, members = _combined(columns)
        subjects = len(members[0])
    if not subjects:
        return RowSubjects(codes, [])
    digest = _hmac_sha256(key)  # before any text: a short key fails first, as in subject_hash
    digests = digest(t.encode("utf-8") for t in _texts(names, columns, members))
    return RowSubjects(*_ranked(codes, digests))


def _ranked(codes: pa.Array, digests: list[str]) -> tuple[pa.Array, list[str]]:
    """Each row's code as the rank of its subject's hash among the distinct hashes, and those
    hashes ascending."""
    found = pa.array(digests, pa.string())
    if pc.count_distinct(found).as_py() < len(digests):  # tuples of one text (a union column)
        hashes = sorted(set(digests))
        rank = {h: i for i, h in enumerate(hashes)}
        return pc.take(pa.array([rank[d] for d in digests], pa.int32()), codes), hashes
    order = pc.sort_indices(found)
    ranks = pc.sort_indices(order).cast(pa.int32())  # inverse permutation: places in `order`
    return pc.take(ranks, codes), pc.take(found, order).to_pylist()


def row_subject_hashes(
    table: pa.Table, dataset: Dataset, constants: Mapping[str, Any], *, key: bytes
) -> pa.Array:
    """The subject hash of every row (a string array; null: the row is nobody's): the erase
    job's matching, which must select exactly the rows the index gives a subject."""
    subjects = row_subjects(table, dataset, constants, key=key)
    return pc.take(pa.array(subjects.hashes, pa.string()), subjects.ids)


# ------------------------------------------------------------------------------ entries

_new = object.__new__
_set = object.__setattr__


@contextmanager
def _collection_deferred() -> Iterator[None]:
    """No cyclic garbage collection while entries are built: they all survive, and collections
    triggered by their allocations would only walk them (a third of the cost of building them).
    The collector's previous state is restored."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _entries(
    first: IndexEntry, hashes: Sequence[str], hints: tuple[int, ...], ends: list[int]
) -> list[IndexEntry]:
    """`first` (validated) and one entry per further hash, equal to a validated IndexEntry with
    `first`'s other fields (object, dataset, version, etag, updated_at): built as
    `model_construct` does, without its cost, from values valid by construction (a hex digest,
    a positive row count, int hints); tests/unit/test_arrow_index_equality.py checks it. The
    built entries share one `model_fields_set` (a frozen model never changes it; model_copy
    copies it before an update)."""
    fields = first.__dict__
    fields_set = set(first.model_fields_set)
    extra, private = first.__pydantic_extra__, first.__pydantic_private__
    entries = [first]
    append, new, set_ = entries.append, _new, _set
    start = ends[0]
    with _collection_deferred():
        for index in range(1, len(ends)):
            end = ends[index]
            entry = new(IndexEntry)
            set_(
                entry,
                "__dict__",
                {
                    **fields,
                    "subject_hash": hashes[index],
                    "rows": end - start,
                    "row_hints": hints[start:end],
                },
            )
            set_(entry, "__pydantic_fields_set__", fields_set)
            set_(entry, "__pydantic_extra__", extra)
            set_(entry, "__pydantic_private__", private)
            append(entry)
            start = end
    return entries


def entries_from_table(
    table: pa.Table,
    dataset: Dataset,
    ref: ObjectRef,
    *,
    key: bytes,
    coordinates: Sequence[int] | None = None,
) -> list[IndexEntry]:
    """One IndexEntry per distinct subject in `table`, with its row count and row hints (every
    row of the subject, ascending), ordered by subject hash.

    `coordinates` locate each row in the object (line numbers of a CSV or JSON Lines file);
    without them the row's index in the table is its hint (a Parquet row). Rows whose subject
    columns hold a null are nobody's: they are not indexed. The entries share one `updated_at`.
    """
    if coordinates is not None and len(coordinates) != table.num_rows:
        raise ValueError("one coordinate per row")
    subjects = row_subjects(table, dataset, ref.constants, key=key)
    if not subjects.hashes:
        return []
    ids = subjects.ids
    order = pc.sort_indices(ids).slice(0, len(ids) - ids.null_count)  # stable: rows ascending
    ends = pc.run_end_encode(pc.take(ids, order)).run_ends.to_pylist()
    located = order if coordinates is None else pc.take(pa.array(coordinates, pa.int64()), order)
    hints = tuple(located.to_pylist())  # a slice of a tuple is the entry's tuple
    first = IndexEntry(
        subject_hash=subjects.hashes[0],
        object_url=ref.object_url,
        dataset_id=dataset.dataset_id,
        zone=ref.zone,
        format=ref.format,
        rows=ends[0],
        row_hints=hints[: ends[0]],
        version_id=ref.version_id,
        etag=ref.etag,
    )
    return _entries(first, subjects.hashes, hints, ends)


def lake_object_entries(
    body: bytes, object_key: str, dataset: Dataset, ref: ObjectRef, *, key: bytes
) -> list[IndexEntry]:
    """Index entries of one lake Parquet file from its bytes; partition values from its Hive
    path. Used by the indexer Lambda and by the Spark jobs, so a file gets the same entries
    whoever indexes it."""
    if is_quarantine_key(object_key):
        raise ValueError(f"{object_key} is a quarantine file: the Spark index job reads those")
    table = pq.read_table(pa.BufferReader(body))
    constants = {**hive_partition_values(object_key, dataset), **ref.constants}
    return entries_from_table(table, dataset, replace(ref, constants=constants), key=key)


class LakeIndexAction(StrEnum):
    INDEXED = "indexed"
    SKIPPED = "skipped"  # written by ingestion, which indexed it
    REMOVED = "removed"  # the version is gone: its entries are flagged or removed


@dataclass(frozen=True)
class LakeIndexOutcome:
    object_url: str
    action: LakeIndexAction
    entries: int = 0  # entries the object has now
    rows: int = 0


def index_lake_object(
    dataset_id: str,
    bucket: str,
    key: str,
    version_id: str,
    *,
    objects: ObjectStore,
    registry: DatasetRegistry,
    index: SubjectIndex,
    hash_key: Callable[[], bytes],
) -> LakeIndexOutcome:
    """Make one small lake Parquet object's entries match its content (the indexer Lambda).
    Idempotent: a repeat gives the same entries. `hash_key` is called only when rows are read."""
    url = s3_url(bucket, key)
    head = objects.head(bucket, key, version_id)
    body = objects.read_bytes(bucket, key, head.version_id) if head is not None else None
    if head is None or body is None:  # gone meanwhile: the delete-marker rule decides
        settle_missing_key(index, url, objects.versions_of(bucket, key))
        return LakeIndexOutcome(url, LakeIndexAction.REMOVED)
    if indexed_by_writer(head):
        return LakeIndexOutcome(url, LakeIndexAction.SKIPPED)
    dataset = require_dataset(registry, dataset_id)
    ref = ObjectRef(url, Zone.LAKE, "parquet", head.version_id, head.etag)
    entries = lake_object_entries(body, key, dataset, ref, key=hash_key())
    replace_entries(index, objects, bucket, key, entries)
    rows = sum(e.rows for e in entries)
    return LakeIndexOutcome(url, LakeIndexAction.INDEXED, len(entries), rows)
