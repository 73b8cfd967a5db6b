"""Index entries of objects, from their rows as Arrow tables.

Used by everything that indexes: the ingest job (lake files, the raw object, quarantine), the
Spark index and reconcile jobs, and the small-object indexer Lambda (`index_lake_object`). One
implementation, so that a backfill gives exactly the index ingestion would. The erase job
matches rows with `row_subject_hashes`, the same computation row by row.

How (docs/INDEX.md, "How entries are computed"): `object_subjects` keeps what an object's
entries need and not the table: a single string, integer or boolean subject column as each
row's text (Arrow's text of the value, as bytes), any other subject as a code per row
(dictionary-encoded by Arrow; several columns combine into one code per distinct tuple) and
each code's canonical text (`lethe_shared.index.subject_index`). `entry_batches` computes the
entries of
a group of objects (a Spark task's): their texts are concatenated and dictionary-encoded by
Arrow, each distinct subject of the group is hashed once (HMAC-SHA256, the key's pads hashed
once), and each object's rows are sorted by their subject's digest (its first 8 bytes as an
integer) with a stable Arrow sort (so each subject's rows stay in row order). Each object gets
the entries as columns (`subjects.EntryBatch`: the hashes, the row hints cut by ends, the
object's fields validated once), from which the index writer builds DynamoDB items directly,
the same alone (`entry_batch`) or in any group; `entries_from_table` gives them as IndexEntry
models. Python work is per distinct subject, never per row, except for column types Arrow
cannot encode (structs, lists, unions, extension types, decimal32/64), whose values go through
Python as before.

Imports pyarrow, and only pyarrow's compute kernels (no numpy: the indexer Lambda's layer has
pyarrow 20 alone): import this module only where pyarrow is installed (Spark, the indexer
Lambda's layer, tests), never from lethe_shared's other modules.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from operator import itemgetter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lethe_shared.aws.s3 import NULL_VERSION, ObjectStore, s3_url
from lethe_shared.catalog.object_catalog import Zone
from lethe_shared.datasets.document import Dataset, hive_partition_values, is_quarantine_key
from lethe_shared.datasets.registry import DatasetRegistry, require_dataset
from lethe_shared.index.maintenance import indexed_by_writer, replace_entries, settle_missing_key
from lethe_shared.index.subject_index import (
    KEY_MIN_BYTES,
    EntryBatch,
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


class _Coded:
    """One subject column: a code per row (null: the row's value is null) and the distinct
    values, every code used by some row: as an Arrow array (`dictionary`) when Arrow encoded
    the column, else as Python values."""

    __slots__ = ("_values", "codes", "dictionary")

    def __init__(
        self, codes: pa.Array, values: list[Any] | None = None, dictionary: Any = None
    ) -> None:
        self.codes = codes  # int32
        self.dictionary = dictionary
        self._values = values

    @property
    def values(self) -> list[Any]:
        """The distinct values as `to_pylist` gives them, in code order."""
        if self._values is None:
            self._values = self.dictionary.to_pylist() if self.dictionary is not None else []
        return self._values

    def __len__(self) -> int:
        return len(self.dictionary) if self.dictionary is not None else len(self.values)

    def messages(self) -> pa.Array | None:
        """The canonical text of each value as UTF-8 bytes (a binary array), computed by Arrow
        for the types whose Arrow text is the canonical text (strings as they are, integers in
        decimal digits, booleans `true`/`false`): distinct values, distinct texts. None for
        other types (Python computes their texts) and for strings that are not valid UTF-8
        (Python fails on them as before)."""
        dictionary = self.dictionary
        if dictionary is None:
            return None
        type_ = dictionary.type
        if pa.types.is_integer(type_) or pa.types.is_boolean(type_):
            return dictionary.cast(pa.string()).view(pa.binary())
        if not (
            pa.types.is_string(type_)
            or pa.types.is_large_string(type_)
            or pa.types.is_string_view(type_)
        ):
            return None
        try:
            dictionary.validate(full=True)  # UTF-8
        except pa.ArrowInvalid:
            return None
        return dictionary.view(_BINARY[type_.id])


# The binary type of the same layout as each string type: a view, without a copy.
_BINARY = {
    pa.string().id: pa.binary(),
    pa.large_string().id: pa.large_binary(),
    pa.string_view().id: pa.binary_view(),
}


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
    array = column
    if isinstance(column, pa.ChunkedArray):
        array = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    if array.null_count == len(array):  # the null type too, whose dictionary holds a null
        return _no_values(len(array))
    if pa.types.is_dictionary(array.type):  # its dictionary may repeat values or hold unused ones
        array = array.dictionary_decode()
    try:
        encoded = pc.dictionary_encode(array)
    except pa.ArrowException:  # no hash kernel for this type
        return _coded_in_python(array.to_pylist())
    return _Coded(encoded.indices, dictionary=encoded.dictionary)


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
    members: list[pa.Array] = [pa.array(range(len(columns[0])), pa.int64())]
    for column in columns[1:]:
        size = len(column)  # >= 1 (checked by the caller): keys stay below 2**62
        keys = pc.add(pc.multiply(codes.cast(pa.int64()), size), column.codes.cast(pa.int64()))
        encoded = pc.dictionary_encode(keys)
        codes = encoded.indices
        parents = pc.divide(encoded.dictionary, size)
        members = [pc.take(m, parents) for m in members]
        members.append(pc.subtract(encoded.dictionary, pc.multiply(parents, size)))
    return codes, [m.to_pylist() for m in members]


_SHA256_BLOCK = 64  # bytes (hashlib.sha256().block_size)
_IPAD = bytes(b ^ 0x36 for b in range(256))  # RFC 2104's pads, as translation tables
_OPAD = bytes(b ^ 0x5C for b in range(256))


def _hmac_sha256(key: bytes) -> Callable[[Iterable[bytes]], list[bytes]]:
    """`subject_hash`'s HMAC-SHA256 (RFC 2104; the 32-byte digests, `subject_hash` is their
    hex) of messages under one key, with the key's inner and outer pads hashed once: a third of
    the cost of `hmac.new` per message. Raises ValueError for a short key, as `subject_hash`
    does."""
    if len(key) < KEY_MIN_BYTES:
        raise ValueError(f"the subject hash key must have at least {KEY_MIN_BYTES} bytes")
    block = _SHA256_BLOCK
    padded = (hashlib.sha256(key).digest() if len(key) > block else key).ljust(block, b"\0")
    inner = hashlib.sha256(padded.translate(_IPAD))
    outer = hashlib.sha256(padded.translate(_OPAD))

    def digests(messages: Iterable[bytes]) -> list[bytes]:
        new_inner, new_outer = inner.copy, outer.copy
        found: list[bytes] = []
        append = found.append
        for message in messages:
            first = new_inner()
            first.update(message)
            second = new_outer()
            second.update(first.digest())
            append(second.digest())
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
class _Subjects:
    """One object's subjects before hashing: the canonical text of each subject as UTF-8 bytes
    (a binary array) and a code per row (null: the row is nobody's) that names its text; or,
    without codes, each row's text (null: nobody's). Two codes share a text only when
    `distinct` is false (an integer and a string `1` in one union column): one subject."""

    codes: pa.Array | None
    texts: pa.Array
    distinct: bool

    @property
    def rows(self) -> int:
        return len(self.texts if self.codes is None else self.codes)


def _row_texts(table: pa.Table, path: str) -> pa.Array | None:
    """Each row's canonical text, as Arrow computes it, for a single subject column whose Arrow
    text is the canonical text (a string or integer or boolean column or struct field, as in
    `_Coded.messages`); None for every other column (codes and distinct texts then)."""
    head, *rest = path.split(".")
    if head not in table.column_names:
        return None
    column: Any = table.column(head)
    for part in rest:
        if not pa.types.is_struct(column.type) or column.type.get_field_index(part) < 0:
            return None
        column = pc.struct_field(column, part)
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    type_ = array.type
    if pa.types.is_integer(type_) or pa.types.is_boolean(type_):
        return array.cast(pa.string()).view(pa.binary())
    if not (pa.types.is_string(type_) or pa.types.is_large_string(type_)):
        return None
    try:
        array.validate(full=True)  # UTF-8
    except pa.ArrowInvalid:
        return None
    return array.view(_BINARY[type_.id])


def _check_key(key: bytes) -> None:
    if len(key) < KEY_MIN_BYTES:
        raise ValueError(f"the subject hash key must have at least {KEY_MIN_BYTES} bytes")


def _subjects(
    table: pa.Table, dataset: Dataset, constants: Mapping[str, Any], key: bytes
) -> _Subjects:
    """The codes and texts of `table`'s subjects (see the module docstring). Raises for a short
    key, only when the table has a subject, and before computing any text, as `subject_hash`."""
    rows = table.num_rows
    names = dataset.subject_columns
    texts_of_rows = _row_texts(table, names[0]) if len(names) == 1 and rows else None
    if texts_of_rows is not None:
        if texts_of_rows.null_count == rows:
            return _Subjects(_no_values(rows).codes, _NO_TEXTS, True)
        _check_key(key)
        return _Subjects(None, texts_of_rows, False)
    columns = [_subject_column(table, path, constants) for path in names]
    if rows == 0 or any(not len(c) for c in columns):
        return _Subjects(_no_values(rows).codes, _NO_TEXTS, True)
    members: list[list[int]] = []  # a single column's codes are its values' indexes
    if len(columns) == 1:
        codes, subjects = columns[0].codes, len(columns[0])
    else:
        codes, members = _combined(columns)
        subjects = len(members[0])
    if not subjects:
        return _Subjects(codes, _NO_TEXTS, True)
    _check_key(key)
    messages = columns[0].messages() if len(columns) == 1 else None
    if messages is not None:  # distinct values of one Arrow type: distinct texts
        return _Subjects(codes, messages, True)
    texts = _texts(names, columns, members)
    encoded = pa.array([t.encode("utf-8") for t in texts], pa.large_binary())
    return _Subjects(codes, encoded, len(set(texts)) == len(texts))


_NO_TEXTS = pa.array([], pa.binary())
_DIGEST = pa.binary(32)
_HEX_OFFSETS: list[pa.Array] = [pa.array([0], pa.int32())]  # 0, 64, 128, ...: grown on demand


def _hex_offsets(count: int) -> pa.Buffer:
    """The offsets of `count` strings of 64 characters each, end to end (an int32 buffer)."""
    if len(_HEX_OFFSETS[0]) <= count:
        size = max(count + 1, 2 * len(_HEX_OFFSETS[0]))
        _HEX_OFFSETS[0] = pa.array(range(0, 64 * size, 64), pa.int32())
    return _HEX_OFFSETS[0].buffers()[1]


# Byte indexes that turn each 32-byte digest's first 8 bytes into a little-endian uint64 whose
# numeric order is the digests' (big-endian) order: 7, 6, ..., 0, 39, 38, ..., 32, ...
_PREFIX_BYTES: list[pa.Array] = [pa.array([], pa.int32())]


def _joined(texts: Sequence[pa.Array]) -> pa.Array:
    """The texts of several objects as one array (large binary unless all fit in binary)."""
    if len(texts) == 1:
        return texts[0]
    if all(t.type == pa.binary() for t in texts) and sum(t.nbytes for t in texts) < 2**30:
        return pa.concat_arrays(texts)
    return pa.concat_arrays([t.cast(pa.large_binary()) for t in texts])


@dataclass(frozen=True)
class _Hashed:
    """A group's subjects hashed: `hashes` (hex) of the group's distinct subjects, and for each
    object each row's subject (`ids`, an index into `hashes`; null: nobody's) and its sort key
    (`row_keys`: an unsigned integer per subject, ascending as the hashes are). `ascending`:
    one object holds every subject, `hashes` are ascending and each row's key is its id."""

    hashes: Sequence[str]
    ids: list[pa.Array]
    row_keys: list[pa.Array]
    ascending: bool


def _prefixes(found: pa.FixedSizeBinaryArray) -> pa.Array | None:
    """An unsigned integer per digest, its first 8 bytes read big-endian: their order is the
    digests' (their hex's) where they differ, and Arrow sorts integers several times faster
    than 32-byte values. None on a big-endian machine."""
    if sys.byteorder != "little":
        return None
    count = len(found)
    if len(_PREFIX_BYTES[0]) < 8 * count:
        size = max(count, 2 * len(_PREFIX_BYTES[0]) // 8)
        indexes = [32 * (i >> 3) + 7 - (i & 7) for i in range(8 * size)]
        _PREFIX_BYTES[0] = pa.array(indexes, pa.int32())
    raw = pa.Array.from_buffers(pa.uint8(), 32 * count, [None, found.buffers()[1]])
    prefixes = pc.take(raw, _PREFIX_BYTES[0].slice(0, 8 * count))
    return pa.Array.from_buffers(pa.uint64(), count, [None, prefixes.buffers()[1]])


def _ascending(found: pa.FixedSizeBinaryArray, prefixes: pa.Array | None) -> pa.Array:
    """The indexes that sort distinct digests ascending: by their prefixes unless two share
    one, then by the whole digests."""
    if prefixes is not None:
        order = pc.sort_indices(prefixes)
        ordered = pc.take(prefixes, order)
        count = len(ordered)
        if count < 2 or not pc.any(pc.equal(ordered.slice(1), ordered.slice(0, count - 1))).as_py():
            return order
    return pc.sort_indices(found)


def _hex(found: pa.FixedSizeBinaryArray) -> list[str]:
    """The hex of each digest, encoded at once."""
    count = len(found)
    start = 32 * found.offset
    data = memoryview(found.buffers()[1])[start : start + 32 * count].hex().encode()
    hexed = pa.Array.from_buffers(
        pa.string(), count, [None, _hex_offsets(count), pa.py_buffer(data)]
    )
    return hexed.to_pylist()  # type: ignore[no-any-return]


def _hashed(objects: Sequence[_Subjects], key: bytes) -> _Hashed:
    """Each distinct text of the group hashed once, however many objects hold it: the texts
    of all objects are concatenated and dictionary-encoded by Arrow (equal texts, one
    subject), the distinct ones hashed and hex-encoded at once, and each object's rows mapped
    to them with Arrow takes. Rows are keyed by their digest's first 8 bytes (`_prefixes`;
    their rank when two subjects share those); for a single object (`entry_batch`), by their
    subject's rank, a small range that Arrow sorts by counting."""
    held = [i for i, o in enumerate(objects) if len(o.texts)]
    nobody = [pa.nulls(o.rows, pa.int32()) for o in objects]
    if not held:
        return _Hashed([], nobody, nobody, True)
    alone = objects[held[0]]
    if len(held) == 1 and alone.codes is not None and alone.distinct:
        distinct, ids = alone.texts, None
    else:
        encoded = pc.dictionary_encode(_joined([objects[i].texts for i in held]))
        distinct, ids = encoded.dictionary, encoded.indices
    digests = _hmac_sha256(key)(distinct.to_pylist())
    count = len(digests)
    found = pa.FixedSizeBinaryArray.from_buffers(
        _DIGEST, count, [None, pa.py_buffer(b"".join(digests))]
    )
    prefixes = _prefixes(found)
    if len(held) == 1:
        order = _ascending(found, prefixes)
        keys = pc.sort_indices(order)  # the inverse permutation: each subject's rank
        hashes = _hex(pc.take(found, order))
    else:
        keys = prefixes
        if keys is None or len(pc.unique(keys)) < count:
            keys = pc.sort_indices(_ascending(found, None))
        hashes = _hex(found)
    rows, row_keys = list(nobody), list(nobody)
    text_keys = None if ids is None else pc.take(keys, ids)  # of every text of the group
    start = 0
    for i in held:
        found_i = objects[i]
        size = len(found_i.texts)
        if ids is None or text_keys is None:
            rows[i], row_keys[i] = found_i.codes, pc.take(keys, found_i.codes)
        elif found_i.codes is None:  # a text per row
            rows[i], row_keys[i] = ids.slice(start, size), text_keys.slice(start, size)
        else:
            rows[i] = pc.take(ids.slice(start, size), found_i.codes)
            row_keys[i] = pc.take(text_keys.slice(start, size), found_i.codes)
        start += size
    if len(held) == 1:
        rows[held[0]] = row_keys[held[0]]
    return _Hashed(hashes, rows, row_keys, len(held) == 1)


@dataclass(frozen=True)
class RowSubjects:
    """Each row's subject: `ids[row]` indexes `hashes` (null: a subject column is null, the row
    is nobody's). `hashes` are the distinct subject hashes, ascending."""

    ids: pa.Array  # integers, one per row
    hashes: list[str]


def row_subjects(
    table: pa.Table, dataset: Dataset, constants: Mapping[str, Any], *, key: bytes
) -> RowSubjects:
    """The subject of every row of `table` (see the module docstring): one hash per distinct
    subject, the same `subject_hash` gives."""
    hashed = _hashed([_subjects(table, dataset, constants, key)], key)  # one: ascending
    return RowSubjects(hashed.ids[0], list(hashed.hashes))


def row_subject_hashes(
    table: pa.Table, dataset: Dataset, constants: Mapping[str, Any], *, key: bytes
) -> pa.Array:
    """The subject hash of every row (a string array; null: the row is nobody's): the erase
    job's matching, which must select exactly the rows the index gives a subject."""
    subjects = row_subjects(table, dataset, constants, key=key)
    return pc.take(pa.array(subjects.hashes, pa.string()), subjects.ids)


# ------------------------------------------------------------------------------ entries


@dataclass(frozen=True)
class ObjectSubjects:
    """An object's rows as the index needs them (`object_subjects`): each row's subject code,
    the texts of the codes and each row's location; not the table, so that the objects of a
    group hold their subject columns only until `entry_batches` hashes them together."""

    dataset: Dataset
    ref: ObjectRef
    subjects: _Subjects
    coordinates: pa.Array | None  # int64, one per row; None: a row's index is its hint

    @property
    def rows(self) -> int:
        return self.subjects.rows


def object_subjects(
    table: pa.Table,
    dataset: Dataset,
    ref: ObjectRef,
    *,
    key: bytes,
    coordinates: Sequence[int] | None = None,
) -> ObjectSubjects:
    """The subjects of `table`'s rows, to be hashed by `entry_batches` (with `entry_batch`'s
    arguments and failures: a short key fails here when the table has a subject)."""
    if coordinates is not None and len(coordinates) != table.num_rows:
        raise ValueError("one coordinate per row")
    located = None if coordinates is None else pa.array(coordinates, pa.int64())
    return ObjectSubjects(dataset, ref, _subjects(table, dataset, ref.constants, key), located)


@dataclass(frozen=True)
class _Columns:
    """An object's entries as columns: hashes ascending, the row hints of each entry one after
    the other, cut by `ends`."""

    hashes: Sequence[str]
    ends: list[int]
    hints: list[int]


def _entry_columns(
    found: ObjectSubjects, ids: pa.Array, keys: pa.Array, hashed: _Hashed
) -> _Columns:
    """The entries of one object from its rows' subjects (`_Hashed`): rows sorted by their
    subject's key with Arrow's stable sort (each subject's rows stay in row order), cut into
    runs of one subject."""
    if keys.null_count == len(keys):
        return _Columns([], [], [])
    order = pc.sort_indices(keys).slice(0, len(keys) - keys.null_count)  # stable: rows ascending
    runs = pc.run_end_encode(pc.take(ids, order))
    ends = runs.run_ends.to_pylist()
    hashes = hashed.hashes
    own = hashes if hashed.ascending else _picked(hashes, runs.values.to_pylist())
    located = order if found.coordinates is None else pc.take(found.coordinates, order)
    return _Columns(own, ends, located.to_pylist())


def _picked(hashes: Sequence[str], ranks: list[int]) -> Sequence[str]:
    """`[hashes[r] for r in ranks]`, without a Python loop."""
    return itemgetter(*ranks)(hashes) if len(ranks) > 1 else [hashes[r] for r in ranks]


def _batch(dataset: Dataset, ref: ObjectRef, columns: _Columns) -> EntryBatch:
    return EntryBatch(
        object_url=ref.object_url,
        dataset_id=dataset.dataset_id,
        zone=ref.zone,
        format=ref.format,
        version_id=ref.version_id,
        etag=ref.etag,
        subject_hashes=columns.hashes,
        ends=columns.ends,
        row_hints=columns.hints,
    )


def no_entries(dataset: Dataset, ref: ObjectRef) -> EntryBatch:
    """The batch of an object that holds no subject's rows (an unreadable raw file)."""
    return _batch(dataset, ref, _Columns([], [], []))


def _columns_of(objects: Sequence[ObjectSubjects], key: bytes) -> list[_Columns]:
    hashed = _hashed([o.subjects for o in objects], key)
    parts = zip(objects, hashed.ids, hashed.row_keys, strict=True)
    return [_entry_columns(o, i, k, hashed) for o, i, k in parts]


def entry_batches(objects: Sequence[ObjectSubjects], *, key: bytes) -> list[EntryBatch]:
    """The entries of several objects (`object_subjects`), one batch each in their order, each
    exactly `entry_batch`'s for that object: hashing once each distinct subject of the group
    (a subject in several objects has one entry in each, with the same hash). What the index
    job uses for the objects of one Spark task."""
    columns = _columns_of(objects, key)
    return [_batch(o.dataset, o.ref, c) for o, c in zip(objects, columns, strict=True)]


def entry_batch(
    table: pa.Table,
    dataset: Dataset,
    ref: ObjectRef,
    *,
    key: bytes,
    coordinates: Sequence[int] | None = None,
) -> EntryBatch:
    """The entries of `table` as columns (`subjects.EntryBatch`): one per distinct subject,
    ordered by subject hash, with its row hints (every row of the subject, ascending); the
    object's fields validated once. What the index writers use: `SubjectIndex.replace_object`
    writes a batch's items without an IndexEntry per entry.

    `coordinates` locate each row in the object (line numbers of a CSV or JSON Lines file);
    without them the row's index in the table is its hint (a Parquet row). Rows whose subject
    columns hold a null are nobody's: they are not indexed. The entries share one `updated_at`.
    """
    found = object_subjects(table, dataset, ref, key=key, coordinates=coordinates)
    return entry_batches([found], key=key)[0]


def entries_from_table(
    table: pa.Table,
    dataset: Dataset,
    ref: ObjectRef,
    *,
    key: bytes,
    coordinates: Sequence[int] | None = None,
) -> list[IndexEntry]:
    """`entry_batch`'s entries as IndexEntry models (one per distinct subject in `table`, with
    its row count and row hints, ordered by subject hash; one `updated_at`)."""
    found = object_subjects(table, dataset, ref, key=key, coordinates=coordinates)
    (columns,) = _columns_of([found], key)
    if not columns.hashes:
        return []
    return _batch(dataset, ref, columns).entries()


def lake_object_subjects(
    body: bytes, object_key: str, dataset: Dataset, ref: ObjectRef, *, key: bytes
) -> ObjectSubjects:
    """The subjects of one lake Parquet file from its bytes (`object_subjects`), partition
    values from its Hive path: `lake_object_batch` for a group of objects (`entry_batches`)."""
    if is_quarantine_key(object_key):
        raise ValueError(f"{object_key} is a quarantine file: the Spark index job reads those")
    table = pq.read_table(pa.BufferReader(body))
    constants = {**hive_partition_values(object_key, dataset), **ref.constants}
    return object_subjects(table, dataset, replace(ref, constants=constants), key=key)


def lake_object_batch(
    body: bytes, object_key: str, dataset: Dataset, ref: ObjectRef, *, key: bytes
) -> EntryBatch:
    """Index entries of one lake Parquet file from its bytes, as columns; partition values from
    its Hive path. Used by the indexer Lambda and by the Spark jobs, so a file gets the same
    entries whoever indexes it."""
    found = lake_object_subjects(body, object_key, dataset, ref, key=key)
    return entry_batches([found], key=key)[0]


def lake_object_entries(
    body: bytes, object_key: str, dataset: Dataset, ref: ObjectRef, *, key: bytes
) -> list[IndexEntry]:
    """`lake_object_batch`'s entries as IndexEntry models."""
    return lake_object_batch(body, object_key, dataset, ref, key=key).entries()


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
    batch = lake_object_batch(body, key, dataset, ref, key=hash_key())
    replace_entries(index, objects, bucket, key, batch)  # written from its columns
    return LakeIndexOutcome(url, LakeIndexAction.INDEXED, len(batch), batch.total_rows)
