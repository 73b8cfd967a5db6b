"""Make the subject index entries of given objects match their current content, in Spark
tasks: what the index job does for the objects it is given, and the reconcile job for the
objects it repairs (`--fix`). Objects are spread over Spark tasks by `tasks.task_groups` (small
objects share a task; sizes when the object list gives them, else by count); per object:

1. classify the key (`objects.object_kind`): raw, lake Parquet, quarantine rows, or no rows
   (a quarantine report, `_SUCCESS`, ...: skipped);
2. HEAD the key's current version. None: the key's entries are flagged `deleted` when older
   versions still hold its data (a delete marker), removed when nothing is left ("missing").
   A requested `version_id` that is no longer current is skipped: the current version is
   indexed by its own event;
3. skip objects whose current version the writes ledger (lethe_shared.catalog.writes_ledger)
   says a job that indexes what it writes wrote (ingestion, erasure: `--skip-producer`, "none"
   with `force`; never the `lethe-producer` metadata, which a copy carries and a producer can
   set), and objects whose entries all describe this version and ETag (unless `force`);
4. download that exact version, read its subjects (`indexing.object_subjects_of`: the subject
   column(s) and line numbers, not the rows) and delete the download;
5. when the task's objects are read (or `GROUP_ROWS` rows are held), compute their entries as
   columns together (`arrow_index.entry_batches`: each distinct subject of the group hashed
   once, every object's entries exactly what it would have alone) and make them each object's
   entries (`index_maintenance.replace_entries`: put the items built from the columns, then
   flag the subjects it no longer holds, or remove them when no older version is left to hold
   them). Each entry names the version and ETag that were read. As before, nothing orders this
   write after the entries of a version uploaded since the HEAD (no conditional write; the
   reconcile job finds entries of a version that is not current), but the window is now the
   reads of the task's objects, not one object's.

Failures worth a retry raise (AWS errors, an unregistered dataset, the hash key): the job
fails and Step Functions retries it. An unreadable lake object is reported and keeps no entry.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import boto3
from pydantic import BaseModel, ConfigDict, Field
from pyspark.sql import SparkSession

from lethe_jobs.errors import UnreadableObjectError
from lethe_jobs.indexing import StoredObject, object_subjects_of
from lethe_jobs.objects import ObjectKind, object_kind
from lethe_jobs.session import logging_shown_keys
from lethe_jobs.tasks import grouped_items
from lethe_shared.aws.s3 import ObjectHead, ObjectStore, S3ObjectStore, s3_url
from lethe_shared.catalog.object_catalog import Buckets
from lethe_shared.catalog.writes_ledger import DynamoWritesLedger, WritesLedger
from lethe_shared.datasets.document import Dataset
from lethe_shared.index.arrow_entries import ObjectSubjects, entry_batches
from lethe_shared.index.maintenance import (
    IndexAction,
    indexed_by_writer,
    replace_entries,
    settle_missing_key,
)
from lethe_shared.index.opening import IndexLocation, open_subject_index
from lethe_shared.index.subject_ids import ids_of
from lethe_shared.index.subject_index import SubjectIndex

LOG = logging.getLogger("lethe.index")
# Rows whose subjects a task holds before hashing them together: bounds the memory of a group.
# A row holds its subject column's value (the column's own buffers, no copy; for other subject
# columns a 4-byte code and the distinct texts) and, for raw and quarantine objects, an 8-byte
# line number: tens of bytes per row, so about 100 MB for subject ids of 40 characters.
GROUP_ROWS = 2_000_000


class ObjectLocation(BaseModel):
    """One object to index: `{"bucket", "key"}`, optionally `"version_id"` and `"size"` (bytes,
    as a listing gives it: only to group small objects into Spark tasks)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    bucket: str = Field(min_length=3)
    key: str = Field(min_length=1)
    version_id: str | None = None
    size: int | None = Field(default=None, ge=0)

    @property
    def url(self) -> str:
        return s3_url(self.bucket, self.key)


@dataclass(frozen=True)
class IndexSettings:
    """What every task needs; travels to the executors with the task."""

    dataset: Dataset
    buckets: Buckets
    index: IndexLocation  # the subject index (lethe_shared.index.opening)
    correlation_id: str
    hash_key: bytes = field(repr=False)
    skip_producers: frozenset[str] = frozenset()  # ledger writers whose versions are skipped
    force: bool = False
    clear_unindexable: bool = False  # remove the entries of objects that hold no rows
    catalog_table: str | None = None  # the writes ledger's table: needed to skip producers

    def __post_init__(self) -> None:
        if self.skip_producers and not self.catalog_table:
            raise ValueError(
                "skipping objects by their writer needs the writes ledger (the catalog table)"
            )


@dataclass(frozen=True)
class Outcome:
    """What happened to one object."""

    status: str  # indexed | skipped | missing | unreadable
    entries_written: int = 0
    entries_deleted: int = 0
    rows: int = 0  # rows of a subject
    # rows whose subject is null, empty or whitespace only (canonical.is_no_subject): no entry
    rows_without_subject: int = 0


@dataclass(frozen=True)
class _Aws:
    """What a task talks to; built on the executor (boto3 clients do not travel)."""

    objects: ObjectStore
    index: SubjectIndex
    ledger: WritesLedger | None = None  # None: no writer is skipped (IndexSettings)

    @classmethod
    def connect(
        cls, index: IndexLocation, dataset: Dataset, catalog_table: str | None = None
    ) -> _Aws:
        dynamodb = boto3.resource("dynamodb")
        ledger = DynamoWritesLedger(dynamodb.Table(catalog_table)) if catalog_table else None
        s3 = boto3.client("s3")
        return cls(
            S3ObjectStore(s3),
            open_subject_index(index, s3=s3, dynamodb=dynamodb, datasets=dataset),
            ledger,
        )


def _gone(aws: _Aws, location: ObjectLocation) -> Outcome:
    """The key has no current version: index_maintenance.settle_missing_key's rule."""
    versions = aws.objects.versions_of(location.bucket, location.key)
    action, count = settle_missing_key(aws.index, location.url, versions)
    if action is IndexAction.FLAGGED:
        LOG.info("%s is hidden by a delete marker: %d entries flagged", location.url, count)
        return Outcome("missing")
    LOG.info("%s does not exist: %d entries removed", location.url, count)
    return Outcome("missing", entries_deleted=count)


def _skip_reason(
    aws: _Aws, location: ObjectLocation, head: ObjectHead, existing: set[str], ctx: IndexSettings
) -> str | None:
    if location.version_id is not None and location.version_id != head.version_id:
        return f"version {location.version_id} is not the current one ({head.version_id})"
    if ctx.skip_producers and aws.ledger is not None:
        writer = aws.ledger.writer_of(location.bucket, location.key, head.version_id)
        if indexed_by_writer(writer, ctx.skip_producers):
            return f"written by {writer} (the writes ledger), which indexed it"
    if ctx.force or not existing:
        return None
    if aws.index.describes_version(
        location.url, sorted(existing), version_id=head.version_id, etag=head.etag
    ):
        return "already indexed at this version"
    return None


@dataclass(frozen=True)
class _Read:
    """An object read up to its subjects, whose entries are computed with its group's."""

    location: ObjectLocation
    existing: set[str]  # the subjects it has entries for
    subjects: ObjectSubjects


def read_object(aws: _Aws, location: ObjectLocation, ctx: IndexSettings) -> Outcome | _Read:
    """Steps 1-4 of the module docstring: the object's outcome when it is not to be indexed
    (skipped, missing, unreadable: settled here), else its subjects."""
    kind = object_kind(ctx.dataset.dataset_id, location.bucket, location.key, ctx.buckets)
    if kind is ObjectKind.NO_ROWS:
        removed = aws.index.remove_object(location.url) if ctx.clear_unindexable else 0
        return Outcome("skipped", entries_deleted=removed)
    head = aws.objects.head(location.bucket, location.key)
    if head is None:
        return _gone(aws, location)
    existing = aws.index.subjects_of(location.url)
    reason = _skip_reason(aws, location, head, existing, ctx)
    if reason is not None:
        LOG.info("skipping %s: %s", location.url, reason)
        return Outcome("skipped")
    with tempfile.TemporaryDirectory(prefix="lethe-index-") as tmp:
        stored = StoredObject(
            location.bucket, location.key, head.version_id, head.etag, Path(tmp) / "object"
        )
        if (
            aws.objects.download(location.bucket, location.key, head.version_id, stored.path)
            is None
        ):
            return _gone(aws, location)  # deleted between the HEAD and the read
        try:
            found = object_subjects_of(
                kind, stored, ctx.dataset, key=ctx.hash_key, workdir=Path(tmp)
            )
        except UnreadableObjectError as exc:
            LOG.warning("%s cannot be read, it keeps no entries: %s", location.url, exc)
            replace_entries(aws.index, aws.objects, location.bucket, location.key, [])
            return Outcome("unreadable", 0, len(existing), 0)
    return _Read(location, existing, found)


def write_group(aws: _Aws, group: Sequence[_Read], ctx: IndexSettings) -> list[Outcome]:
    """Step 5: the entries of the objects read, computed together, each made its object's."""
    batches = entry_batches([r.subjects for r in group], key=ctx.hash_key)
    outcomes = []
    for read, batch in zip(group, batches, strict=True):
        location = read.location
        replace_entries(aws.index, aws.objects, location.bucket, location.key, batch)
        ids = ids_of(aws.index, ctx.dataset.dataset_id)  # prefixes: as subjects_of names them
        deleted = len(read.existing - {ids(h) for h in batch.subject_hashes})
        nobody = read.subjects.rows - batch.total_rows
        outcomes.append(Outcome("indexed", len(batch), deleted, batch.total_rows, nobody))
    return outcomes


def index_group(
    aws: _Aws, locations: Iterable[ObjectLocation], ctx: IndexSettings
) -> list[Outcome]:
    """Make the index entries of several objects (a Spark task's) match their current
    versions (module docstring); the outcomes in the order of `locations`."""
    outcomes: list[Outcome | None] = []
    group: list[tuple[int, _Read]] = []
    held = 0

    def flush() -> None:
        written = write_group(aws, [read for _, read in group], ctx)
        for (place, _), outcome in zip(group, written, strict=True):
            outcomes[place] = outcome
        group.clear()

    for location in locations:
        found = read_object(aws, location, ctx)
        outcomes.append(found if isinstance(found, Outcome) else None)
        if isinstance(found, _Read):
            group.append((len(outcomes) - 1, found))
            held += found.subjects.rows
            if held >= GROUP_ROWS:
                flush()
                held = 0
    flush()
    return [o for o in outcomes if o is not None]


def index_partition(items: Iterable[str], ctx: IndexSettings) -> Iterator[dict[str, Any]]:
    """A Spark task: index the objects of one partition (JSON object locations) as a group."""
    # an executor's Python worker logs on its own
    logging_shown_keys(ctx.correlation_id, ctx.hash_key, {ctx.dataset.dataset_id: ctx.dataset})
    aws = _Aws.connect(ctx.index, ctx.dataset, ctx.catalog_table)
    locations = [ObjectLocation.model_validate_json(item) for item in items]
    for outcome in index_group(aws, locations, ctx):
        yield asdict(outcome)


def index_objects(
    spark: SparkSession, locations: Sequence[ObjectLocation], ctx: IndexSettings
) -> list[Outcome]:
    """The objects in Spark tasks grouped by `tasks.task_groups`; the outcomes in the order of
    `locations`."""
    if not locations:
        return []
    items = [loc.model_dump_json() for loc in locations]
    rdd = grouped_items(spark, items, [loc.size for loc in locations])
    return [Outcome(**o) for o in rdd.mapPartitions(lambda p: index_partition(p, ctx)).collect()]
