"""Spark job `reconcile`: compare a dataset's subject index with a full scan, and repair it.

    python spark_jobs/reconcile.py --dataset-id reviews --raw-bucket RAW --lake-bucket LAKE \
        --datasets-table DATASETS --index-table INDEX --hash-key-secret SECRET_ARN \
        --reports-bucket REPORTS --correlation-id EXECUTION_NAME [--fix]

Writes the drift report to s3://REPORTS/reconcile/<dataset>/<correlation id>.json and prints
one JSON line on stdout: {"report", "missing", "stale", "wrong_rows", "fixed"}; logs go to
stderr. Exits non-zero only for failures worth a retry or a look (AWS errors, an unregistered
dataset, the hash key). What is compared is described in lethe_jobs.reconcile_core.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Sequence
from datetime import UTC, datetime

import boto3

from lethe_jobs.errors import scrubbed_exit
from lethe_jobs.reconcile_core import ReconcilePorts, parse_args, run_reconcile
from lethe_jobs.session import configure_logging, job_session, logging_shown_keys
from lethe_shared.aws.s3 import S3ObjectStore
from lethe_shared.aws.scrub import shown_urls
from lethe_shared.datasets.registry import DynamoDatasetRegistry
from lethe_shared.index.opening import open_subject_index
from lethe_shared.subject_hashing.keys import load_hash_key

LOG = logging.getLogger("lethe.reconcile")


def main(argv: Sequence[str] | None = None) -> int:
    args, ignored = parse_args(argv)
    configure_logging(args.correlation_id)
    if ignored:
        LOG.info("ignoring %d argument(s) meant for the engine", len(ignored))
    dynamodb = boto3.resource("dynamodb")
    s3 = boto3.client("s3")
    datasets = DynamoDatasetRegistry(dynamodb.Table(args.datasets_table))
    ports = ReconcilePorts(
        objects=S3ObjectStore(s3),
        datasets=datasets,
        index=open_subject_index(args.index_location, s3=s3, dynamodb=dynamodb, datasets=datasets),
        hash_key=load_hash_key(boto3.client("secretsmanager"), args.hash_key_secret),
    )
    shown = logging_shown_keys(args.correlation_id, ports.hash_key, ports.datasets)
    with job_session("lethe-reconcile") as spark:
        result = run_reconcile(spark, args, ports, datetime.now(UTC))
    sys.stdout.write(shown_urls(json.dumps(result), shown) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(scrubbed_exit(main))
