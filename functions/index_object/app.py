"""Index one lake object that arrived by other means than ingestion (docs/INDEX.md).

Invoked asynchronously by the object events handler for lake objects up to
LambdaIndexMaxBytes; larger ones go to the Spark index job. A version the writes ledger
(lethe_shared.catalog.writes_ledger, in the catalog table) says ingestion or erasure wrote is
skipped (they indexed it); its metadata decides nothing. Reads the object version, computes
its subject entries with lethe_shared.index.arrow_entries (the same code the Spark jobs use) and
makes
the object's index entries exactly those. Idempotent: a repeat gives the same entries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import Field

from lethe_shared.aws.s3 import NULL_VERSION, S3ObjectStore
from lethe_shared.aws.scrub import scrubbed_errors
from lethe_shared.aws.wiring import Aws, wiring
from lethe_shared.catalog.writes_ledger import DynamoWritesLedger
from lethe_shared.datasets.registry import DynamoDatasetRegistry
from lethe_shared.errors import MalformedEventError
from lethe_shared.index.arrow_entries import LakeIndexAction, index_lake_object
from lethe_shared.index.opening import IndexSettings as SettingsWithIndex
from lethe_shared.index.opening import open_subject_index
from lethe_shared.index.subject_index import SubjectIndex
from lethe_shared.models import Model
from lethe_shared.subject_hashing.keys import key_from_secret
from lethe_shared.subject_hashing.shown_keys import KeyNamer

logger = Logger()
tracer = Tracer()
metrics = Metrics()
KEY_CACHE_SECONDS = 300


def _secret(arn: str) -> str:
    """The secret string of `arn`, cached for KEY_CACHE_SECONDS. Powertools' parameters utility
    (and boto3 with it) is imported at the first read, with the clients, not at import."""
    from aws_lambda_powertools.utilities import parameters  # noqa: PLC0415

    return str(parameters.get_secret(arn, max_age=KEY_CACHE_SECONDS))


class IndexObjectSettings(SettingsWithIndex):
    datasets_table: str = Field(alias="DATASETS_TABLE", min_length=1)
    hash_key_secret_arn: str = Field(alias="HASH_KEY_SECRET_ARN", min_length=1)
    lake_bucket: str = Field(alias="LAKE_BUCKET", min_length=3)
    catalog_table: str = Field(alias="CATALOG_TABLE", min_length=1)  # the writes ledger


class IndexObjectRequest(Model):
    dataset_id: str = Field(min_length=1)
    bucket: str = Field(min_length=3)
    key: str = Field(min_length=1)
    version_id: str = NULL_VERSION


@dataclass(frozen=True)
class _Dependencies:
    settings: IndexObjectSettings
    objects: S3ObjectStore
    registry: DynamoDatasetRegistry
    index: SubjectIndex
    ledger: DynamoWritesLedger


def _build(settings: IndexObjectSettings, aws: Aws) -> _Dependencies:
    registry = DynamoDatasetRegistry(aws.table(settings.datasets_table))
    return _Dependencies(
        settings=settings,
        objects=S3ObjectStore(aws.client("s3")),
        registry=registry,
        index=open_subject_index(
            settings.index_location, s3=aws.client("s3"), dynamodb=aws.table, datasets=registry
        ),
        ledger=DynamoWritesLedger(aws.table(settings.catalog_table)),
    )


_dependencies = wiring(IndexObjectSettings, _build)


@logger.inject_lambda_context(log_event=False)
@tracer.capture_lambda_handler
@metrics.log_metrics
@scrubbed_errors  # an error's text names no key and quotes no value (lethe_shared.aws.scrub)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    request = IndexObjectRequest.model_validate(event)
    deps = _dependencies()
    if request.bucket != deps.settings.lake_bucket:
        raise MalformedEventError(f"only lake objects are indexed here, not s3://{request.bucket}")
    secret_arn = deps.settings.hash_key_secret_arn
    outcome = index_lake_object(
        request.dataset_id,
        request.bucket,
        request.key,
        request.version_id,
        objects=deps.objects,
        registry=deps.registry,
        index=deps.index,
        hash_key=lambda: key_from_secret(_secret(secret_arn)),
        ledger=deps.ledger,
    )
    metrics.add_metric(name="IndexEntriesWritten", unit=MetricUnit.Count, value=outcome.entries)
    logger.info(
        f"lake object {outcome.action.value}",
        # its shown key: a lake key holds a subject id where a subject column is a partition
        extra={
            "object_url": KeyNamer(key_from_secret(_secret(secret_arn)), deps.registry.get).url(
                outcome.object_url
            ),
            "entries": outcome.entries,
            "rows": outcome.rows,
        },
    )
    result: dict[str, Any] = {
        "object_url": outcome.object_url,
        "action": outcome.action.value,
        "entries": outcome.entries,
    }
    return result | ({"rows": outcome.rows} if outcome.action is LakeIndexAction.INDEXED else {})
