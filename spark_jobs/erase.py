"""Spark job `erase`: remove an approved erasure request's subjects from every object and every
stored version of its frozen report (`--mode erase`), or prove it (`--mode verify`).

    python spark_jobs/erase.py --mode erase|verify --request-id ER \
        --manifest s3://REPORTS/erasure/ER/manifest.json --manifest-sha256 HEX \
        --requests-table REQUESTS \
        --raw-bucket RAW --lake-bucket LAKE --reports-bucket REPORTS \
        --datasets-table DATASETS --hash-key-secret SECRET_ARN --correlation-id EXECUTION_NAME

Writes s3://REPORTS/erasure/ER/results.json (erase) or verification.json (verify) and prints
one JSON line on stdout; logs go to stderr. Exits non-zero when the run should be retried or
looked at: AWS errors, a request whose record is not ERASING with a recorded approval of this
manifest (refused before the lake is read), a manifest that is not the approved one, producers
that keep writing an object, an object that does not verify. What happens is described in
lethe_jobs.erase_core.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Sequence

import boto3

from lethe_jobs.erase_core import authorise, run
from lethe_jobs.erase_settings import ErasePorts, parse_args
from lethe_jobs.errors import scrubbed_exit
from lethe_jobs.session import configure_logging, job_session, logging_shown_keys
from lethe_shared.aws.s3 import S3ObjectStore
from lethe_shared.aws.scrub import shown_urls
from lethe_shared.datasets.holds import DynamoHolds
from lethe_shared.datasets.registry import DynamoDatasetRegistry
from lethe_shared.erasure.authority import DynamoRequestView
from lethe_shared.subject_hashing.keys import load_hash_key

LOG = logging.getLogger("lethe.erase")


def main(argv: Sequence[str] | None = None) -> int:
    args, ignored = parse_args(argv)
    configure_logging(args.correlation_id)
    if ignored:
        LOG.info("ignoring %d argument(s) meant for the engine", len(ignored))
    ports = ErasePorts(
        reports=S3ObjectStore(boto3.client("s3")),
        datasets=DynamoDatasetRegistry(boto3.resource("dynamodb").Table(args.datasets_table)),
        hash_key=load_hash_key(boto3.client("secretsmanager"), args.hash_key_secret),
        requests=DynamoRequestView(boto3.resource("dynamodb").Table(args.requests_table)),
        holds=DynamoHolds(boto3.resource("dynamodb").Table(args.datasets_table)),
    )
    shown = logging_shown_keys(args.correlation_id, ports.hash_key, ports.datasets)
    authorise(args, ports)  # before a Spark session is started, or anything read
    with job_session(f"lethe-erase-{args.mode}") as spark:
        summary = run(spark, args, ports)
    sys.stdout.write(shown_urls(json.dumps(summary), shown) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(scrubbed_exit(main))
