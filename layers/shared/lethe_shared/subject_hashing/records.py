"""The record path of subject hashing: the canonical subject texts of rows held as Python
values or JSON records (raw objects read again, rejected rows, quarantine lines, typed Parquet
columns), and their subject hashes.

Each subject column value is typed as the ingest job's validation types it (`values.subject_text`)
so a subject has the same text, and hash, in a validated lake row, in its raw object and in
quarantine. `SubjectRows` holds an object's rows as the index sees them (location and texts);
`subject_table` turns the texts into an Arrow table of canonical texts, which the Arrow path
(`arrow.row_subject_hashes`, `lethe_shared.index.arrow_entries.entry_batches`) hashes.

Imports pyarrow: import this module only where it is installed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lethe_shared.datasets.document import Dataset
from lethe_shared.subject_hashing.arrow import row_subject_hashes
from lethe_shared.subject_hashing.values import json_leaf_text, subject_text


@dataclass(frozen=True)
class SubjectRows:
    """Rows of an object as the index sees them: each row's location (line or row) and the
    canonical text of each subject column (None: null, the row is nobody's)."""

    coordinates: list[int]
    texts: list[list[str | None]]  # one list per subject column, one item per row

    def sorted(self) -> SubjectRows:
        order = sorted(range(len(self.coordinates)), key=self.coordinates.__getitem__)
        return SubjectRows(
            [self.coordinates[i] for i in order], [[c[i] for i in order] for c in self.texts]
        )


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


def _walk(value: Any, parts: Sequence[str], from_json: bool) -> Any:
    """The value at `parts` below a column value: into dicts, and into JSON text (a struct
    column held as text, which validation parses the same way)."""
    for part in parts:
        if isinstance(value, str):
            value, from_json = json_object(value), True
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return json_leaf_text(value) if from_json else value


def record_texts(
    dataset: Dataset, heads: Mapping[str, Sequence[Any]], count: int, from_json: bool
) -> list[list[str | None]]:
    """Canonical subject texts per subject column, from the rows' top-level column values."""
    columns: list[list[str | None]] = []
    for path in dataset.subject_columns:
        head, *rest = path.split(".")
        declared = dataset.column_type(path)
        values = heads.get(head) or [None] * count
        columns.append([subject_text(_walk(v, rest, from_json), declared) for v in values])
    return columns


def distinct_safe(kind: pa.DataType) -> bool:
    """Types whose equal values (as Arrow hashes them) are equal Python values with equal
    texts: the texts of a column of them can be computed once per distinct value."""
    return bool(
        pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_integer(kind)
    )


def _chunk_texts(chunk: pa.Array, rest: Sequence[str], declared: Any) -> pa.Array:
    textual = pa.types.is_string(chunk.type) or pa.types.is_large_string(chunk.type)
    if not rest and textual and (declared is None or declared.name == "string"):
        return chunk.cast(pa.string())  # subject_text of a str typed as a string: the str
    if not rest and distinct_safe(chunk.type):
        encoded = pc.dictionary_encode(chunk)  # nulls stay null indices: null texts
        distinct = encoded.dictionary.to_pylist()
        texts = pa.array([subject_text(v, declared) for v in distinct], pa.string())
        return pc.take(texts, encoded.indices)
    return pa.array(
        [subject_text(_walk(v, rest, False), declared) for v in chunk.to_pylist()], pa.string()
    )


def column_texts(table: pa.Table, dataset: Dataset) -> list[pa.Array]:
    """The canonical subject text of every row of `table` (typed columns, not JSON text), one
    string array per subject column, exactly as `_texts` gives them row by row: a flat column of
    strings or integers is converted once per distinct value (`subject_text` depends on the
    value alone), any other column row by row."""
    columns: list[pa.Array] = []
    for path in dataset.subject_columns:
        head, *rest = path.split(".")
        declared = dataset.column_type(path)
        if head not in table.column_names:
            columns.append(pa.nulls(table.num_rows, pa.string()))
            continue
        chunks = [_chunk_texts(c, rest, declared) for c in table.column(head).chunks]
        columns.append(pa.concat_arrays(chunks) if chunks else pa.array([], pa.string()))
    return columns


def column_subject_hashes(table: pa.Table, dataset: Dataset, *, key: bytes) -> pa.Array:
    """The subject hash of every row of `table` (typed columns, as `raw_subject_rows` reads a
    Parquet object's), in row order; null: nobody's. Equal to `subject_hashes_of_rows` of
    `raw_subject_rows` for the same rows, without a Python value per row."""
    if table.num_rows == 0:
        return pa.array([], pa.string())
    return row_subject_hashes(
        _arrow_subject_table(dataset, column_texts(table, dataset)), dataset, {}, key=key
    )


def record_heads(dataset: Dataset, records: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
    heads = {path.split(".")[0] for path in dataset.subject_columns}
    return {h: [r.get(h) for r in records] for h in heads}


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
    null: nobody's), as `entries_of_rows` hashes them: the erase job's matching."""
    if not rows.coordinates:
        return pa.array([], pa.string())
    return row_subject_hashes(subject_table(dataset, rows.texts), dataset, {}, key=key)
