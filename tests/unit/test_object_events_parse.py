"""The object events handler's event parsing, on the event files in events/."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from lethe_shared.errors import MalformedEventError
from lethe_shared.object_events import EventKind
from tests.conftest import load_function_module

app = load_function_module("object_events")


def test_created_event(load_event: Callable[[str], dict[str, Any]]) -> None:
    event = app.to_object_event(load_event("object_created_raw.json"))

    assert event.kind is EventKind.CREATED
    assert event.bucket == "lethe-local-raw-123456789012-us-east-1"
    assert event.key == "reviews/2026/11/22/reviews-001.jsonl"
    assert event.version_id == "3HL4kqtJlcpXroDTDmJ.rmSpXd3dIbrHY"
    assert event.etag == "b1946ac92492d2347c6235b4d2611184"
    assert event.size == 1024
    assert event.sequencer == "0062E99A88DC407460"
    assert event.reason == "PutObject"


def test_delete_marker_event(load_event: Callable[[str], dict[str, Any]]) -> None:
    event = app.to_object_event(load_event("object_delete_marker_raw.json"))

    assert event.kind is EventKind.DELETED
    assert event.deletion_type == "Delete Marker Created"
    assert event.size is None


def test_missing_key_is_malformed(load_event: Callable[[str], dict[str, Any]]) -> None:
    with pytest.raises(MalformedEventError, match=r"detail\.object\.key: Field required"):
        app.to_object_event(load_event("object_created_malformed.json"))


def test_other_detail_type_is_malformed(load_event: Callable[[str], dict[str, Any]]) -> None:
    event = load_event("object_created_raw.json")
    event["detail-type"] = "Object Tags Added"

    with pytest.raises(MalformedEventError, match="unsupported detail-type 'Object Tags Added'"):
        app.to_object_event(event)


def test_missing_sequencer_is_malformed(load_event: Callable[[str], dict[str, Any]]) -> None:
    event = load_event("object_created_raw.json")
    del event["detail"]["object"]["sequencer"]

    with pytest.raises(MalformedEventError, match="sequencer is missing"):
        app.to_object_event(event)
