"""The subjects of Arrow tables: each row's canonical subject text, computed per column, and its
subject hash (the Arrow path of subject hashing).

Used by everything that hashes rows held as Arrow tables: the index entries
(`lethe_shared.index.arrow_entries`, for the ingest, index and reconcile jobs and the indexer
Lambda) and the erase job's matching (`row_subject_hashes`, the same computation row by row).

How (docs/INDEX.md, "How entries are computed"): `table_subjects` keeps what hashing needs and
not the table: a single string, integer or boolean subject column as each row's text (Arrow's
text of the value, as bytes), any other subject as a code per row (dictionary-encoded by Arrow;
several columns combine into one code per distinct tuple) and each code's canonical text
(`canonical.canonical_text`, `canonical.composite_text`). `arrow_digests.hash_subjects` then
hashes each distinct subject once. Python work is per distinct subject, never per row, except
for column types Arrow cannot encode (structs, lists, unions, extension types, decimal32/64),
whose values go through Python as before.

Imports pyarrow, and only pyarrow's compute kernels (no numpy: the indexer Lambda's layer has
pyarrow 20 alone): import this module only where pyarrow is installed (Spark, the indexer
Lambda's layer, tests), never from lethe_shared's modules that run without it.

Subject columns are found by the field-name rule (`lethe_shared.datasets.field_names`: the
exact name, else the one case variant, never by position), at the top level and in structs; a
name that is ambiguous in the table's schema raises AmbiguousFieldError (never a guess).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lethe_shared.datasets.document import Dataset
from lethe_shared.datasets.field_names import AmbiguousFieldError, find_field
from lethe_shared.subject_hashing.arrow_digests import NO_TEXTS, SubjectTexts, hash_subjects
from lethe_shared.subject_hashing.canonical import WHITESPACE, canonical_text, is_no_subject
from lethe_shared.subject_hashing.keys import check_key


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


def _blank(texts: Any) -> pa.Array | None:
    """Which of `texts` (strings) name nobody (`canonical.is_no_subject`: empty or whitespace
    only), or None when none does, or when they are not strings or not valid UTF-8 (Python
    fails on those later, as before)."""
    type_ = texts.type
    if pa.types.is_string_view(type_):
        texts = texts.cast(pa.large_string())
    elif not (pa.types.is_string(type_) or pa.types.is_large_string(type_)):
        return None
    try:
        blank = pc.equal(pc.binary_length(pc.utf8_ltrim(texts, characters=WHITESPACE)), 0)
    except pa.ArrowInvalid:
        return None
    return blank if pc.any(blank).as_py() else None


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
        if is_no_subject(value):  # null, or a text naming nobody
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
    blank = _blank(encoded.dictionary)
    if blank is not None:  # texts naming nobody: their rows become null, as a null's
        if pa.types.is_string_view(array.type):
            array = array.cast(pa.large_string())
        return _coded(pc.if_else(pc.take(blank, encoded.indices), None, array))
    return _Coded(encoded.indices, dictionary=encoded.dictionary)


def _subject_column(table: pa.Table, path: str, constants: Mapping[str, Any]) -> _Coded:
    """The values of one subject column path (`customer.id`) for every row: a missing column or
    struct field is null, a null parent struct makes its fields null; a top-level column that
    is not in the table takes its value from `constants` (a partition value)."""
    rows = table.num_rows
    head, *rest = path.split(".")
    if _field_index(table.column_names, head) is None:
        value = constants.get(head) if not rest else None
        if is_no_subject(value):
            return _no_values(rows)
        return _Coded(pa.repeat(pa.scalar(0, pa.int32()), rows), [value])
    column = _column_at(table, path)
    return _no_values(rows) if column is None else _coded(column)


def _field_index(names: Sequence[str], wanted: str) -> int | None:
    """The index of the field `wanted` names among `names`, by the field-name rule
    (lethe_shared.datasets.field_names: exact, else the one case variant); None when there is
    none. Raises AmbiguousFieldError (a name repeated exactly is ambiguous too)."""
    found = find_field(names, wanted)
    if found is None:
        return None
    if names.count(found) > 1:
        raise AmbiguousFieldError(wanted, [found] * names.count(found))
    return names.index(found)


def _column_at(table: pa.Table, path: str) -> Any:
    """The column (or nested struct field) at a subject column path, each name found by the
    field-name rule; None when the table has none. A null parent struct makes its fields
    null. Raises AmbiguousFieldError."""
    head, *rest = path.split(".")
    index = _field_index(table.column_names, head)
    if index is None:
        return None
    column: Any = table.column(index)
    for part in rest:
        if not pa.types.is_struct(column.type):
            return None
        child = _field_index([f.name for f in column.type], part)
        if child is None:
            return None
        column = pc.struct_field(column, [child])
    return column


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


def _row_texts(table: pa.Table, path: str) -> pa.Array | None:
    """Each row's canonical text, as Arrow computes it, for a single subject column whose Arrow
    text is the canonical text (a string or integer or boolean column or struct field, as in
    `_Coded.messages`); None for every other column (codes and distinct texts then)."""
    column = _column_at(table, path)
    if column is None:
        return None
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
    blank = _blank(array)
    if blank is not None:  # texts naming nobody: null, as a null's
        array = pc.if_else(blank, None, array)
    return array.view(_BINARY[type_.id])


def table_subjects(
    table: pa.Table, dataset: Dataset, constants: Mapping[str, Any], key: bytes
) -> SubjectTexts:
    """The codes and texts of `table`'s subjects (see the module docstring). Raises for a short
    key, only when the table has a subject, and before computing any text, as `subject_hash`."""
    rows = table.num_rows
    names = dataset.subject_columns
    texts_of_rows = _row_texts(table, names[0]) if len(names) == 1 and rows else None
    if texts_of_rows is not None:
        if texts_of_rows.null_count == rows:
            return SubjectTexts(_no_values(rows).codes, NO_TEXTS, True)
        check_key(key)
        return SubjectTexts(None, texts_of_rows, False)
    columns = [_subject_column(table, path, constants) for path in names]
    if rows == 0 or any(not len(c) for c in columns):
        return SubjectTexts(_no_values(rows).codes, NO_TEXTS, True)
    members: list[list[int]] = []  # a single column's codes are its values' indexes
    if len(columns) == 1:
        codes, subjects = columns[0].codes, len(columns[0])
    else:
        codes, members = _combined(columns)
        subjects = len(members[0])
    if not subjects:
        return SubjectTexts(codes, NO_TEXTS, True)
    check_key(key)
    messages = columns[0].messages() if len(columns) == 1 else None
    if messages is not None:  # distinct values of one Arrow type: distinct texts
        return SubjectTexts(codes, messages, True)
    texts = _texts(names, columns, members)
    encoded = pa.array([t.encode("utf-8") for t in texts], pa.large_binary())
    return SubjectTexts(codes, encoded, len(set(texts)) == len(texts))


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
    hashed = hash_subjects([table_subjects(table, dataset, constants, key)], key)  # one: ascending
    return RowSubjects(hashed.ids[0], list(hashed.hashes))


def row_subject_hashes(
    table: pa.Table, dataset: Dataset, constants: Mapping[str, Any], *, key: bytes
) -> pa.Array:
    """The subject hash of every row (a string array; null: the row is nobody's): the erase
    job's matching, which must select exactly the rows the index gives a subject."""
    subjects = row_subjects(table, dataset, constants, key=key)
    return pc.take(pa.array(subjects.hashes, pa.string()), subjects.ids)
