"""The index job: make the subject index entries of given objects match their current content.

For a lake that existed before Lethe (backfill), for lake objects too large for the indexer
Lambda, and for raw keys whose current version changed by a delete. Objects are spread over
Spark tasks by `tasks.task_groups` (small objects share a task; sizes when the object list gives
them, else by count); per object:

1. classify the key (`objects.object_kind`): raw, lake Parquet, quarantine rows, or no rows
   (a quarantine report, `_SUCCESS`, ...: skipped);
2. HEAD the key's current version. None: the key's entries are flagged `deleted` when older
   versions still hold its data (a delete marker), removed when nothing is left ("missing").
   A requested `version_id` that is no longer current is skipped: the current version is
   indexed by its own event;
3. skip objects whose `lethe-producer` metadata names a job that indexes what it writes
   (ingestion, erasure: `--skip-producer`, "none" with `force`), and objects whose entries all
   describe this version and ETag (unless `force`);
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

import argparse
import json
import logging
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import boto3
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pyspark.sql import SparkSession

from lethe_jobs.errors import InvalidObjectListError
from lethe_jobs.indexing import StoredObject, UnreadableObjectError, object_subjects_of
from lethe_jobs.objects import ObjectKind, object_kind, object_list
from lethe_jobs.session import configure_logging
from lethe_jobs.tasks import grouped_items
from lethe_shared.aws.s3 import ObjectHead, ObjectStore, S3ObjectStore, s3_url
from lethe_shared.catalog.object_catalog import Buckets
from lethe_shared.datasets.document import Dataset
from lethe_shared.datasets.registry import DatasetRegistry, require_dataset
from lethe_shared.index.arrow_entries import ObjectSubjects, entry_batches
from lethe_shared.index.maintenance import (
    SELF_INDEXING_PRODUCERS,
    IndexAction,
    indexed_by_writer,
    replace_entries,
    settle_missing_key,
)
from lethe_shared.index.subject_index import DynamoSubjectIndex, SubjectIndex

LOG = logging.getLogger("lethe.index")
NO_PRODUCER = "none"
# Rows whose subjects a task holds before hashing them together: bounds the memory of a group.
# A row holds its subject column's value (the column's own buffers, no copy; for other subject
# columns a 4-byte code and the distinct texts) and, for raw and quarantine objects, an 8-byte
# line number: tens of bytes per row, so about 100 MB for subject ids of 40 characters.
GROUP_ROWS = 2_000_000
TRUE_WORDS = frozenset({"true", "yes", "1"})
FALSE_WORDS = frozenset({"false", "no", "0"})


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
class DatasetJobArgs:
    """Arguments every job over one dataset's objects takes (index, reconcile, erase)."""

    dataset_id: str
    raw_bucket: str
    lake_bucket: str
    datasets_table: str
    index_table: str
    hash_key_secret: str
    correlation_id: str

    @property
    def buckets(self) -> Buckets:
        return Buckets(raw=self.raw_bucket, lake=self.lake_bucket)


DATASET_JOB_ARGUMENTS = tuple(DatasetJobArgs.__dataclass_fields__)


@dataclass(frozen=True)
class IndexArgs(DatasetJobArgs):
    objects_json: str | None
    objects_manifest: str | None
    skip_producers: frozenset[str]  # empty: index every object, whatever wrote it
    force: bool


def _flag(value: str) -> bool:
    """`--force` alone, or with a value (Glue passes every argument as a key and a value)."""
    word = value.strip().lower()
    if word not in TRUE_WORDS | FALSE_WORDS:
        raise argparse.ArgumentTypeError(f"expected true or false, found {value!r}")
    return word in TRUE_WORDS


def add_flag(parser: argparse.ArgumentParser, name: str, help_text: str) -> None:
    parser.add_argument(
        f"--{name}", type=_flag, nargs="?", const=True, default=False, help=help_text
    )


def add_required(parser: argparse.ArgumentParser, names: Sequence[str]) -> None:
    for name in names:
        parser.add_argument(f"--{name.replace('_', '-')}", f"--{name}", dest=name, required=True)


def parse_args(argv: Sequence[str] | None) -> tuple[IndexArgs, list[str]]:
    """`--key value` arguments; unknown ones (Glue's own) are returned apart and ignored."""
    parser = argparse.ArgumentParser(prog="index", description="Lethe subject index job")
    add_required(parser, DATASET_JOB_ARGUMENTS)
    objects = parser.add_mutually_exclusive_group(required=True)
    objects.add_argument("--objects-json", dest="objects_json")
    objects.add_argument("--objects-manifest", dest="objects_manifest")
    parser.add_argument(
        "--skip-producer",
        dest="skip_producers",
        default=",".join(sorted(SELF_INDEXING_PRODUCERS)),
        help="lethe-producer values to skip, comma-separated (their jobs indexed them); none",
    )
    add_flag(parser, "force", "index even objects whose entries describe their current version")
    known, unknown = parser.parse_known_args(argv)
    values = vars(known)
    text = values["skip_producers"].strip()
    names = [] if text in ("", NO_PRODUCER) else [n.strip() for n in text.split(",") if n.strip()]
    values["skip_producers"] = frozenset(names)
    return IndexArgs(**values), unknown


def parse_objects(document: Any, dataset_id: str, buckets: Buckets) -> list[ObjectLocation]:
    """The object list: a JSON list of `{"bucket", "key"[, "version_id"]}`, every object under
    the dataset's prefix in its raw or lake bucket; duplicates dropped, order kept."""
    if not isinstance(document, list):
        raise InvalidObjectListError("the objects must be a JSON list")
    try:
        locations = [ObjectLocation.model_validate(item) for item in document]
    except ValidationError as exc:
        raise InvalidObjectListError(f"not an object list: {exc}") from exc
    outside = [
        loc.url
        for loc in locations
        if loc.bucket not in buckets.names or not loc.key.startswith(f"{dataset_id}/")
    ]
    if outside:
        raise InvalidObjectListError(
            f"{len(outside)} object(s) are not under dataset {dataset_id!r} in the raw or lake "
            f"bucket, e.g. {outside[0]}"
        )
    unique: dict[tuple[str, str, str | None], ObjectLocation] = {}
    for location in locations:  # the same object twice, with a size or without: once
        unique.setdefault((location.bucket, location.key, location.version_id), location)
    return list(unique.values())


def read_objects(objects: ObjectStore, args: IndexArgs) -> list[ObjectLocation]:
    document = object_list(objects, args.objects_json, args.objects_manifest)
    return parse_objects(document, args.dataset_id, args.buckets)


@dataclass(frozen=True)
class IndexSettings:
    """What every task needs; travels to the executors with the task."""

    dataset: Dataset
    buckets: Buckets
    index_table: str
    correlation_id: str
    hash_key: bytes = field(repr=False)
    skip_producers: frozenset[str] = frozenset()
    force: bool = False
    clear_unindexable: bool = False  # remove the entries of objects that hold no rows


@dataclass(frozen=True)
class Outcome:
    """What happened to one object."""

    status: str  # indexed | skipped | missing | unreadable
    entries_written: int = 0
    entries_deleted: int = 0
    rows: int = 0


@dataclass(frozen=True)
class _Aws:
    """What a task talks to; built on the executor (boto3 clients do not travel)."""

    objects: ObjectStore
    index: SubjectIndex

    @classmethod
    def connect(cls, index_table: str) -> _Aws:
        dynamodb = boto3.resource("dynamodb")
        return cls(
            S3ObjectStore(boto3.client("s3")), DynamoSubjectIndex(dynamodb.Table(index_table))
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
    if indexed_by_writer(head, ctx.skip_producers):
        return f"written by {head.producer}, which indexed it"
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
        deleted = len(read.existing - set(batch.subject_hashes))
        outcomes.append(Outcome("indexed", len(batch), deleted, batch.total_rows))
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
    configure_logging(ctx.correlation_id)  # an executor's Python worker logs on its own
    aws = _Aws.connect(ctx.index_table)
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


def summarize(outcomes: Sequence[Outcome]) -> dict[str, int]:
    """The job's one-line summary."""
    count = {s: sum(o.status == s for o in outcomes) for s in ("indexed", "skipped", "missing")}
    return {
        "objects": len(outcomes),
        **count,
        "unreadable": sum(o.status == "unreadable" for o in outcomes),
        "entries_written": sum(o.entries_written for o in outcomes),
        "entries_deleted": sum(o.entries_deleted for o in outcomes),
        "rows": sum(o.rows for o in outcomes),
    }


@dataclass(frozen=True)
class IndexPorts:
    objects: ObjectStore  # the manifest
    datasets: DatasetRegistry
    hash_key: bytes = field(repr=False)


def run_index(spark: SparkSession, args: IndexArgs, ports: IndexPorts) -> dict[str, int]:
    dataset = require_dataset(ports.datasets, args.dataset_id)
    locations = read_objects(ports.objects, args)
    LOG.info(
        "indexing %d objects of dataset %s (skip producer: %s, force: %s)",
        len(locations),
        dataset.dataset_id,
        ",".join(sorted(args.skip_producers)) or NO_PRODUCER,
        args.force,
    )
    settings = IndexSettings(
        dataset=dataset,
        buckets=args.buckets,
        index_table=args.index_table,
        correlation_id=args.correlation_id,
        hash_key=ports.hash_key,
        skip_producers=args.skip_producers,
        force=args.force,
    )
    summary = summarize(index_objects(spark, locations, settings))
    LOG.info("done: %s", json.dumps(summary, sort_keys=True))
    return summary
