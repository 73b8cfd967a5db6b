"""The ingest job: one raw object version in, curated Parquet and quarantine out.

1. load the dataset document (the registry) and stop with SUPERSEDED when the catalog knows a
   newer version of the raw key (an older version ingested last must not replace its rows);
2. stream the exact raw object version to a local file and read it (`readers`);
3. conform the records in Spark (`validate`, pure transformations);
4. write valid rows as Parquet per partition (`layout`), with pyarrow;
5. write rejected rows (or the unreadable file's reason) to the quarantine prefix;
6. index what it wrote and read (`indexing`): entries for every lake file, the quarantine file
   and the raw object version, each object's entries replaced as a whole;
7. remove the files an earlier ingestion of the same raw key wrote that this run did not
   rewrite, with their entries;
8. record the outcome on the raw object version's catalog item and return the summary.

Every lake object it writes carries the S3 metadata `lethe-producer: ingest`: the object events
path sees these writes too, and leaves their indexing to this job.

Quarantining is a success of the job. Failures worth a retry or an investigation (AWS errors,
an unregistered dataset, a missing version, a missing catalog item) raise.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession

from lethe_jobs import layout
from lethe_jobs.arrow_bridge import arrow_schema, dataframe_to_table, table_to_dataframe
from lethe_jobs.errors import RawObjectNotFoundError, UnreadableFileError
from lethe_jobs.indexing import (
    SubjectRows,
    entries_of_rows,
    lake_file_ref,
    lake_parquet_entries,
    quarantine_entries,
    raw_subject_rows,
    with_typed_subjects,
)
from lethe_jobs.readers import RawRecords, RejectedRecord, read_raw
from lethe_jobs.validate import (
    POSITION,
    REASONS,
    RECORD,
    col,
    conform,
    extra_columns,
    extract_json_fields,
    rejected_rows,
    schema_of,
    valid_rows,
    with_record,
)
from lethe_shared.arrow_index import ObjectRef
from lethe_shared.catalog import IngestionRecord, ObjectCatalog, ObjectStatus, Zone
from lethe_shared.datasets import Dataset
from lethe_shared.index_maintenance import INGEST_PRODUCER, settle_missing_key
from lethe_shared.registry import DatasetRegistry, require_dataset
from lethe_shared.s3 import PRODUCER_METADATA, ObjectHead, S3ObjectStore, s3_url, split_s3_url
from lethe_shared.subjects import IndexEntry, SubjectIndex

LOG = logging.getLogger("lethe.ingest")
# Every lake object the job writes says so: the object events path sees these writes too, and
# leaves their indexing to this job (lethe_shared.index_maintenance.indexed_by_writer).
INGEST_METADATA = {PRODUCER_METADATA: INGEST_PRODUCER}
PARQUET_CONTENT_TYPE = "application/vnd.apache.parquet"
JSONL_CONTENT_TYPE = "application/x-ndjson"
JSON_CONTENT_TYPE = "application/json"


@dataclass(frozen=True)
class IngestArgs:
    dataset_id: str
    raw_bucket: str
    key: str
    version_id: str
    lake_bucket: str
    datasets_table: str
    catalog_table: str
    index_table: str
    hash_key_secret: str  # ARN or name of the secret whose SecretString is the HMAC key
    correlation_id: str

    @property
    def object_url(self) -> str:
        return s3_url(self.raw_bucket, self.key)

    @property
    def digest(self) -> str:
        return layout.object_hash(self.raw_bucket, self.key)


def parse_args(argv: Sequence[str] | None) -> tuple[IngestArgs, list[str]]:
    """`--key value` arguments; unknown ones (Glue adds --JOB_ID, --JOB_RUN_ID,
    --job-bookmark-option, ...) are returned apart and ignored."""
    parser = argparse.ArgumentParser(prog="ingest", description="Lethe ingest job")
    for name in IngestArgs.__dataclass_fields__:
        flag = name.replace("_", "-")
        parser.add_argument(f"--{flag}", f"--{name}", dest=name, required=True)
    known, unknown = parser.parse_known_args(argv)
    return IngestArgs(**vars(known)), unknown


@dataclass(frozen=True)
class IngestResult:
    status: ObjectStatus
    rows_read: int
    rows_written: int
    rows_quarantined: int
    lake_objects: list[str]
    quarantine_object: str | None

    def summary(self) -> dict[str, Any]:
        return {
            "status": self.status.value,
            "rows_read": self.rows_read,
            "rows_written": self.rows_written,
            "rows_quarantined": self.rows_quarantined,
            "lake_objects": self.lake_objects,
            "quarantine_object": self.quarantine_object,
        }


@dataclass(frozen=True)
class AwsPorts:
    s3: S3ObjectStore
    datasets: DatasetRegistry
    catalog: ObjectCatalog
    index: SubjectIndex
    hash_key: bytes = field(repr=False)  # the subject HMAC key: never logged


@dataclass(frozen=True)
class _Run:
    """Everything one run's steps share."""

    args: IngestArgs
    dataset: Dataset
    s3: S3ObjectStore
    workdir: Path
    now: datetime
    hash_key: bytes = field(repr=False)


@dataclass
class _Indexing:
    """The entries of the objects a run wrote and read, by object URL, written at the end."""

    entries: dict[str, list[IndexEntry]] = field(default_factory=dict)

    def add(self, object_url: str, entries: list[IndexEntry]) -> None:
        self.entries[object_url] = entries


def run_ingest(spark: SparkSession, args: IngestArgs, aws: AwsPorts, now: datetime) -> IngestResult:
    dataset = require_dataset(aws.datasets, args.dataset_id)
    newer = aws.catalog.newer_version_of(args.object_url, args.version_id)
    if newer is not None:
        LOG.warning(
            "%s version %s is superseded by version %s: nothing is written",
            args.object_url,
            args.version_id,
            newer,
        )
        superseded = IngestResult(ObjectStatus.SUPERSEDED, 0, 0, 0, [], None)
        _record(aws, args, superseded, now)
        return superseded
    earlier = aws.catalog.lake_objects_of(args.object_url)
    LOG.info(
        "ingesting %s version %s into dataset %s (%s)",
        args.object_url,
        args.version_id,
        dataset.dataset_id,
        dataset.format.value,
    )
    indexing = _Indexing()
    with tempfile.TemporaryDirectory(prefix="lethe-ingest-") as tmp:
        run = _Run(args, dataset, aws.s3, Path(tmp), now, aws.hash_key)
        raw_path = run.workdir / "raw"
        raw = aws.s3.download(args.raw_bucket, args.key, args.version_id, raw_path)
        if raw is None:
            raise RawObjectNotFoundError(
                f"{args.object_url} version {args.version_id} cannot be read: it is not there"
            )
        try:
            records = read_raw(raw_path, dataset, run.workdir)
        except UnreadableFileError as exc:
            result = _quarantine_file(run, exc.reason)
            indexing.add(args.object_url, [])  # no row can be read: nobody's rows
        else:
            result = _ingest_records(spark, run, records, _raw_ref(args, dataset, raw), indexing)
    _write_index(aws.index, indexing)
    _remove_stale(run, earlier, result, aws.index)
    _record(aws, args, result, now)
    LOG.info(
        "%s: %d rows read, %d written, %d quarantined",
        result.status,
        result.rows_read,
        result.rows_written,
        result.rows_quarantined,
    )
    return result


def _raw_ref(args: IngestArgs, dataset: Dataset, raw: ObjectHead) -> ObjectRef:
    return ObjectRef(args.object_url, Zone.RAW, dataset.format.value, args.version_id, raw.etag)


def _write_index(index: SubjectIndex, indexing: _Indexing) -> None:
    """Each object's entries become exactly the ones computed: written, then the entries of
    subjects the object no longer holds deleted (lethe_shared's replace_object)."""
    for url, entries in indexing.entries.items():
        index.replace_object(url, entries)
    count = sum(len(e) for e in indexing.entries.values())
    LOG.info("indexed %d objects: %d subject entries", len(indexing.entries), count)


def _record(aws: AwsPorts, args: IngestArgs, result: IngestResult, now: datetime) -> None:
    aws.catalog.record_ingestion(
        args.object_url,
        args.version_id,
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


def _ingest_records(
    spark: SparkSession, run: _Run, records: RawRecords, raw_ref: ObjectRef, indexing: _Indexing
) -> IngestResult:
    extras = extra_columns(records.columns, run.dataset)
    if extras:
        LOG.info("dropping columns the schema does not declare: %s", ", ".join(extras))
    valid, rejected, typed_subjects = _validate(spark, run.dataset, records)
    rejected = sorted([*records.rejected, *rejected], key=lambda r: r.position)
    lake_objects = _write_partitions(run, valid, indexing)
    quarantine_object = _write_quarantined_rows(run, records.coordinate, rejected, indexing)
    indexing.add(raw_ref.object_url, _raw_entries(run, records, typed_subjects, raw_ref))
    written = int(valid.num_rows)
    status = ObjectStatus.INGESTED if written or not records.rows_read else ObjectStatus.QUARANTINED
    return IngestResult(
        status, records.rows_read, written, len(rejected), lake_objects, quarantine_object
    )


def _raw_entries(
    run: _Run, records: RawRecords, typed_subjects: Any, ref: ObjectRef
) -> list[IndexEntry]:
    """The raw object's entries: every record it holds, valid or rejected; subject values as
    validation typed them, or as read where they did not convert (indexing module)."""
    rows: SubjectRows = raw_subject_rows(records, run.dataset)
    if typed_subjects is not None:
        rows = with_typed_subjects(rows, typed_subjects, run.dataset)
    return entries_of_rows(rows, run.dataset, ref, key=run.hash_key)


def _subject_heads(dataset: Dataset) -> list[str]:
    return sorted({path.split(".")[0] for path in dataset.subject_columns})


def _validate(
    spark: SparkSession, dataset: Dataset, records: RawRecords
) -> tuple[Any, list[RejectedRecord], Any]:
    """Valid rows (Arrow, POSITION and schema columns, in source order), rejected rows, and
    the subject columns of every row as validation typed them (Arrow, POSITION first)."""
    if records.table.num_rows == 0:
        empty = arrow_schema(schema_of(dataset)).empty_table()
        return empty.add_column(0, POSITION, pa.array([], pa.int64())), [], None
    frame: DataFrame = table_to_dataframe(spark, records.table)
    if records.json_text:
        frame = frame.transform(extract_json_fields(dataset))
    conformed = frame.transform(with_record).transform(conform(dataset)).persist()
    try:
        valid = dataframe_to_table(valid_rows(conformed).orderBy(POSITION))
        rejected = [
            RejectedRecord(int(row[POSITION]), tuple(row[REASONS]), str(row[RECORD]))
            for row in rejected_rows(conformed).orderBy(POSITION).collect()
        ]
        heads = [col(POSITION), *[col(h) for h in _subject_heads(dataset)]]
        typed_subjects = dataframe_to_table(conformed.select(*heads))
    finally:
        conformed.unpersist()
    return valid, rejected, typed_subjects


def _file_schema(run: _Run) -> Any:
    """The Parquet schema of a lake file: every schema column but the partition columns, with
    the declared types and nullability, and where the rows came from in the metadata."""
    fields = [
        f for f in arrow_schema(schema_of(run.dataset)) if f.name not in run.dataset.partition_by
    ]
    return pa.schema(fields).with_metadata(
        {"lethe.source_object": run.args.object_url, "lethe.source_version_id": run.args.version_id}
    )


def _write_partitions(run: _Run, valid: Any, indexing: _Indexing) -> list[str]:
    schema = _file_schema(run)
    written: list[str] = []
    for partition, indices in layout.partition_groups(valid, run.dataset.partition_by).items():
        part = valid.take(pa.array(indices, pa.int64())).select(schema.names).cast(schema)
        key = layout.lake_key(run.dataset.dataset_id, partition, run.args.digest)
        local = run.workdir / f"part-{len(written)}.parquet"
        pq.write_table(part, local, compression="snappy")
        stored = _put(run, key, local, PARQUET_CONTENT_TYPE)
        url = s3_url(run.args.lake_bucket, key)
        written.append(url)
        LOG.info("wrote %d rows to %s (version %s)", part.num_rows, url, stored.version_id)
        ref = lake_file_ref(url, key, run.dataset, stored.version_id, stored.etag)
        indexing.add(url, lake_parquet_entries(local, key, run.dataset, ref, key=run.hash_key))
    return written


def _source(run: _Run) -> dict[str, Any]:
    return {"object": run.args.object_url, "version_id": run.args.version_id}


def _quarantine_line(run: _Run, coordinate: str, rejected: RejectedRecord) -> str:
    """One JSON Lines record; the rejected record's JSON text is kept byte for byte."""
    head = json.dumps(
        {"source": {**_source(run), coordinate: rejected.position}, "reasons": rejected.reasons},
        ensure_ascii=False,
    )
    tail = json.dumps(
        {"correlation_id": run.args.correlation_id, "rejected_at": run.now.isoformat()}
    )
    return f'{head[:-1]}, "record": {rejected.record_json}, {tail[1:]}\n'


def _write_quarantined_rows(
    run: _Run, coordinate: str, rejected: list[RejectedRecord], indexing: _Indexing
) -> str | None:
    if not rejected:
        return None
    key = layout.quarantine_rows_key(run.dataset.dataset_id, run.args.digest)
    local = run.workdir / "quarantine.jsonl"
    with local.open("w", encoding="utf-8") as out:
        for record in rejected:
            out.write(_quarantine_line(run, coordinate, record))
    stored = _put(run, key, local, JSONL_CONTENT_TYPE)
    url = s3_url(run.args.lake_bucket, key)
    LOG.info("quarantined %d rows to %s", len(rejected), url)
    ref = ObjectRef(url, Zone.LAKE, "jsonl", stored.version_id, stored.etag)
    indexing.add(url, quarantine_entries(local, run.dataset, ref, key=run.hash_key))
    return url


def _quarantine_file(run: _Run, reason: str) -> IngestResult:
    LOG.warning("the file cannot be read, quarantining it whole: %s", reason)
    key = layout.quarantine_file_key(run.dataset.dataset_id, run.args.digest)
    local = run.workdir / "quarantine.file.json"
    document = {
        "source": _source(run),
        "reason": reason,
        "correlation_id": run.args.correlation_id,
        "rejected_at": run.now.isoformat(),
    }
    local.write_text(json.dumps(document, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    _put(run, key, local, JSON_CONTENT_TYPE)
    return IngestResult(ObjectStatus.QUARANTINED, 0, 0, 0, [], s3_url(run.args.lake_bucket, key))


def _put(run: _Run, key: str, local: Path, content_type: str) -> ObjectHead:
    """Upload a lake object this run produced, marked as written (and indexed) by ingestion."""
    return run.s3.upload(
        run.args.lake_bucket, key, local, content_type=content_type, metadata=INGEST_METADATA
    )


def _remove_stale(run: _Run, earlier: set[str], result: IngestResult, index: SubjectIndex) -> None:
    """Delete what an earlier ingestion of this raw key wrote and this run did not rewrite:
    partition files whose rows moved or went away, and a quarantine object of the other kind
    (or of rows, when no row was rejected this time). Their index entries follow the
    delete-marker rule, also when the file is gone already (a retry after a failure between the
    two steps): flagged while an older version holds the rows, removed when none does."""
    lake, dataset_id, digest = run.args.lake_bucket, run.dataset.dataset_id, run.args.digest
    for url in sorted(earlier - set(result.lake_objects)):
        bucket, key = split_s3_url(url)
        if bucket != lake or not layout.is_lake_object_of(key, dataset_id, digest):
            LOG.warning("not removing %s: not a lake file of this raw object", url)
            continue
        if run.s3.delete_current(bucket, key):
            LOG.info("removed stale lake object %s", url)
        _unindex(run, index, bucket, key)
    for key in (
        layout.quarantine_rows_key(dataset_id, digest),
        layout.quarantine_file_key(dataset_id, digest),
    ):
        url = s3_url(lake, key)
        if url == result.quarantine_object:
            continue
        if run.s3.delete_current(lake, key):
            LOG.info("removed stale quarantine object %s", url)
        _unindex(run, index, lake, key)


def _unindex(run: _Run, index: SubjectIndex, bucket: str, key: str) -> None:
    url = s3_url(bucket, key)
    action, count = settle_missing_key(index, url, run.s3.versions_of(bucket, key))
    if count:
        LOG.info("%s: %d index entries of %s", action.value, count, url)
