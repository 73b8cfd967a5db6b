"""POST /erasure-requests/{id}/resume (ErasureApiFunction against moto; the CLI verb is
tests/integration/test_erasure_resume_cli.py): a FAILED request with a valid approval of its frozen
report starts one new execution straight to Mark Erasing; every other request is refused with
409 and a reason; the caller must be the requester's principal or an approver's."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from lethe_shared.erasure.requests import DynamoErasureRequests, ErasureStatus
from tests.integration import test_erasure_api_handler as handler_tests
from tests.integration.test_erasure_api_handler import (
    STATE_MACHINE,
    at,
    call,
    stored_items,
    with_key,
)

pytestmark = pytest.mark.lambda_runtime

Event = Callable[[str], dict[str, Any]]
SHA = "b" * 64
OTHER_USER = "arn:aws:iam::123456789012:user/someone-else"
OFFICER = "arn:aws:iam::123456789012:user/privacy-officer"  # events/erasure_api_resume.json's
RESUME_REFUSED = "only the IAM principal that filed this request or an approver's may resume it"
# the erasure API's fixtures (moto tables, the handler, no raw id in any log)
app = handler_tests.app
requests_table = handler_tests.requests_table
_logs_hold_no_raw_id = handler_tests._logs_hold_no_raw_id


def resume_event(load_event: Event, rid: str, key: str | None = "r-1") -> dict[str, Any]:
    event = at(load_event("erasure_api_resume.json"), rid)
    return with_key(event, key) if key else event


def failed_after_approval(table: Any, rid: str, *, hours_ago: float = 2) -> None:
    decided = datetime.now(UTC) - timedelta(hours=hours_ago)
    requests = DynamoErasureRequests(table)
    for status in ("REPORTED", "AWAITING_APPROVAL"):
        requests.transition(rid, ErasureStatus(status), by="test")
    requests.transition(
        rid, ErasureStatus.APPROVED, by="dpo@example.com",
        updates={
            "report": {"manifest_sha256": SHA, "manifest_url": f"s3://r/erasure/{rid}/m.json"},
            "approval": {
                "approvers": ["dpo@example.com"], "decision": "approve",
                "decided_by": "dpo@example.com", "decided_at": decided.isoformat(),
                "report_sha256": SHA,
            },
        },
    )  # fmt: skip
    requests.transition(rid, ErasureStatus.ERASING, by="workflow")
    requests.transition(
        rid, ErasureStatus.FAILED, by="workflow",
        updates={"error": {"error": "States.TaskFailed", "cause": "killed"}},
    )  # fmt: skip


def executions_named(suffix: str) -> list[dict[str, Any]]:
    sfn = boto3.client("stepfunctions")
    listed = sfn.list_executions(stateMachineArn=STATE_MACHINE)["executions"]
    return [
        dict(sfn.describe_execution(executionArn=e["executionArn"]))
        for e in listed
        if e["name"].endswith(suffix)
    ]


def test_a_failed_request_is_resumed_once_per_key(
    app: Any, requests_table: Any, load_event: Event
) -> None:
    _, filed = call(app, load_event("erasure_api_post.json"))
    rid = filed["request_id"]
    failed_after_approval(requests_table, rid)

    status, answer = call(app, resume_event(load_event, rid))
    again = call(app, resume_event(load_event, rid))

    assert status == 202
    assert (answer["status"], answer["resumed"]["run"], answer["resumed"]["repeated"]) == (
        "FAILED", 2, False,
    )  # fmt: skip
    assert again[0] == 202
    assert again[1]["resumed"]["repeated"] is True
    (started,) = executions_named(f"{rid}-resume-1")
    assert json.loads(started["input"]) == {
        "request_id": rid, "resume": f"erasure-{rid}-resume-1", "manifest_sha256": SHA,
    }  # fmt: skip
    (item,) = stored_items(requests_table)
    assert item["execution_arn"] == started["executionArn"]
    last = item["history"][-1]
    assert (last["status"], last["by"]) == (
        "FAILED",
        "arn:aws:iam::123456789012:user/privacy-officer",
    )
    assert last["detail"].startswith("resume requested: run 2")
    # another key while that run is recorded: it is running, so it is refused
    status, refused = call(app, resume_event(load_event, rid, key="r-2"))
    assert status == 409
    assert "still running" in refused["message"]


def test_a_resume_is_refused_with_a_reason(
    app: Any, requests_table: Any, load_event: Event
) -> None:
    _, filed = call(app, load_event("erasure_api_post.json"))
    rid = filed["request_id"]
    # not failed
    status, answer = call(app, resume_event(load_event, rid))
    assert (status, "not FAILED" in answer["message"]) == (409, True)
    # failed, but the approval is older than ApprovalValidityHours (168 by default)
    failed_after_approval(requests_table, rid, hours_ago=169)
    status, answer = call(app, resume_event(load_event, rid))
    assert status == 409
    assert "expired" in answer["message"]
    assert "file a new request" in answer["message"]
    # an unknown request, and a caller who neither filed it nor approves
    assert call(app, resume_event(load_event, "er-20261122T100000Z-ffffffff"))[0] == 404
    event = resume_event(load_event, rid)
    event["requestContext"]["identity"]["userArn"] = OTHER_USER
    assert call(app, event) == (403, {"message": RESUME_REFUSED})
    assert executions_named("-resume-1") == []
