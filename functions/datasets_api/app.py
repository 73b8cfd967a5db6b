"""Datasets API: PUT and GET /datasets/{dataset_id} (IAM-authenticated REST API).

PUT registers or replaces a dataset document (docs/DATASETS.md) after full validation; the
answer lists every problem of an invalid document at once. GET returns the stored document.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import Field

from lethe_shared.aws.s3 import S3ObjectStore
from lethe_shared.aws.wiring import Aws, wiring
from lethe_shared.catalog.zones import Buckets
from lethe_shared.config import Settings
from lethe_shared.datasets.document import Dataset, parse_dataset
from lethe_shared.datasets.registry import DynamoDatasetRegistry
from lethe_shared.errors import BucketVersioningError, DatasetNotFoundError, DatasetValidationError

logger = Logger()
tracer = Tracer()
metrics = Metrics()
app = APIGatewayRestResolver()


class DatasetsApiSettings(Settings):
    datasets_table: str = Field(alias="DATASETS_TABLE", min_length=1)
    raw_bucket: str = Field(alias="RAW_BUCKET", min_length=3)
    lake_bucket: str = Field(alias="LAKE_BUCKET", min_length=3)


@dataclass(frozen=True)
class _Dependencies:
    registry: DynamoDatasetRegistry
    objects: S3ObjectStore
    buckets: Buckets


def _build(settings: DatasetsApiSettings, aws: Aws) -> _Dependencies:
    return _Dependencies(
        registry=DynamoDatasetRegistry(aws.table(settings.datasets_table)),
        objects=S3ObjectStore(aws.client("s3")),
        buckets=Buckets(raw=settings.raw_bucket, lake=settings.lake_bucket),
    )


_dependencies = wiring(DatasetsApiSettings, _build)


def _json(status: int, body: dict[str, Any]) -> Response[str]:
    return Response(
        status_code=status, content_type=content_types.APPLICATION_JSON, body=json.dumps(body)
    )


class BadRequestError(Exception):
    """The request itself (not the document) is unusable."""


def dataset_of_request(dataset_id: str, body: str | None) -> Dataset:
    """The dataset a PUT's body registers under the path's dataset_id: BadRequestError for a body
    that is not JSON or names another dataset, DatasetValidationError for an invalid document."""
    try:
        document = json.loads(body or "")
    except json.JSONDecodeError as exc:
        raise BadRequestError(f"body is not JSON: {exc.msg} at position {exc.pos}") from exc
    if isinstance(document, dict):
        document.setdefault("dataset_id", dataset_id)
        if document["dataset_id"] != dataset_id:
            raise BadRequestError(
                f"dataset_id {document['dataset_id']!r} in the body differs from {dataset_id!r} "
                "in the path"
            )
    return parse_dataset(document)


@app.put("/datasets/<dataset_id>")
@tracer.capture_method
def put_dataset(dataset_id: str) -> Response[str]:
    dataset = dataset_of_request(dataset_id, app.current_event.body)
    deps = _dependencies()
    deps.objects.require_versioning(deps.buckets.names)
    version = deps.registry.put(dataset)
    logger.info("dataset registered", extra={"dataset_id": dataset_id, "version": version})
    return _json(201 if version == 1 else 200, {"dataset": dataset.document(), "version": version})


@app.get("/datasets/<dataset_id>")
@tracer.capture_method
def get_dataset(dataset_id: str) -> Response[str]:
    dataset = _dependencies().registry.require(dataset_id)
    return _json(200, {"dataset": dataset.document()})


@app.exception_handler(DatasetValidationError)
def _invalid_document(exc: DatasetValidationError) -> Response[str]:
    return _json(400, {"message": "invalid dataset document", "errors": exc.errors})


@app.exception_handler(BadRequestError)
def _bad_request(exc: BadRequestError) -> Response[str]:
    return _json(400, {"message": str(exc)})


@app.exception_handler(BucketVersioningError)
def _unversioned(exc: BucketVersioningError) -> Response[str]:
    return _json(409, {"message": str(exc)})


@app.exception_handler(DatasetNotFoundError)
def _not_found(exc: DatasetNotFoundError) -> Response[str]:
    return _json(404, {"message": str(exc)})


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
