"""lethe_shared.erasure.request_ages and ErasureMetricsFunction: open requests by status, the oldest
open request and the longest pending approval, as the metrics the alarms read."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from lethe_jobs.emf import emf_line
from lethe_shared.erasure.request_ages import awaiting_since, measure
from lethe_shared.erasure.requests import ErasureRequest, ErasureStatus, HistoryEvent
from tests.fakes import MemoryErasureRequests

pytestmark = [pytest.mark.unit, pytest.mark.lambda_runtime]

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def _at(hours_ago: float) -> str:
    return (NOW - timedelta(hours=hours_ago)).isoformat()


def _request(
    request_id: str, status: ErasureStatus, created_hours_ago: float, **history: float
) -> ErasureRequest:
    events = [HistoryEvent(status=ErasureStatus(s), at=_at(h)) for s, h in history.items()]
    return ErasureRequest(
        request_id=request_id,
        status=status,
        created_at=_at(created_hours_ago),
        updated_at=_at(0),
        requested_by="dpo@example.com",
        subject_hashes=("h" * 64,),
        subject_count=1,
        history=tuple(events),
    )


def _store(*requests: ErasureRequest) -> MemoryErasureRequests:
    store = MemoryErasureRequests()
    for request in requests:
        store.create(request)
    return store


def test_nothing_open_publishes_zero_counts_and_ages() -> None:
    figures = measure(_store(), NOW).metrics()
    assert figures["OpenErasureRequests"] == 0
    assert figures["OldestOpenErasureAgeHours"] == 0
    assert figures["OldestPendingApprovalAgeHours"] == 0
    assert figures["OpenErasureRequests_AWAITING_APPROVAL"] == 0


def test_open_requests_by_status_and_the_oldest_open_one() -> None:
    store = _store(
        _request("er-1", ErasureStatus.ERASING, 30),
        _request("er-2", ErasureStatus.RECEIVED, 1),
        _request("er-3", ErasureStatus.COMPLETED, 900),  # closed: neither counted nor aged
        _request("er-4", ErasureStatus.FAILED, 800),
    )
    figures = measure(store, NOW).metrics()
    assert figures["OpenErasureRequests"] == 2
    assert figures["OpenErasureRequests_ERASING"] == 1
    assert figures["OpenErasureRequests_RECEIVED"] == 1
    assert figures["OldestOpenErasureAgeHours"] == 30
    assert "OpenErasureRequests_COMPLETED" not in figures


def test_a_pending_approval_is_aged_from_when_it_started_waiting() -> None:
    waiting = _request(
        "er-1", ErasureStatus.AWAITING_APPROVAL, 50, REPORTED=49.5, AWAITING_APPROVAL=49
    )
    assert awaiting_since(waiting) == _at(49)
    figures = measure(_store(waiting), NOW).metrics()
    assert figures["OldestPendingApprovalAgeHours"] == 49
    assert figures["OldestOpenErasureAgeHours"] == 50


def test_a_pending_approval_without_history_is_aged_from_its_creation() -> None:
    waiting = _request("er-1", ErasureStatus.AWAITING_APPROVAL, 3)
    assert measure(_store(waiting), NOW).metrics()["OldestPendingApprovalAgeHours"] == 3


def test_the_figures_carry_no_request_id_or_subject_hash() -> None:
    store = _store(_request("er-secret-id", ErasureStatus.AWAITING_APPROVAL, 2))
    text = json.dumps(measure(store, NOW).metrics())
    assert "er-secret-id" not in text
    assert "h" * 64 not in text


def test_the_ingest_job_emf_line_is_cloudwatch_embedded_metric_format() -> None:
    line = emf_line({"RowsWritten": 7, "ObjectsIngested": 1}, NOW)
    document: dict[str, Any] = json.loads(line)
    directive = document["_aws"]["CloudWatchMetrics"][0]
    assert directive["Namespace"] == "Lethe"
    assert directive["Dimensions"] == [["service"]]
    assert {m["Name"] for m in directive["Metrics"]} == {"RowsWritten", "ObjectsIngested"}
    assert document["service"] == "lethe"
    assert document["RowsWritten"] == 7
    assert document["_aws"]["Timestamp"] == int(NOW.timestamp() * 1000)
    assert "\n" not in line
