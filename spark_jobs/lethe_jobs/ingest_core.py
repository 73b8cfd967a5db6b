"""The ingest job: a batch of raw object versions in; curated Parquet, quarantine and index
entries out; one outcome per object version.

The driver plans and collects summaries; the executors do the work (`ingest_tasks`):

1. read the batch (`--objects-json` or `--objects-manifest`: a JSON list of
   `{"dataset_id", "key", "version_id"}` in the raw bucket);
2. per object version, on the driver: whether it was deleted meanwhile (DELETED in the catalog:
   skipped), its dataset (unregistered: FAILED), whether the catalog
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
import gzip
import json
import logging
import shutil
import tempfile
from collections import Counter, defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lethe_jobs import ingest_tasks as tasks
from lethe_jobs import layout, pieces
from lethe_jobs.arrow_bridge import spark_type, to_spark_compatible
from lethe_jobs.errors import InvalidObjectListError
from lethe_jobs.ingest_tasks import (
    ENTRY,
    INFO,
    KIND,
    OBJECT,
    PART,
    PIECE,
    PREREASONS,
    ROW,
    BatchObject,
    TaskSettings,
)
from lethe_jobs.objects import object_list
from lethe_jobs.readers import BATCH_ROWS, GZIP_MAGIC, parquet_data_columns
from lethe_jobs.tasks import task_groups
from lethe_jobs.validate import (
    POSITION,
    REASONS,
    RECORD,
    col,
    conform,
    extract_json_fields,
)
from lethe_shared.aws.s3 import ObjectStore, S3ObjectStore, get_version, s3_url, split_s3_url
from lethe_shared.catalog.object_catalog import IngestionRecord, ObjectCatalog, ObjectStatus
from lethe_shared.datasets.document import Compression, DataFormat, Dataset
from lethe_shared.datasets.registry import DatasetRegistry
from lethe_shared.errors import CatalogItemMissingError
from lethe_shared.index.maintenance import replace_entries, settle_missing_key
from lethe_shared.index.subject_index import SubjectIndex

LOG = logging.getLogger("lethe.ingest")
MAX_OBJECTS = 1000  # object versions per run (Lethe's batches hold MAX_BATCH_OBJECTS = 200)
HEAD_THREADS = 16  # the driver's concurrent HEAD / footer requests while planning
JSON_CONTENT_TYPE = "application/json"


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


def parse_args(argv: Sequence[str] | None) -> tuple[IngestArgs, list[str]]:
    """`--key value` arguments; unknown ones (Glue adds --JOB_ID, --JOB_RUN_ID,
    --job-bookmark-option, ...) are returned apart and ignored."""
    parser = argparse.ArgumentParser(prog="ingest", description="Lethe ingest job")
    for name in IngestArgs.__dataclass_fields__:
        if name.startswith("objects_") or name in {"piece_bytes", "batch_rows"}:
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
    known, unknown = parser.parse_known_args(argv)
    return IngestArgs(**vars(known)), unknown


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return value


@dataclass(frozen=True)
class BatchRequest:
    """One raw object version the batch asks to ingest."""

    dataset_id: str
    key: str
    version_id: str


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


@dataclass
class ObjectResult:
    """The outcome of one object version of the batch."""

    request: BatchRequest
    object_url: str
    status: ObjectStatus
    rows_read: int = 0
    rows_written: int = 0
    rows_quarantined: int = 0
    lake_objects: list[str] = field(default_factory=list)
    quarantine_object: str | None = None
    error: str | None = None  # FAILED: why
    gone: bool = False  # DELETED: S3 no longer has the version, the catalog did not know yet

    def summary(self) -> dict[str, Any]:
        return {
            "dataset_id": self.request.dataset_id,
            "key": self.request.key,
            "version_id": self.request.version_id,
            "object_url": self.object_url,
            "status": self.status.value,
            "rows_read": self.rows_read,
            "rows_written": self.rows_written,
            "rows_quarantined": self.rows_quarantined,
            "lake_objects": self.lake_objects,
            "quarantine_object": self.quarantine_object,
            "error": self.error,
        }


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


@dataclass(frozen=True)
class AwsPorts:
    s3: S3ObjectStore
    datasets: DatasetRegistry
    catalog: ObjectCatalog
    index: SubjectIndex
    hash_key: bytes = field(repr=False)  # the subject HMAC key: never logged


@dataclass(frozen=True)
class _Planned:
    """An object version to ingest: where it is, and what earlier ingestions of its key wrote."""

    obj: BatchObject
    request: BatchRequest
    earlier: set[str]


def run_ingest(spark: SparkSession, args: IngestArgs, aws: AwsPorts, now: datetime) -> BatchResult:
    requests = read_batch(aws.s3, args)
    LOG.info("batch of %d object version(s)", len(requests))
    results: dict[int, ObjectResult] = {}
    datasets: dict[str, Dataset | None] = {}
    planned: dict[str, list[_Planned]] = defaultdict(list)
    heads = _heads(aws.s3, args.raw_bucket, requests)
    for index, request in enumerate(requests):
        url = s3_url(args.raw_bucket, request.key)
        item = aws.catalog.get(args.raw_bucket, request.key, request.version_id)
        if item is not None and item.status is ObjectStatus.DELETED:
            LOG.info(
                "%s version %s was deleted before it could be ingested", url, request.version_id
            )
            results[index] = ObjectResult(request, url, ObjectStatus.DELETED)
            continue
        if request.dataset_id not in datasets:
            datasets[request.dataset_id] = aws.datasets.get(request.dataset_id)
        if datasets[request.dataset_id] is None:
            error = f"dataset {request.dataset_id!r} is not registered"
            results[index] = ObjectResult(request, url, ObjectStatus.FAILED, error=error)
            continue
        newer = aws.catalog.newer_version_of(url, request.version_id)
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
        planned[request.dataset_id].append(_Planned(obj, request, aws.catalog.lake_objects_of(url)))
    for dataset_id, objects in sorted(planned.items()):
        dataset = datasets[dataset_id]
        assert dataset is not None
        results.update(_ingest_dataset(spark, args, aws, dataset=dataset, objects=objects, now=now))
    ordered = [results[i] for i in range(len(requests))]
    for result in ordered:
        _record(aws.catalog, args, result, now)
    counts = Counter(r.status.value for r in ordered)
    LOG.info("batch done: %s", ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    return BatchResult(ordered)


def _heads(s3: S3ObjectStore, bucket: str, requests: Sequence[BatchRequest]) -> list[Any]:
    with ThreadPoolExecutor(max_workers=HEAD_THREADS) as pool:
        return list(pool.map(lambda r: s3.head(bucket, r.key, r.version_id), requests))


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


# -------------------------------------------------------------------------------- one dataset


def _ingest_dataset(
    spark: SparkSession,
    args: IngestArgs,
    aws: AwsPorts,
    *,
    dataset: Dataset,
    objects: list[_Planned],
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
        index_table=args.index_table,
        correlation_id=args.correlation_id,
        now=now.isoformat(),
        objects={p.obj.index: p.obj for p in objects},
        hash_key=aws.hash_key,
        batch_rows=args.batch_rows,
        piece_bytes=args.piece_bytes,
    )
    outcomes: dict[int, ObjectResult] = {}
    for schema, piece_list in _pipelines(spark, aws.s3, settings):
        members = sorted({p.object_index for p in piece_list})
        part = replace(settings, objects={i: settings.objects[i] for i in members})
        outcomes.update(_run_pipeline(spark, aws, part, schema, piece_list))
    results: dict[int, ObjectResult] = {}
    for plan in objects:
        outcome = outcomes[plan.obj.index]
        _remove_stale(aws, settings, plan, outcome)
        results[plan.obj.index] = outcome
    return results


def _pipelines(
    spark: SparkSession, s3: S3ObjectStore, settings: TaskSettings
) -> list[tuple[T.StructType, list[pieces.Piece]]]:
    """The dataset's objects cut into pieces, in groups that share one frame schema: text
    datasets have one; Parquet objects are grouped by the schema of their footer (an object
    whose footer cannot be read runs on its own and is found unreadable by its read task; a
    gzip-wrapped one is one piece, which its reader decompresses)."""
    dataset = settings.dataset
    objects = list(settings.objects.values())
    if dataset.format is not DataFormat.PARQUET:
        large = [o for o in objects if o.size > settings.piece_bytes]
        split = _scan_large_text(spark, settings, large) if large else {}
        found = [
            p for o in objects for p in split.get(o.index, [pieces.Piece(o.index, size=o.size)])
        ]
        return [(tasks.frame_schema(dataset), found)]
    footers = _footers(s3.client, settings, objects)
    by_schema: dict[str, tuple[T.StructType, list[pieces.Piece]]] = {}
    for obj in objects:
        metadata, gzipped = footers[obj.index]
        if metadata is None:
            by_schema[f"unreadable-{obj.index}"] = (
                tasks.frame_schema(dataset),
                [pieces.Piece(obj.index, size=obj.size)],
            )
            continue
        data = _parquet_fields(metadata)
        schema = tasks.frame_schema(dataset, data)
        group = by_schema.setdefault(schema.json(), (schema, []))
        group[1].extend(
            [pieces.Piece(obj.index, size=obj.size)]
            if gzipped
            else pieces.parquet_pieces(obj.index, metadata, obj.size, settings.piece_bytes)
        )
    return list(by_schema.values())


def _parquet_fields(metadata: Any) -> list[T.StructField]:
    """The Spark fields of a Parquet footer's schema, as the readers give its columns (types
    Spark cannot hold are converted by `to_spark_compatible`, columns named like the job's own
    are left out; a file with a type that cannot be converted, or a repeated column name, gets
    none, and its read task finds it unreadable)."""
    arrow = metadata.schema.to_arrow_schema()
    try:
        arrow = arrow.empty_table().select(parquet_data_columns(list(arrow.names)))
        arrow = to_spark_compatible(arrow).schema
        return [T.StructField(f.name, spark_type(f.type)) for f in arrow]
    except Exception:
        return []


def _footers(
    client: Any, settings: TaskSettings, objects: list[BatchObject]
) -> dict[int, tuple[Any, bool]]:
    """Per object, its Parquet footer (None when it cannot be read) and whether the object is
    gzip-wrapped Parquet."""

    def footer(obj: BatchObject) -> tuple[Any, bool]:
        try:
            return pieces.parquet_metadata(
                client, settings.raw_bucket, obj.key, obj.version_id, obj.size
            ), False
        except Exception:
            return _gzipped_footer(client, settings, obj), True

    with ThreadPoolExecutor(max_workers=HEAD_THREADS) as pool:
        return dict(zip([o.index for o in objects], pool.map(footer, objects), strict=True))


def _gzipped_footer(client: Any, settings: TaskSettings, obj: BatchObject) -> Any:
    """The footer of gzip-wrapped Parquet (None when the object is not gzip, or not Parquet
    inside). Its footer cannot be reached by ranges: the object is streamed once through gzip
    to a temporary file on the driver's disk (memory stays one buffer), and only the footer is
    read from there. Without it, the object would run with no data columns and every row
    would be quarantined with an empty record."""
    if settings.dataset.compression is Compression.NONE:
        return None
    fetch = partial(get_version, client, settings.raw_bucket, obj.key, obj.version_id)
    try:
        if fetch(byte_range=(0, 1))["Body"].read() != GZIP_MAGIC:
            return None
        with tempfile.TemporaryDirectory(prefix="lethe-footer-") as tmp:
            path = Path(tmp) / "object.parquet"
            with gzip.GzipFile(fileobj=fetch()["Body"]) as stream, path.open("wb") as out:
                shutil.copyfileobj(stream, out, length=1024 * 1024)
            return pq.ParquetFile(path).metadata
    except Exception:
        return None


def _scan_large_text(
    spark: SparkSession, settings: TaskSettings, large: list[BatchObject]
) -> dict[int, list[pieces.Piece]]:
    """Where each large text object may be cut: one scan task per object, on the executors."""
    LOG.info("scanning %d large object(s) for split points", len(large))
    context = spark.sparkContext
    specs = [obj.index for obj in large]
    scanned = (
        context.parallelize(specs, len(specs))
        .map(partial(tasks.scan_object, settings=settings))
        .collect()
    )
    found: dict[int, list[pieces.Piece]] = {}
    for text in scanned:
        pieces_of = [tasks.piece_from_spec(s) for s in json.loads(text)]
        found[pieces_of[0].object_index] = pieces_of
        LOG.info(
            "object %s: %d piece(s)",
            settings.objects[pieces_of[0].object_index].url,
            len(pieces_of),
        )
    return found


# ------------------------------------------------------------------------------ one pipeline


@dataclass
class _PieceTotals:
    rows_read: int = 0
    unreadable: str | None = None
    columns: list[str] = field(default_factory=list)


def _run_pipeline(
    spark: SparkSession,
    aws: AwsPorts,
    settings: TaskSettings,
    schema: T.StructType,
    piece_list: list[pieces.Piece],
) -> dict[int, ObjectResult]:
    context = spark.sparkContext
    groups = task_groups([p.size for p in piece_list], min_tasks=context.defaultParallelism)
    specs = [json.dumps([tasks.piece_spec(piece_list[i]) for i in g]) for g in groups]
    source = spark.createDataFrame(
        context.parallelize([(s,) for s in specs], len(specs)), "pieces string"
    )
    reader = partial(tasks.read_pieces, settings=settings, schema=schema)
    # Both reads of the batch are kept on the executors' local disk, never in their heap: a
    # partition holds a task's pieces (up to 256 MiB of input, several times that as rows), and
    # caching it in memory ran 1.5 GB executors out of heap on a 1 GB object (docs/BENCHMARKS.md,
    # "Ingestion"); written and read back as a stream, it needs one cached batch at a time.
    frame = source.mapInArrow(reader, schema).persist(StorageLevel.DISK_ONLY)
    shuffle = max(context.defaultParallelism, len(groups))
    try:
        totals = _piece_totals(frame, settings)
        readable = sorted(i for i, t in totals.items() if t.unreadable is None)
        raw_entries = _write_raw_entries(frame, settings, readable, shuffle)
        conformed = _conformed(frame, settings, schema, readable).persist(StorageLevel.DISK_ONLY)
        try:
            lake = _write_lake(conformed, settings, shuffle)
            quarantine = _write_quarantine(conformed, settings, shuffle)
        finally:
            conformed.unpersist()
    finally:
        frame.unpersist()
    return _outcomes(
        aws, settings, totals, raw_entries=raw_entries, lake=lake, quarantine=quarantine
    )


def _piece_totals(frame: DataFrame, settings: TaskSettings) -> dict[int, _PieceTotals]:
    totals = {index: _PieceTotals() for index in settings.objects}
    for row in frame.where(col(KIND) == PIECE).select(OBJECT, INFO).collect():
        info = json.loads(row[INFO])
        total = totals[row[OBJECT]]
        total.rows_read += info["rows_read"]
        total.columns = total.columns or info["columns"]
        if info["unreadable"] and total.unreadable is None:
            total.unreadable = info["unreadable"]
    return totals


_ENTRY_STRUCT = "struct<s:string,r:bigint,h:array<bigint>>"


def _write_raw_entries(
    frame: DataFrame, settings: TaskSettings, readable: list[int], shuffle: int
) -> dict[int, int]:
    """The raw objects' entries: the batches' partial entries added up per (object, subject),
    the first hints kept, then written per object by `write_raw_entries`."""
    entries = frame.where((col(KIND) == ENTRY) & col(OBJECT).isin(readable)).select(
        col(OBJECT).alias("object"), F.from_json(col(INFO), _ENTRY_STRUCT).alias("e")
    )
    added = entries.groupBy("object", F.col("e.s").alias("subject")).agg(
        F.sum("e.r").alias("rows"),
        F.slice(F.array_sort(F.flatten(F.collect_list("e.h"))), 1, tasks.HINTS_KEPT).alias("hints"),
    )
    written = (
        added.repartition(shuffle, "object")
        .sortWithinPartitions("object", "subject")
        .mapInArrow(partial(tasks.write_raw_entries, settings=settings), tasks.RAW_SUMMARY)
        .collect()
    )
    return {row["object"]: row["entries"] for row in written}


def _conformed(
    frame: DataFrame, settings: TaskSettings, schema: T.StructType, readable: list[int]
) -> DataFrame:
    """Every record of the readable objects conformed (`validate.conform`): OBJECT, POSITION,
    the schema's columns, REASONS (the reader's, when it rejected the record) and RECORD."""
    dataset = settings.dataset
    rows = frame.where((col(KIND) == ROW) & col(OBJECT).isin(readable))
    keep = [OBJECT, PREREASONS]
    data = [f.name for f in schema.fields[len(tasks.META_FIELDS) :]]
    if dataset.format is DataFormat.JSONL:
        source = rows.transform(extract_json_fields(dataset, keep=keep))
    elif dataset.format is DataFormat.CSV:
        source = rows.select(*[col(c) for c in (*keep, POSITION, RECORD, *data)])
    else:
        record = F.to_json(F.struct(*[col(c) for c in data])) if data else F.lit("{}")
        source = rows.select(
            *[col(c) for c in (*keep, POSITION)], record.alias(RECORD), *[col(c) for c in data]
        )
    conformed = source.transform(conform(dataset, keep=keep))
    reasons = F.when(F.size(col(PREREASONS)) > 0, col(PREREASONS)).otherwise(col(REASONS))
    conformed = conformed.withColumn(REASONS, reasons).drop(PREREASONS)
    # each valid row's lake partition path; a row whose lake key S3 would refuse is rejected
    placed = T.StructType([*conformed.schema.fields, T.StructField(PART, T.StringType())])
    return conformed.mapInArrow(partial(tasks.place_rows, settings=settings), placed)


def _write_lake(conformed: DataFrame, settings: TaskSettings, shuffle: int) -> list[Any]:
    dataset = settings.dataset
    valid = conformed.where(F.size(col(REASONS)) == 0).select(
        col(OBJECT), col(POSITION), *[col(c.name) for c in dataset.schema_], col(PART)
    )
    return (
        valid.repartition(shuffle, col(OBJECT), col(PART))
        .sortWithinPartitions(col(OBJECT), col(PART), col(POSITION))
        .mapInArrow(partial(tasks.write_lake_files, settings=settings), tasks.LAKE_SUMMARY)
        .collect()
    )


def _write_quarantine(conformed: DataFrame, settings: TaskSettings, shuffle: int) -> list[Any]:
    rejected = conformed.where(F.size(col(REASONS)) > 0).select(
        col(OBJECT), col(POSITION), col(REASONS), col(RECORD)
    )
    return (
        rejected.repartition(shuffle, col(OBJECT))
        .sortWithinPartitions(col(OBJECT), col(POSITION))
        .mapInArrow(partial(tasks.write_quarantine, settings=settings), tasks.FILE_SUMMARY)
        .collect()
    )


def _outcomes(
    aws: AwsPorts,
    settings: TaskSettings,
    totals: dict[int, _PieceTotals],
    *,
    raw_entries: dict[int, int],
    lake: list[Any],
    quarantine: list[Any],
) -> dict[int, ObjectResult]:
    written: dict[int, list[Any]] = defaultdict(list)
    for row in lake:
        written[row["object"]].append(row)
    quarantined = {row["object"]: row for row in quarantine}
    results: dict[int, ObjectResult] = {}
    for index_of, obj in settings.objects.items():
        request = BatchRequest(obj.dataset_id, obj.key, obj.version_id)
        total = totals[index_of]
        if index_of not in raw_entries:  # nobody's rows (or none could be read): no entries
            replace_entries(aws.index, aws.s3, settings.raw_bucket, obj.key, [])
        if total.unreadable is not None:
            url = _quarantine_file(aws.s3, settings, obj, total.unreadable)
            results[index_of] = ObjectResult(
                request, obj.url, ObjectStatus.QUARANTINED, quarantine_object=url
            )
            continue
        files = sorted(written[index_of], key=lambda r: r["url"])
        extras = [c for c in total.columns if c not in {c.name for c in settings.dataset.schema_}]
        if extras:
            LOG.info(
                "%s: dropping columns the schema does not declare: %s", obj.url, ", ".join(extras)
            )
        rows_written = sum(r["rows"] for r in files)
        rejected = quarantined.get(index_of)
        status = (
            ObjectStatus.INGESTED
            if rows_written or not total.rows_read
            else ObjectStatus.QUARANTINED
        )
        results[index_of] = ObjectResult(
            request,
            obj.url,
            status,
            rows_read=total.rows_read,
            rows_written=rows_written,
            rows_quarantined=rejected["rows"] if rejected else 0,
            lake_objects=[r["url"] for r in files],
            quarantine_object=rejected["url"] if rejected else None,
        )
        LOG.info(
            "%s version %s: %s, %d rows read, %d written to %d file(s), %d quarantined",
            obj.url, obj.version_id, status.value, total.rows_read, rows_written, len(files),
            results[index_of].rows_quarantined,
        )  # fmt: skip
    return results


def _quarantine_file(
    s3: S3ObjectStore, settings: TaskSettings, obj: BatchObject, reason: str
) -> str:
    """The document that stands for a wholly unreadable file, in quarantine."""
    LOG.warning(
        "%s version %s cannot be read, quarantining it whole: %s", obj.url, obj.version_id, reason
    )
    key = layout.quarantine_file_key(settings.dataset.dataset_id, settings.digest(obj.index))
    document = {
        "source": {"object": obj.url, "version_id": obj.version_id},
        "reason": reason,
        "correlation_id": settings.correlation_id,
        "rejected_at": settings.now,
    }
    body = (json.dumps(document, ensure_ascii=False, indent=2) + "\n").encode("utf-8")
    s3.put_bytes(
        settings.lake_bucket,
        key,
        body,
        content_type=JSON_CONTENT_TYPE,
        metadata=tasks.ingest_metadata(settings.correlation_id),
    )
    return s3_url(settings.lake_bucket, key)


# ------------------------------------------------------------------------------ stale files


def _remove_stale(
    aws: AwsPorts, settings: TaskSettings, plan: _Planned, result: ObjectResult
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
        if aws.s3.delete_current(bucket, key):
            LOG.info("removed stale lake object %s", url)
        _unindex(aws, bucket, key)
    for key in (
        layout.quarantine_rows_key(dataset_id, digest),
        layout.quarantine_file_key(dataset_id, digest),
    ):
        if s3_url(lake, key) == result.quarantine_object:
            continue
        if aws.s3.delete_current(lake, key):
            LOG.info("removed stale quarantine object %s", s3_url(lake, key))
        _unindex(aws, lake, key)


def _unindex(aws: AwsPorts, bucket: str, key: str) -> None:
    url = s3_url(bucket, key)
    action, count = settle_missing_key(aws.index, url, aws.s3.versions_of(bucket, key))
    if count:
        LOG.info("%s: %d index entries of %s", action.value, count, url)
