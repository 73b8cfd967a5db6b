"""Spark job `index`: make the subject index entries of given objects match their content.

    python spark_jobs/index.py --dataset-id reviews --raw-bucket RAW --lake-bucket LAKE \
        --datasets-table DATASETS --index-table INDEX --catalog-table CATALOG \
        --hash-key-secret SECRET_ARN --correlation-id EXECUTION_NAME \
        (--objects-json '[{"bucket": "LAKE", "key": "reviews/x.parquet"}]'
         | --objects-manifest s3://BUCKET/manifest.json) \
        [--skip-producer ingest,erase|none] [--force]

`--skip-producer` names Lethe jobs whose versions are skipped (they indexed them), as the writes
ledger in CATALOG records them; never the objects' `lethe-producer` metadata.
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
import sys
from collections.abc import Sequence

import boto3

from lethe_jobs.errors import scrubbed_exit
from lethe_jobs.index_core import IndexPorts, parse_args, run_index
from lethe_jobs.session import configure_logging, job_session, logging_shown_keys
from lethe_shared.aws.s3 import S3ObjectStore
from lethe_shared.aws.scrub import shown_urls
from lethe_shared.datasets.registry import DynamoDatasetRegistry
from lethe_shared.subject_hashing.keys import load_hash_key

LOG = logging.getLogger("lethe.index")


def main(argv: Sequence[str] | None = None) -> int:
    args, ignored = parse_args(argv)
    configure_logging(args.correlation_id)
    if ignored:
        LOG.info("ignoring %d argument(s) meant for the engine", len(ignored))
    ports = IndexPorts(
        objects=S3ObjectStore(boto3.client("s3")),
        datasets=DynamoDatasetRegistry(boto3.resource("dynamodb").Table(args.datasets_table)),
        hash_key=load_hash_key(boto3.client("secretsmanager"), args.hash_key_secret),
    )
    shown = logging_shown_keys(args.correlation_id, ports.hash_key, ports.datasets)
    with job_session("lethe-index") as spark:
        summary = run_index(spark, args, ports)
    sys.stdout.write(shown_urls(json.dumps(summary), shown) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(scrubbed_exit(main))
