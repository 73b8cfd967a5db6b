"""The reconcile job: compare a dataset's subject index with a full scan of its objects.

1. list every key under `<dataset>/` in the raw and lake buckets, with versions: current
   objects, and keys hidden by a delete marker that still hold older versions;
2. compute the entries each current object should have, one Spark task per object, with the
   index job's code (`indexing.object_entries`);
3. read the dataset's entries (GSI by_dataset: keys, rows, deleted);
4. compare per (object, subject) (`drift`, a pure DataFrame transformation):
   - `missing`: the object holds the subject's rows and no visible entry says so (no entry, or
     one flagged `deleted` although the object exists: lookups do not show it);
   - `stale`: an entry for a subject the object does not hold, or for a key that has no
     version at all;
   - `wrong_rows`: both agree on the pair but not on the row count.
   Entries of hidden keys are not compared: their data sits in older versions, which only
   erasure or expiry removes (docs/INDEX.md);
5. write the report to `s3://<reports>/reconcile/<dataset>/<correlation id>.json`; with `fix`,
   re-index every drifted object (the index job's per-object code, forced) and remove the
   entries that do not name an object of the dataset.

Subject ids appear only as their hashes.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import boto3
from botocore.exceptions import ClientError
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from lethe_jobs import layout
from lethe_jobs.index_core import (
    IndexSettings,
    ObjectLocation,
    Outcome,
    add_flag,
    add_required,
    index_objects,
)
from lethe_jobs.indexing import StoredObject, UnreadableObjectError, object_entries
from lethe_jobs.objects import ObjectKind, list_prefix, missing_object_error, object_kind
from lethe_jobs.session import configure_logging
from lethe_jobs.subject_index import FoundEntry, dataset_entries
from lethe_shared.catalog import NULL_VERSION
from lethe_shared.datasets import Dataset
from lethe_shared.registry import DynamoDatasetRegistry
from lethe_shared.subjects import DynamoSubjectIndex

LOG = logging.getLogger("lethe.reconcile")
SAMPLE_SIZE = 100
DRIFT_KINDS = ("missing", "stale", "wrong_rows")
ENTRY_SCHEMA = "object_url string, subject_hash string, rows long"
FOUND_SCHEMA = f"{ENTRY_SCHEMA}, deleted boolean"


@dataclass(frozen=True)
class ReconcileArgs:
    dataset_id: str
    raw_bucket: str
    lake_bucket: str
    datasets_table: str
    index_table: str
    hash_key_secret: str
    reports_bucket: str
    correlation_id: str
    fix: bool


def parse_args(argv: Sequence[str] | None) -> tuple[ReconcileArgs, list[str]]:
    parser = argparse.ArgumentParser(prog="reconcile", description="Lethe index reconcile job")
    add_required(parser, [f for f in ReconcileArgs.__dataclass_fields__ if f != "fix"])
    add_flag(parser, "fix", "re-index every object with drift")
    known, unknown = parser.parse_known_args(argv)
    return ReconcileArgs(**vars(known)), unknown


@dataclass(frozen=True)
class Scan:
    """The dataset's objects to read (current versions of keys that hold rows) and the keys
    hidden by a delete marker."""

    objects: list[ObjectLocation]
    hidden: set[str]


def scan_dataset(s3: Any, dataset: Dataset, raw_bucket: str, lake_bucket: str) -> Scan:
    objects: list[ObjectLocation] = []
    hidden: set[str] = set()
    prefix = f"{dataset.dataset_id}/"
    for bucket in (raw_bucket, lake_bucket):
        listing = list_prefix(s3, bucket, prefix)
        hidden.update(layout.s3_url(bucket, k) for k in listing.hidden)
        for key, head in sorted(listing.current.items()):
            kind = object_kind(
                dataset.dataset_id, bucket, key, raw_bucket=raw_bucket, lake_bucket=lake_bucket
            )
            if kind is not ObjectKind.NO_ROWS:
                objects.append(ObjectLocation(bucket=bucket, key=key, version_id=head.version_id))
    return Scan(objects, hidden)


@dataclass(frozen=True)
class ExpectSettings:
    dataset: Dataset
    raw_bucket: str
    lake_bucket: str
    correlation_id: str
    hash_key: bytes = field(repr=False)


def _expected_of(s3: Any, location: ObjectLocation, ctx: ExpectSettings) -> list[tuple[Any, ...]]:
    kind = object_kind(
        ctx.dataset.dataset_id,
        location.bucket,
        location.key,
        raw_bucket=ctx.raw_bucket,
        lake_bucket=ctx.lake_bucket,
    )
    version = location.version_id or NULL_VERSION
    extra = {"VersionId": version} if version != NULL_VERSION else None
    with tempfile.TemporaryDirectory(prefix="lethe-reconcile-") as tmp:
        stored = StoredObject(location.bucket, location.key, version, "", Path(tmp) / "object")
        try:
            s3.download_file(location.bucket, location.key, str(stored.path), ExtraArgs=extra)
            entries = object_entries(kind, stored, ctx.dataset, key=ctx.hash_key, workdir=Path(tmp))
        except ClientError as exc:
            if not missing_object_error(exc):
                raise
            LOG.info("%s went away during the scan", location.url)
            return []
        except UnreadableObjectError as exc:
            LOG.warning("%s cannot be read, it should have no entries: %s", location.url, exc)
            return []
    return [(e.object_url, e.subject_hash, e.rows) for e in entries]


def expected_partition(items: Iterable[str], ctx: ExpectSettings) -> Iterator[tuple[Any, ...]]:
    """A Spark task: the expected (object_url, subject_hash, rows) of its objects."""
    configure_logging(ctx.correlation_id)  # an executor's Python worker logs on its own
    s3 = boto3.client("s3")
    for item in items:
        yield from _expected_of(s3, ObjectLocation.model_validate_json(item), ctx)


def expected_entries(
    spark: SparkSession, objects: Sequence[ObjectLocation], ctx: ExpectSettings
) -> DataFrame:
    """One Spark task per object."""
    if not objects:
        return spark.createDataFrame([], ENTRY_SCHEMA)
    items = [o.model_dump_json() for o in objects]
    rdd = spark.sparkContext.parallelize(items, numSlices=len(items))
    return spark.createDataFrame(
        rdd.mapPartitions(lambda p: expected_partition(p, ctx)), ENTRY_SCHEMA
    )


def found_entries(
    spark: SparkSession, entries: Iterable[FoundEntry], hidden: set[str]
) -> DataFrame:
    """The entries to compare (FOUND_SCHEMA): all but those of hidden keys."""
    rows = [
        (e.object_url, e.subject_hash, e.rows, e.deleted)
        for e in entries
        if e.object_url not in hidden
    ]
    return spark.createDataFrame(rows, FOUND_SCHEMA)


def drift(expected: DataFrame, found: DataFrame) -> DataFrame:
    """Pairs on which the index (FOUND_SCHEMA) and the scan (ENTRY_SCHEMA) disagree:
    object_url, subject_hash, drift (missing | stale | wrong_rows), expected_rows,
    found_rows. An entry flagged deleted is one a lookup does not show."""
    keys = ["object_url", "subject_hash"]
    joined = expected.withColumnRenamed("rows", "expected_rows").join(
        found.withColumnRenamed("rows", "found_rows"), keys, "full_outer"
    )
    expected_rows, found_rows = F.col("expected_rows"), F.col("found_rows")
    invisible = found_rows.isNull() | F.coalesce(F.col("deleted"), F.lit(False))
    kind = (
        F.when(expected_rows.isNull(), F.lit("stale"))
        .when(invisible, F.lit("missing"))
        .when(expected_rows != found_rows, F.lit("wrong_rows"))
    )
    return (
        joined.withColumn("drift", kind)
        .where(F.col("drift").isNotNull())
        .select(*keys, "drift", "expected_rows", "found_rows")
    )


def _sample_item(row: Any) -> dict[str, Any]:
    item = {"object_url": row["object_url"], "subject_hash": row["subject_hash"]}
    if row["drift"] == "wrong_rows":
        item |= {"expected_rows": row["expected_rows"], "found_rows": row["found_rows"]}
    return item


def summarize_drift(drifted: DataFrame, sample_size: int = SAMPLE_SIZE) -> dict[str, Any]:
    """{kind: {"count", "sample"}}: samples ordered by object and subject hash."""
    counts = {r["drift"]: int(r["count"]) for r in drifted.groupBy("drift").count().collect()}
    order = Window.partitionBy("drift").orderBy("object_url", "subject_hash")
    sampled = (
        drifted.withColumn("_n", F.row_number().over(order))
        .where(F.col("_n") <= sample_size)
        .orderBy("drift", "_n")
        .collect()
    )
    return {
        kind: {
            "count": counts.get(kind, 0),
            "sample": [_sample_item(r) for r in sampled if r["drift"] == kind],
        }
        for kind in DRIFT_KINDS
    }


@dataclass(frozen=True)
class FixPlan:
    reindex: list[ObjectLocation]  # objects of the dataset: re-indexed (forced)
    remove: list[str]  # entries that name no object of the dataset: removed


def fix_plan(urls: Iterable[str], dataset_id: str, raw_bucket: str, lake_bucket: str) -> FixPlan:
    reindex: list[ObjectLocation] = []
    remove: list[str] = []
    for url in sorted(set(urls)):
        try:
            bucket, key = layout.split_s3_url(url)
            object_kind(dataset_id, bucket, key, raw_bucket=raw_bucket, lake_bucket=lake_bucket)
        except ValueError:
            remove.append(url)
            continue
        reindex.append(ObjectLocation(bucket=bucket, key=key))
    return FixPlan(reindex, remove)


def apply_fix(
    spark: SparkSession, plan: FixPlan, ctx: IndexSettings, index: DynamoSubjectIndex
) -> list[Outcome]:
    outcomes = index_objects(spark, plan.reindex, ctx)
    for url in plan.remove:
        LOG.info(
            "removing %d entries of %s: not an object of the dataset", index.remove_object(url), url
        )
    return outcomes


def report_document(
    args: ReconcileArgs,
    *,
    objects_scanned: int,
    entries_expected: int,
    entries_found: int,
    objects_hidden: int,
    found_drift: dict[str, Any],
    fixed: bool,
    now: datetime,
) -> dict[str, Any]:
    return {
        "dataset_id": args.dataset_id,
        "correlation_id": args.correlation_id,
        "objects_scanned": objects_scanned,
        "objects_hidden": objects_hidden,
        "entries_expected": entries_expected,
        "entries_found": entries_found,
        **found_drift,
        "fixed": fixed,
        "generated_at": now.isoformat(),
    }


def report_key(dataset_id: str, correlation_id: str) -> str:
    return f"reconcile/{dataset_id}/{correlation_id}.json"


def write_report(s3: Any, bucket: str, key: str, document: dict[str, Any]) -> str:
    body = json.dumps(document, indent=2, sort_keys=True).encode("utf-8")
    s3.put_object(Bucket=bucket, Key=key, Body=body, ContentType="application/json")
    return layout.s3_url(bucket, key)


@dataclass(frozen=True)
class ReconcilePorts:
    s3: Any  # boto3 S3 client
    datasets: Any  # DatasetsTable
    index: Any  # SubjectIndexTable
    hash_key: bytes = field(repr=False)


def run_reconcile(
    spark: SparkSession, args: ReconcileArgs, ports: ReconcilePorts, now: datetime
) -> dict[str, Any]:
    dataset = DynamoDatasetRegistry(ports.datasets).require(args.dataset_id)
    scan = scan_dataset(ports.s3, dataset, args.raw_bucket, args.lake_bucket)
    LOG.info(
        "scanning %d objects of dataset %s (%d keys hidden by a delete marker)",
        len(scan.objects),
        dataset.dataset_id,
        len(scan.hidden),
    )
    expect = ExpectSettings(
        dataset, args.raw_bucket, args.lake_bucket, args.correlation_id, ports.hash_key
    )
    expected = expected_entries(spark, scan.objects, expect).persist()
    found_list = list(dataset_entries(ports.index, dataset.dataset_id))
    drifted = drift(expected, found_entries(spark, found_list, scan.hidden)).persist()
    try:
        found_drift = summarize_drift(drifted)
        entries_expected = expected.count()
        drifted_urls = [r["object_url"] for r in drifted.select("object_url").distinct().collect()]
    finally:
        drifted.unpersist()
        expected.unpersist()
    counts = {kind: found_drift[kind]["count"] for kind in DRIFT_KINDS}
    LOG.info("drift: %s", json.dumps(counts, sort_keys=True))
    if args.fix:
        plan = fix_plan(drifted_urls, dataset.dataset_id, args.raw_bucket, args.lake_bucket)
        settings = IndexSettings(
            dataset=dataset,
            raw_bucket=args.raw_bucket,
            lake_bucket=args.lake_bucket,
            index_table=args.index_table,
            correlation_id=args.correlation_id,
            hash_key=ports.hash_key,
            force=True,
            clear_unindexable=True,
        )
        outcomes = apply_fix(spark, plan, settings, DynamoSubjectIndex(ports.index))
        LOG.info("fixed %d objects", len(outcomes) + len(plan.remove))
    document = report_document(
        args,
        objects_scanned=len(scan.objects),
        entries_expected=entries_expected,
        entries_found=len(found_list),
        objects_hidden=len(scan.hidden),
        found_drift=found_drift,
        fixed=args.fix,
        now=now,
    )
    url = write_report(
        ports.s3,
        args.reports_bucket,
        report_key(dataset.dataset_id, args.correlation_id),
        document,
    )
    LOG.info("report written to %s", url)
    return {"report": url, **counts, "fixed": args.fix}
