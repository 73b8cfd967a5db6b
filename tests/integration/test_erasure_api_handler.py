"""ErasureApiFunction against moto, driven by the API Gateway and EventBridge events in events/.

The erasure state machine exists in moto (created from statemachines/erasure.asl.json) but is
not executed: StartExecution only has to succeed and be findable by its name. The sample raw id
of the events, SECRET, must appear in no stored item, response, execution input or log line."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities import parameters
from botocore.exceptions import ClientError

from lethe.localcloud.provision import substitute_definition
from lethe_shared.erasure.approval_flow import DELIVERY_ATTEMPTS
from lethe_shared.erasure.requests import (
    DynamoErasureRequests,
    ErasureStatus,
    idempotent_request_id,
)
from lethe_shared.subject_hashing.keys import hash_of_id, key_fingerprint
from tests.conftest import REPO_ROOT, FakeLambdaContext, load_function_module
from tests.integration.conftest import create_table_from_template

pytestmark = pytest.mark.lambda_runtime

Event = Callable[[str], dict[str, Any]]
SECRET = "u-SECRET-1001"
HASH_SECRET = "h" * 64
REQUESTER = "privacy@example.com"
STATE_MACHINE = "arn:aws:states:us-east-1:123456789012:stateMachine:lethe-local-erasure"
EVENT_ID = "5f0c6c2e-9b1a-4f7e-8d3c-2a1b0c9d8e7f"  # events/erasure_requested_event.json
REVIEWS = {
    "dataset_id": "reviews",
    "format": "jsonl",
    "subject_columns": ["user_id"],
    "schema": [{"name": "user_id", "type": "string"}, {"name": "stars", "type": "int"}],
}


def create_erasure_state_machine() -> None:
    """statemachines/erasure.asl.json under the template's name, every substitution filled."""
    text = (REPO_ROOT / "statemachines" / "erasure.asl.json").read_text()
    names = set(re.findall(r"\$\{([A-Za-z]+)\}", text))
    definition = substitute_definition(text, {n: "72" if "Hours" in n else f"x-{n}" for n in names})
    boto3.client("stepfunctions").create_state_machine(
        name="lethe-local-erasure",
        definition=definition,
        roleArn="arn:aws:iam::123456789012:role/lethe-local-erasure",
    )


@pytest.fixture
def requests_table(lethe_tables: dict[str, Any]) -> Any:
    lethe_tables["DatasetsTable"].put_item(
        Item={"dataset_id": "reviews", "document": json.dumps(REVIEWS)}
    )
    return create_table_from_template("ErasureRequestsTable", "lethe-local-erasure-requests")


@pytest.fixture
def app(requests_table: Any, handler_env: Callable[[str], None]) -> Iterator[Any]:
    handler_env("ErasureApiFunction")
    parameters.clear_caches()
    boto3.client("secretsmanager").create_secret(
        Name="lethe-local-subject-hash-key", SecretString=HASH_SECRET
    )
    create_erasure_state_machine()
    yield load_function_module("erasure_api")
    parameters.clear_caches()


@pytest.fixture(autouse=True)
def _logs_hold_no_raw_id(
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> Iterator[None]:
    caplog.set_level(logging.INFO)  # what Lambda logs
    yield
    out, err = capsys.readouterr()
    records = " ".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
    for text in (out, err, caplog.text, records):
        assert SECRET.casefold() not in text.casefold()


def call(app: Any, event: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    response = app.handler(event, FakeLambdaContext())
    assert SECRET.casefold() not in json.dumps(response).casefold()
    return response["statusCode"], json.loads(response["body"])


def at(event: dict[str, Any], request_id: str) -> dict[str, Any]:
    """The event aimed at another request id."""
    old = event["pathParameters"]["request_id"]
    event["path"] = event["path"].replace(old, request_id)
    event["requestContext"]["path"] = event["requestContext"]["path"].replace(old, request_id)
    event["pathParameters"] = {"request_id": request_id}
    return event


def with_key(event: dict[str, Any], key: str) -> dict[str, Any]:
    event["headers"]["Idempotency-Key"] = key
    event["multiValueHeaders"]["Idempotency-Key"] = [key]
    return event


def executions() -> list[dict[str, Any]]:
    sfn = boto3.client("stepfunctions")
    listed = sfn.list_executions(stateMachineArn=STATE_MACHINE)["executions"]
    return [dict(sfn.describe_execution(executionArn=e["executionArn"])) for e in listed]


def stored_items(table: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = table.scan()["Items"]
    assert SECRET.casefold() not in json.dumps(items, default=str).casefold()
    return items


# ------------------------------------------------------------------------------ POST


def test_post_files_a_request_and_starts_its_execution(
    app: Any, requests_table: Any, load_event: Event, caplog: pytest.LogCaptureFixture
) -> None:
    status, body = call(app, load_event("erasure_api_post.json"))

    assert status == 202
    assert set(body) == {"request_id", "status", "duplicate"}
    assert (body["status"], body["duplicate"]) == ("RECEIVED", False)
    rid = body["request_id"]
    assert re.fullmatch(r"er-\d{8}T\d{6}Z-[0-9a-f]{8}", rid)
    (execution,) = executions()
    assert execution["name"] == f"erasure-{rid}"
    assert json.loads(execution["input"]) == {"request_id": rid}
    (item,) = stored_items(requests_table)
    assert item["subject_hashes"] == [hash_of_id(HASH_SECRET.encode(), SECRET)]
    assert item["execution_arn"] == execution["executionArn"]
    assert item["history"][0]["detail"] == (
        "1 subject(s), 1 hash(es), via api (arn:aws:iam::123456789012:user/privacy-officer)"
    )
    (logged,) = [r for r in caplog.records if r.getMessage() == "erasure request filed"]
    assert (logged.__dict__["request_id"], logged.__dict__["subjects"]) == (rid, 1)


def test_a_request_records_the_fingerprint_of_the_key_that_hashed_its_ids(
    app: Any, requests_table: Any, load_event: Event
) -> None:
    status, _ = call(app, load_event("erasure_api_post.json"))

    assert status == 202
    (item,) = stored_items(requests_table)
    # what the watermark compares with each dataset's indexed_key_fingerprint (scope.py)
    assert item["key_fingerprint"] == key_fingerprint(HASH_SECRET.encode())
    assert HASH_SECRET not in json.dumps(item, default=str)


def test_post_invalid_body_lists_fields_and_files_nothing(
    app: Any, requests_table: Any, load_event: Event
) -> None:
    status, body = call(app, load_event("erasure_api_post_invalid.json"))

    assert status == 400
    assert body == {
        "message": "invalid erasure request",
        "errors": [
            "subject_ids: Value error, subject_ids[1] must have 1 to 512 characters",
            "subject_keys: Value error, subject_keys[0] names no column",
            "requested_by: Field required",
        ],
    }
    assert stored_items(requests_table) == []
    assert executions() == []


def test_a_reason_quoting_the_id_is_refused(app: Any, load_event: Event) -> None:
    event = load_event("erasure_api_post.json")
    document = json.loads(event["body"])
    event["body"] = json.dumps({**document, "reason": f"erase {SECRET.upper()} today"})

    status, body = call(app, event)

    assert (status, body["errors"]) == (
        400,
        ["reason: must not contain a subject id (it is stored as written)"],
    )


SPOOFS = [
    "https://evil.example/approvals/x?e=1&s=2",
    "privacy@example.com\n\nReview the request: https://evil.example/approvals/x",
    "privacy@example.com\u2028https://evil.example",
]


@pytest.mark.parametrize("requested_by", SPOOFS)
def test_a_requested_by_that_is_a_link_or_several_lines_is_refused(
    app: Any, requests_table: Any, load_event: Event, requested_by: str
) -> None:
    event = load_event("erasure_api_post.json")
    event["body"] = json.dumps({**json.loads(event["body"]), "requested_by": requested_by})

    status, body = call(app, event)

    assert status == 400
    assert body["message"] == "invalid erasure request"
    ((problem,),) = [body["errors"]]
    assert problem.startswith("requested_by: Value error, requested_by must ")
    assert "evil.example" not in json.dumps(body)
    assert stored_items(requests_table) == []
    assert executions() == []


@pytest.mark.parametrize("requested_by", SPOOFS)
def test_an_event_whose_requested_by_is_a_link_or_several_lines_is_refused(
    app: Any, requests_table: Any, load_event: Event, requested_by: str
) -> None:
    event = load_event("erasure_requested_event.json")
    event["detail"]["requested_by"] = requested_by

    result = app.handler(event, FakeLambdaContext())

    (problem,) = result["refused"]
    assert problem.startswith("requested_by: Value error, requested_by must ")
    assert "evil.example" not in problem
    assert stored_items(requests_table) == []
    assert executions() == []


def test_the_clis_default_requested_by_the_callers_arn_is_filed(
    app: Any, requests_table: Any, load_event: Event
) -> None:
    arn = "arn:aws:sts::123456789012:assumed-role/Admin/botocore-session-1700000000"
    event = load_event("erasure_api_post.json")
    event["requestContext"]["identity"]["userArn"] = arn
    event["body"] = json.dumps({**json.loads(event["body"]), "requested_by": arn})

    status, _ = call(app, event)

    assert status == 202
    (item,) = stored_items(requests_table)
    assert (item["requested_by"], item["requester_principal"]) == (arn, arn)


def test_a_body_that_is_not_json_is_refused(app: Any, load_event: Event) -> None:
    event = load_event("erasure_api_post.json")
    event["body"] = '{"subject_ids": ["u-SECRET-1001"'

    assert call(app, event) == (
        400,
        {"message": "body is not JSON: Expecting ',' delimiter at position 32"},
    )


def test_an_idempotency_key_repeat_names_the_same_request(
    app: Any, requests_table: Any, load_event: Event
) -> None:
    first = call(app, with_key(load_event("erasure_api_post.json"), "ticket-4711"))
    again = call(app, with_key(load_event("erasure_api_post.json"), "ticket-4711"))

    rid = idempotent_request_id("ticket-4711", REQUESTER)
    assert first == (202, {"request_id": rid, "status": "RECEIVED", "duplicate": False})
    assert again == (202, {"request_id": rid, "status": "RECEIVED", "duplicate": True})
    assert [e["name"] for e in executions()] == [f"erasure-{rid}"]
    assert len(stored_items(requests_table)) == 1


def test_an_idempotency_key_reused_for_another_body_is_a_conflict(
    app: Any, requests_table: Any, load_event: Event
) -> None:
    call(app, with_key(load_event("erasure_api_post.json"), "ticket-4711"))
    event = with_key(load_event("erasure_api_post.json"), "ticket-4711")
    event["body"] = json.dumps({"subject_ids": ["u-2002"], "requested_by": REQUESTER})

    assert call(app, event) == (
        409,
        {"message": "this Idempotency-Key was used for another request body; use a new key"},
    )
    (item,) = stored_items(requests_table)
    assert item["subject_hashes"] == [hash_of_id(HASH_SECRET.encode(), SECRET)]
    assert len(executions()) == 1


def test_an_idempotency_key_too_long_is_refused(app: Any, load_event: Event) -> None:
    event = with_key(load_event("erasure_api_post.json"), "k" * 257)

    assert call(app, event) == (400, {"message": "Idempotency-Key must have 1 to 256 characters"})


# ------------------------------------------------------------------------------ GET


def test_get_unknown_request_is_404(app: Any, load_event: Event) -> None:
    assert call(app, load_event("erasure_api_get.json")) == (
        404,
        {"message": "no erasure request er-20261122T100000Z-0a1b2c3d"},
    )


def test_get_shows_the_public_record_without_the_task_token(
    app: Any, requests_table: Any, load_event: Event
) -> None:
    _, filed = call(app, load_event("erasure_api_post.json"))
    rid = filed["request_id"]
    requests = DynamoErasureRequests(requests_table)
    requests.transition(rid, ErasureStatus.REPORTED, by="workflow")
    requests.transition(
        rid,
        ErasureStatus.AWAITING_APPROVAL,
        by="workflow",
        updates={
            "task_token": "task-token-kept-server-side",
            "approval": {"deadline": "2026-11-25T10:00:00+00:00", "approvers": ["a@x", "b@x"]},
        },
    )

    status, body = call(app, at(load_event("erasure_api_get.json"), rid))

    assert status == 200
    assert (body["request_id"], body["status"], body["subject_count"]) == (
        rid,
        "AWAITING_APPROVAL",
        1,
    )
    assert [h["status"] for h in body["history"]] == ["RECEIVED", "REPORTED", "AWAITING_APPROVAL"]
    assert body["report"] == {}
    assert body["approval"] == {"deadline": "2026-11-25T10:00:00+00:00", "approvers": 2}
    assert "task_token" not in body
    assert "fingerprint" not in body
    assert "task-token-kept-server-side" not in json.dumps(body)


def test_list_by_status_newest_first(app: Any, requests_table: Any, load_event: Event) -> None:
    ids = [call(app, with_key(load_event("erasure_api_post.json"), f"k-{n}"))[1] for n in range(3)]
    first, second, third = (i["request_id"] for i in ids)
    DynamoErasureRequests(requests_table).transition(second, ErasureStatus.REPORTED, by="workflow")
    reported = load_event("erasure_api_list.json")
    reported["queryStringParameters"] = {"status": "REPORTED"}
    reported["multiValueQueryStringParameters"] = {"status": ["REPORTED"]}

    received = call(app, load_event("erasure_api_list.json"))
    only_reported = call(app, reported)

    assert received[0] == 200
    # idempotent ids are not time-ordered: the order is by created_at, the filing order
    assert [r["request_id"] for r in received[1]["requests"]] == [third, first]
    assert [r["status"] for r in received[1]["requests"]] == ["RECEIVED", "RECEIVED"]
    assert [r["request_id"] for r in only_reported[1]["requests"]] == [second]
    assert all("task_token" not in r for r in received[1]["requests"])


def test_list_with_an_unknown_status_is_refused(app: Any, load_event: Event) -> None:
    event = load_event("erasure_api_list.json")
    event["queryStringParameters"] = {"status": "DONE"}
    event["multiValueQueryStringParameters"] = {"status": ["DONE"]}

    status, body = call(app, event)

    assert status == 400
    assert body["message"] == (
        "status must be one of RECEIVED, REPORTED, AWAITING_APPROVAL, APPROVED, REJECTED, "
        "EXPIRED, ERASING, COMPLETED, FAILED"
    )


# ------------------------------------------------------------------------------ cancel


def test_cancel_then_cancel_again(app: Any, requests_table: Any, load_event: Event) -> None:
    _, filed = call(app, load_event("erasure_api_post.json"))
    rid = filed["request_id"]

    cancelled = call(app, at(load_event("erasure_api_cancel.json"), rid))
    again = call(app, at(load_event("erasure_api_cancel.json"), rid))

    assert cancelled[0] == 200
    assert (cancelled[1]["status"], cancelled[1]["outcome"]) == ("REJECTED", "CANCELLED")
    assert cancelled[1]["history"][-1]["by"] == REQUESTER
    assert again == (409, {"message": "the request cannot be cancelled: it is REJECTED"})
    (item,) = stored_items(requests_table)
    assert [h["status"] for h in item["history"]] == ["RECEIVED", "REJECTED"]


def test_cancel_while_erasing_is_a_conflict(
    app: Any, requests_table: Any, load_event: Event
) -> None:
    _, filed = call(app, load_event("erasure_api_post.json"))
    rid = filed["request_id"]
    requests = DynamoErasureRequests(requests_table)
    for status in ("REPORTED", "AWAITING_APPROVAL", "APPROVED", "ERASING"):
        requests.transition(rid, ErasureStatus(status), by="test")

    assert call(app, at(load_event("erasure_api_cancel.json"), rid)) == (
        409,
        {"message": "the request cannot be cancelled: it is ERASING"},
    )


def test_cancel_of_an_unknown_request_is_404(app: Any, load_event: Event) -> None:
    assert call(app, load_event("erasure_api_cancel.json")) == (
        404,
        {"message": "no erasure request er-20261122T100000Z-0a1b2c3d"},
    )


OTHER_USER = "arn:aws:iam::123456789012:user/someone-else"
CANCEL_REFUSED = (
    403,
    {"message": "only the IAM principal that filed this request or an approver's may cancel it"},
)


def cancel_as(load_event: Event, rid: str, arn: str) -> dict[str, Any]:
    event = at(load_event("erasure_api_cancel.json"), rid)
    event["requestContext"]["identity"]["userArn"] = arn
    return event


def test_cancel_by_another_principal_is_forbidden_and_changes_nothing(
    app: Any, requests_table: Any, load_event: Event
) -> None:
    # Given a request filed by the privacy officer (events/erasure_api_post.json's caller)
    _, filed = call(app, load_event("erasure_api_post.json"))
    rid = filed["request_id"]
    before = stored_items(requests_table)

    # When another IAM user, and a caller API Gateway gave no ARN, try to cancel it
    refused = [call(app, cancel_as(load_event, rid, arn)) for arn in (OTHER_USER, "")]

    # Then both are refused with a message, and the request is as it was
    assert refused == [CANCEL_REFUSED, CANCEL_REFUSED]
    assert stored_items(requests_table) == before
    assert before[0]["status"] == "RECEIVED"


def test_cancel_by_the_requesters_principal_or_an_approvers(
    app: Any, requests_table: Any, load_event: Event
) -> None:
    requester_role = "arn:aws:sts::123456789012:assumed-role/privacy-app/run-1"
    filed = [
        call(app, as_caller(with_key(load_event("erasure_api_post.json"), k), arn, REQUESTER))[1]
        for k, arn in (("k1", requester_role), ("k2", requester_role))
    ]

    # another session of the role that filed it, and a session of an approver's role
    later_session = "arn:aws:sts::123456789012:assumed-role/privacy-app/run-2"
    by_requester = call(app, cancel_as(load_event, filed[0]["request_id"], later_session))
    by_approver = call(app, cancel_as(load_event, filed[1]["request_id"], APPROVER_SESSION))

    assert [(r[0], r[1]["outcome"]) for r in (by_requester, by_approver)] == [
        (200, "CANCELLED"),
        (200, "CANCELLED"),
    ]
    other_role = "arn:aws:sts::123456789012:assumed-role/other-app/run-1"
    third = call(
        app,
        as_caller(with_key(load_event("erasure_api_post.json"), "k3"), requester_role, REQUESTER),
    )
    assert call(app, cancel_as(load_event, third[1]["request_id"], other_role)) == CANCEL_REFUSED


def test_a_request_filed_by_event_is_cancelled_by_an_approver_only(
    app: Any, requests_table: Any, load_event: Event
) -> None:
    app.handler(load_event("erasure_requested_event.json"), FakeLambdaContext())
    rid = idempotent_request_id(EVENT_ID, REQUESTER)

    refused = call(
        app, cancel_as(load_event, rid, "arn:aws:iam::123456789012:user/privacy-officer")
    )
    cancelled = call(app, cancel_as(load_event, rid, APPROVER_SESSION))

    assert refused == CANCEL_REFUSED
    assert (cancelled[0], cancelled[1]["outcome"]) == (200, "CANCELLED")


# ---------------------------------------------------------------- a decision's hand-over


class SendTaskCalls:
    """SendTaskSuccess/SendTaskFailure the API's boto3 client sends; the first `refuse` of
    them refused as Step Functions refuses a throttled call."""

    def __init__(self, refuse: int = 0) -> None:
        self.refuse = refuse
        self.sent: list[tuple[str, str]] = []

    def hook(self, model: Any, params: dict[str, Any], **_: Any) -> None:
        if model.name not in {"SendTaskSuccess", "SendTaskFailure"}:
            return
        if self.refuse > 0:
            self.refuse -= 1
            raise ClientError(
                {"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, model.name
            )
        self.sent.append((model.name, params["taskToken"]))


def decided_undelivered(requests_table: Any, rid: str, decision: str) -> None:
    """An approver's decision recorded whose hand-over to the workflow failed: decided, the
    task token still on the record."""
    requests = DynamoErasureRequests(requests_table)
    requests.transition(rid, ErasureStatus.REPORTED, by="workflow")
    requests.transition(
        rid, ErasureStatus.AWAITING_APPROVAL, by="workflow", updates={"task_token": "tok-1"}
    )
    target = ErasureStatus.APPROVED if decision == "approve" else ErasureStatus.REJECTED
    requests.transition(
        rid,
        target,
        by="approver@example.com",
        updates={"approval": {"decision": decision, "decided_by": "approver@example.com"}},
    )


@pytest.mark.parametrize(
    ("decision", "call_name"), [("approve", "SendTaskSuccess"), ("reject", "SendTaskFailure")]
)
def test_get_hands_over_a_recorded_undelivered_decision_once(
    app: Any, requests_table: Any, load_event: Event, decision: str, call_name: str
) -> None:
    _, filed = call(app, load_event("erasure_api_post.json"))
    rid = filed["request_id"]
    decided_undelivered(requests_table, rid, decision)
    calls = SendTaskCalls(refuse=DELIVERY_ATTEMPTS)  # the first GET: Step Functions throttles
    app._dependencies().callbacks.client.meta.events.register(
        "before-parameter-build.sfn", calls.hook
    )
    requests = DynamoErasureRequests(requests_table)

    first = call(app, at(load_event("erasure_api_get.json"), rid))
    still = requests.get(rid)
    second = call(app, at(load_event("erasure_api_get.json"), rid))
    third = call(app, at(load_event("erasure_api_get.json"), rid))

    assert [r[0] for r in (first, second, third)] == [200, 200, 200]
    assert still is not None
    assert still.task_token == "tok-1"  # kept while undelivered
    assert calls.sent == [(call_name, "tok-1")]  # the second GET; the third sends nothing
    after = requests.get(rid)
    assert after is not None
    assert after.task_token == ""
    assert (
        after.status.value
        == first[1]["status"]
        == ("APPROVED" if decision == "approve" else "REJECTED")
    )


# ------------------------------------------------------------------------------ the event


def test_the_erasure_requested_event_files_one_request_per_event_id(
    app: Any, requests_table: Any, load_event: Event
) -> None:
    first = app.handler(load_event("erasure_requested_event.json"), FakeLambdaContext())
    redelivered = app.handler(load_event("erasure_requested_event.json"), FakeLambdaContext())

    rid = idempotent_request_id(EVENT_ID, REQUESTER)
    assert first == {"request_id": rid, "status": "RECEIVED", "duplicate": False}
    assert redelivered == {"request_id": rid, "status": "RECEIVED", "duplicate": True}
    (item,) = stored_items(requests_table)
    assert item["history"][0]["detail"] == "1 subject(s), 1 hash(es), via event lethe.requests"
    assert [e["name"] for e in executions()] == [f"erasure-{rid}"]


def test_a_bad_erasure_requested_event_is_refused_and_files_nothing(
    app: Any, requests_table: Any, load_event: Event
) -> None:
    event = load_event("erasure_requested_event.json")
    event["detail"]["reason"] = f"user {SECRET} asked"

    result = app.handler(event, FakeLambdaContext())

    assert result == {
        "refused": ["reason: must not contain a subject id (it is stored as written)"]
    }
    assert stored_items(requests_table) == []
    assert executions() == []


# ------------------------------------------------------------------------------ ids and scope

CUSTOMERS = {
    "dataset_id": "customers",
    "format": "csv",
    "subject_columns": ["customer_id"],
    "schema": [{"name": "customer_id", "type": "int"}, {"name": "name", "type": "string"}],
}


def posting(load_event: Event, **document: Any) -> dict[str, Any]:
    event = load_event("erasure_api_post.json")
    event["body"] = json.dumps({"requested_by": REQUESTER, **document})
    return event


def test_blank_ids_are_refused_naming_their_fields(
    app: Any, requests_table: Any, load_event: Event
) -> None:
    event = posting(
        load_event,
        subject_ids=[SECRET, " \t"],
        subject_keys=[{"tenant": SECRET, "user_id": "\u3000"}],
    )

    status, body = call(app, event)

    assert status == 400
    assert body["errors"] == [
        "subject_ids: Value error, subject_ids[1] is empty or whitespace only: it names no subject",
        "subject_keys: Value error, subject_keys[0].user_id is empty or whitespace only: it "
        "names no subject",
    ]
    assert stored_items(requests_table) == []
    assert executions() == []


def test_an_unknown_dataset_in_the_scope_is_refused_naming_it(
    app: Any, requests_table: Any, load_event: Event
) -> None:
    event = posting(load_event, subject_ids=[SECRET], datasets=["reviews", "contractors"])

    assert call(app, event) == (
        400,
        {
            "message": "invalid erasure request",
            "errors": ["datasets: no registered dataset contractors"],
        },
    )
    assert stored_items(requests_table) == []
    assert executions() == []


def test_a_scoped_request_is_hashed_per_dataset_of_its_scope(
    app: Any, requests_table: Any, lethe_tables: dict[str, Any], load_event: Event
) -> None:
    # Given an int-typed customers dataset besides the string-typed reviews
    lethe_tables["DatasetsTable"].put_item(
        Item={"dataset_id": "customers", "document": json.dumps(CUSTOMERS)}
    )
    key = HASH_SECRET.encode()

    # When "01001" is asked for, in both, and then in reviews only
    both = call(app, posting(load_event, subject_ids=["01001"]))
    scoped = call(app, posting(load_event, subject_ids=["01001"], datasets=["reviews"]))

    # Then customers looks up 1001 (its int), reviews "01001" as written; the scope is kept
    assert (both[0], scoped[0]) == (202, 202)
    items = {i["request_id"]: i for i in stored_items(requests_table)}
    unscoped, reviews_only = items[both[1]["request_id"]], items[scoped[1]["request_id"]]
    assert unscoped["scope"] == []
    assert unscoped["hash_groups"] == [
        {"datasets": ["customers"], "hashes": [hash_of_id(key, "1001")]},
        {"datasets": ["reviews"], "hashes": [hash_of_id(key, "01001")]},
    ]
    assert reviews_only["scope"] == ["reviews"]
    assert reviews_only["hash_groups"] == [
        {"datasets": ["reviews"], "hashes": [hash_of_id(key, "01001")]}
    ]
    assert reviews_only["subject_hashes"] == [hash_of_id(key, "01001")]


def test_an_id_no_value_of_a_column_type_equals_is_recorded_as_not_looked_up(
    app: Any, requests_table: Any, lethe_tables: dict[str, Any], load_event: Event
) -> None:
    lethe_tables["DatasetsTable"].put_item(
        Item={"dataset_id": "customers", "document": json.dumps(CUSTOMERS)}
    )

    status, _ = call(app, posting(load_event, subject_ids=[SECRET]))

    assert status == 202
    (item,) = stored_items(requests_table)
    assert item["not_looked_up"] == [
        {
            "dataset_id": "customers",
            "subject_columns": ["customer_id"],
            "subject_types": ["int"],
            "subjects": 1,
        }
    ]


def test_an_erasure_requested_event_takes_a_scope(
    app: Any, requests_table: Any, load_event: Event
) -> None:
    event = load_event("erasure_requested_event.json")
    event["detail"]["datasets"] = ["reviews"]
    unknown = load_event("erasure_requested_event.json")
    unknown["id"] = "another-event"
    unknown["detail"]["datasets"] = ["contractors"]

    filed = app.handler(event, FakeLambdaContext())
    refused = app.handler(unknown, FakeLambdaContext())

    assert filed["status"] == "RECEIVED"
    assert refused == {"refused": ["datasets: no registered dataset contractors"]}
    (item,) = stored_items(requests_table)
    assert item["scope"] == ["reviews"]


# ------------------------------------------------------------------------------ the IAM caller
# events/env.json maps approver@example.com to arn:aws:iam::123456789012:role/lethe-local-approver

APPROVER_SESSION = "arn:aws:sts::123456789012:assumed-role/lethe-local-approver/approver"


def as_caller(event: dict[str, Any], arn: str, requested_by: str) -> dict[str, Any]:
    event["requestContext"]["identity"]["userArn"] = arn
    event["body"] = json.dumps({**json.loads(event["body"]), "requested_by": requested_by})
    return event


def test_the_callers_arn_is_recorded_as_the_requester_principal(
    app: Any, requests_table: Any, load_event: Event
) -> None:
    status, body = call(
        app,
        as_caller(load_event("erasure_api_post.json"), APPROVER_SESSION, "approver@example.com"),
    )

    assert status == 202
    (item,) = stored_items(requests_table)
    assert (item["requested_by"], item["requester_principal"]) == (
        "approver@example.com",
        APPROVER_SESSION,
    )
    _, shown = call(app, at(load_event("erasure_api_get.json"), body["request_id"]))
    assert shown["requester_principal"] == APPROVER_SESSION


def test_a_request_in_an_approvers_name_from_another_caller_is_forbidden(
    app: Any, requests_table: Any, load_event: Event
) -> None:
    event = as_caller(
        load_event("erasure_api_post.json"),
        "arn:aws:iam::123456789012:user/privacy-officer",
        "Approver@Example.com",
    )

    assert call(app, event) == (
        403,
        {
            "message": "requested_by names an approver: only that approver's own IAM principal "
            "may file a request in their name"
        },
    )
    assert stored_items(requests_table) == []
    assert executions() == []


def test_an_event_records_its_account_and_source_as_the_requester_principal(
    app: Any, requests_table: Any, load_event: Event
) -> None:
    app.handler(load_event("erasure_requested_event.json"), FakeLambdaContext())

    (item,) = stored_items(requests_table)
    assert item["requester_principal"] == "event:123456789012:lethe.requests"


def test_an_event_in_the_name_of_the_approver_mapped_to_its_sender_is_filed(
    app: Any, requests_table: Any, load_event: Event, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the approver mapped to the event sender too (they run the app that sends events)
    monkeypatch.setenv(
        "APPROVER_PRINCIPALS",
        "approver@example.com=arn:aws:iam::123456789012:role/lethe-local-approver,"
        "approver@example.com=event:123456789012:lethe.requests",
    )
    app._dependencies.cache_clear()
    event = load_event("erasure_requested_event.json")
    event["detail"]["requested_by"] = "approver@example.com"
    other = load_event("erasure_requested_event.json")
    other["account"], other["id"] = "210987654321", "another-event-id"
    other["detail"]["requested_by"] = "approver@example.com"

    filed = app.handler(event, FakeLambdaContext())
    refused = app.handler(other, FakeLambdaContext())  # the same source from another account

    assert filed["status"] == "RECEIVED"
    assert "refused" in refused
    (item,) = stored_items(requests_table)
    assert item["requester_principal"] == "event:123456789012:lethe.requests"


def test_an_event_in_an_approvers_name_is_refused(
    app: Any, requests_table: Any, load_event: Event
) -> None:
    event = load_event("erasure_requested_event.json")
    event["detail"]["requested_by"] = "approver@example.com"

    result = app.handler(event, FakeLambdaContext())

    assert result == {
        "refused": [
            "requested_by names an approver: only that approver's own IAM principal may file "
            "a request in their name"
        ]
    }
    assert stored_items(requests_table) == []
    assert executions() == []
