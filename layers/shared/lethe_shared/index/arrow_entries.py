"""Index entries of objects, from their rows as Arrow tables.

Used by everything that indexes: the ingest job (lake files, the raw object, quarantine), the
Spark index and reconcile jobs, and the small-object indexer Lambda (`index_lake_object`). One
implementation, so that a backfill gives exactly the index ingestion would. The rows' subjects
are hashed by `lethe_shared.subject_hashing` (its Arrow path, `subject_hashing.arrow`), which the
erase job's matching uses too (`row_subject_hashes`, the same computation row by row).

How (docs/INDEX.md, "How entries are computed"): `object_subjects` keeps what an object's
entries need and not the table (`subject_hashing.arrow.table_subjects`: the subject texts of the
rows, codes and distinct texts). `entry_batches` computes the entries of a group of objects (a
Spark task's): each distinct subject of the group is hashed once
(`subject_hashing.arrow_digests.hash_subjects`), and each object's rows are sorted by their
subject's digest (its first 8 bytes as an integer) with a stable Arrow sort (so each subject's
rows stay in row order). Each object gets the entries as columns (`subject_index.EntryBatch`:
the hashes, the row hints cut by ends, the object's fields validated once), from which the index
writer builds DynamoDB items directly, the same alone (`entry_batch`) or in any group;
`entries_from_table` gives them as IndexEntry models.

Imports pyarrow, and only pyarrow's compute kernels (no numpy: the indexer Lambda's layer has
pyarrow 20 alone): import this module only where pyarrow is installed (Spark, the indexer
Lambda's layer, tests), never from lethe_shared's other modules.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import lru_cache
from operator import itemgetter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lethe_shared.aws.s3 import NULL_VERSION, ObjectStore, s3_url
from lethe_shared.catalog.writes_ledger import WritesLedger
from lethe_shared.catalog.zones import Zone
from lethe_shared.datasets.document import Dataset, hive_partition_values, is_quarantine_key
from lethe_shared.datasets.matching import matching_fingerprint
from lethe_shared.datasets.registry import DatasetRegistry, require_dataset
from lethe_shared.index.maintenance import indexed_by_writer, replace_entries, settle_missing_key
from lethe_shared.index.subject_index import EntryBatch, IndexEntry, SubjectIndex
from lethe_shared.subject_hashing.arrow import table_subjects
from lethe_shared.subject_hashing.arrow_digests import HashedSubjects, SubjectTexts, hash_subjects
from lethe_shared.subject_hashing.keys import key_fingerprint


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


# ------------------------------------------------------------------------------ entries


@dataclass(frozen=True)
class ObjectSubjects:
    """An object's rows as the index needs them (`object_subjects`): each row's subject code,
    the texts of the codes and each row's location; not the table, so that the objects of a
    group hold their subject columns only until `entry_batches` hashes them together."""

    dataset: Dataset
    ref: ObjectRef
    subjects: SubjectTexts
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
    return ObjectSubjects(dataset, ref, table_subjects(table, dataset, ref.constants, key), located)


@dataclass(frozen=True)
class _Columns:
    """An object's entries as columns: hashes ascending, the row hints of each entry one after
    the other, cut by `ends`."""

    hashes: Sequence[str]
    ends: list[int]
    hints: list[int]


def _entry_columns(
    found: ObjectSubjects, ids: pa.Array, keys: pa.Array, hashed: HashedSubjects
) -> _Columns:
    """The entries of one object from its rows' subjects (`HashedSubjects`): rows sorted by their
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


@dataclass(frozen=True)
class EntryPin:
    """What an object's entries are computed with: the dataset definition's matching
    fingerprint and the subject hash key's fingerprint (IndexEntry's fields of those names)."""

    matching_fingerprint: str
    key_fingerprint: str


def entry_pin(dataset: Dataset, key: bytes) -> EntryPin:
    """The pin of entries computed from `dataset`'s rows with `key` (a short key: ValueError)."""
    return EntryPin(matching_fingerprint(dataset), _key_fingerprint(key))  # about 30 us


@lru_cache(maxsize=8)
def _key_fingerprint(key: bytes) -> str:
    return key_fingerprint(key)


_UNPINNED = EntryPin("", "")


def _batch(dataset: Dataset, ref: ObjectRef, columns: _Columns, key: bytes) -> EntryBatch:
    # a batch without entries writes nothing: no pin (and a short key still fails only when
    # something is hashed)
    pin = entry_pin(dataset, key) if columns.hashes else _UNPINNED
    return EntryBatch(
        object_url=ref.object_url,
        dataset_id=dataset.dataset_id,
        zone=ref.zone,
        format=ref.format,
        version_id=ref.version_id,
        etag=ref.etag,
        matching_fingerprint=pin.matching_fingerprint,
        key_fingerprint=pin.key_fingerprint,
        subject_hashes=columns.hashes,
        ends=columns.ends,
        row_hints=columns.hints,
    )


def no_entries(dataset: Dataset, ref: ObjectRef, *, key: bytes) -> EntryBatch:
    """The batch of an object that holds no subject's rows (an unreadable raw file)."""
    return _batch(dataset, ref, _Columns([], [], []), key)


def _columns_of(objects: Sequence[ObjectSubjects], key: bytes) -> list[_Columns]:
    hashed = hash_subjects([o.subjects for o in objects], key)
    parts = zip(objects, hashed.ids, hashed.row_keys, strict=True)
    return [_entry_columns(o, i, k, hashed) for o, i, k in parts]


def entry_batches(objects: Sequence[ObjectSubjects], *, key: bytes) -> list[EntryBatch]:
    """The entries of several objects (`object_subjects`), one batch each in their order, each
    exactly `entry_batch`'s for that object: hashing once each distinct subject of the group
    (a subject in several objects has one entry in each, with the same hash). What the index
    job uses for the objects of one Spark task."""
    columns = _columns_of(objects, key)
    return [_batch(o.dataset, o.ref, c, key) for o, c in zip(objects, columns, strict=True)]


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
    return _batch(dataset, ref, columns, key).entries()


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
    SKIPPED = "skipped"  # the writes ledger says ingestion or erasure wrote it, and indexed it
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
    ledger: WritesLedger,
) -> LakeIndexOutcome:
    """Make one small lake Parquet object's entries match its content (the indexer Lambda),
    unless the writes `ledger` says a job that indexes what it writes wrote the version (never
    its metadata). Idempotent: a repeat gives the same entries. `hash_key` is called only when
    rows are read."""
    url = s3_url(bucket, key)
    head = objects.head(bucket, key, version_id)
    body = objects.read_bytes(bucket, key, head.version_id) if head is not None else None
    if head is None or body is None:  # gone meanwhile: the delete-marker rule decides
        settle_missing_key(index, url, objects.versions_of(bucket, key))
        return LakeIndexOutcome(url, LakeIndexAction.REMOVED)
    if indexed_by_writer(ledger.writer_of(bucket, key, head.version_id)):
        return LakeIndexOutcome(url, LakeIndexAction.SKIPPED)
    dataset = require_dataset(registry, dataset_id)
    ref = ObjectRef(url, Zone.LAKE, "parquet", head.version_id, head.etag)
    batch = lake_object_batch(body, key, dataset, ref, key=hash_key())
    replace_entries(index, objects, bucket, key, batch)  # written from its columns
    return LakeIndexOutcome(url, LakeIndexAction.INDEXED, len(batch), batch.total_rows)
