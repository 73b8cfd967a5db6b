"""The object events handler's event parsing, on the event files in events/.

Those files are SQS batches, as the function's event source delivers them; each record's body is
the EventBridge S3 event.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from lethe_shared.errors import MalformedEventError
from lethe_shared.ingestion.object_events import EventKind
from tests.conftest import load_function_module

pytestmark = pytest.mark.lambda_runtime

app = load_function_module("object_events")
Loader = Callable[[str], dict[str, Any]]


def _body(load_event: Loader, name: str) -> dict[str, Any]:
    """The EventBridge event in the only record of events/<name>."""
    (record,) = load_event(name)["Records"]
    event: dict[str, Any] = app.event_of_body(record["body"])
    return event


def test_event_files_are_sqs_batches_of_eventbridge_events(load_event: Loader) -> None:
    for name in ("object_created_raw.json", "object_deleted_raw.json", "object_events_batch.json"):
        records = load_event(name)["Records"]
        assert records
        for record in records:
            assert record["eventSource"] == "aws:sqs"
            assert record["eventSourceARN"].endswith(":lethe-local-object-events")
            assert record["attributes"]["ApproximateReceiveCount"] == "1"


def test_created_event(load_event: Loader) -> None:
    event = app.to_object_event(_body(load_event, "object_created_raw.json"))

    assert event.kind is EventKind.CREATED
    assert event.bucket == "lethe-local-raw-123456789012-us-east-1"
    assert event.key == "reviews/2026/11/22/reviews-001.jsonl"
    assert event.version_id == "3HL4kqtJlcpXroDTDmJ.rmSpXd3dIbrHY"
    assert event.etag == "b1946ac92492d2347c6235b4d2611184"
    assert event.size == 1024
    assert event.sequencer == "0062E99A88DC407460"
    assert event.reason == "PutObject"


def test_delete_marker_event(load_event: Loader) -> None:
    event = app.to_object_event(_body(load_event, "object_delete_marker_raw.json"))

    assert event.kind is EventKind.DELETED
    assert event.deletion_type == "Delete Marker Created"
    assert event.size is None


def test_missing_key_is_malformed(load_event: Loader) -> None:
    with pytest.raises(MalformedEventError, match=r"detail\.object\.key: Field required"):
        app.to_object_event(_body(load_event, "object_created_malformed.json"))


def test_other_detail_type_is_malformed(load_event: Loader) -> None:
    event = _body(load_event, "object_created_raw.json")
    event["detail-type"] = "Object Tags Added"

    with pytest.raises(MalformedEventError, match="unsupported detail-type 'Object Tags Added'"):
        app.to_object_event(event)


def test_missing_sequencer_is_malformed(load_event: Loader) -> None:
    event = _body(load_event, "object_created_raw.json")
    del event["detail"]["object"]["sequencer"]

    with pytest.raises(MalformedEventError, match="sequencer is missing"):
        app.to_object_event(event)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('{"version": "0", "detail": ', r"^the record body is not JSON: Expecting value"),
        ("", r"^the record body is not JSON"),
        (None, r"^the record body is not JSON"),
        ("[1, 2]", r"^the record body is a JSON list, not an event$"),
        ('"Object Created"', r"^the record body is a JSON str, not an event$"),
    ],
)
def test_a_body_that_is_not_an_event_is_malformed(body: str | None, message: str) -> None:
    with pytest.raises(MalformedEventError, match=message):
        app.event_of_body(body)


def test_the_body_is_the_eventbridge_event_unchanged(load_event: Loader) -> None:
    (record,) = load_event("object_created_raw.json")["Records"]

    assert app.event_of_body(record["body"]) == json.loads(record["body"])
