"""The index job: make the subject index entries of given objects match their current content.

For a lake that existed before Lethe (backfill), for lake objects too large for the indexer
Lambda, and for raw keys whose current version changed by a delete. This module holds the
job's arguments, its object list and its summary; the per-object work, in Spark tasks, is
`reindexing` (shared with the reconcile job's repair), which the module docstring there
describes step by step.

Failures worth a retry raise (AWS errors, an unregistered dataset, the hash key): the job
fails and Step Functions retries it. An unreadable lake object is reported and keeps no entry.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from pyspark.sql import SparkSession

from lethe_jobs.errors import InvalidObjectListError
from lethe_jobs.job_args import (
    DATASET_JOB_ARGUMENTS,
    DatasetJobArgs,
    add_flag,
    add_index,
    add_required,
)
from lethe_jobs.objects import object_list
from lethe_jobs.reindexing import IndexSettings, ObjectLocation, Outcome, index_objects
from lethe_shared.aws.s3 import ObjectStore
from lethe_shared.catalog.object_catalog import Buckets
from lethe_shared.datasets.registry import DatasetRegistry, require_dataset
from lethe_shared.index.maintenance import SELF_INDEXING_PRODUCERS

LOG = logging.getLogger("lethe.index")
NO_PRODUCER = "none"


@dataclass(frozen=True)
class IndexArgs(DatasetJobArgs):
    objects_json: str | None
    objects_manifest: str | None
    skip_producers: frozenset[str]  # empty: index every object, whatever wrote it
    force: bool
    catalog_table: str  # the writes ledger's table: which versions Lethe's jobs wrote


def parse_args(argv: Sequence[str] | None) -> tuple[IndexArgs, list[str]]:
    """`--key value` arguments; unknown ones (Glue's own) are returned apart and ignored."""
    parser = argparse.ArgumentParser(prog="index", description="Lethe subject index job")
    add_required(parser, DATASET_JOB_ARGUMENTS)
    add_index(parser)
    objects = parser.add_mutually_exclusive_group(required=True)
    objects.add_argument("--objects-json", dest="objects_json")
    objects.add_argument("--objects-manifest", dest="objects_manifest")
    parser.add_argument(
        "--skip-producer",
        dest="skip_producers",
        default=",".join(sorted(SELF_INDEXING_PRODUCERS)),
        help="skip versions the writes ledger says these Lethe jobs wrote, comma-separated "
        "(they indexed them; never the lethe-producer metadata); none",
    )
    parser.add_argument("--catalog-table", dest="catalog_table", required=True)
    add_flag(parser, "force", "index even objects whose entries describe their current version")
    known, unknown = parser.parse_known_args(argv)
    values = vars(known)
    text = values["skip_producers"].strip()
    names = [] if text in ("", NO_PRODUCER) else [n.strip() for n in text.split(",") if n.strip()]
    values["skip_producers"] = frozenset(names)
    args = IndexArgs(**values)
    _ = args.index_location  # an incomplete index location fails here, before anything is read
    return args, unknown


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
        "rows_without_subject": sum(o.rows_without_subject for o in outcomes),
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
        index=args.index_location,
        correlation_id=args.correlation_id,
        hash_key=ports.hash_key,
        skip_producers=args.skip_producers,
        force=args.force,
        catalog_table=args.catalog_table,
    )
    summary = summarize(index_objects(spark, locations, settings))
    LOG.info("done: %s", json.dumps(summary, sort_keys=True))
    return summary
