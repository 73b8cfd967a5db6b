"""The ingest job's steps 4 and 5 for one group of pieces: the Spark pipeline that reads the
pieces (`ingest_tasks.read_pieces`), conforms the records (`validate`), writes lake files,
quarantine and index entries, and the outcome of each object. See `ingest_core`'s docstring for
the whole job."""

from __future__ import annotations

import json
import logging
import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from pyspark import InheritableThread, StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lethe_jobs import ingest_tasks as tasks
from lethe_jobs import layout, pieces
from lethe_jobs.ingest_outcomes import AwsPorts, BatchRequest, ObjectResult
from lethe_jobs.ingest_tasks import (
    ENTRY,
    INFO,
    KIND,
    OBJECT,
    PACKED,
    PACKED_ROWS,
    PART,
    PIECE,
    PREREASONS,
    ROW,
    BatchObject,
    TaskSettings,
)
from lethe_jobs.ingest_tasks.packed import ARROW_RECORDS, arrow_records
from lethe_jobs.tasks import wave_groups
from lethe_jobs.validate import (
    POSITION,
    REASONS,
    RECORD,
    col,
    conform,
    extract_json_fields,
)
from lethe_shared.aws.s3 import S3ObjectStore, s3_url
from lethe_shared.catalog.object_catalog import ObjectStatus
from lethe_shared.datasets.document import HIVE_DEFAULT_PARTITION, DataFormat, Dataset
from lethe_shared.index.maintenance import replace_entries

LOG = logging.getLogger("lethe.ingest")


JSON_CONTENT_TYPE = "application/json"
CACHE_COMPRESSED = "spark.sql.inMemoryColumnarStorage.compressed"  # the persisted read's columns
# the Spark SQL settings the pipeline runs with (the session's own are put back after it)
PIPELINE_CONF = {CACHE_COMPRESSED: "false"}


@dataclass
class _PieceTotals:
    rows_read: int = 0
    rows_without_subject: int = 0  # records that name no subject: never indexed
    unreadable: str | None = None
    columns: list[str] = field(default_factory=list)
    entries: int = 0  # the raw object's entries its read task wrote (an object read whole)
    packed_bytes: int = 0  # its largest packed run (`ingest_tasks.packed`), in bytes
    packed_rows: int = 0  # its rows that travelled packed


def run_pipeline(
    spark: SparkSession,
    aws: AwsPorts,
    settings: TaskSettings,
    schema: T.StructType,
    piece_list: list[pieces.Piece],
) -> dict[int, ObjectResult]:
    context = spark.sparkContext
    # the read tasks: a whole number of waves of them, where the pieces' sizes allow it
    groups = wave_groups([p.size for p in piece_list], context.defaultParallelism)
    specs = [json.dumps([tasks.piece_spec(piece_list[i]) for i in g]) for g in groups]
    source = spark.createDataFrame(
        context.parallelize([(s,) for s in specs], len(specs)), "pieces string"
    )
    reader = partial(tasks.read_pieces, settings=settings, schema=schema)
    # the writer tasks: at least one per core, and a whole number of waves of them
    cores = max(1, context.defaultParallelism)
    shuffle = -(-max(cores, len(groups)) // cores) * cores
    # The batch's read is kept on the executors' local disk, never in their heap: a partition
    # holds a task's pieces (up to 256 MiB of input, several times that as rows), and caching
    # it in memory ran 1.5 GB executors out of heap on a 1 GB object (docs/BENCHMARKS.md,
    # "Ingestion"); written and read back as a stream, it needs one cached batch at a time.
    # The conformed rows are not kept: one pass writes the lake and quarantine files.
    # The cached columns are not encoded (CACHE_COMPRESSED): choosing an encoding tries each one
    # on every value (a hash map of a column's distinct values), which cost more CPU than the
    # rest of caching; the read is written to local disk as it is, a few times its text's size
    # at most, and read back once per action.
    previous = {key: spark.conf.get(key, None) for key in (*PIPELINE_CONF, ARROW_RECORDS)}
    for key, value in PIPELINE_CONF.items():
        spark.conf.set(key, value)
    frame = source.mapInArrow(reader, schema)
    beside: Beside | None = None
    try:
        frame = frame.persist(StorageLevel.DISK_ONLY)
        totals = _piece_totals(frame, settings)
        readable = sorted(i for i, t in totals.items() if t.unreadable is None)
        # an object read whole had its entries written by its read task; a split object's
        # pieces sent theirs, added up and written by a job that runs beside the writes
        # (`Beside`: its few tasks take the cores the lake writers leave idle)
        raw_entries = {i: totals[i].entries for i in readable if totals[i].entries}
        split = sorted({p.object_index for p in piece_list if not p.whole} & set(readable))
        if split:
            beside = Beside(spark, partial(_write_raw_entries, frame, settings, split, shuffle))
        records = {i: tasks.record_columns(totals[i].columns, settings.dataset) for i in readable}
        texts = any(pairs is not None for pairs in records.values())
        packed = max((totals[i].packed_bytes for i in readable), default=0)
        conformed = _conformed(frame, settings, schema, readable, texts=texts, packed=packed > 0)
        # the writer tasks get Arrow batches of about PACK_BATCH_BYTES while packed runs travel
        spark.conf.set(ARROW_RECORDS, str(arrow_records(packed)))
        # every object read whole: each object's rows are in one partition already, which
        # writes its files without a shuffle; a split object's pieces are shuffled together
        written = _write_files(conformed, settings, shuffle if split else None, records)
        lake = [row for row in written if row["kind"] == "lake"]
        quarantine = [row for row in written if row["kind"] == "quarantine"]
        if beside is not None:
            raw_entries.update(beside.result())
    finally:
        if beside is not None:
            beside.abandon()  # before the read it scans is dropped (done already, unless failed)
        frame.unpersist()
        for key, before in previous.items():
            if before is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, before)
    return _outcomes(
        aws, settings, totals, raw_entries=raw_entries, lake=lake, quarantine=quarantine
    )


def _piece_totals(frame: DataFrame, settings: TaskSettings) -> dict[int, _PieceTotals]:
    totals = {index: _PieceTotals() for index in settings.objects}
    for row in frame.where(col(KIND) == PIECE).select(OBJECT, INFO).collect():
        info = json.loads(row[INFO])
        total = totals[row[OBJECT]]
        total.rows_read += info["rows_read"]
        total.rows_without_subject += info.get("rows_without_subject", 0)
        total.columns = total.columns or info["columns"]
        total.entries += info.get("entries") or 0
        total.packed_bytes = max(total.packed_bytes, info.get("packed_bytes") or 0)
        total.packed_rows += info.get("packed_rows") or 0
        if info["unreadable"] and total.unreadable is None:
            total.unreadable = info["unreadable"]
    return totals


class Beside:
    """A Spark action run in a driver thread beside the job's next one: submitted once that
    job runs (or has ended), so that Spark's FIFO scheduler gives that job's tasks the cores
    first and the action's tasks take the cores it leaves idle (the last lake files'
    writers), instead of slowing the planning of that job down on the same cores. `result`
    waits for the action and raises what it raised; `abandon` (the next job failed) waits for
    an action that started, and keeps one that has not from starting."""

    WAIT_S = 0.02  # how often the thread looks for the next job

    def __init__(self, spark: SparkSession, action: Callable[[], dict[int, int]]) -> None:
        self.tracker = spark.sparkContext.statusTracker()
        self.action = action
        self.value: dict[int, int] | None = None
        self.error: BaseException | None = None
        self.wanted = True
        self.released = threading.Event()  # the next job ended (or failed)
        self.thread = InheritableThread(target=self._run, name="lethe-beside")
        self.thread.start()

    def _run(self) -> None:
        try:
            while not self.released.wait(self.WAIT_S) and not self.tracker.getActiveJobsIds():
                pass
            if self.wanted:
                self.value = self.action()
        except BaseException as exc:  # re-raised in the driver's thread by `result`
            self.error = exc

    def result(self) -> dict[int, int]:
        self.released.set()
        self.thread.join()
        if self.error is not None:
            raise self.error
        if self.value is None:
            raise RuntimeError("the action beside the lake writes was abandoned")
        return self.value

    def abandon(self) -> None:
        self.wanted = False
        self.released.set()
        self.thread.join()


def _write_raw_entries(
    frame: DataFrame, settings: TaskSettings, readable: list[int], shuffle: int
) -> dict[int, int]:
    """The entries of the raw objects read in several pieces (`readable`: those of them that
    could be read): each piece's partial entries (one ENTRY row, an Arrow IPC stream) go to the
    writer task of their object, which adds them up per subject (`tasks.write_raw_entries`).
    They reach Python as rows, not Arrow batches: a piece's entries can be tens of megabytes,
    and an Arrow batch size for them (a session setting) would be the lake writers' too, whose
    job runs at the same time (`Beside`)."""
    entries = frame.where((col(KIND) == ENTRY) & col(OBJECT).isin(readable)).select(
        OBJECT, POSITION, PACKED
    )
    # shuffled by object in the JVM, then handed to Python as rows (a few large ones)
    by_object = entries.repartition(min(shuffle, len(readable)), OBJECT).sortWithinPartitions(
        OBJECT
    )
    written = by_object.rdd.mapPartitions(
        partial(tasks.write_raw_entries, settings=settings)
    ).collect()
    return dict(written)


def _conformed(
    frame: DataFrame,
    settings: TaskSettings,
    schema: T.StructType,
    readable: list[int],
    *,
    texts: bool = False,
    packed: bool = False,
) -> DataFrame:
    """Every record of the readable objects conformed (`validate.conform`): OBJECT, POSITION,
    the schema's columns, REASONS (the reader's, when it rejected the record) and RECORD; with
    `texts` (CSV), also each schema column's text as read (`tasks.text_column`), from which the
    quarantine writer rebuilds the RECORD the read task left null (`tasks.record_columns`).
    With `packed` (CSV: the read tasks packed plain rows, `ingest_tasks.packed`), the packed
    runs too: valid, their partition path the one the read task gave them (INFO), PACKED
    set; they pass the conforming untouched, as rows whose values are all null."""
    dataset = settings.dataset
    kinds = [ROW, PACKED_ROWS] if packed else [ROW]
    rows = frame.where(col(KIND).isin(kinds) & col(OBJECT).isin(readable))
    passing = [OBJECT, PREREASONS, *([KIND, INFO, PACKED] if packed else [])]
    keep = list(passing)
    fields = [f.name for f in schema.fields[len(tasks.META_FIELDS) :]]
    data = [name for name in fields if not name.startswith(tasks.TYPED_PREFIX)]
    # the values the read task converted (`tasks.typed`), by schema column
    typed = {c.name: tasks.typed_column(i) for i, c in enumerate(dataset.schema_)}
    typed = {name: column for name, column in typed.items() if column in fields}
    if dataset.format is DataFormat.JSONL:
        source = rows.transform(extract_json_fields(dataset, keep=keep))
    elif dataset.format is DataFormat.CSV:
        carried = []
        if texts:
            index = {c.name: i for i, c in enumerate(dataset.schema_)}
            carried = [col(c).alias(tasks.text_column(index[c])) for c in data]
            keep = [*keep, *[tasks.text_column(index[c]) for c in data]]
        source = rows.select(
            *[col(c) for c in (*passing, POSITION, RECORD, *data, *typed.values())],
            *carried,
        )
    else:
        record = F.to_json(F.struct(*[col(c) for c in data])) if data else F.lit("{}")
        source = rows.select(
            *[col(c) for c in (*keep, POSITION)], record.alias(RECORD), *[col(c) for c in data]
        )
    conformed = source.transform(conform(dataset, keep=keep, typed=typed))
    reasons = F.when(F.size(col(PREREASONS)) > 0, col(PREREASONS)).otherwise(col(REASONS))
    if packed:  # a packed run is valid rows
        run = col(KIND) == F.lit(PACKED_ROWS)
        reasons = F.when(run, F.array().cast("array<string>")).otherwise(reasons)
    conformed = conformed.withColumn(REASONS, reasons).drop(PREREASONS)
    # each valid row's lake partition path; a row whose lake key S3 would refuse is rejected
    rendered = sql_partition_path(conformed, settings)
    if rendered is not None:  # in Spark SQL, where it renders exactly what `place_rows` does
        valid = col(REASONS).isNull() | (F.size(col(REASONS)) == 0)
        part = F.when(valid, rendered)
        if packed:  # a packed run's path is the one its read task rendered
            part = F.when(col(KIND) == F.lit(PACKED_ROWS), col(INFO)).otherwise(part)
            return conformed.withColumn(PART, part).drop(KIND, INFO)
        return conformed.withColumn(PART, part)
    if packed:  # `tasks.pack_plan` packs only where the path is rendered in Spark SQL
        raise AssertionError("packed rows of a dataset whose partition path is not in SQL")
    placed = T.StructType([*conformed.schema.fields, T.StructField(PART, T.StringType())])
    return conformed.mapInArrow(partial(tasks.place_rows, settings=settings), placed)


def sql_partition_path(conformed: DataFrame, settings: TaskSettings) -> Column | None:
    """Each row's lake partition path as Spark SQL, when that gives exactly what `place_rows`
    gives (`layout.partition_path` of the row's values) and no valid row can get a key
    problem: a dataset without partition columns (""), or whose partition columns are all
    dates (a date renders as ISO `yyyy-MM-dd`, which needs no escaping; null as
    HIVE_DEFAULT_PARTITION) and whose longest lake key is within S3's and the index's limits
    (`tasks.key_problem`). Then the rows need not go through a Python task and back to be
    placed. None otherwise (`place_rows` places them). A valid row whose date falls outside
    the years 1-9999 fails the task, as it did in `place_rows` (Python has no such date)."""
    dataset = settings.dataset
    names = list(dataset.partition_by)
    if not names:
        return F.lit("")
    if not all(isinstance(conformed.schema[n].dataType, T.DateType) for n in names):
        return None
    if not tasks.dated_partitions(settings):  # the longest lake key is too long
        return None
    parts = []
    for name in names:
        value = col(name)
        beyond = F.raise_error(F.lit(f"partition column {name}: a date outside years 1-9999"))
        shown = (
            F.when(value.isNull(), F.lit(HIVE_DEFAULT_PARTITION))
            .when(F.year(value).between(1, 9999), F.date_format(value, "yyyy-MM-dd"))
            .otherwise(beyond)
        )
        parts.append(F.concat(F.lit(f"{layout.escape_partition_value(name)}="), shown))
    return F.concat_ws("/", *parts)


def _write_files(
    conformed: DataFrame,
    settings: TaskSettings,
    shuffle: int | None,
    records: dict[int, list[tuple[str, str]] | None],
) -> list[Any]:
    """The lake files and the quarantine files in one pass over the conformed rows, so that one
    task writes each lake file and each object's quarantine file, sorted by source position
    (`tasks.write_files`): shuffled into `shuffle` tasks by (object, partition path; null for a
    rejected row), or, with `shuffle` None (every object in one partition of `conformed`, as
    its read task left it), sorted where they are, each read task's rows written by one task.
    What only one kind needs is null in the other's rows (the sort does not carry it)."""
    dataset = settings.dataset
    valid = F.size(col(REASONS)) == 0
    texts = [c for c in conformed.columns if c.startswith(tasks.TEXT_PREFIX)]
    rows = conformed.where(col(REASONS).isNotNull()).select(
        col(OBJECT),
        col(POSITION),
        *[F.when(valid, col(c.name)).alias(c.name) for c in dataset.schema_],
        col(PART),
        col(REASONS),
        F.when(~valid, col(RECORD)).alias(RECORD),
        *[F.when(~valid, _text(c, dataset)).alias(c) for c in texts],
        *([col(PACKED)] if PACKED in conformed.columns else []),
    )
    writer = partial(tasks.write_files, settings=settings, records=records)
    if shuffle is not None:
        rows = rows.repartition(shuffle, col(OBJECT), col(PART))
    return (
        rows.sortWithinPartitions(col(OBJECT), col(PART).asc_nulls_first(), col(POSITION))
        .mapInArrow(writer, tasks.WRITE_SUMMARY)
        .collect()
    )


def _text(name: str, dataset: Dataset) -> Column:
    """A rejected row's text of a schema column (`tasks.text_column`). Where the read task
    converted it (`tasks.typed`: its text is null there), the converted value as Spark renders
    it, which is the text as read."""
    index = int(name[len(tasks.TEXT_PREFIX) :])
    if index not in tasks.typed_indexes(dataset):
        return col(name)
    return F.coalesce(col(name), col(dataset.schema_[index].name).cast("string"))


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
            rows_without_subject=total.rows_without_subject,
            rows_written=rows_written,
            rows_quarantined=rejected["rows"] if rejected else 0,
            lake_objects=[r["url"] for r in files],
            quarantine_object=rejected["url"] if rejected else None,
        )
        LOG.info(
            "%s version %s: %s, %d rows read, %d written to %d file(s), %d quarantined, "
            "%d without a subject (not indexed), %d valid without Spark's checks (packed)",
            obj.url, obj.version_id, status.value, total.rows_read, rows_written, len(files),
            results[index_of].rows_quarantined, total.rows_without_subject, total.packed_rows,
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
