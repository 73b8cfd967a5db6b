"""DatasetsApiFunction against moto, driven by the API Gateway events in events/."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities import parameters

from lethe_shared.subject_hashing.keys import key_fingerprint
from tests.conftest import FakeLambdaContext, load_function_module

pytestmark = pytest.mark.lambda_runtime

Event = Callable[[str], dict[str, Any]]


KEY_SECRET = "lethe-local-subject-hash-key"  # events/env.json
HASH_SECRET = "k" * 64
ROTATED_SECRET = "r" * 64
KEY = key_fingerprint(HASH_SECRET.encode())
ROTATED = key_fingerprint(ROTATED_SECRET.encode())


@pytest.fixture
def app(lethe_tables: dict[str, Any], handler_env: Callable[[str], None]) -> Iterator[Any]:
    handler_env("DatasetsApiFunction")
    parameters.clear_caches()
    boto3.client("secretsmanager").create_secret(Name=KEY_SECRET, SecretString=HASH_SECRET)
    yield load_function_module("datasets_api")
    parameters.clear_caches()


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


# ------------------------------------------------------------ matching generation, re-index

BACKFILL = "arn:aws:states:us-east-1:123456789012:stateMachine:lethe-local-index-backfill"


@pytest.fixture
def backfill_machine(aws: None) -> Any:
    """The index backfill state machine under the name env.json gives the function (moto keeps
    executions RUNNING: nothing is executed in-process)."""
    sfn = boto3.client("stepfunctions", region_name="us-east-1")
    created = sfn.create_state_machine(
        name="lethe-local-index-backfill",
        definition=json.dumps(
            {"StartAt": "Done", "States": {"Done": {"Type": "Pass", "End": True}}}
        ),
        roleArn="arn:aws:iam::123456789012:role/lethe-local-index-backfill",
    )
    assert created["stateMachineArn"] == BACKFILL
    return sfn


def _put(app: Any, load_event: Event, ctx: FakeLambdaContext, **changes: Any) -> tuple[int, Any]:
    event = load_event("datasets_api_put.json")
    event["body"] = json.dumps({**json.loads(event["body"]), **changes})
    return _call(app, event, ctx)


def _executions(sfn: Any) -> list[dict[str, Any]]:
    listed = sfn.list_executions(stateMachineArn=BACKFILL)["executions"]
    return [
        {
            "name": e["name"],
            "input": json.loads(sfn.describe_execution(executionArn=e["executionArn"])["input"]),
        }
        for e in listed
    ]


def test_a_new_dataset_is_generation_one_indexed_and_starts_nothing(
    app: Any,
    lethe_buckets: Callable[..., None],
    backfill_machine: Any,
    load_event: Event,
    lambda_context: FakeLambdaContext,
) -> None:
    lethe_buckets()

    status, body = _put(app, load_event, lambda_context)
    got = _call(app, load_event("datasets_api_get.json"), lambda_context)

    assert status == 201
    assert (body["version"], body["generation"], body["indexed_generation"]) == (1, 1, 1)
    assert len(body["matching_fingerprint"]) == 32
    assert "reindex" not in body
    assert _executions(backfill_machine) == []
    assert got[0] == 200
    assert {k: got[1][k] for k in ("version", "generation", "indexed_generation")} == {
        "version": 1,
        "generation": 1,
        "indexed_generation": 1,
    }


def test_a_put_changing_subject_columns_starts_exactly_one_reindex(
    app: Any,
    lethe_buckets: Callable[..., None],
    backfill_machine: Any,
    load_event: Event,
    lambda_context: FakeLambdaContext,
) -> None:
    lethe_buckets()
    _put(app, load_event, lambda_context)
    unchanged = _put(app, load_event, lambda_context)

    changed = _put(app, load_event, lambda_context, subject_columns=["text"])
    retried = _put(app, load_event, lambda_context, subject_columns=["text"])
    described = _put(
        app, load_event, lambda_context, subject_columns=["text"], description="free text only"
    )

    assert (unchanged[1]["generation"], "reindex" in unchanged[1]) == (1, False)
    status, body = changed
    assert status == 200
    assert (body["version"], body["generation"], body["indexed_generation"]) == (3, 2, 1)
    execution = f"{BACKFILL.replace(':stateMachine:', ':execution:')}:reviews-reindex-g2"
    assert body["reindex"] == {
        "execution": execution,
        "name": "reviews-reindex-g2",
        "generation": 2,
        "status": "RUNNING",
    }
    # one execution, named by dataset and generation, a forced backfill of the whole dataset
    assert _executions(backfill_machine) == [
        {
            "name": "reviews-reindex-g2",
            # the key as the API read it before the start: recorded when the re-index succeeds
            "input": {
                "dataset_id": "reviews",
                "force": True,
                "generation": 2,
                "key_fingerprint": KEY,
            },
        }
    ]
    # the same document again, or one that differs only in free text: no new generation and
    # no second execution; the answer still names the pending re-index
    for again in (retried, described):
        assert again[0] == 200
        assert (again[1]["generation"], again[1]["indexed_generation"]) == (2, 1)
        assert again[1]["reindex"]["execution"] == execution
    assert len(_executions(backfill_machine)) == 1


def test_once_the_generation_is_recorded_a_put_starts_nothing(
    app: Any,
    lethe_buckets: Callable[..., None],
    backfill_machine: Any,
    load_event: Event,
    lambda_context: FakeLambdaContext,
    lethe_tables: dict[str, Any],
) -> None:
    lethe_buckets()
    _put(app, load_event, lambda_context)
    _put(app, load_event, lambda_context, subject_columns=["text"])
    # what the backfill's last state does when generation 2 succeeded
    lethe_tables["DatasetsTable"].update_item(
        Key={"dataset_id": "reviews"},
        UpdateExpression="SET indexed_generation = :g",
        ConditionExpression="matching_generation = :g",
        ExpressionAttributeValues={":g": 2},
    )

    status, body = _put(app, load_event, lambda_context, subject_columns=["text"])
    changed = _put(app, load_event, lambda_context, partition_by=[])

    assert (status, body["generation"], body["indexed_generation"]) == (200, 2, 2)
    assert "reindex" not in body
    assert (changed[1]["generation"], changed[1]["indexed_generation"]) == (3, 2)
    assert changed[1]["reindex"]["name"] == "reviews-reindex-g3"
    assert sorted(e["name"] for e in _executions(backfill_machine)) == [
        "reviews-reindex-g2",
        "reviews-reindex-g3",
    ]


def test_a_dataset_registered_before_generations_is_taken_as_indexed(
    app: Any,
    lethe_buckets: Callable[..., None],
    backfill_machine: Any,
    load_event: Event,
    lambda_context: FakeLambdaContext,
    lethe_tables: dict[str, Any],
) -> None:
    lethe_buckets()
    document = json.loads(load_event("datasets_api_put.json")["body"])
    lethe_tables["DatasetsTable"].put_item(
        Item={"dataset_id": "reviews", "document": json.dumps(document), "version": 4}
    )

    same = _put(app, load_event, lambda_context)
    changed = _put(app, load_event, lambda_context, subject_columns=["text"])

    assert (same[0], same[1]["version"], same[1]["generation"]) == (200, 5, 1)
    assert "reindex" not in same[1]
    assert (changed[1]["generation"], changed[1]["indexed_generation"]) == (2, 1)
    assert [e["name"] for e in _executions(backfill_machine)] == ["reviews-reindex-g2"]


def test_a_reindex_that_cannot_start_is_started_by_the_next_put(
    app: Any,
    lethe_buckets: Callable[..., None],
    load_event: Event,
    lambda_context: FakeLambdaContext,
) -> None:
    lethe_buckets()
    _put(app, load_event, lambda_context)

    # no backfill machine yet: StartExecution fails after the registry took generation 2
    status, body = _put(app, load_event, lambda_context, subject_columns=["text"])

    assert status == 503
    assert (body["generation"], body["indexed_generation"]) == (2, 1)
    assert body["message"].startswith(
        "the document is registered (version 2, matching generation 2), but its re-index could "
        "not be started (StateMachineDoesNotExist)"
    )

    sfn = boto3.client("stepfunctions", region_name="us-east-1")
    sfn.create_state_machine(
        name="lethe-local-index-backfill",
        definition=json.dumps(
            {"StartAt": "Done", "States": {"Done": {"Type": "Pass", "End": True}}}
        ),
        roleArn="arn:aws:iam::123456789012:role/lethe-local-index-backfill",
    )
    retried = _put(app, load_event, lambda_context, subject_columns=["text"])

    assert retried[0] == 200
    assert retried[1]["generation"] == 2  # the same generation: no second bump
    assert retried[1]["reindex"]["name"] == "reviews-reindex-g2"
    assert [e["name"] for e in _executions(sfn)] == ["reviews-reindex-g2"]


# ------------------------------------------------------------------ the subject hash key


def _rotate() -> None:
    """An operator puts a new value in the secret; the function's cache has expired."""
    boto3.client("secretsmanager").put_secret_value(
        SecretId=KEY_SECRET, SecretString=ROTATED_SECRET
    )
    parameters.clear_caches()


def test_a_new_dataset_records_the_current_key_and_a_put_never_changes_it(
    app: Any,
    lethe_buckets: Callable[..., None],
    backfill_machine: Any,
    load_event: Event,
    lambda_context: FakeLambdaContext,
    lethe_tables: dict[str, Any],
) -> None:
    lethe_buckets()

    created = _put(app, load_event, lambda_context)
    _rotate()
    same = _put(app, load_event, lambda_context)
    changed = _put(app, load_event, lambda_context, subject_columns=["text"])
    got = _call(app, load_event("datasets_api_get.json"), lambda_context)
    item = lethe_tables["DatasetsTable"].get_item(Key={"dataset_id": "reviews"})["Item"]

    assert created[0] == 201
    assert {k: created[1][k] for k in ("indexed_key_fingerprint", "key_fingerprint")} == {
        "indexed_key_fingerprint": KEY,
        "key_fingerprint": KEY,
    }
    assert created[1]["key_reindex_pending"] is False
    # after the rotation: the dataset keeps the key its index was built with, and is pending
    assert item["indexed_key_fingerprint"] == KEY
    for answer in (same[1], changed[1], got[1]):
        assert answer["indexed_key_fingerprint"] == KEY
        assert answer["key_fingerprint"] == ROTATED
        assert answer["key_reindex_pending"] is True
    # the re-index a definition change starts carries the key read now
    assert _executions(backfill_machine)[0]["input"]["key_fingerprint"] == ROTATED
    assert HASH_SECRET not in json.dumps([created, same, changed, got])
    assert ROTATED_SECRET not in json.dumps([created, same, changed, got])


def test_a_dataset_from_before_key_fingerprints_is_pending_and_a_put_keeps_it_so(
    app: Any,
    lethe_buckets: Callable[..., None],
    load_event: Event,
    lambda_context: FakeLambdaContext,
    lethe_tables: dict[str, Any],
) -> None:
    lethe_buckets()
    document = json.loads(load_event("datasets_api_put.json")["body"])
    lethe_tables["DatasetsTable"].put_item(
        Item={"dataset_id": "reviews", "document": json.dumps(document), "version": 4}
    )

    status, body = _put(app, load_event, lambda_context)

    assert status == 200
    assert (body["indexed_key_fingerprint"], body["key_reindex_pending"]) == (None, True)
    item = lethe_tables["DatasetsTable"].get_item(Key={"dataset_id": "reviews"})["Item"]
    assert "indexed_key_fingerprint" not in item


def test_an_unreadable_key_is_a_503_that_writes_nothing(
    app: Any,
    lethe_buckets: Callable[..., None],
    load_event: Event,
    lambda_context: FakeLambdaContext,
    lethe_tables: dict[str, Any],
) -> None:
    lethe_buckets()
    boto3.client("secretsmanager").delete_secret(
        SecretId=KEY_SECRET, ForceDeleteWithoutRecovery=True
    )
    parameters.clear_caches()

    status, body = _put(app, load_event, lambda_context)

    assert status == 503
    assert body["message"].startswith(f"the subject hash key secret {KEY_SECRET} cannot be read")
    assert lethe_tables["DatasetsTable"].scan()["Items"] == []
