"""The compaction job: fold each dataset's level-0 index segments into level-1 partitions.

1. the driver lists the datasets of the segment index's manifest (or the one `--dataset-id`
   names) and counts each one's active level-0 segments (one consistent Query per dataset);
   a dataset with fewer than `--min-level0` is skipped: compacting it would rewrite its
   level-1 partitions for little gain;
2. each remaining dataset is one Spark task (`compact_dataset`): the executor opens the index
   itself (`open_subject_index`, the location is a dataclass of strings) and runs
   `SegmentSubjectIndex.compact(dataset_id)` (lethe_shared.index.segments.compaction): per
   partition, read, merge, drop dead rows, write the new level-1 segment and commit in one
   DynamoDB transaction on the condition that every input's state and ETag are still the ones
   read; an erasure that rewrote an input meanwhile cancels the commit and the partition starts
   again, so an erased hash never comes back. One task per dataset keeps the rule "one
   compaction per dataset at a time" inside a run; across runs (a schedule tick while a long
   run goes on, a run started by hand) a **lease** keeps it: before compacting, the task puts
   the manifest item (pk `compaction-lease`, sk = dataset) on the condition that none exists or
   the one there has expired (LEASE_SECONDS, longer than a job may run), and deletes it
   afterwards on the condition that it is still its own. A dataset whose lease another run
   holds is reported `busy` and skipped. The commits are conditional on ETags anyway, so a
   race would be safe; the lease avoids wasted concurrent work (compaction.py's docstring:
   two concurrent compactions of a partition without a level-1 segment could both create one);
3. the driver prints one JSON line: per dataset its counts or the error's class, and totals.
   A dataset whose compaction failed does not stop the others; the job exits non-zero when any
   failed (the state machine notifies and fails, its alarm fires).

Nothing here reads a subject id or a hash: only counts and dataset ids appear.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from pyspark.sql import SparkSession

from lethe_jobs.job_args import add_index, index_location
from lethe_shared.aws.errors import is_condition_failed
from lethe_shared.index.opening import IndexLocation, IndexStore
from lethe_shared.index.segments.manifest import ACTIVE, Manifest

LOG = logging.getLogger("lethe.compact")
DEFAULT_MIN_LEVEL0 = 8
LEASE_PK = "compaction-lease"
LEASE_SECONDS = 6 * 3600  # above the Glue job's 240-minute timeout
DEFAULT_SETTLE_SECONDS = 60.0  # compaction.Compactor's: a writer's seq taken, its item not yet put


@dataclass(frozen=True)
class CompactArgs:
    correlation_id: str
    min_level0: int
    settle_seconds: float  # level-0 segments younger than this wait for the next run
    dataset_id: str  # "" = every dataset of the manifest
    index_store: str
    index_table: str
    index_bucket: str
    manifest_table: str

    @property
    def index_location(self) -> IndexLocation:
        return index_location(self.index_store, self.index_table, self.index_bucket,
                              self.manifest_table)  # fmt: skip


def parse_args(argv: Sequence[str] | None) -> tuple[CompactArgs, list[str]]:
    parser = argparse.ArgumentParser(prog="compact", description="Lethe index compaction job")
    parser.add_argument("--correlation-id", dest="correlation_id", required=True)
    parser.add_argument("--min-level0", dest="min_level0", type=int, default=DEFAULT_MIN_LEVEL0)
    parser.add_argument(
        "--settle-seconds", dest="settle_seconds", type=float, default=DEFAULT_SETTLE_SECONDS
    )
    parser.add_argument("--dataset-id", dest="dataset_id", default="")
    parser.add_argument("--index-table", dest="index_table", default="")
    add_index(parser)
    known, unknown = parser.parse_known_args(argv)
    args = CompactArgs(**vars(known))
    if args.min_level0 < 1:
        parser.error("--min-level0 must be at least 1")
    if args.settle_seconds < 0:
        parser.error("--settle-seconds must not be negative")
    if args.index_location.store is not IndexStore.SEGMENTS:
        parser.error("compaction applies to the segment index only (--index-store segments)")
    return args, unknown


def level0_backlog(manifest: Manifest, dataset_id: str) -> int:
    """The dataset's active level-0 segments: what every lookup consults beyond level 1."""
    return sum(1 for s in manifest.segments(dataset_id, 0) if s.state == ACTIVE)


@dataclass(frozen=True)
class Plan:
    compact: dict[str, int]  # dataset -> level-0 backlog
    skipped: dict[str, int]


def plan(manifest: Manifest, args: CompactArgs) -> Plan:
    datasets = [args.dataset_id] if args.dataset_id else manifest.datasets()
    compact: dict[str, int] = {}
    skipped: dict[str, int] = {}
    for dataset_id in datasets:
        backlog = level0_backlog(manifest, dataset_id)
        (compact if backlog >= args.min_level0 else skipped)[dataset_id] = backlog
    return Plan(compact, skipped)


IndexOpener = Callable[[IndexLocation], Any]


def open_segments(location: IndexLocation) -> Any:
    """The segment index, opened on the executor with its own clients."""
    import boto3  # noqa: PLC0415

    from lethe_shared.index.opening import open_subject_index  # noqa: PLC0415

    return open_subject_index(location, s3=boto3.client("s3"), dynamodb=boto3.resource("dynamodb"))


def take_lease(table: Any, dataset_id: str, owner: str, now: float) -> bool:
    """The dataset's compaction lease for `owner`, unless another holds an unexpired one."""
    from botocore.exceptions import ClientError  # noqa: PLC0415

    try:
        table.put_item(
            Item={"pk": LEASE_PK, "sk": dataset_id, "owner": owner,
                  "expires_at": int(now) + LEASE_SECONDS},
            ConditionExpression="attribute_not_exists(pk) OR expires_at < :now",
            ExpressionAttributeValues={":now": int(now)},
        )  # fmt: skip
    except ClientError as error:
        if is_condition_failed(error):
            return False
        raise
    return True


def release_lease(table: Any, dataset_id: str, owner: str) -> None:
    """Delete the lease if it is still `owner`'s (an expired one taken over stays)."""
    from botocore.exceptions import ClientError  # noqa: PLC0415

    try:
        table.delete_item(
            Key={"pk": LEASE_PK, "sk": dataset_id},
            ConditionExpression="#o = :o",
            ExpressionAttributeNames={"#o": "owner"},
            ExpressionAttributeValues={":o": owner},
        )
    except ClientError as error:
        if not is_condition_failed(error):
            raise


def compact_dataset(
    location: IndexLocation,
    dataset_id: str,
    settle_seconds: float,
    opener: IndexOpener,
    owner: str,
) -> dict[str, Any]:
    """One dataset's compaction (a Spark task's work), under its lease: its report, `busy`
    when another run holds the lease, or the error's class."""
    index = opener(location)
    index.compactor.settle_seconds = settle_seconds
    table = index.manifest.table
    if not take_lease(table, dataset_id, owner, time.time()):
        LOG.info("compaction of %s skipped: another run holds its lease", dataset_id)
        return {"dataset_id": dataset_id, "busy": True}
    try:
        report = index.compact(dataset_id)
    except Exception as error:
        LOG.exception("compaction of %s failed", dataset_id)
        return {"dataset_id": dataset_id, "error": type(error).__name__}
    finally:
        release_lease(table, dataset_id, owner)
    counts = asdict(report)
    counts["partitions_written"] = len(report.partitions_written)
    counts["level0_after"] = level0_backlog(index.manifest, dataset_id)
    return counts


def run_compaction(
    spark: SparkSession, args: CompactArgs, opener: IndexOpener = open_segments
) -> dict[str, Any]:
    location = args.index_location
    settle = args.settle_seconds
    owner = args.correlation_id
    planned = plan(opener(location).manifest, args)
    LOG.info("compacting %d dataset(s), skipping %d", len(planned.compact), len(planned.skipped))
    datasets = sorted(planned.compact)
    results: list[dict[str, Any]] = []
    if datasets:

        def task(items: Iterable[str]) -> Iterator[dict[str, Any]]:
            for dataset_id in items:
                yield compact_dataset(location, dataset_id, settle, opener, owner)

        rdd = spark.sparkContext.parallelize(datasets, len(datasets))
        results = rdd.mapPartitions(task).collect()
    failed = sorted(r["dataset_id"] for r in results if "error" in r)
    done = [r for r in results if "error" not in r and "busy" not in r]
    return {
        "compacted": {r["dataset_id"]: r for r in done},
        "busy": sorted(r["dataset_id"] for r in results if "busy" in r),
        "failed": {r["dataset_id"]: r["error"] for r in results if "error" in r},
        "skipped": planned.skipped,
        "min_level0": args.min_level0,
        "datasets_failed": len(failed),
    }


def metric_counts(result: dict[str, Any]) -> dict[str, int]:
    """The run's EMF counts (lethe_jobs.emf)."""
    compacted = result["compacted"].values()
    return {
        "IndexCompactionDatasets": len(result["compacted"]),
        "IndexCompactionSkipped": len(result["skipped"]) + len(result["busy"]),
        "IndexCompactionFailed": result["datasets_failed"],
        "IndexCompactionLevel0Retired": sum(r["level0_retired"] for r in compacted),
        "IndexCompactionRestarts": sum(r["restarts"] for r in compacted),
    }
