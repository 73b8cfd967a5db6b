"""The reconcile job: compare a dataset's subject index with a full scan of its objects.

1. list every key under `<dataset>/` in the raw and lake buckets, with versions: current
   objects, and keys hidden by a delete marker that still hold older versions;
2. compute the entries each current object should have with the index job's code
   (`indexing.object_entries`), in Spark tasks grouped by the listed sizes (`tasks.task_groups`:
   small objects share a task, a large one has its own);
3. read the dataset's entries (GSI by_dataset: keys, rows, deleted);
4. compare per (object, subject) (`drift`, a pure DataFrame transformation):
   - `missing`: the object holds the subject's rows and no visible entry says so (no entry, or
     one flagged `deleted` although the object exists: lookups do not show it);
   - `stale`: an entry for a subject the object does not hold (unless it is flagged `deleted`
     and the key keeps older versions, which may hold the subject), or for a key that has no
     version at all;
   - `wrong_rows`: both agree on the pair but not on the row count.
   Entries of hidden keys are not compared: their data sits in older versions, which only
   erasure or expiry removes (docs/INDEX.md);
5. write the report to `s3://<reports>/reconcile/<dataset>/<correlation id>.json`; with `fix`,
   re-index every drifted object (the index job's per-object code, `reindexing`, forced) and
   remove the entries that do not name an object of the dataset.

Subject ids appear only as their hashes.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import boto3
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from lethe_jobs.errors import UnreadableObjectError
from lethe_jobs.indexing import StoredObject, object_entries
from lethe_jobs.job_args import INDEX_ARGUMENTS, DatasetJobArgs, add_flag, add_index, add_required
from lethe_jobs.objects import ObjectKind, list_prefix, object_kind
from lethe_jobs.reindexing import IndexSettings, ObjectLocation, Outcome, index_objects
from lethe_jobs.session import logging_shown_keys
from lethe_jobs.tasks import grouped_items
from lethe_shared.aws.s3 import NULL_VERSION, ObjectStore, S3ObjectStore, s3_url, split_s3_url
from lethe_shared.catalog.object_catalog import Buckets
from lethe_shared.datasets.document import Dataset
from lethe_shared.datasets.registry import DatasetRegistry, require_dataset
from lethe_shared.index.subject_ids import key_width, subject_id
from lethe_shared.index.subject_index import DRIFT_KINDS, FoundEntry, SubjectIndex

LOG = logging.getLogger("lethe.reconcile")
SAMPLE_SIZE = 100
ENTRY_SCHEMA = "object_url string, subject_hash string, rows long"
FOUND_SCHEMA = f"{ENTRY_SCHEMA}, deleted boolean, older_versions boolean"


@dataclass(frozen=True)
class ReconcileArgs(DatasetJobArgs):
    reports_bucket: str
    fix: bool


def parse_args(argv: Sequence[str] | None) -> tuple[ReconcileArgs, list[str]]:
    parser = argparse.ArgumentParser(prog="reconcile", description="Lethe index reconcile job")
    add_required(
        parser,
        [f for f in ReconcileArgs.__dataclass_fields__ if f != "fix" and f not in INDEX_ARGUMENTS],
    )
    add_index(parser)
    add_flag(parser, "fix", "re-index every object with drift")
    known, unknown = parser.parse_known_args(argv)
    args = ReconcileArgs(**vars(known))
    _ = args.index_location  # an incomplete index location fails here, before anything is read
    return args, unknown


@dataclass(frozen=True)
class Scan:
    """The dataset's objects to read (current versions of keys that hold rows) and the keys
    hidden by a delete marker."""

    objects: list[ObjectLocation]
    hidden: set[str]
    with_older: set[str]  # current objects that keep older versions holding data


def scan_dataset(store: ObjectStore, dataset: Dataset, buckets: Buckets) -> Scan:
    objects: list[ObjectLocation] = []
    hidden: set[str] = set()
    with_older: set[str] = set()
    prefix = f"{dataset.dataset_id}/"
    for bucket in buckets.names:
        listing = list_prefix(store, bucket, prefix)
        hidden.update(s3_url(bucket, k) for k in listing.hidden)
        with_older.update(s3_url(bucket, k) for k in listing.with_older)
        for key, head in sorted(listing.current.items()):
            kind = object_kind(dataset.dataset_id, bucket, key, buckets)
            if kind is not ObjectKind.NO_ROWS:
                objects.append(
                    ObjectLocation(
                        bucket=bucket, key=key, version_id=head.version_id, size=head.size
                    )
                )
    return Scan(objects, hidden, with_older)


@dataclass(frozen=True)
class ExpectSettings:
    dataset: Dataset
    buckets: Buckets
    correlation_id: str
    hash_key: bytes = field(repr=False)
    # the index's key width for the dataset (lethe_shared.index.subject_ids): 32 full digests,
    # 6 48-bit prefixes (one index row per (prefix, object version), rows summed)
    hash_bytes: int = 32


def _expected_of(
    store: ObjectStore, location: ObjectLocation, ctx: ExpectSettings
) -> list[tuple[Any, ...]]:
    kind = object_kind(ctx.dataset.dataset_id, location.bucket, location.key, ctx.buckets)
    version = location.version_id or NULL_VERSION
    with tempfile.TemporaryDirectory(prefix="lethe-reconcile-") as tmp:
        stored = StoredObject(location.bucket, location.key, version, "", Path(tmp) / "object")
        if store.download(location.bucket, location.key, version, stored.path) is None:
            LOG.info("%s went away during the scan", location.url)
            return []
        try:
            entries = object_entries(kind, stored, ctx.dataset, key=ctx.hash_key, workdir=Path(tmp))
        except UnreadableObjectError as exc:
            LOG.warning("%s cannot be read, it should have no entries: %s", location.url, exc)
            return []
    if ctx.hash_bytes >= 32:
        return [(e.object_url, e.subject_hash, e.rows) for e in entries]
    rows: dict[tuple[str, str], int] = {}  # prefixes: as entries_of_dataset names them
    for e in entries:
        key = (e.object_url, subject_id(e.subject_hash, ctx.hash_bytes))
        rows[key] = rows.get(key, 0) + e.rows
    return [(url, h, n) for (url, h), n in sorted(rows.items())]


def expected_partition(items: Iterable[str], ctx: ExpectSettings) -> Iterator[tuple[Any, ...]]:
    """A Spark task: the expected (object_url, subject_hash, rows) of its objects."""
    # an executor's Python worker logs on its own
    logging_shown_keys(ctx.correlation_id, ctx.hash_key, {ctx.dataset.dataset_id: ctx.dataset})
    store = S3ObjectStore(boto3.client("s3"))
    for item in items:
        yield from _expected_of(store, ObjectLocation.model_validate_json(item), ctx)


def expected_entries(
    spark: SparkSession, objects: Sequence[ObjectLocation], ctx: ExpectSettings
) -> DataFrame:
    """The expected entries (ENTRY_SCHEMA), objects in Spark tasks grouped by their sizes."""
    if not objects:
        return spark.createDataFrame([], ENTRY_SCHEMA)
    items = [o.model_dump_json() for o in objects]
    rdd = grouped_items(spark, items, [o.size for o in objects])
    return spark.createDataFrame(
        rdd.mapPartitions(lambda p: expected_partition(p, ctx)), ENTRY_SCHEMA
    )


def found_entries(spark: SparkSession, entries: Iterable[FoundEntry], scan: Scan) -> DataFrame:
    """The entries to compare (FOUND_SCHEMA): all but those of hidden keys, each marked with
    whether its object keeps older versions."""
    rows = [
        (e.object_url, e.subject_hash, e.rows, e.deleted, e.object_url in scan.with_older)
        for e in entries
        if e.object_url not in scan.hidden
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
    flagged = F.coalesce(F.col("deleted"), F.lit(False))
    invisible = found_rows.isNull() | flagged
    of_older = flagged & F.coalesce(F.col("older_versions"), F.lit(False))
    kind = (
        F.when(expected_rows.isNull() & of_older, F.lit(None))  # older versions: not scanned
        .when(expected_rows.isNull(), F.lit("stale"))
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


def fix_plan(
    urls: Iterable[str],
    dataset_id: str,
    buckets: Buckets,
    sizes: Mapping[str, int | None] | None = None,
) -> FixPlan:
    """What `--fix` does for the drifted objects (`sizes`: the scan's, by URL, to group the
    re-indexing into tasks)."""
    reindex: list[ObjectLocation] = []
    remove: list[str] = []
    for url in sorted(set(urls)):
        try:
            bucket, key = split_s3_url(url)
            object_kind(dataset_id, bucket, key, buckets)
        except ValueError:
            remove.append(url)
            continue
        reindex.append(ObjectLocation(bucket=bucket, key=key, size=(sizes or {}).get(url)))
    return FixPlan(reindex, remove)


def apply_fix(
    spark: SparkSession, plan: FixPlan, ctx: IndexSettings, index: SubjectIndex
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


def write_report(store: S3ObjectStore, bucket: str, key: str, document: dict[str, Any]) -> str:
    body = json.dumps(document, indent=2, sort_keys=True).encode("utf-8")
    store.put_bytes(bucket, key, body, content_type="application/json")
    return s3_url(bucket, key)


@dataclass(frozen=True)
class ReconcilePorts:
    objects: S3ObjectStore
    datasets: DatasetRegistry
    index: SubjectIndex
    hash_key: bytes = field(repr=False)


def run_reconcile(
    spark: SparkSession, args: ReconcileArgs, ports: ReconcilePorts, now: datetime
) -> dict[str, Any]:
    dataset = require_dataset(ports.datasets, args.dataset_id)
    scan = scan_dataset(ports.objects, dataset, args.buckets)
    LOG.info(
        "scanning %d objects of dataset %s (%d keys hidden by a delete marker)",
        len(scan.objects),
        dataset.dataset_id,
        len(scan.hidden),
    )
    expect = ExpectSettings(
        dataset, args.buckets, args.correlation_id, ports.hash_key,
        key_width(ports.index, dataset.dataset_id),
    )  # fmt: skip
    expected = expected_entries(spark, scan.objects, expect).persist()
    found_list = list(ports.index.entries_of_dataset(dataset.dataset_id))
    drifted = drift(expected, found_entries(spark, found_list, scan)).persist()
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
        sizes = {o.url: o.size for o in scan.objects}
        plan = fix_plan(drifted_urls, dataset.dataset_id, args.buckets, sizes)
        settings = IndexSettings(
            dataset=dataset,
            buckets=args.buckets,
            index=args.index_location,
            correlation_id=args.correlation_id,
            hash_key=ports.hash_key,
            force=True,
            clear_unindexable=True,
        )
        outcomes = apply_fix(spark, plan, settings, ports.index)
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
        ports.objects,
        args.reports_bucket,
        report_key(dataset.dataset_id, args.correlation_id),
        document,
    )
    LOG.info("report written to %s", url)
    return {"report": url, **counts, "fixed": args.fix}
