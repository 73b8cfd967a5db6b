"""Spark job `ingest`: validate a batch of raw object versions and write them to the curated lake.

    python spark_jobs/ingest.py --raw-bucket RAW --lake-bucket LAKE \
        --datasets-table DATASETS --catalog-table CATALOG --index-table INDEX \
        --hash-key-secret SECRET_ARN --correlation-id EXECUTION_NAME \
        (--objects-manifest s3://REPORTS/manifests/ingest/NAME.json |
         --objects-json '[{"dataset_id": "reviews", "key": "reviews/a.csv", "version_id": "V"}]')

The same script runs on Glue 5.0, EMR Serverless 7.x and locally (LETHE_SPARK_MASTER set).
Prints one JSON summary line on stdout (`{"objects": [one outcome per object version], "counts":
{status: n}}`); logs go to stderr, and so does one CloudWatch Embedded Metric Format line of
the batch's counts (lethe_jobs.emf: objects ingested, quarantined and failed, rows written and
quarantined). Exits 0 when every object version has its outcome recorded
(INGESTED, QUARANTINED, SUPERSEDED or FAILED), non-zero (with the exception's message) when the
run should be retried or looked at. What happens is described in lethe_jobs.ingest_core.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Sequence
from datetime import UTC, datetime

import boto3

from lethe_jobs.emf import emf_line
from lethe_jobs.errors import scrubbed_exit
from lethe_jobs.ingest_core import parse_args, run_ingest
from lethe_jobs.ingest_outcomes import AwsPorts
from lethe_jobs.ingest_planning import DRIVER_CLIENT_CONFIG
from lethe_jobs.session import configure_logging, job_session, logging_shown_keys
from lethe_shared.aws.s3 import S3ObjectStore
from lethe_shared.aws.scrub import shown_urls
from lethe_shared.catalog.object_catalog import DynamoObjectCatalog
from lethe_shared.catalog.writes_ledger import DynamoWritesLedger, Writer
from lethe_shared.datasets.registry import DynamoDatasetRegistry
from lethe_shared.index.opening import open_subject_index
from lethe_shared.subject_hashing.keys import load_hash_key

LOG = logging.getLogger("lethe.ingest")


def main(argv: Sequence[str] | None = None) -> int:
    args, ignored = parse_args(argv)
    configure_logging(args.correlation_id)
    if ignored:
        LOG.info(
            "ignoring %d argument(s) meant for the engine: %s",
            len(ignored),
            " ".join(a for a in ignored if a.startswith("--")),
        )
    hash_key = load_hash_key(boto3.client("secretsmanager"), args.hash_key_secret)
    dynamodb = boto3.resource("dynamodb", config=DRIVER_CLIENT_CONFIG)
    catalog = dynamodb.Table(args.catalog_table)
    # what the driver writes (a wholly unreadable file's quarantine document) is recorded in the
    # writes ledger, as the tasks' lake and quarantine files are
    writes = DynamoWritesLedger(catalog).writer(Writer.INGEST, args.correlation_id)
    datasets = DynamoDatasetRegistry(dynamodb.Table(args.datasets_table))
    aws = AwsPorts(
        s3=S3ObjectStore(boto3.client("s3", config=DRIVER_CLIENT_CONFIG), writes=writes),
        datasets=datasets,
        catalog=DynamoObjectCatalog(catalog),
        index=open_subject_index(
            args.index_location, s3=boto3.client("s3"), dynamodb=dynamodb, datasets=datasets
        ),
        hash_key=hash_key,
    )
    shown = logging_shown_keys(args.correlation_id, hash_key, aws.datasets)
    with job_session("lethe-ingest") as spark:
        result = run_ingest(spark, args, aws, datetime.now(UTC))
    sys.stdout.write(shown_urls(json.dumps(result.summary(), sort_keys=True), shown) + "\n")
    sys.stdout.flush()
    sys.stderr.write(emf_line(result.metric_counts(), datetime.now(UTC)) + "\n")
    sys.stderr.flush()
    return 0


if __name__ == "__main__":
    sys.exit(scrubbed_exit(main))
