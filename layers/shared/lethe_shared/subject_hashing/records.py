"""The record path of subject hashing: the canonical subject texts of rows held as Python
values or JSON records (raw objects read again, rejected rows, quarantine lines, typed Parquet
columns), and their subject hashes.

Each subject column value is typed as the ingest job's validation types it (`values.subject_text`)
so a subject has the same text, and hash, in a validated lake row, in its raw object and in
quarantine. `SubjectRows` holds an object's rows as the index sees them (location and texts);
`subject_table` turns the texts into an Arrow table of canonical texts, which the Arrow path
(`arrow.row_subject_hashes`, `lethe_shared.index.arrow_entries.entry_batches`) hashes.

Field names: a subject column path (`customer.id`) is looked up at every level (the top-level
column, each struct field, in typed rows and in JSON records alike) by the one rule of
`lethe_shared.datasets.field_names`, which ingestion conforms files by: the exact name, else the
one case variant, never by position. Where a name is ambiguous (several case variants, none
exact), each candidate field is a *reading* of the row. A row whose readings give different
subjects is ambiguous (`SubjectRows.ambiguous`): the index records it under every reading (so
that an erasure of any of them reaches the object; `SubjectRows` then holds the row once per
reading, at the same coordinate), and the functions that decide which rows an erasure removes
(`subject_hashes_of_rows`, `column_subject_hashes`) raise AmbiguousFieldError instead of
guessing (`SubjectRows.unambiguous` leaves those rows out). Readings that agree are one subject.

Imports pyarrow: import this module only where it is installed.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lethe_shared.datasets.document import Dataset, DataType
from lethe_shared.datasets.field_names import AmbiguousFieldError, candidate_fields
from lethe_shared.subject_hashing.arrow import row_subject_hashes
from lethe_shared.subject_hashing.values import json_leaf_text, subject_text


@dataclass(frozen=True)
class SubjectRows:
    """Rows of an object as the index sees them: each row's location (line or row) and the
    canonical text of each subject column (None: null, the row is nobody's). An ambiguous row
    (module docstring) is here once per reading, its coordinate in `ambiguous`."""

    coordinates: list[int]
    texts: list[list[str | None]]  # one list per subject column, one item per row
    ambiguous: tuple[int, ...] = ()  # coordinates of the rows whose readings differ, ascending
    ambiguity: AmbiguousFieldError | None = field(default=None, compare=False)  # the first

    def sorted(self) -> SubjectRows:
        order = sorted(range(len(self.coordinates)), key=self.coordinates.__getitem__)
        return SubjectRows(
            [self.coordinates[i] for i in order],
            [[c[i] for i in order] for c in self.texts],
            tuple(sorted(self.ambiguous)),
            self.ambiguity,
        )

    def unambiguous(self) -> SubjectRows:
        """These rows without the ambiguous ones (whose subject cannot be told)."""
        if not self.ambiguous:
            return self
        skipped = set(self.ambiguous)
        keep = [i for i, c in enumerate(self.coordinates) if c not in skipped]
        return SubjectRows(
            [self.coordinates[i] for i in keep], [[c[i] for i in keep] for c in self.texts]
        )

    def require_unambiguous(self) -> None:
        """Raises AmbiguousFieldError when a row's subject cannot be told (never a guess)."""
        if self.ambiguous:
            raise self.ambiguity or AmbiguousFieldError("?", ())


def json_object(text: Any) -> dict[str, Any] | None:
    if isinstance(text, Mapping):
        return dict(text)
    if not isinstance(text, str):
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than Python parses
        return None
    return value if isinstance(value, dict) else None


_Seen = dict[str, AmbiguousFieldError]  # the ambiguous names met, by declared name


def _values_at(value: Any, parts: Sequence[str], from_json: bool, seen: _Seen) -> list[Any]:
    """Every value at `parts` below a value, one per reading of the names on the way (one
    unless a name is ambiguous): into mappings by the field-name rule, and into JSON text (a
    struct column held as text, which validation parses the same way); [None] for none."""
    item, as_json = value, from_json
    for at, part in enumerate(parts):  # exact names all the way: one reading
        if isinstance(item, str):
            item, as_json = json_object(item), True
        if not isinstance(item, Mapping):
            return [None]
        if part not in item:
            return _readings_at(item, parts[at:], as_json, seen)
        item = item[part]
    return [json_leaf_text(item) if as_json else item]


def _readings_at(value: Any, parts: Sequence[str], from_json: bool, seen: _Seen) -> list[Any]:
    """`_values_at` where a name is not there exactly."""
    found: list[tuple[Any, bool]] = [(value, from_json)]
    for part in parts:
        below: list[tuple[Any, bool]] = []
        for item, as_json in found:
            mapping, in_json = (
                (json_object(item), True) if isinstance(item, str) else (item, as_json)
            )
            if not isinstance(mapping, Mapping):
                below.append((None, in_json))
            elif part in mapping:  # the exact name wins
                below.append((mapping[part], in_json))
            else:
                names = candidate_fields(mapping, part)
                if len(names) > 1:
                    seen.setdefault(part, AmbiguousFieldError(part, names))
                below += [(mapping[n], in_json) for n in names] or [(None, in_json)]
        found = below
    return [json_leaf_text(v) if as_json else v for v, as_json in found]


def _readings(values: list[Any], declared: DataType | None) -> list[str | None]:
    """The distinct subject texts of a row's readings, in order."""
    if len(values) == 1:
        return [subject_text(values[0], declared)]
    return list(dict.fromkeys(subject_text(v, declared) for v in values))


@dataclass
class _PathTexts:
    """One subject column's texts: each row's first reading (a string array), and all of them
    for the rows that have several distinct readings (by row index)."""

    first: pa.Array
    more: dict[int, list[str | None]]


def _from_readings(readings: list[list[str | None]]) -> _PathTexts:
    first = pa.array([r[0] for r in readings], pa.string())
    return _PathTexts(first, {i: r for i, r in enumerate(readings) if len(r) > 1})


def _combined(coordinates: Sequence[int], paths: Sequence[_PathTexts], seen: _Seen) -> SubjectRows:
    """SubjectRows of the rows' readings: a row with one reading per column once, any other row
    once per distinct tuple of readings (ambiguous when there are several)."""
    columns = [p.first.to_pylist() for p in paths]
    several: set[int] = set().union(*(p.more for p in paths))
    if not several:
        return SubjectRows(list(coordinates), columns)
    located: list[int] = []
    texts: list[list[str | None]] = [[] for _ in paths]
    ambiguous: list[int] = []
    for i, coordinate in enumerate(coordinates):
        if i in several:
            options = [p.more.get(i) or [c[i]] for p, c in zip(paths, columns, strict=True)]
            tuples = list(dict.fromkeys(itertools.product(*options)))
        else:
            tuples = [tuple(c[i] for c in columns)]
        if len(tuples) > 1:
            ambiguous.append(coordinate)
        for reading in tuples:
            located.append(coordinate)
            for column, text in zip(texts, reading, strict=True):
                column.append(text)
    error = next(iter(seen.values()), None)
    return SubjectRows(located, texts, tuple(sorted(ambiguous)), error)


def record_subject_rows(
    dataset: Dataset, records: Sequence[Mapping[str, Any]], coordinates: Sequence[int]
) -> SubjectRows:
    """The subject texts of JSON records (a JSON Lines line, a rejected row's record, a
    quarantine line's record), one per coordinate, every name looked up by the rule."""
    seen: _Seen = {}
    paths = []
    for path in dataset.subject_columns:
        parts = path.split(".")
        declared = dataset.column_type(path)
        readings = [_readings(_values_at(r, parts, True, seen), declared) for r in records]
        paths.append(_from_readings(readings))
    return _combined(coordinates, paths, seen)


def distinct_safe(kind: pa.DataType) -> bool:
    """Types whose equal values (as Arrow hashes them) are equal Python values with equal
    texts: the texts of a column of them can be computed once per distinct value."""
    return bool(
        pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_integer(kind)
    )


def _flat_texts(chunk: pa.Array, declared: Any) -> pa.Array:
    """The subject text of each value of a column chunk (a subject column at the top level)."""
    textual = pa.types.is_string(chunk.type) or pa.types.is_large_string(chunk.type)
    if textual and (declared is None or declared.name == "string"):
        return chunk.cast(pa.string())  # subject_text of a str typed as a string: the str
    if distinct_safe(chunk.type):
        encoded = pc.dictionary_encode(chunk)  # nulls stay null indices: null texts
        distinct = encoded.dictionary.to_pylist()
        texts = pa.array([subject_text(v, declared) for v in distinct], pa.string())
        return pc.take(texts, encoded.indices)
    return pa.array([subject_text(v, declared) for v in chunk.to_pylist()], pa.string())


def _flat_column_texts(column: pa.ChunkedArray, declared: Any) -> pa.Array:
    chunks = [_flat_texts(c, declared) for c in column.chunks]
    return pa.concat_arrays(chunks) if chunks else pa.array([], pa.string())


def _column_texts(table: pa.Table, path: str, declared: Any, seen: _Seen) -> _PathTexts:
    """A subject column's texts in a table of typed columns, names looked up by the rule: a
    flat column of strings or integers converted once per distinct value (`subject_text`
    depends on the value alone), any other column (a nested path) row by row."""
    head, *rest = path.split(".")
    heads = candidate_fields(table.column_names, head)
    if len(heads) > 1:
        seen.setdefault(head, AmbiguousFieldError(head, heads))
    if not heads:
        return _PathTexts(pa.nulls(table.num_rows, pa.string()), {})
    if not rest:
        arrays = [_flat_column_texts(table.column(name), declared) for name in heads]
        if len(arrays) == 1:
            return _PathTexts(arrays[0], {})
        listed = [a.to_pylist() for a in arrays]
        return _from_readings([list(dict.fromkeys(r)) for r in zip(*listed, strict=True)])
    values = [table.column(name).to_pylist() for name in heads]
    readings = [
        _readings([v for column in row for v in _values_at(column, rest, False, seen)], declared)
        for row in zip(*values, strict=True)
    ]
    return _from_readings(readings)


def _typed_paths(table: pa.Table, dataset: Dataset, seen: _Seen) -> list[_PathTexts]:
    return [
        _column_texts(table, path, dataset.column_type(path), seen)
        for path in dataset.subject_columns
    ]


def typed_subject_rows(
    table: pa.Table, dataset: Dataset, coordinates: Sequence[int]
) -> SubjectRows:
    """The subject texts of rows held as typed columns (a CSV or Parquet object as the readers
    give it), one per coordinate, every name looked up by the rule."""
    seen: _Seen = {}
    return _combined(coordinates, _typed_paths(table, dataset, seen), seen)


def column_texts(table: pa.Table, dataset: Dataset) -> list[pa.Array]:
    """The canonical subject text of every row of `table` (typed columns, not JSON text), one
    string array per subject column, exactly as `typed_subject_rows` gives them, with Arrow
    where it can (`_flat_texts`). Raises AmbiguousFieldError when a row's subject cannot be
    told (module docstring)."""
    seen: _Seen = {}
    paths = _typed_paths(table, dataset, seen)
    if not any(p.more for p in paths):
        return [p.first for p in paths]  # one reading per row, or readings that agree
    rows = _combined(range(table.num_rows), paths, seen)
    rows.require_unambiguous()  # raises: a row with several readings has differing ones
    return [p.first for p in paths]


def column_subject_hashes(table: pa.Table, dataset: Dataset, *, key: bytes) -> pa.Array:
    """The subject hash of every row of `table` (typed columns, as `raw_subject_rows` reads a
    Parquet object's), in row order; null: nobody's. Equal to `subject_hashes_of_rows` of
    `raw_subject_rows` for the same rows, without a Python value per row. Raises
    AmbiguousFieldError when a row's subject cannot be told."""
    if table.num_rows == 0:
        return pa.array([], pa.string())
    return row_subject_hashes(
        _arrow_subject_table(dataset, column_texts(table, dataset)), dataset, {}, key=key
    )


def _subject_array(node: Any) -> Any:
    if isinstance(node, pa.Array):
        return node
    if isinstance(node, list):
        return pa.array(node, pa.string())
    children = [_subject_array(child) for child in node.values()]
    return pa.StructArray.from_arrays(children, names=list(node))


def _arrow_subject_table(dataset: Dataset, texts: Sequence[pa.Array]) -> pa.Table:
    """`subject_table` of string arrays."""
    tree: dict[str, Any] = {}
    for path, values in zip(dataset.subject_columns, texts, strict=True):
        *parents, leaf = path.split(".")
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = values
    return pa.table({name: _subject_array(node) for name, node in tree.items()})


def subject_table(dataset: Dataset, texts: Sequence[Sequence[str | None]]) -> Any:
    """The subject columns as an Arrow table of canonical texts, nested like the dataset's
    subject paths (`customer.id` is field `id` of struct column `customer`)."""
    tree: dict[str, Any] = {}
    for path, values in zip(dataset.subject_columns, texts, strict=True):
        *parents, leaf = path.split(".")
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = list(values)
    return pa.table({name: _subject_array(node) for name, node in tree.items()})


def subject_hashes_of_rows(rows: SubjectRows, dataset: Dataset, *, key: bytes) -> Any:
    """The subject hash of each of `rows` (an Arrow string array in `rows.coordinates` order;
    null: nobody's), as `entries_of_rows` hashes them: the erase job's matching. Raises
    AmbiguousFieldError when a row's subject cannot be told (`rows.unambiguous()` has the
    others)."""
    rows.require_unambiguous()
    if not rows.coordinates:
        return pa.array([], pa.string())
    return row_subject_hashes(subject_table(dataset, rows.texts), dataset, {}, key=key)
