"""The ingest job: a batch of raw object versions in; curated Parquet, quarantine and index
entries out; one outcome per object version.

The driver plans and collects summaries; the executors do the work (`ingest_tasks`):

1. read the batch (`--objects-json` or `--objects-manifest`: a JSON list of
   `{"dataset_id", "key", "version_id"}` in the raw bucket);
2. per object version, on the driver: whether it was deleted meanwhile (DELETED in the catalog:
   skipped), its dataset (unregistered: FAILED; a key not under `<dataset_id>/`: FAILED, the
   raw layout's contract, which the subject index keeps objects by), whether the catalog
   knows a newer version of the key (SUPERSEDED: an older version ingested last must not replace
   its rows; this is what keeps sequencer order when a batch holds two versions of one key), a
   HEAD of the exact version (gone: DELETED when the catalog recorded it, it was deleted
   before its Object Deleted event was read; FAILED when the catalog never saw it), and what
   earlier ingestions of the key wrote;
3. per dataset, cut the objects into pieces (`pieces`: a large object is split, by row groups
   for Parquet and at line starts for uncompressed text, so that no process holds it whole;
   the split scan of a large text object runs in a task), and group pieces into Spark tasks
   by bytes (`tasks.task_groups`);
4. a read task per group streams its pieces' records, a batch at a time, with the raw objects'
   partial index entries and one summary per piece (`ingest_tasks.read_pieces`); an unreadable
   object (a piece raised `UnreadableFileError`) is quarantined whole, its records discarded;
5. Spark conforms the records (`validate`, pure DataFrame transformations), places each valid
   row in its partition (`ingest_tasks.place_rows`: a row whose lake object could not be
   written or indexed, its URL over 1,024 bytes, is rejected there) and sends valid rows
   to one writer task per lake file (object, partition; sorted by source position), rejected
   ones to one quarantine writer per object, and adds up the raw objects' entries per subject;
   each writer uploads its file and replaces the file's index entries (`replace_entries`);
6. on the driver, per object: the objects without entries get none, the files an earlier
   ingestion of the key wrote and this run did not rewrite are removed with their entries, and
   the outcome (INGESTED / QUARANTINED / SUPERSEDED / FAILED) is recorded on the version's
   catalog item.

Every lake object it writes carries the S3 metadata `lethe-producer: ingest`: the object events
path sees these writes too, and leaves their indexing to this job; and `lethe-correlation-id`,
the run's correlation id, so that `lethe trace` goes from a lake object to the story that wrote it.

Quarantining is a success of the job, and a FAILED object does not fail its neighbours. What
is worth a retry or an investigation (an AWS error, a Spark task that keeps failing, an invalid
object list) raises: the run fails and the state machine marks the batch's objects FAILED.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from pyspark.sql import SparkSession

from lethe_jobs import layout, pieces
from lethe_jobs.errors import InvalidObjectListError
from lethe_jobs.ingest_outcomes import AwsPorts, BatchRequest, ObjectResult, PlannedObject
from lethe_jobs.ingest_pipeline import run_pipeline
from lethe_jobs.ingest_planning import HEAD_THREADS, plan_pipelines
from lethe_jobs.ingest_tasks import PACK_ROWS, BatchObject, TaskSettings
from lethe_jobs.job_args import INDEX_ARGUMENTS, add_index, index_location
from lethe_jobs.objects import object_list
from lethe_jobs.readers import BATCH_ROWS
from lethe_shared.aws.s3 import (
    KeyState,
    ObjectStore,
    S3ObjectStore,
    key_state,
    s3_url,
    split_s3_url,
)
from lethe_shared.catalog.object_catalog import IngestionRecord, ObjectCatalog, ObjectStatus
from lethe_shared.datasets.document import Dataset
from lethe_shared.datasets.registry import dataset_of_key
from lethe_shared.errors import CatalogItemMissingError
from lethe_shared.index.maintenance import settle_missing_key
from lethe_shared.index.opening import DEFAULT_STORE, IndexLocation

LOG = logging.getLogger("lethe.ingest")


MAX_OBJECTS = 1000  # object versions per run (Lethe's batches hold MAX_BATCH_OBJECTS = 200)


@dataclass(frozen=True)
class IngestArgs:
    raw_bucket: str
    lake_bucket: str
    datasets_table: str
    catalog_table: str
    index_table: str
    hash_key_secret: str  # ARN or name of the secret whose SecretString is the HMAC key
    correlation_id: str
    objects_json: str | None = None
    objects_manifest: str | None = None
    piece_bytes: int = pieces.PIECE_BYTES  # a larger object is split (docs/INGESTION.md)
    batch_rows: int = BATCH_ROWS  # records a read task holds at a time
    pack_rows: int = PACK_ROWS  # plain CSV rows packed in runs of this many (0: none)
    # where the subject index is (lethe_jobs.job_args.add_index, lethe_shared.index.opening)
    index_store: str = DEFAULT_STORE.value
    index_bucket: str = ""
    manifest_table: str = ""

    @property
    def index_location(self) -> IndexLocation:
        return index_location(self.index_store, self.index_table, self.index_bucket,
                              self.manifest_table)  # fmt: skip


def parse_args(argv: Sequence[str] | None) -> tuple[IngestArgs, list[str]]:
    """`--key value` arguments; unknown ones (Glue adds --JOB_ID, --JOB_RUN_ID,
    --job-bookmark-option, ...) are returned apart and ignored."""
    parser = argparse.ArgumentParser(prog="ingest", description="Lethe ingest job")
    for name in IngestArgs.__dataclass_fields__:
        if name.startswith("objects_") or name in {
            "piece_bytes",
            "batch_rows",
            "pack_rows",
            *INDEX_ARGUMENTS,
        }:
            continue
        flag = name.replace("_", "-")
        parser.add_argument(f"--{flag}", f"--{name}", dest=name, required=True)
    objects = parser.add_mutually_exclusive_group(required=True)
    objects.add_argument("--objects-json", dest="objects_json")
    objects.add_argument("--objects-manifest", dest="objects_manifest")
    parser.add_argument(
        "--piece-bytes", dest="piece_bytes", type=_positive, default=pieces.PIECE_BYTES
    )
    parser.add_argument("--batch-rows", dest="batch_rows", type=_positive, default=BATCH_ROWS)
    parser.add_argument(
        "--pack-rows", dest="pack_rows", type=_not_negative, default=PACK_ROWS,
        help="plain CSV rows travel packed in runs of at most this many; 0: every row alone",
    )  # fmt: skip
    add_index(parser)
    known, unknown = parser.parse_known_args(argv)
    args = IngestArgs(**vars(known))
    _ = args.index_location  # an incomplete index location fails here, before anything is read
    return args, unknown


def _not_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is a negative number")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return value


def outside_prefix_error(dataset_id: str) -> str:
    """Why an object whose key is not under `<dataset_id>/` is not ingested into the dataset:
    raw objects of a dataset live under `s3://<raw>/<dataset_id>/` (ARCHITECTURE.md), and the
    subject index finds an object's entries by that layout (lethe_shared.index.segments). The
    text names no key: a key can hold a subject id."""
    return (
        f"the object's key is not under the prefix {dataset_id}/ of dataset {dataset_id!r}: a"
        f" dataset's raw objects live under s3://<raw bucket>/{dataset_id}/"
    )


def parse_batch(document: Any) -> list[BatchRequest]:
    """The object versions of a batch document, each once, in order. Raises
    InvalidObjectListError."""
    if not isinstance(document, list) or not document:
        raise InvalidObjectListError("the object list must be a non-empty JSON list")
    if len(document) > MAX_OBJECTS:
        raise InvalidObjectListError(
            f"the object list holds {len(document)} objects; one run takes at most {MAX_OBJECTS}"
        )
    requests: list[BatchRequest] = []
    for number, entry in enumerate(document):
        fields = ("dataset_id", "key", "version_id")
        if not isinstance(entry, dict) or not all(
            isinstance(entry.get(f), str) and entry.get(f) for f in fields
        ):
            raise InvalidObjectListError(
                f"object {number} must be an object with non-empty strings "
                f"{', '.join(fields)}: {json.dumps(entry)[:200]}"
            )
        requests.append(BatchRequest(entry["dataset_id"], entry["key"], entry["version_id"]))
    return list(dict.fromkeys(requests))


def read_batch(objects: ObjectStore, args: IngestArgs) -> list[BatchRequest]:
    document = object_list(objects, args.objects_json, args.objects_manifest)
    return parse_batch(document)


@dataclass(frozen=True)
class BatchResult:
    objects: list[ObjectResult]

    def summary(self) -> dict[str, Any]:
        counts = Counter(r.status.value for r in self.objects)
        return {
            "objects": [r.summary() for r in self.objects],
            "counts": dict(sorted(counts.items())),
        }

    def metric_counts(self) -> dict[str, int]:
        """The batch's figures for the dashboard (lethe_jobs.emf; docs/OPERATIONS.md)."""
        statuses = Counter(r.status for r in self.objects)
        return {
            "ObjectsIngested": statuses[ObjectStatus.INGESTED],
            "ObjectsQuarantined": statuses[ObjectStatus.QUARANTINED],
            "ObjectsFailed": statuses[ObjectStatus.FAILED],
            "RowsWritten": sum(r.rows_written for r in self.objects),
            "RowsQuarantined": sum(r.rows_quarantined for r in self.objects),
        }


def run_ingest(spark: SparkSession, args: IngestArgs, aws: AwsPorts, now: datetime) -> BatchResult:
    requests = read_batch(aws.s3, args)
    LOG.info("batch of %d object version(s)", len(requests))
    results: dict[int, ObjectResult] = {}
    datasets: dict[str, Dataset | None] = {}
    planned: dict[str, list[PlannedObject]] = defaultdict(list)
    urls = [s3_url(args.raw_bucket, r.key) for r in requests]
    # the per-version look-ups run HEAD_THREADS at a time (each is one or two calls); what they
    # decide is decided below, one version after the other in batch order, as before
    heads = _heads(aws.s3, args.raw_bucket, requests)
    items = _parallel(lambda r: aws.catalog.get(args.raw_bucket, r.key, r.version_id), requests)
    live = [
        i for i, item in enumerate(items) if item is None or item.status is not ObjectStatus.DELETED
    ]
    for index in live:
        dataset_id = requests[index].dataset_id
        if dataset_id not in datasets:
            datasets[dataset_id] = aws.datasets.get(dataset_id)
    admitted = [i for i in live if _refusal(requests[i], datasets[requests[i].dataset_id]) is None]
    newer_of = _by_index(
        lambda i: aws.catalog.newer_version_of(urls[i], requests[i].version_id), admitted
    )
    readable = [i for i in admitted if newer_of[i] is None and heads[i] is not None]
    earlier_of = _by_index(lambda i: aws.catalog.lake_objects_of(urls[i]), readable)
    for index, request in enumerate(requests):
        url, item = urls[index], items[index]
        if item is not None and item.status is ObjectStatus.DELETED:
            LOG.info(
                "%s version %s was deleted before it could be ingested", url, request.version_id
            )
            results[index] = ObjectResult(request, url, ObjectStatus.DELETED)
            continue
        refused = _refusal(request, datasets[request.dataset_id])
        if refused:
            results[index] = ObjectResult(request, url, ObjectStatus.FAILED, error=refused)
            continue
        newer = newer_of[index]
        if newer is not None:
            LOG.warning(
                "%s version %s is superseded by version %s: nothing is written",
                url, request.version_id, newer,
            )  # fmt: skip
            results[index] = ObjectResult(request, url, ObjectStatus.SUPERSEDED)
            continue
        head = heads[index]
        if head is None and item is not None:
            # Recorded when its Object Created event was read, gone now: deleted meanwhile (an
            # erasure purges the versions it rewrote), and its Object Deleted event not read yet.
            LOG.info(
                "%s version %s was deleted before it could be ingested (S3 no longer has it)",
                url, request.version_id,
            )  # fmt: skip
            results[index] = ObjectResult(request, url, ObjectStatus.DELETED, gone=True)
            continue
        if head is None:
            error = f"{url} version {request.version_id} cannot be read: it is not there"
            results[index] = ObjectResult(request, url, ObjectStatus.FAILED, error=error)
            continue
        obj = BatchObject(
            index, request.dataset_id, request.key, request.version_id, head.etag, head.size, url
        )
        LOG.info(
            "ingesting %s version %s (%d bytes) into dataset %s",
            url, request.version_id, head.size, request.dataset_id,
        )  # fmt: skip
        planned[request.dataset_id].append(PlannedObject(obj, request, earlier_of[index]))
    for dataset_id, objects in sorted(planned.items()):
        dataset = datasets[dataset_id]
        assert dataset is not None
        results.update(_ingest_dataset(spark, args, aws, dataset=dataset, objects=objects, now=now))
    ordered = [results[i] for i in range(len(requests))]
    _parallel(lambda result: _record(aws.catalog, args, result, now), ordered)
    counts = Counter(r.status.value for r in ordered)
    LOG.info("batch done: %s", ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    return BatchResult(ordered)


def _by_index(work: Callable[[int], Any], indices: Sequence[int]) -> dict[int, Any]:
    return dict(zip(indices, _parallel(work, indices), strict=True))


def _parallel(work: Callable[[Any], Any], inputs: Sequence[Any]) -> list[Any]:
    """`work` of each input, HEAD_THREADS at a time, the answers in the inputs' order; the first
    exception is raised (after every call has ended)."""
    if len(inputs) <= 1:
        return [work(x) for x in inputs]
    with ThreadPoolExecutor(max_workers=HEAD_THREADS) as pool:
        return list(pool.map(work, inputs))


def _refusal(request: BatchRequest, dataset: Dataset | None) -> str | None:
    """Why the object cannot go into its dataset at all (the version FAILS), or None."""
    if dataset is None:
        return f"dataset {request.dataset_id!r} is not registered"
    if dataset_of_key(request.key) != request.dataset_id:
        return outside_prefix_error(request.dataset_id)
    return None


def _heads(s3: S3ObjectStore, bucket: str, requests: Sequence[BatchRequest]) -> list[Any]:
    return _parallel(lambda r: s3.head(bucket, r.key, r.version_id), requests)


def _record(catalog: ObjectCatalog, args: IngestArgs, result: ObjectResult, now: datetime) -> None:
    request = result.request
    if result.status is ObjectStatus.DELETED:
        if result.gone:  # the catalog says so once the version's Object Deleted event is read
            catalog.record_gone(result.object_url, request.version_id, args.correlation_id)
        return  # otherwise the catalog says so already
    try:
        if result.status is ObjectStatus.FAILED:
            LOG.error(
                "%s version %s FAILED: %s", result.object_url, request.version_id, result.error
            )
            catalog.record_failure(
                result.object_url, request.version_id, result.error or "", args.correlation_id, now
            )
            return
        catalog.record_ingestion(
            result.object_url,
            request.version_id,
            IngestionRecord(
                result.status,
                result.rows_read,
                result.rows_written,
                result.rows_quarantined,
                result.lake_objects,
                result.quarantine_object,
                args.correlation_id,
                now,
            ),
        )
    except CatalogItemMissingError as exc:
        LOG.error("%s; its outcome %s is in the job's summary only", exc, result.status.value)


def _ingest_dataset(
    spark: SparkSession,
    args: IngestArgs,
    aws: AwsPorts,
    *,
    dataset: Dataset,
    objects: list[PlannedObject],
    now: datetime,
) -> dict[int, ObjectResult]:
    LOG.info(
        "dataset %s (%s): %d object version(s), %d bytes",
        dataset.dataset_id, dataset.format.value, len(objects), sum(p.obj.size for p in objects),
    )  # fmt: skip
    settings = TaskSettings(
        dataset=dataset,
        raw_bucket=args.raw_bucket,
        lake_bucket=args.lake_bucket,
        index=args.index_location,
        correlation_id=args.correlation_id,
        now=now.isoformat(),
        objects={p.obj.index: p.obj for p in objects},
        hash_key=aws.hash_key,
        batch_rows=args.batch_rows,
        piece_bytes=args.piece_bytes,
        pack_rows=args.pack_rows,
        catalog_table=args.catalog_table,
        time_zone=spark.conf.get("spark.sql.session.timeZone") or "",
    )
    outcomes: dict[int, ObjectResult] = {}
    for schema, piece_list in plan_pipelines(spark, aws.s3, settings):
        members = sorted({p.object_index for p in piece_list})
        part = replace(settings, objects={i: settings.objects[i] for i in members})
        outcomes.update(run_pipeline(spark, aws, part, schema, piece_list))
    _parallel(lambda plan: _remove_stale(aws, settings, plan, outcomes[plan.obj.index]), objects)
    return {plan.obj.index: outcomes[plan.obj.index] for plan in objects}


def _remove_stale(
    aws: AwsPorts, settings: TaskSettings, plan: PlannedObject, result: ObjectResult
) -> None:
    """Delete what an earlier ingestion of this raw key wrote and this run did not rewrite:
    partition files whose rows moved or went away, and a quarantine object of the other kind
    (or of rows, when no row was rejected this time). Their index entries follow the
    delete-marker rule, also when the file is gone already (a retry after a failure between the
    two steps): flagged while an older version holds the rows, removed when none does."""
    lake, dataset_id = settings.lake_bucket, settings.dataset.dataset_id
    digest = layout.object_hash(settings.raw_bucket, plan.obj.key)
    for url in sorted(plan.earlier - set(result.lake_objects)):
        bucket, key = split_s3_url(url)
        if bucket != lake or not layout.is_lake_object_of(key, dataset_id, digest):
            LOG.warning("not removing %s: not a lake file of this raw object", url)
            continue
        if _remove(aws, bucket, key):
            LOG.info("removed stale lake object %s", url)
    for key in (
        layout.quarantine_rows_key(dataset_id, digest),
        layout.quarantine_file_key(dataset_id, digest),
    ):
        if s3_url(lake, key) == result.quarantine_object:
            continue
        if _remove(aws, lake, key):
            LOG.info("removed stale quarantine object %s", s3_url(lake, key))


def _remove(aws: AwsPorts, bucket: str, key: str) -> bool:
    """Delete the key's current version (a delete marker), if it has one, and settle its
    index entries by its versions then (`settle_missing_key`). The versions are listed first:
    a key that has none (a first ingestion's other quarantine kind) costs one listing, not a
    HEAD as well. Returns whether a version was deleted."""
    url = s3_url(bucket, key)
    versions = aws.s3.versions_of(bucket, key)
    deleted = key_state(versions) is KeyState.CURRENT and aws.s3.delete_current(bucket, key)
    if deleted:
        versions = aws.s3.versions_of(bucket, key)
    action, count = settle_missing_key(aws.index, url, versions)
    if count:
        LOG.info("%s: %d index entries of %s", action.value, count, url)
    return deleted
