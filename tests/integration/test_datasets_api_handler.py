"""DatasetsApiFunction against moto, driven by the API Gateway events in events/."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import FakeLambdaContext, load_function_module

pytestmark = pytest.mark.lambda_runtime

Event = Callable[[str], dict[str, Any]]


@pytest.fixture
def app(lethe_tables: dict[str, Any], handler_env: Callable[[str], None]) -> Any:
    handler_env("DatasetsApiFunction")
    return load_function_module("datasets_api")


def _call(app: Any, event: dict[str, Any], ctx: FakeLambdaContext) -> tuple[int, dict[str, Any]]:
    response = app.handler(event, ctx)
    return response["statusCode"], json.loads(response["body"])


def test_put_then_update_then_get(
    app: Any,
    lethe_buckets: Callable[..., None],
    load_event: Event,
    lambda_context: FakeLambdaContext,
) -> None:
    lethe_buckets()

    created = _call(app, load_event("datasets_api_put.json"), lambda_context)
    updated = _call(app, load_event("datasets_api_put.json"), lambda_context)
    status, body = _call(app, load_event("datasets_api_get.json"), lambda_context)

    assert (created[0], created[1]["version"]) == (201, 1)
    assert (updated[0], updated[1]["version"]) == (200, 2)
    assert status == 200
    assert body["dataset"]["subject_columns"] == ["user_id"]
    assert body["dataset"]["partition_by"] == ["review_date"]


def test_invalid_document_lists_every_problem(
    app: Any,
    lethe_buckets: Callable[..., None],
    load_event: Event,
    lambda_context: FakeLambdaContext,
) -> None:
    lethe_buckets()

    status, body = _call(app, load_event("datasets_api_put_invalid.json"), lambda_context)

    assert status == 400
    assert body == {
        "message": "invalid dataset document",
        "errors": ["schema[0].type: 'strng' is not a valid type (unknown type 'strng')"],
    }


def test_semantic_errors_after_types_parse(
    app: Any,
    lethe_buckets: Callable[..., None],
    load_event: Event,
    lambda_context: FakeLambdaContext,
) -> None:
    lethe_buckets()
    event = load_event("datasets_api_put.json")
    document = json.loads(event["body"])
    document["subject_columns"] = ["customer.id"]
    document["partition_by"] = ["country"]
    event["body"] = json.dumps(document)

    status, body = _call(app, event, lambda_context)

    assert status == 400
    assert body["errors"] == [
        "subject_columns[0]: 'customer.id' is not a column of the schema",
        "partition_by[0]: 'country' is not a column of the schema",
    ]


def test_unversioned_bucket_is_refused(
    app: Any,
    lethe_buckets: Callable[..., None],
    load_event: Event,
    lambda_context: FakeLambdaContext,
    lethe_tables: dict[str, Any],
) -> None:
    lethe_buckets(versioned=False)

    status, body = _call(app, load_event("datasets_api_put.json"), lambda_context)

    assert status == 409
    assert "without versioning enabled: lethe-local-raw-123456789012-us-east-1, " in body["message"]
    assert lethe_tables["DatasetsTable"].scan()["Items"] == []


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "{not json",
            "body is not JSON: Expecting property name enclosed in double quotes at position 1",
        ),
        (
            '{"dataset_id": "other"}',
            "dataset_id 'other' in the body differs from 'reviews' in the path",
        ),
    ],
)
def test_bad_requests(
    app: Any, load_event: Event, lambda_context: FakeLambdaContext, body: str, message: str
) -> None:
    event = load_event("datasets_api_put.json")
    event["body"] = body

    assert _call(app, event, lambda_context) == (400, {"message": message})


def test_get_unknown_dataset_is_404(
    app: Any, load_event: Event, lambda_context: FakeLambdaContext
) -> None:
    assert _call(app, load_event("datasets_api_get.json"), lambda_context) == (
        404,
        {"message": "dataset 'reviews' is not registered"},
    )
