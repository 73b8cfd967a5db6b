"""ErasureMetricsFunction against moto DynamoDB, driven by events/erasure_metrics_schedule.json:
the open requests of ErasureRequestsTable (its by_status index) become one Powertools EMF
document (namespace Lethe, dimension service=lethe) that names no request and no subject."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from lethe_shared.erasure.requests import (
    DynamoErasureRequests,
    ErasureStatus,
    hash_subjects,
    new_request,
    new_request_id,
    parse_request_body,
)
from tests.conftest import FakeLambdaContext, load_function_module
from tests.integration.conftest import create_table_from_template

pytestmark = [pytest.mark.integration, pytest.mark.lambda_runtime]

SECRET = "u-SECRET-1001"


def _emf_documents(out: str) -> list[dict[str, Any]]:
    documents = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return [d for d in documents if "_aws" in d]


def test_the_schedule_publishes_open_requests_and_ages(
    aws: None,
    handler_env: Callable[[str], None],
    load_event: Callable[[str], dict[str, Any]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    table = create_table_from_template("ErasureRequestsTable", "lethe-local-erasure-requests")
    requests = DynamoErasureRequests(table)
    body = parse_request_body({"subject_ids": [SECRET], "requested_by": "dpo@example.com"})
    request = new_request(new_request_id(), body, hash_subjects(body, b"k" * 32, datasets=[]))
    requests.create(request)
    requests.transition(request.request_id, ErasureStatus.REPORTED, by="workflow")
    requests.transition(request.request_id, ErasureStatus.AWAITING_APPROVAL, by="workflow")
    handler_env("ErasureMetricsFunction")
    app = load_function_module("erasure_metrics")

    figures = app.handler(load_event("erasure_metrics_schedule.json"), FakeLambdaContext())

    assert figures["OpenErasureRequests"] == 1
    assert figures["OpenErasureRequests_AWAITING_APPROVAL"] == 1
    assert 0 <= figures["OldestPendingApprovalAgeHours"] < 0.1
    out, err = capsys.readouterr()
    (document,) = _emf_documents(out)
    directive = document["_aws"]["CloudWatchMetrics"][0]
    assert directive["Namespace"] == "Lethe"
    assert directive["Dimensions"] == [["service"]]
    assert document["service"] == "lethe"
    assert document["OpenErasureRequests_AWAITING_APPROVAL"] == [1.0]
    assert document["OpenErasureRequests_ERASING"] == [0.0]
    for text in (out, err):
        assert SECRET not in text
        assert request.request_id not in text
        for subject_hash in request.subject_hashes:
            assert subject_hash not in text
