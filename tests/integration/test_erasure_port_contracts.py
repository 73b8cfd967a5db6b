"""One contract, two implementations, for the erasure ports: MemoryErasureRequests and
DynamoErasureRequests (ErasureRequestsTable as template.yaml declares it, on moto), MemoryApprovals
and DynamoApprovals (ApprovalsTable), pass the same tests."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from lethe_shared.erasure.intake import StepFunctionsStarter
from lethe_shared.erasure.requests import (
    ApprovalLink,
    Approvals,
    DynamoApprovals,
    DynamoErasureRequests,
    ErasureRequest,
    ErasureRequests,
    ErasureStatus,
    HistoryEvent,
    InvalidTransitionError,
    RequestNotFoundError,
)
from lethe_shared.erasure.workflow import S3Documents
from tests.fakes import MemoryApprovals, MemoryErasureRequests
from tests.integration.conftest import create_table_from_template

pytestmark = pytest.mark.lambda_runtime

T0 = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
H1 = "1" * 64
REPORTS = "lethe-local-reports-123456789012-us-east-1"
REPORT = {
    "manifest_sha256": "ab" * 32,
    "objects": 3,
    "versions": 5,
    "rows": 7,
    "datasets": [{"dataset_id": "reviews", "zone": "lake", "objects": 3, "versions": 5, "rows": 7}],
}


def request(request_id: str, at: datetime = T0, **changes: Any) -> ErasureRequest:
    values: dict[str, Any] = {
        "request_id": request_id,
        "status": ErasureStatus.RECEIVED,
        "created_at": at.isoformat(),
        "updated_at": at.isoformat(),
        "requested_by": "privacy@example.com",
        "reason": "ticket 88",
        "subject_hashes": (H1,),
        "subject_count": 1,
        "history": (
            HistoryEvent(
                status=ErasureStatus.RECEIVED, at=at.isoformat(), by="privacy@example.com"
            ),
        ),
        "fingerprint": "f" * 64,
    }
    return ErasureRequest.model_validate(values | changes)


@pytest.fixture(params=["memory", "dynamodb"])
def requests(request: pytest.FixtureRequest, aws: None) -> ErasureRequests:
    if request.param == "memory":
        return MemoryErasureRequests()
    table = create_table_from_template("ErasureRequestsTable", "lethe-local-erasure-requests")
    return DynamoErasureRequests(table)


@pytest.fixture(params=["memory", "dynamodb"])
def approvals(request: pytest.FixtureRequest, aws: None) -> Approvals:
    if request.param == "memory":
        return MemoryApprovals()
    return DynamoApprovals(create_table_from_template("ApprovalsTable", "lethe-local-approvals"))


def test_create_once_then_the_stored_request(requests: ErasureRequests) -> None:
    first = request("er-1")

    created = requests.create(first)
    again = requests.create(request("er-1", reason="another body", subject_count=2))

    assert created == (first, True)
    assert again == (first, False)
    assert requests.get("er-1") == first
    assert requests.get("er-unknown") is None


def test_transitions_follow_the_edges_and_append_history_in_order(
    requests: ErasureRequests,
) -> None:
    requests.create(request("er-1"))

    reported = requests.transition(
        "er-1",
        ErasureStatus.REPORTED,
        by="workflow",
        detail="3 object(s)",
        updates={"report": REPORT},
    )
    awaiting = requests.transition(
        "er-1", ErasureStatus.AWAITING_APPROVAL, by="workflow", updates={"task_token": "tok-1"}
    )

    assert reported.status is ErasureStatus.REPORTED
    assert reported.report == REPORT  # numbers come back as ints, lists as lists
    assert awaiting.task_token == "tok-1"
    stored = requests.get("er-1")
    assert stored == awaiting
    assert [(h.status, h.by, h.detail) for h in stored.history] == [
        (ErasureStatus.RECEIVED, "privacy@example.com", ""),
        (ErasureStatus.REPORTED, "workflow", "3 object(s)"),
        (ErasureStatus.AWAITING_APPROVAL, "workflow", ""),
    ]
    assert stored.updated_at == stored.history[-1].at
    assert stored.created_at == T0.isoformat()


def test_the_task_token_is_cleared_only_while_it_is_the_one_handed_over(
    requests: ErasureRequests,
) -> None:
    requests.create(request("er-1"))
    requests.transition("er-1", ErasureStatus.REPORTED, by="workflow")
    requests.transition(
        "er-1", ErasureStatus.AWAITING_APPROVAL, by="workflow", updates={"task_token": "tok-2"}
    )

    stale = requests.clear_task_token("er-1", "tok-1")  # a retry's older token
    kept = requests.get("er-1")
    cleared = requests.clear_task_token("er-1", "tok-2")
    again = requests.clear_task_token("er-1", "tok-2")

    assert (stale, cleared, again) == (False, True, False)
    assert kept is not None
    assert kept.task_token == "tok-2"
    after = requests.get("er-1")
    assert after is not None
    assert (after.task_token, after.status) == ("", ErasureStatus.AWAITING_APPROVAL)
    assert after.history == kept.history
    assert requests.clear_task_token("er-unknown", "tok-2") is False


def test_a_transition_from_another_status_is_refused_with_the_current_one(
    requests: ErasureRequests,
) -> None:
    requests.create(request("er-1"))

    with pytest.raises(InvalidTransitionError) as caught:
        requests.transition("er-1", ErasureStatus.APPROVED, by="dpo@example.com")

    assert caught.value.current == "RECEIVED"
    assert requests.get("er-1") == request("er-1")


def test_allowed_from_widens_or_narrows_the_edges(requests: ErasureRequests) -> None:
    requests.create(request("er-1"))
    requests.transition("er-1", ErasureStatus.REPORTED, by="workflow")
    awaiting = frozenset({ErasureStatus.REPORTED, ErasureStatus.AWAITING_APPROVAL})

    requests.transition("er-1", ErasureStatus.AWAITING_APPROVAL, by="a", allowed_from=awaiting)
    again = requests.transition(
        "er-1", ErasureStatus.AWAITING_APPROVAL, by="b", allowed_from=awaiting
    )
    with pytest.raises(InvalidTransitionError) as caught:
        requests.transition(
            "er-1", ErasureStatus.REJECTED, by="c",
            allowed_from=frozenset({ErasureStatus.RECEIVED}),
        )  # fmt: skip

    assert [h.by for h in again.history] == ["privacy@example.com", "workflow", "a", "b"]
    assert caught.value.current == "AWAITING_APPROVAL"


def test_a_transition_requires_every_attribute_it_pins(requests: ErasureRequests) -> None:
    """`require` is part of the conditional write (Mark Erasing pins the approval it read)."""
    approval = {"decision": "approve", "decided_by": "dpo@example.com", "decided_at": "t1"}
    requests.create(request("er-1", status=ErasureStatus.APPROVED, approval=approval))
    pinned = {"approval.decision": "approve", "approval.decided_by": "dpo@example.com"}

    for wrong in (
        {**pinned, "approval.decided_by": "privacy@example.com"},
        {**pinned, "approval.decision": "reject"},
        {"approval.missing": "x"},
        {"requested_by": "dpo@example.com"},
    ):
        with pytest.raises(InvalidTransitionError):
            requests.transition("er-1", ErasureStatus.ERASING, by="workflow", require=wrong)
        stored = requests.get("er-1")
        assert stored is not None
        assert stored.status is ErasureStatus.APPROVED

    moved = requests.transition(
        "er-1", ErasureStatus.ERASING, by="workflow",
        require={**pinned, "requested_by": "privacy@example.com"},
    )  # fmt: skip
    assert moved.status is ErasureStatus.ERASING


def test_a_transition_of_an_unknown_request_is_not_found(requests: ErasureRequests) -> None:
    with pytest.raises(RequestNotFoundError):
        requests.transition("er-unknown", ErasureStatus.REPORTED, by="workflow")
    with pytest.raises(RequestNotFoundError):
        requests.update("er-unknown", {"execution_arn": "arn"})

    assert requests.get("er-unknown") is None


def test_a_transition_removes_the_task_token(requests: ErasureRequests) -> None:
    requests.create(request("er-1"))
    requests.transition("er-1", ErasureStatus.REPORTED, by="workflow")
    requests.transition(
        "er-1", ErasureStatus.AWAITING_APPROVAL, by="workflow", updates={"task_token": "tok-1"}
    )

    approved = requests.transition(
        "er-1",
        ErasureStatus.APPROVED,
        by="dpo@example.com",
        updates={"approval": {"decision": "approve", "decided_by": "dpo@example.com"}},
        remove=("task_token",),
    )

    assert approved.task_token == ""
    stored = requests.get("er-1")
    assert stored is not None
    assert stored.task_token == ""
    assert stored.approval == {"decision": "approve", "decided_by": "dpo@example.com"}


def test_update_sets_attributes_and_keeps_status_and_history(requests: ErasureRequests) -> None:
    requests.create(request("er-1"))

    updated = requests.update("er-1", {"execution_arn": "arn:aws:states:x", "report": REPORT})

    assert (updated.status, updated.execution_arn) == (ErasureStatus.RECEIVED, "arn:aws:states:x")
    assert updated.report == REPORT
    assert len(updated.history) == 1
    assert updated.updated_at > T0.isoformat()
    assert requests.get("er-1") == updated


def test_floats_are_refused_as_dynamodb_refuses_them(requests: ErasureRequests) -> None:
    requests.create(request("er-1"))

    with pytest.raises(TypeError, match="Float types are not supported"):
        requests.update("er-1", {"result": {"ratio": 0.5}})


def test_list_newest_first_all_or_of_one_status(requests: ErasureRequests) -> None:
    for number, hours in ((1, 0), (2, 1), (3, 2)):
        requests.create(request(f"er-{number}", T0 + timedelta(hours=hours)))
    requests.transition("er-2", ErasureStatus.REPORTED, by="workflow")

    assert [r.request_id for r in requests.list()] == ["er-3", "er-2", "er-1"]
    assert [r.request_id for r in requests.list(ErasureStatus.RECEIVED)] == ["er-3", "er-1"]
    assert [r.request_id for r in requests.list(ErasureStatus.REPORTED)] == ["er-2"]
    assert list(requests.list(ErasureStatus.COMPLETED)) == []


def link(approval_id: str, approver: str = "dpo@example.com") -> ApprovalLink:
    deadline = int((T0 + timedelta(hours=72)).timestamp())
    return ApprovalLink(
        approval_id=approval_id,
        request_id="er-1",
        approver=approver,
        deadline=deadline,
        created_at=T0.isoformat(),
        expires_at=deadline + 30 * 86400,
    )


def test_approvals_put_get_and_replace(approvals: Approvals) -> None:
    first = link("x7Qm3v9KpL2sT8wYzR4nB6cD1eF5gH0j")
    approvals.put(first)
    approvals.put(link("a" * 32, "ciso@example.com"))

    assert approvals.get("x7Qm3v9KpL2sT8wYzR4nB6cD1eF5gH0j") == first
    assert approvals.get("b" * 32) is None
    approvals.put(link("a" * 32, "other@example.com"))
    replaced = approvals.get("a" * 32)
    assert replaced is not None
    assert replaced.approver == "other@example.com"
    assert replaced.deadline == 1795600800


# The other two adapters the workflow steps use, on moto: what the unit tests' in-memory
# stand-ins (tests/unit/test_erasure_workflow.py, test_erasure_intake.py) assume of them.


def test_s3_documents_write_a_document_once(aws: None) -> None:
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=REPORTS)
    s3.put_bucket_versioning(Bucket=REPORTS, VersioningConfiguration={"Status": "Enabled"})
    documents = S3Documents(s3, REPORTS)

    url = documents.put("erasure/er-1/certificate.json", b"{}", "application/json")
    first = documents.put_once("erasure/er-1/audit.json", b'{"n":1}', "application/json")
    second = documents.put_once("erasure/er-1/audit.json", b'{"n":2}', "application/json")

    assert url == f"s3://{REPORTS}/erasure/er-1/certificate.json"
    assert (first, second) == (True, False)
    assert documents.get("erasure/er-1/audit.json") == b'{"n":1}'
    assert documents.get("erasure/er-1/missing.json") is None
    versions = s3.list_object_versions(Bucket=REPORTS, Prefix="erasure/er-1/audit.json")
    assert len(versions["Versions"]) == 1


def test_the_starter_finds_the_execution_it_started(aws: None) -> None:
    sfn = boto3.client("stepfunctions")
    machine = sfn.create_state_machine(
        name="lethe-local-erasure",
        definition=json.dumps(
            {"StartAt": "Wait", "States": {"Wait": {"Type": "Pass", "End": True}}}
        ),
        roleArn="arn:aws:iam::123456789012:role/lethe-local-erasure",
    )["stateMachineArn"]
    starter = StepFunctionsStarter(sfn, machine)

    first = starter.start("er-20261122T100000Z-0a1b2c3d")
    again = starter.start("er-20261122T100000Z-0a1b2c3d")

    expected = (
        "arn:aws:states:us-east-1:123456789012:execution:lethe-local-erasure:"
        "erasure-er-20261122T100000Z-0a1b2c3d"
    )
    assert (first, again) == (expected, expected)
    (execution,) = sfn.list_executions(stateMachineArn=machine)["executions"]
    assert execution["name"] == "erasure-er-20261122T100000Z-0a1b2c3d"
