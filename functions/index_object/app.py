"""Index one lake object that arrived by other means than ingestion (docs/INDEX.md).

Invoked asynchronously by the object events handler for lake objects up to
LambdaIndexMaxBytes; larger ones go to the Spark index job. Reads the object version, computes
its subject entries with lethe_shared.arrow_index (the same code the Spark jobs use) and makes
the object's index entries exactly those. Idempotent: a repeat gives the same entries.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities import parameters
from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel, Field

from lethe_shared.arrow_index import ObjectRef, lake_object_entries
from lethe_shared.catalog import object_url
from lethe_shared.config import Settings, load_settings
from lethe_shared.index_maintenance import INGEST_PRODUCER, PRODUCER_METADATA
from lethe_shared.registry import DynamoDatasetRegistry
from lethe_shared.subjects import DynamoSubjectIndex, key_from_secret

logger = Logger()
tracer = Tracer()
metrics = Metrics()
KEY_CACHE_SECONDS = 300


class IndexObjectSettings(Settings):
    index_table: str = Field(alias="INDEX_TABLE", min_length=1)
    datasets_table: str = Field(alias="DATASETS_TABLE", min_length=1)
    hash_key_secret_arn: str = Field(alias="HASH_KEY_SECRET_ARN", min_length=1)
    lake_bucket: str = Field(alias="LAKE_BUCKET", min_length=3)


class IndexObjectRequest(BaseModel):
    dataset_id: str = Field(min_length=1)
    bucket: str = Field(min_length=3)
    key: str = Field(min_length=1)
    version_id: str = "null"


@dataclass(frozen=True)
class _Dependencies:
    settings: IndexObjectSettings
    s3: Any
    registry: DynamoDatasetRegistry
    index: DynamoSubjectIndex


@cache
def _dependencies() -> _Dependencies:
    settings = load_settings(IndexObjectSettings)
    dynamodb = boto3.resource("dynamodb")
    return _Dependencies(
        settings=settings,
        s3=boto3.client("s3"),
        registry=DynamoDatasetRegistry(dynamodb.Table(settings.datasets_table)),
        index=DynamoSubjectIndex(dynamodb.Table(settings.index_table)),
    )


def _hash_key(secret_arn: str) -> bytes:
    secret = parameters.get_secret(secret_arn, max_age=KEY_CACHE_SECONDS)
    return key_from_secret(str(secret))


def _version_args(request: IndexObjectRequest) -> dict[str, str]:
    args = {"Bucket": request.bucket, "Key": request.key}
    if request.version_id != "null":
        args["VersionId"] = request.version_id
    return args


@logger.inject_lambda_context(log_event=False)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    request = parse(event=event, model=IndexObjectRequest)
    deps = _dependencies()
    if request.bucket != deps.settings.lake_bucket:
        raise ValueError(f"only lake objects are indexed here, not s3://{request.bucket}")
    url = object_url(request.bucket, request.key)
    s3 = deps.s3
    try:
        head = s3.head_object(**_version_args(request))
    except s3.exceptions.ClientError as error:
        if error.response.get("Error", {}).get("Code") not in {"404", "NoSuchKey"}:
            raise
        removed = deps.index.remove_object(url)
        logger.info("object gone; entries removed", extra={"object_url": url, "removed": removed})
        return {"object_url": url, "action": "removed", "entries": 0}
    if head.get("Metadata", {}).get(PRODUCER_METADATA) == INGEST_PRODUCER:
        logger.info("indexed by ingestion; nothing to do", extra={"object_url": url})
        return {"object_url": url, "action": "skipped", "entries": 0}
    dataset = deps.registry.require(request.dataset_id)
    body = s3.get_object(**_version_args(request))["Body"].read()
    ref = ObjectRef(
        object_url=url,
        zone="lake",
        format="parquet",
        version_id=head.get("VersionId", request.version_id),
        etag=str(head.get("ETag", "")).strip('"'),
    )
    entries = lake_object_entries(
        body, request.key, dataset, ref, key=_hash_key(deps.settings.hash_key_secret_arn)
    )
    deps.index.replace_object(url, entries)
    rows = sum(e.rows for e in entries)
    metrics.add_metric(name="IndexEntriesWritten", unit=MetricUnit.Count, value=len(entries))
    logger.info("object indexed", extra={"object_url": url, "entries": len(entries), "rows": rows})
    return {"object_url": url, "action": "indexed", "entries": len(entries), "rows": rows}
