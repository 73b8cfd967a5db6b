"""Datasets API: PUT and GET /datasets/{dataset_id} (IAM-authenticated REST API).

PUT registers or replaces a dataset document (docs/DATASETS.md) after full validation; the
answer lists every problem of an invalid document at once. GET returns the stored document.

Both answer the registry's fields besides the document: `version`, the matching `generation`,
the `indexed_generation` the subject index was built for, and the `matching_fingerprint`
(lethe_shared.datasets.matching). A PUT that changes the matching fingerprint of an existing
dataset starts its re-index (the index backfill state machine, forced, for the new generation,
named by dataset and generation: lethe_shared.datasets.reindex); so does any PUT while a
re-index of the current generation is still pending (a retry after a lost answer, which finds
the same execution instead of starting another). Its answer then has `reindex`: `{execution,
name, generation, status}`. New erasure requests that reach the dataset wait until it completes.

The subject hash key (SubjectHashKeySecret, read through Powertools' cache like the other
handlers, KEY_CACHE_SECONDS): a new dataset is recorded as indexed with the current key's
fingerprint (it holds no data yet), a re-index is started with it (recorded when it succeeds),
and both answers add `indexed_key_fingerprint`, the current `key_fingerprint` and
`key_reindex_pending` (the index was built with another or an unknown key: after a rotation,
`lethe datasets reindex`). Only fingerprints are answered, never the key. A key that cannot be
read is a 503.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import ClientError
from pydantic import Field

from lethe_shared.aws.errors import error_code
from lethe_shared.aws.s3 import S3ObjectStore
from lethe_shared.aws.wiring import Aws, wiring
from lethe_shared.config import Settings
from lethe_shared.datasets.document import Dataset, parse_dataset
from lethe_shared.datasets.registry import DynamoDatasetRegistry, RegistryConflictError
from lethe_shared.datasets.reindex import StepFunctionsReindexer
from lethe_shared.errors import (
    BucketVersioningError,
    DatasetNotFoundError,
    DatasetValidationError,
    HashKeyError,
)
from lethe_shared.subject_hashing.keys import key_fingerprint, key_from_secret

logger = Logger()
tracer = Tracer()
metrics = Metrics()
app = APIGatewayRestResolver()
KEY_CACHE_SECONDS = 300


def _secret(arn: str) -> str:
    """The secret string of `arn`, cached for KEY_CACHE_SECONDS. Powertools' parameters utility
    (and boto3 with it) is imported at the first read, with the clients, not at import."""
    from aws_lambda_powertools.utilities import parameters  # noqa: PLC0415

    return str(parameters.get_secret(arn, max_age=KEY_CACHE_SECONDS))


class DatasetsApiSettings(Settings):
    datasets_table: str = Field(alias="DATASETS_TABLE", min_length=1)
    raw_bucket: str = Field(alias="RAW_BUCKET", min_length=3)
    lake_bucket: str = Field(alias="LAKE_BUCKET", min_length=3)
    index_backfill_state_machine_arn: str = Field(
        alias="INDEX_BACKFILL_STATE_MACHINE_ARN", pattern=r"^arn:[^:]+:states:.+:stateMachine:.+"
    )
    hash_key_secret_arn: str = Field(alias="HASH_KEY_SECRET_ARN", min_length=1)


@dataclass(frozen=True)
class _Dependencies:
    settings: DatasetsApiSettings
    registry: DynamoDatasetRegistry
    objects: S3ObjectStore
    buckets: tuple[str, str]  # raw, lake: both must keep versions
    reindexer: StepFunctionsReindexer


def _build(settings: DatasetsApiSettings, aws: Aws) -> _Dependencies:
    return _Dependencies(
        settings=settings,
        registry=DynamoDatasetRegistry(aws.table(settings.datasets_table)),
        objects=S3ObjectStore(aws.client("s3")),
        buckets=(settings.raw_bucket, settings.lake_bucket),
        reindexer=StepFunctionsReindexer(
            aws.client("stepfunctions"), settings.index_backfill_state_machine_arn
        ),
    )


_dependencies = wiring(DatasetsApiSettings, _build)


def current_key_fingerprint(deps: _Dependencies) -> str:
    """The fingerprint of the subject hash key as this container reads it (cached), or
    HashKeyError (the message names the secret, never its value)."""
    arn = deps.settings.hash_key_secret_arn
    try:
        return key_fingerprint(key_from_secret(_secret(arn)))
    except HashKeyError:
        raise
    except Exception as exc:  # Powertools' GetParameterError, a short key
        raise HashKeyError(
            f"the subject hash key secret {arn} cannot be read: {type(exc).__name__}"
        ) from None


def _json(status: int, body: dict[str, Any]) -> Response[str]:
    return Response(
        status_code=status, content_type=content_types.APPLICATION_JSON, body=json.dumps(body)
    )


class BadRequestError(Exception):
    """The request itself (not the document) is unusable."""


class ReindexNotStartedError(Exception):
    """The document is registered, but the re-index of its new generation did not start."""

    def __init__(self, summary: dict[str, Any], code: str) -> None:
        self.summary = summary
        super().__init__(
            f"the document is registered (version {summary['version']}, matching generation "
            f"{summary['generation']}), but its re-index could not be started ({code or 'error'}): "
            "PUT the same document again to start it"
        )


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
    deps.objects.require_versioning(deps.buckets)
    key = current_key_fingerprint(deps)  # read before the re-index starts its jobs
    registered = deps.registry.register(dataset, key_fingerprint=key)
    registration = registered.registration
    body = {"dataset": dataset.document(), **registration.summary(key)}
    if registration.reindex_pending:
        try:
            reindex = deps.reindexer.start(dataset_id, registration.matching_generation, key)
        except ClientError as exc:  # registered; the next PUT of it starts the re-index
            raise ReindexNotStartedError(registration.summary(), error_code(exc)) from exc
        body["reindex"] = reindex.answer()
    logger.info(
        "dataset registered",
        extra={
            "dataset_id": dataset_id,
            "version": registration.version,
            "generation": registration.matching_generation,
            "generation_changed": registered.generation_changed,
            "indexed_generation": registration.indexed_generation,
            "key_reindex_pending": body["key_reindex_pending"],
            "reindex": body.get("reindex"),
        },
    )
    return _json(201 if registered.created else 200, body)


@app.get("/datasets/<dataset_id>")
@tracer.capture_method
def get_dataset(dataset_id: str) -> Response[str]:
    deps = _dependencies()
    registration = deps.registry.require_registration(dataset_id)
    key = current_key_fingerprint(deps)
    return _json(200, {"dataset": registration.dataset.document(), **registration.summary(key)})


@app.exception_handler(DatasetValidationError)
def _invalid_document(exc: DatasetValidationError) -> Response[str]:
    return _json(400, {"message": "invalid dataset document", "errors": exc.errors})


@app.exception_handler(BadRequestError)
def _bad_request(exc: BadRequestError) -> Response[str]:
    return _json(400, {"message": str(exc)})


@app.exception_handler(BucketVersioningError)
def _unversioned(exc: BucketVersioningError) -> Response[str]:
    return _json(409, {"message": str(exc)})


@app.exception_handler(ReindexNotStartedError)
def _reindex_not_started(exc: ReindexNotStartedError) -> Response[str]:
    logger.error("re-index not started", extra={"error": str(exc)})
    return _json(503, {"message": str(exc), **exc.summary})


@app.exception_handler(HashKeyError)
def _no_key(exc: HashKeyError) -> Response[str]:
    logger.error("subject hash key unreadable", extra={"error": str(exc)})
    return _json(503, {"message": f"{exc}; try again (nothing was written)"})


@app.exception_handler(RegistryConflictError)
def _conflict(exc: RegistryConflictError) -> Response[str]:
    return _json(409, {"message": str(exc)})


@app.exception_handler(DatasetNotFoundError)
def _not_found(exc: DatasetNotFoundError) -> Response[str]:
    return _json(404, {"message": str(exc)})


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
