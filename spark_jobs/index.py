"""Spark job `index`: make the subject index entries of given objects match their content.

    python spark_jobs/index.py --dataset-id reviews --raw-bucket RAW --lake-bucket LAKE \
        --datasets-table DATASETS --index-table INDEX --hash-key-secret SECRET_ARN \
        --correlation-id EXECUTION_NAME \
        (--objects-json '[{"bucket": "LAKE", "key": "reviews/x.parquet"}]'
         | --objects-manifest s3://BUCKET/manifest.json) \
        [--skip-producer ingest|none] [--force]

Backfills a lake that existed before Lethe (`--skip-producer none`), indexes lake objects too
large for the indexer Lambda, and re-indexes keys whose current version changed. Prints one JSON
line on stdout: {"objects", "indexed", "skipped", "missing", "unreadable", "entries_written",
"entries_deleted", "rows"}; logs go to stderr. Exits non-zero only for failures worth a retry
or a look (AWS errors, an unregistered dataset, the hash key, a malformed object list). What
happens per object is described in lethe_jobs.index_core.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Sequence

import boto3
from pyspark.sql import SparkSession

from lethe_jobs.index_core import IndexPorts, parse_args, run_index
from lethe_jobs.session import build_session, configure_logging
from lethe_jobs.subject_index import load_hash_key

LOG = logging.getLogger("lethe.index")


def main(argv: Sequence[str] | None = None) -> int:
    args, ignored = parse_args(argv)
    configure_logging(args.correlation_id)
    if ignored:
        LOG.info("ignoring %d argument(s) meant for the engine", len(ignored))
    ports = IndexPorts(
        s3=boto3.client("s3"),
        datasets=boto3.resource("dynamodb").Table(args.datasets_table),
        hash_key=load_hash_key(boto3.client("secretsmanager"), args.hash_key_secret),
    )
    owns_session = SparkSession.getActiveSession() is None
    spark = build_session("lethe-index", os.environ.get("LETHE_SPARK_MASTER") or None)
    try:
        summary = run_index(spark, args, ports)
    finally:
        if owns_session:
            spark.stop()
    sys.stdout.write(json.dumps(summary) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
