"""Approval is enforced where data is destroyed (lethe_shared.erasure.authority):

- Mark Erasing (workflow.mark / start_erasing) moves a request to ERASING only from APPROVED
  with a valid recorded approval, in one conditional write; anything else raises
  ErasureNotApprovedError and changes nothing;
- the erase job's own check (check_erasable) refuses a request that is not ERASING with a
  recorded approval of exactly the manifest it was handed;
- the task token is stored sealed (task_tokens) and opened only by the callbacks;
- template.yaml and the state machine keep it so: keys-only index, the token key's use, the
  erase job's read-only view of the request, ErasureNotApprovedError never reaching a Spark run.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from lethe.localcloud.template import REPO_ROOT, load_template
from lethe_shared.erasure.approval_flow import request_approval
from lethe_shared.erasure.authority import (
    VIEW_ATTRIBUTES,
    EraseNotAuthorisedError,
    ErasureNotApprovedError,
    RequestView,
    check_erasable,
    recorded_approval,
)
from lethe_shared.erasure.intake import cancel_request
from lethe_shared.erasure.requests import (
    ErasureRequest,
    ErasureRequestBody,
    ErasureStatus,
    hash_subjects,
    new_request,
)
from lethe_shared.erasure.task_callbacks import StepFunctionsCallbacks
from lethe_shared.erasure.workflow import mark
from tests.fakes import MemoryApprovals, MemoryErasureRequests

pytestmark = pytest.mark.unit

RID = "er-20261122T100000Z-0a1b2c3d"
REQUESTER = "privacy@example.com"
DPO = "dpo@example.com"
T0 = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
MANIFEST_URL = f"s3://reports/erasure/{RID}/manifest.json"
SHA = "ab" * 32
REPORT = {"manifest_url": MANIFEST_URL, "manifest_sha256": SHA}
ASKED = {"deadline": (T0 + timedelta(hours=72)).isoformat(), "approvers": [DPO]}
DECIDED = {**ASKED, "decision": "approve", "decided_by": DPO, "decided_at": T0.isoformat()}


class RecordingCallbacks:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def success(self, token: str, output: Mapping[str, Any]) -> None:
        self.calls.append(("success", token))

    def failure(self, token: str, error: str, cause: str) -> None:
        self.calls.append(("failure", token))


def _filed(requests: MemoryErasureRequests) -> None:
    body = ErasureRequestBody(subject_ids=["u-1"], requested_by=REQUESTER)
    requests.create(new_request(RID, body, hash_subjects(body, b"k" * 32, []), now=T0))


def _advance(requests: MemoryErasureRequests, *statuses: ErasureStatus, **approval: Any) -> None:
    updates: dict[ErasureStatus, dict[str, Any]] = {
        ErasureStatus.REPORTED: {"report": REPORT},
        ErasureStatus.AWAITING_APPROVAL: {"task_token": "task-token-1", "approval": ASKED},
        ErasureStatus.APPROVED: {"approval": {**DECIDED, **approval}},
        ErasureStatus.REJECTED: {"approval": {**DECIDED, "decision": "reject"}},
    }
    for status in statuses:
        requests.transition(RID, status, by="test", updates=updates.get(status, {}))


@pytest.fixture
def requests() -> MemoryErasureRequests:
    store = MemoryErasureRequests()
    _filed(store)
    return store


def _mark_erasing(requests: MemoryErasureRequests) -> dict[str, Any]:
    return mark(RID, ErasureStatus.ERASING, requests=requests, detail="approved: erasing")


# ------------------------------------------------------------------------------ Mark Erasing


def test_an_approved_request_becomes_erasing_and_a_retry_keeps_it(
    requests: MemoryErasureRequests,
) -> None:
    _advance(
        requests, ErasureStatus.REPORTED, ErasureStatus.AWAITING_APPROVAL, ErasureStatus.APPROVED
    )

    first = _mark_erasing(requests)
    again = _mark_erasing(requests)

    assert (first["status"], again["status"]) == ("ERASING", "ERASING")
    record = requests.get(RID)
    assert record is not None
    assert record.status is ErasureStatus.ERASING
    assert [h.status for h in record.history].count(ErasureStatus.ERASING) == 2


@pytest.mark.parametrize(
    ("path", "status", "outcome"),
    [
        ((ErasureStatus.REPORTED, ErasureStatus.AWAITING_APPROVAL, ErasureStatus.REJECTED),
         "REJECTED", ""),
        ((ErasureStatus.REPORTED, ErasureStatus.AWAITING_APPROVAL, ErasureStatus.EXPIRED),
         "EXPIRED", ""),
        ((ErasureStatus.REPORTED, ErasureStatus.AWAITING_APPROVAL, ErasureStatus.FAILED),
         "FAILED", ""),
        ((ErasureStatus.REPORTED, ErasureStatus.AWAITING_APPROVAL, ErasureStatus.APPROVED,
          ErasureStatus.ERASING, ErasureStatus.COMPLETED), "COMPLETED", ""),
        ((ErasureStatus.REPORTED, ErasureStatus.AWAITING_APPROVAL), "AWAITING_APPROVAL", ""),
        ((ErasureStatus.REPORTED,), "REPORTED", ""),
    ],
)  # fmt: skip
def test_a_request_not_approved_is_never_marked_erasing(
    requests: MemoryErasureRequests, path: tuple[ErasureStatus, ...], status: str, outcome: str
) -> None:
    # Given a request rejected, expired, failed, completed or still undecided (whoever holds
    # the task token answered it with SendTaskSuccess: the workflow reaches Mark Erasing)
    _advance(requests, *path)
    before = requests.get(RID)

    # When the workflow marks it ERASING
    with pytest.raises(ErasureNotApprovedError, match=f"is {status}"):
        _mark_erasing(requests)

    # Then nothing changed
    assert requests.get(RID) == before


def test_a_cancelled_request_is_never_marked_erasing(requests: MemoryErasureRequests) -> None:
    _advance(requests, ErasureStatus.REPORTED, ErasureStatus.AWAITING_APPROVAL)
    callbacks = RecordingCallbacks()
    cancelled = cancel_request(RID, REQUESTER, requests=requests, callbacks=callbacks)

    with pytest.raises(ErasureNotApprovedError, match=r"is REJECTED \(CANCELLED\)"):
        _mark_erasing(requests)

    assert requests.get(RID) == cancelled


@pytest.mark.parametrize(
    "approval",
    [
        {"decision": ""},  # no decision recorded
        {"decision": "reject"},
        {"decided_by": ""},
        {"decided_by": "Privacy@Example.com"},  # the requester, whatever the case
        {"decided_by": "someone@example.com"},  # not an approver the request was sent to
        {"decided_at": ""},
        {"approvers": []},
    ],
)
def test_an_approved_request_without_a_valid_recorded_decision_is_not_marked_erasing(
    requests: MemoryErasureRequests, approval: dict[str, Any]
) -> None:
    _advance(
        requests, ErasureStatus.REPORTED, ErasureStatus.AWAITING_APPROVAL, ErasureStatus.APPROVED,
        **approval,
    )  # fmt: skip
    before = requests.get(RID)

    with pytest.raises(ErasureNotApprovedError, match="without a recorded approval"):
        _mark_erasing(requests)

    assert requests.get(RID) == before


class StaleReads(MemoryErasureRequests):
    """Reads that lag behind the table: the next get returns `snapshot` (the decision was
    changed after Mark Erasing read it)."""

    def __init__(self) -> None:
        super().__init__()
        self.snapshots: deque[ErasureRequest] = deque()

    def get(self, request_id: str) -> ErasureRequest | None:
        return self.snapshots.popleft() if self.snapshots else super().get(request_id)


@pytest.mark.parametrize(
    "change",
    [
        {"status": "REJECTED"},  # a cancel landed between the read and the write
        {"approval": {**DECIDED, "decided_by": REQUESTER}},  # the decision was rewritten
    ],
)
def test_the_conditional_write_is_the_enforcement_not_the_read(change: dict[str, Any]) -> None:
    # Given Mark Erasing reads an approved request, then the stored record changes
    requests = StaleReads()
    _filed(requests)
    _advance(
        requests, ErasureStatus.REPORTED, ErasureStatus.AWAITING_APPROVAL, ErasureStatus.APPROVED
    )
    read = requests.get(RID)
    assert read is not None
    requests.snapshots.append(read)
    requests.items[RID] = {**requests.items[RID], **change}

    # When it writes, then the condition (status and the decision it read) refuses
    with pytest.raises(ErasureNotApprovedError):
        _mark_erasing(requests)
    record = requests.get(RID)
    assert record is not None
    assert record.status is not ErasureStatus.ERASING


def test_other_marks_still_leave_a_terminal_request_as_it_is(
    requests: MemoryErasureRequests,
) -> None:
    _advance(requests, ErasureStatus.REPORTED, ErasureStatus.AWAITING_APPROVAL)
    cancelled = cancel_request(RID, REQUESTER, requests=requests, callbacks=RecordingCallbacks())

    note = mark(RID, ErasureStatus.FAILED, requests=requests, error={"error": "ErasureNotApproved"})

    assert (note["status"], note["outcome"]) == ("REJECTED", "CANCELLED")
    assert requests.get(RID) == cancelled


# ------------------------------------------------------------------------ the erase job's check


def _view(**changes: Any) -> RequestView:
    fields: dict[str, Any] = {
        "request_id": RID, "status": "ERASING", "requested_by": REQUESTER, "approval": DECIDED,
        "report": REPORT,
    } | changes  # fmt: skip
    return RequestView.from_item(fields)


def test_the_job_may_run_for_an_erasing_request_with_its_approved_manifest() -> None:
    check_erasable(_view(), manifest_url=MANIFEST_URL, manifest_sha256=SHA)
    assert recorded_approval(_view()) is not None


@pytest.mark.parametrize(
    ("view", "url", "sha", "reason"),
    [
        (None, MANIFEST_URL, SHA, "no erasure request"),
        (_view(status="APPROVED"), MANIFEST_URL, SHA, "is APPROVED, not ERASING"),
        (_view(status="REJECTED"), MANIFEST_URL, SHA, "is REJECTED, not ERASING"),
        (_view(status="COMPLETED"), MANIFEST_URL, SHA, "is COMPLETED, not ERASING"),
        (_view(approval={}), MANIFEST_URL, SHA, "no recorded approval"),
        (_view(approval={**DECIDED, "decided_by": REQUESTER}), MANIFEST_URL, SHA,
         "no recorded approval"),
        (_view(), f"s3://reports/erasure/{RID}/forged.json", SHA, "is not request"),
        (_view(), MANIFEST_URL, "cd" * 32, "not the one request"),
        (_view(report={}), MANIFEST_URL, SHA, "is not request"),
    ],
)  # fmt: skip
def test_the_job_refuses_what_the_record_does_not_approve(
    view: RequestView | None, url: str, sha: str, reason: str
) -> None:
    with pytest.raises(EraseNotAuthorisedError, match=reason):
        check_erasable(view, manifest_url=url, manifest_sha256=sha)


# ------------------------------------------------------------------------------ task tokens


class Sealer:
    def seal(self, token: str) -> str:
        return "kms:" + token[::-1]

    def open(self, stored: str) -> str:  # as KmsTaskTokens: a token never sealed as it is
        return stored.removeprefix("kms:")[::-1] if stored.startswith("kms:") else stored


class RecordingMailer:
    def send(self, to: str, subject: str, text: str, html: str) -> None:
        pass


def test_the_approval_task_stores_its_token_sealed(requests: MemoryErasureRequests) -> None:
    _advance(requests, ErasureStatus.REPORTED)

    request_approval(
        RID, "raw-task-token", requests=requests, approvals=MemoryApprovals(),
        mailer=RecordingMailer(), approvers=[DPO], signing_key=b"s" * 32,
        base_url="https://api.example.com/prod", timeout=timedelta(hours=72), tokens=Sealer(),
    )  # fmt: skip

    record = requests.get(RID)
    assert record is not None
    assert record.task_token == "kms:nekot-ksat-war"
    assert "raw-task-token" not in json.dumps(requests.items[RID])


class StepFunctionsClient:
    class exceptions:
        class TaskTimedOut(Exception): ...

        class InvalidToken(Exception): ...

        class TaskDoesNotExist(Exception): ...

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def send_task_success(self, taskToken: str, output: str) -> None:
        self.calls.append(("success", taskToken))

    def send_task_failure(self, taskToken: str, error: str, cause: str) -> None:
        self.calls.append(("failure", taskToken))


def test_the_callbacks_open_the_sealed_token_only_to_answer_the_task() -> None:
    client = StepFunctionsClient()
    callbacks = StepFunctionsCallbacks(client, Sealer())

    callbacks.success("kms:nekot-ksat-war", {"decision": "approve"})
    callbacks.failure("kms:nekot-ksat-war", "ErasureCancelled", "cancelled")
    callbacks.success("a-token-stored-before-sealing", {})

    assert client.calls == [
        ("success", "raw-task-token"),
        ("failure", "raw-task-token"),
        ("success", "a-token-stored-before-sealing"),
    ]


# ------------------------------------------------------------------------------ the template


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template()


def _statements(resource: dict[str, Any]) -> Iterator[dict[str, Any]]:
    props = resource.get("Properties", {})
    documents: list[Any] = []
    for policy in props.get("Policies", []):
        if isinstance(policy, dict) and "Fn::If" in policy:
            documents.extend(b for b in policy["Fn::If"][1:] if isinstance(b, dict))
        elif isinstance(policy, dict):
            documents.append(policy)
    for document in documents:
        body = document.get("PolicyDocument", document)
        yield from (s for s in body.get("Statement", []) if isinstance(s, dict))


def _names(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _refers(value: Any, logical_id: str) -> bool:
    return logical_id in json.dumps(value)


def test_no_index_of_any_table_can_hold_a_task_token(template: dict[str, Any]) -> None:
    table = template["Resources"]["ErasureRequestsTable"]["Properties"]
    (index,) = table["GlobalSecondaryIndexes"]
    assert (index["IndexName"], index["Projection"]) == (
        "by_status",
        {"ProjectionType": "KEYS_ONLY"},
    )
    for logical_id, resource in template["Resources"].items():
        if resource["Type"] != "AWS::DynamoDB::Table":
            continue
        indexes = resource["Properties"].get("GlobalSecondaryIndexes", []) + resource[
            "Properties"
        ].get("LocalSecondaryIndexes", [])
        for found in indexes:
            projection = found["Projection"]
            if logical_id == "ErasureRequestsTable":
                assert projection["ProjectionType"] == "KEYS_ONLY"
            assert "task_token" not in projection.get("NonKeyAttributes", [])


def test_only_the_approval_functions_use_the_task_token_key(template: dict[str, Any]) -> None:
    key = template["Resources"]["TaskTokenKey"]["Properties"]
    assert (key["KeySpec"], key["KeyUsage"], key["EnableKeyRotation"]) == (
        "SYMMETRIC_DEFAULT", "ENCRYPT_DECRYPT", True,
    )  # fmt: skip
    uses: dict[str, set[str]] = {}
    for logical_id, resource in template["Resources"].items():
        for statement in _statements(resource):
            if not _refers(statement.get("Resource"), "TaskTokenKey"):
                continue
            assert statement["Condition"] == {
                "StringEquals": {"kms:EncryptionContext:lethe:purpose": "erasure-task-token"}
            }
            uses.setdefault(logical_id, set()).update(_names(statement["Action"]))
    assert uses == {
        "ApprovalRequestFunction": {"kms:Encrypt"},
        "ApprovalPageFunction": {"kms:Decrypt"},
        "ErasureApiFunction": {"kms:Decrypt"},
    }
    for logical_id in uses:
        env = template["Resources"][logical_id]["Properties"]["Environment"]["Variables"]
        assert env["TASK_TOKEN_KEY_ARN"] == {"Fn::GetAtt": ["TaskTokenKey", "Arn"]}


def test_the_erase_job_reads_the_request_and_nothing_else_of_it(template: dict[str, Any]) -> None:
    role = template["Resources"]["SparkJobRole"]
    on_requests = [
        s for s in _statements(role) if _refers(s.get("Resource"), "ErasureRequestsTable")
    ]
    assert len(on_requests) == 1
    (statement,) = on_requests
    assert _names(statement["Action"]) == ["dynamodb:GetItem"]
    assert statement["Resource"] == {"Fn::GetAtt": ["ErasureRequestsTable", "Arn"]}
    condition = statement["Condition"]
    assert condition["ForAllValues:StringEquals"]["dynamodb:Attributes"] == list(VIEW_ATTRIBUTES)
    assert condition["StringEqualsIfExists"]["dynamodb:Select"] == "SPECIFIC_ATTRIBUTES"


# ------------------------------------------------------------------------- the state machine


def _asl() -> dict[str, Any]:
    return dict(json.loads((REPO_ROOT / "statemachines/erasure.asl.json").read_text()))


def _next_states(state: dict[str, Any]) -> list[str]:
    found = [state["Next"]] if "Next" in state else []
    found += [c["Next"] for c in state.get("Choices", [])]
    found += [state["Default"]] if "Default" in state else []
    found += [c["Next"] for c in state.get("Catch", [])]
    return found


def test_every_path_from_the_approval_to_a_spark_run_passes_mark_erasing() -> None:
    states = _asl()["States"]
    spark = {n for n, s in states.items() if str(s.get("Resource", "")).count("startJobRun")}
    assert spark == {"Run Erase Job On Glue", "Run Erase Job On EMR Serverless"}
    # walk from the approval wait without passing Mark Erasing: no Spark run is reachable
    seen, todo = set(), ["Wait For Approval"]
    while todo:
        name = todo.pop()
        if name in seen or name == "Mark Erasing":
            continue
        seen.add(name)
        todo.extend(_next_states(states[name]))
    assert not seen & spark
    assert states["Wait For Approval"]["Next"] == "Mark Erasing"


def test_a_request_not_approved_ends_the_workflow_without_a_spark_run() -> None:
    states = _asl()["States"]
    step = states["Mark Erasing"]
    assert step["Retry"][0] == {"ErrorEquals": ["ErasureNotApprovedError"], "MaxAttempts": 0}
    (catch,) = [c for c in step["Catch"] if c["ErrorEquals"] == ["ErasureNotApprovedError"]]
    assert catch["Next"] == "Mark Failed"
    # from Mark Failed on, no Spark run
    seen, todo = set(), [catch["Next"]]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(_next_states(states[name]))
    assert not any("Run Erase Job" in n for n in seen)


def test_the_erase_job_is_handed_the_requests_table(template: dict[str, Any]) -> None:
    arguments = _asl()["States"]["Select Spark Engine"]["Assign"]["job_arguments"]
    assert arguments["--requests-table"] == "${ErasureRequestsTable}"
    machine = template["Resources"]["ErasureStateMachine"]["Properties"]
    assert machine["DefinitionSubstitutions"]["ErasureRequestsTable"] == {
        "Ref": "ErasureRequestsTable"
    }
