"""`entries_from_table` as it was before its Arrow rewrite, kept verbatim: a loop over rows,
`subject_hash` per distinct value, a validated IndexEntry per entry. One change since: a row is
nobody's by the one no-subject rule (`canonical.is_no_subject`: null, empty or whitespace only),
where it was by a null alone.

The one reference both bench/index_bench.py (the build's second baseline, the items' digest) and
tests/unit/test_arrow_index_equality.py (randomized equality) compare the current code with.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lethe_shared.datasets.document import Dataset
from lethe_shared.index.arrow_entries import ObjectRef
from lethe_shared.index.subject_index import IndexEntry
from lethe_shared.subject_hashing.canonical import is_no_subject
from lethe_shared.subject_hashing.keys import subject_hash


def reference_subject_values(table: pa.Table, path: str, constants: Mapping[str, Any]) -> list[Any]:
    """The values of one subject column path (`customer.id`) for every row."""
    head, *rest = path.split(".")
    if head not in table.column_names:
        if head in constants and not rest:
            return [constants[head]] * table.num_rows
        return [None] * table.num_rows
    column: Any = table.column(head)
    for part in rest:
        if not pa.types.is_struct(column.type) or column.type.get_field_index(part) < 0:
            return [None] * table.num_rows
        column = pc.struct_field(column, part)
    return list(column.to_pylist())


def reference_entries(
    table: pa.Table,
    dataset: Dataset,
    ref: ObjectRef,
    *,
    key: bytes,
    coordinates: Sequence[int] | None = None,
) -> list[IndexEntry]:
    """`entries_from_table` as it was before its Arrow rewrite (per row, a validated model per
    entry), verbatim: the build's second baseline and the items' reference."""
    if coordinates is not None and len(coordinates) != table.num_rows:
        raise ValueError("one coordinate per row")
    columns = dataset.subject_columns
    per_column = [reference_subject_values(table, path, ref.constants) for path in columns]
    rows: dict[str, list[int]] = {}
    cache: dict[tuple[Any, ...], str] = {}  # keyed with types: True == 1 in Python
    for index, values in enumerate(zip(*per_column, strict=True)):
        if any(is_no_subject(v) for v in values):  # the one no-subject rule (was: v is None)
            continue
        typed = tuple((type(v), v) for v in values)
        digest = cache.get(typed)
        if digest is None:
            digest = subject_hash(key, columns, list(values))
            cache[typed] = digest
        rows.setdefault(digest, []).append(coordinates[index] if coordinates is not None else index)
    return [
        IndexEntry(
            subject_hash=digest,
            object_url=ref.object_url,
            dataset_id=dataset.dataset_id,
            zone=ref.zone,
            format=ref.format,
            rows=len(hints),
            row_hints=tuple(hints),
            version_id=ref.version_id,
            etag=ref.etag,
        )
        for digest, hints in sorted(rows.items())
    ]
