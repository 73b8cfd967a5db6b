"""Index entries of one object, from its rows as an Arrow table.

Used by everything that indexes: the ingest job (lake files, the raw object, quarantine), the
Spark index and reconcile jobs, and the small-object indexer Lambda (`index_lake_object`). One
implementation, so that a backfill gives exactly the index ingestion would.

Imports pyarrow: import this module only where pyarrow is installed (Spark, the indexer Lambda's
layer, tests), never from lethe_shared's other modules.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
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
from lethe_shared.subjects import IndexEntry, SubjectIndex, subject_hash


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


def subject_values(table: pa.Table, path: str, constants: Mapping[str, Any]) -> list[Any]:
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


def entries_from_table(
    table: pa.Table,
    dataset: Dataset,
    ref: ObjectRef,
    *,
    key: bytes,
    coordinates: Sequence[int] | None = None,
) -> list[IndexEntry]:
    """One IndexEntry per distinct subject in `table`, with its row count and row hints.

    `coordinates` locate each row in the object (line numbers of a CSV or JSON Lines file);
    without them the row's index in the table is its hint (a Parquet row). Rows whose subject
    columns hold a null are nobody's: they are not indexed.
    """
    if coordinates is not None and len(coordinates) != table.num_rows:
        raise ValueError("one coordinate per row")
    columns = dataset.subject_columns
    per_column = [subject_values(table, path, ref.constants) for path in columns]
    rows: dict[str, list[int]] = {}
    cache: dict[tuple[Any, ...], str] = {}  # keyed with types: True == 1 in Python
    for index, values in enumerate(zip(*per_column, strict=True)):
        if any(v is None for v in values):
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
