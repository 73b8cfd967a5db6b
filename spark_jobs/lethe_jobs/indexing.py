"""Index entries of one object, from its content: what the ingest, index and reconcile jobs
write or expect. No AWS here: the callers download the object and write the entries.

- **lake Parquet files**: `lethe_shared.index.arrow_entries.lake_object_batch`, the function the
  indexer Lambda uses (row hint = row in the file; partition values from the Hive path), so a
  file gets the same entries whoever indexes it;
- **raw objects**: read with the ingest job's readers (`subject_rows.raw_subject_rows`); each
  row's subject values typed as the ingest validation types them
  (`lethe_shared.subject_hashing.values`); hint = the record's line (CSV, JSON Lines) or row
  (Parquet). Spark's typed values, where they exist (`subject_rows.with_typed_subjects`), are
  the same values wherever Spark's conversion and `subject_hashing.values` agree, which
  tests/spark/test_index_subject_values.py checks;
- **quarantine files** (`subject_rows.quarantine_subject_rows`): each line's `record` (the
  rejected row as read), typed the same way, so a rejected row has the same subject in its raw
  object and in quarantine; hint = line.

Subject columns are found by the field-name rule ingestion conforms files by
(`lethe_shared.datasets.field_names`: the exact name, else the one case variant, never by
position). A raw or quarantine row whose subject field is ambiguous gets an entry under each
reading (`lethe_shared.subject_hashing.records`), so an erasure reaches it; a lake file whose
schema makes a subject column ambiguous cannot be indexed (UnreadableObjectError).

Every path ends in `lethe_shared.index.arrow_entries.entry_batches`, the one implementation that
turns rows into entries: the typed values go to it as their canonical texts. The `*_subjects`
functions return an object's subjects before hashing (`ObjectSubjects`: the subject columns'
codes and texts, not the rows), which the index job hashes for all the objects of a Spark task
at once (`entry_batches`); the `*_batch` functions return one object's entries as columns
(`EntryBatch`); the `*_entries` functions the same entries as IndexEntry models
(`EntryBatch.entries()`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from lethe_jobs.errors import UnreadableFileError, UnreadableObjectError
from lethe_jobs.objects import ObjectKind
from lethe_jobs.readers import read_raw
from lethe_jobs.subject_rows import quarantine_subject_rows, raw_subject_rows
from lethe_shared.aws.s3 import s3_url
from lethe_shared.catalog.object_catalog import Zone
from lethe_shared.datasets.document import Dataset, hive_partition_values
from lethe_shared.datasets.field_names import AmbiguousFieldError
from lethe_shared.index.arrow_entries import (
    ObjectRef,
    ObjectSubjects,
    entry_batches,
    lake_object_subjects,
    object_subjects,
)
from lethe_shared.index.subject_index import EntryBatch, IndexEntry
from lethe_shared.subject_hashing.records import (
    SubjectRows,
    subject_table,
)

_ARROW_ERRORS = (pa.ArrowException, TypeError, ValueError)


def subjects_of_rows(
    rows: SubjectRows, dataset: Dataset, ref: ObjectRef, *, key: bytes
) -> ObjectSubjects:
    """The subjects of `rows`, to be hashed by `entry_batches`."""
    table = subject_table(dataset, rows.texts)
    return object_subjects(table, dataset, ref, key=key, coordinates=rows.coordinates)


def batch_of_rows(rows: SubjectRows, dataset: Dataset, ref: ObjectRef, *, key: bytes) -> EntryBatch:
    """The entries of `rows` as columns (empty when there are no rows)."""
    return entry_batches([subjects_of_rows(rows, dataset, ref, key=key)], key=key)[0]


def entries_of_rows(
    rows: SubjectRows, dataset: Dataset, ref: ObjectRef, *, key: bytes
) -> list[IndexEntry]:
    if not rows.coordinates:
        return []
    return batch_of_rows(rows, dataset, ref, key=key).entries()


def raw_subjects(
    path: Path, dataset: Dataset, ref: ObjectRef, *, key: bytes, workdir: Path
) -> ObjectSubjects:
    """Subjects of a raw object stored at `path`; an unreadable file has no rows, so none."""
    try:
        rows = raw_subject_rows(read_raw(path, dataset, workdir), dataset)
    except UnreadableFileError:
        rows = SubjectRows([], [[] for _ in dataset.subject_columns])
    return subjects_of_rows(rows, dataset, ref, key=key)


def raw_batch(
    path: Path, dataset: Dataset, ref: ObjectRef, *, key: bytes, workdir: Path
) -> EntryBatch:
    """Entries of a raw object stored at `path`; an unreadable file has no rows, so none."""
    found = raw_subjects(path, dataset, ref, key=key, workdir=workdir)
    return entry_batches([found], key=key)[0]


def raw_entries(
    path: Path, dataset: Dataset, ref: ObjectRef, *, key: bytes, workdir: Path
) -> list[IndexEntry]:
    return raw_batch(path, dataset, ref, key=key, workdir=workdir).entries()


def quarantine_subjects(
    path: Path, dataset: Dataset, ref: ObjectRef, *, key: bytes
) -> ObjectSubjects:
    with path.open(encoding="utf-8") as lines:
        rows = quarantine_subject_rows(lines, dataset)
    return subjects_of_rows(rows, dataset, ref, key=key)


def quarantine_batch(path: Path, dataset: Dataset, ref: ObjectRef, *, key: bytes) -> EntryBatch:
    found = quarantine_subjects(path, dataset, ref, key=key)
    return entry_batches([found], key=key)[0]


def quarantine_entries(
    path: Path, dataset: Dataset, ref: ObjectRef, *, key: bytes
) -> list[IndexEntry]:
    return quarantine_batch(path, dataset, ref, key=key).entries()


def lake_file_ref(
    object_url: str, object_key: str, dataset: Dataset, version_id: str, etag: str
) -> ObjectRef:
    """A lake Parquet file: constants are the partition values its Hive path carries."""
    return ObjectRef(
        object_url=object_url,
        zone=Zone.LAKE,
        format="parquet",
        version_id=version_id,
        etag=etag,
        constants=hive_partition_values(object_key, dataset),
    )


def lake_parquet_subjects(
    path: Path, object_key: str, dataset: Dataset, ref: ObjectRef, *, key: bytes
) -> ObjectSubjects:
    """Raises UnreadableObjectError, also when a subject column's name is ambiguous in the
    file's schema (several fields equal it ignoring case, none exactly: a lake file Lethe did
    not write), whose rows no reading can be chosen for."""
    try:
        return lake_object_subjects(path.read_bytes(), object_key, dataset, ref, key=key)
    except _ARROW_ERRORS as exc:
        raise UnreadableObjectError(f"not a readable Parquet file: {exc}") from exc
    except AmbiguousFieldError as exc:
        raise UnreadableObjectError(f"its subject columns cannot be told: {exc}") from exc


def lake_parquet_batch(
    path: Path, object_key: str, dataset: Dataset, ref: ObjectRef, *, key: bytes
) -> EntryBatch:
    found = lake_parquet_subjects(path, object_key, dataset, ref, key=key)
    return entry_batches([found], key=key)[0]


def lake_parquet_entries(
    path: Path, object_key: str, dataset: Dataset, ref: ObjectRef, *, key: bytes
) -> list[IndexEntry]:
    return lake_parquet_batch(path, object_key, dataset, ref, key=key).entries()


@dataclass(frozen=True)
class StoredObject:
    """An object version downloaded to `path`."""

    bucket: str
    key: str
    version_id: str
    etag: str
    path: Path

    @property
    def url(self) -> str:
        return s3_url(self.bucket, self.key)


def object_subjects_of(
    kind: ObjectKind, stored: StoredObject, dataset: Dataset, *, key: bytes, workdir: Path
) -> ObjectSubjects:
    """The subjects of an object of `kind`, read from `stored.path`: `object_batch` before
    hashing, for `entry_batches` (what the index job does for the objects of a task). Raises
    UnreadableObjectError for a lake object that cannot be read, ValueError for an object
    that holds no rows (ObjectKind.NO_ROWS: never indexed)."""
    if kind is ObjectKind.RAW:
        ref = ObjectRef(stored.url, Zone.RAW, dataset.format.value, stored.version_id, stored.etag)
        return raw_subjects(stored.path, dataset, ref, key=key, workdir=workdir)
    if kind is ObjectKind.QUARANTINE_ROWS:
        ref = ObjectRef(stored.url, Zone.LAKE, "jsonl", stored.version_id, stored.etag)
        return quarantine_subjects(stored.path, dataset, ref, key=key)
    if kind is ObjectKind.LAKE_PARQUET:
        ref = lake_file_ref(stored.url, stored.key, dataset, stored.version_id, stored.etag)
        return lake_parquet_subjects(stored.path, stored.key, dataset, ref, key=key)
    raise ValueError(f"{stored.url} holds no rows: it has no entries")


def object_batch(
    kind: ObjectKind, stored: StoredObject, dataset: Dataset, *, key: bytes, workdir: Path
) -> EntryBatch:
    """The entries an object of `kind` should have, as columns (`object_subjects_of`, then
    hashed alone). Raises as `object_subjects_of`."""
    found = object_subjects_of(kind, stored, dataset, key=key, workdir=workdir)
    return entry_batches([found], key=key)[0]


def object_entries(
    kind: ObjectKind, stored: StoredObject, dataset: Dataset, *, key: bytes, workdir: Path
) -> list[IndexEntry]:
    """The entries an object of `kind` should have (`object_batch`'s, as IndexEntry models;
    none for an object that holds no rows). Raises UnreadableObjectError for a lake object
    that cannot be read."""
    if kind is ObjectKind.NO_ROWS:
        return []
    return object_batch(kind, stored, dataset, key=key, workdir=workdir).entries()
