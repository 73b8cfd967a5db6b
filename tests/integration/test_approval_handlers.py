"""ApprovalRequestFunction and ApprovalPageFunction against moto (DynamoDB, Secrets Manager, SES,
Step Functions), driven by the events in events/: the task emails each approver their link, the
link's GET renders the page with its cookie and headers, and the form's POST decides once.

The raw id of the request, SECRET, was hashed at intake: it must appear in no email, page or
log line; the task token must not leave the server either."""

from __future__ import annotations

import html
import logging
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import boto3
import pytest
from aws_lambda_powertools.utilities import parameters

from lethe_shared.erasure.approval_pages import CONTENT_SECURITY_POLICY
from lethe_shared.erasure.requests import (
    DynamoErasureRequests,
    ErasureStatus,
    hash_subjects,
    new_request,
    parse_request_body,
)
from tests.conftest import FakeLambdaContext, load_function_module
from tests.integration.approval_events import (
    aimed,
    headers_of,
    outcome,
    part,
    sent_mail,
    stored_token,
)
from tests.integration.approval_events import link_in as link_in_api
from tests.integration.conftest import create_table_from_template

pytestmark = pytest.mark.lambda_runtime

Event = Callable[[str], dict[str, Any]]
SECRET = "u-SECRET-1001"
RID = "er-20261122T100000Z-0a1b2c3d"  # events/approval_request_task.json
TOKEN = "AQCEAAAAKgAAAAMAAAAAAAAAAexampleTaskTokenOfTheWaitForApprovalState"
SIGNING_SECRET = "s" * 64
API_URL = "https://abc123.execute-api.us-east-1.amazonaws.com/local"
APPROVER = "approver@example.com"
REPORT = {
    "manifest_url": f"s3://lethe-local-reports-123456789012-us-east-1/erasure/{RID}/manifest.json",
    "manifest_sha256": "cd" * 32,
    "summary_text_url": "s3://r/summary.txt",
    "summary_html_url": "s3://r/summary.html",
    "objects": 2,
    "versions": 3,
    "rows": 4,
    "datasets": [{"dataset_id": "reviews", "zone": "lake", "objects": 2, "versions": 3, "rows": 4}],
}


@pytest.fixture
def requests(aws: None) -> DynamoErasureRequests:
    """A REPORTED request for SECRET, and the approvals table."""
    table = create_table_from_template("ErasureRequestsTable", "lethe-local-erasure-requests")
    create_table_from_template("ApprovalsTable", "lethe-local-approvals")
    requests = DynamoErasureRequests(table)
    body = parse_request_body(
        {"subject_ids": [SECRET], "reason": "ticket 4711", "requested_by": "privacy@example.com"}
    )
    requests.create(new_request(RID, body, hash_subjects(body, b"k" * 32, [])))
    requests.transition(RID, ErasureStatus.REPORTED, by="workflow", updates={"report": REPORT})
    return requests


@pytest.fixture
def functions(
    requests: DynamoErasureRequests, handler_env: Callable[[str], None]
) -> Iterator[tuple[Any, Any]]:
    """(approval_request, approval_page) modules with the template's environment."""
    handler_env("ApprovalRequestFunction")
    handler_env("ApprovalPageFunction")
    parameters.clear_caches()
    boto3.client("secretsmanager").create_secret(
        Name="lethe-local-approval-signing-key", SecretString=SIGNING_SECRET
    )
    boto3.client("ses").verify_email_identity(EmailAddress="lethe@example.com")
    yield load_function_module("approval_request"), load_function_module("approval_page")
    parameters.clear_caches()


@pytest.fixture(autouse=True)
def _nothing_private_in_logs(
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> Iterator[None]:
    caplog.set_level(logging.INFO)  # what Lambda logs
    yield
    out, err = capsys.readouterr()
    records = " ".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
    for text in (out, err, caplog.text, records):
        assert SECRET.casefold() not in text.casefold()
        assert TOKEN not in text


def link_in(message: EmailMessage) -> str:
    return link_in_api(message, API_URL)


def ask(functions: tuple[Any, Any], load_event: Event) -> dict[str, Any]:
    result: dict[str, Any] = functions[0].handler(
        load_event("approval_request_task.json"), FakeLambdaContext()
    )
    return result


# ------------------------------------------------------------------------------ the email


def test_the_approval_task_emails_one_raw_message_per_approver_with_their_link(
    functions: tuple[Any, Any],
    requests: DynamoErasureRequests,
    load_event: Event,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("APPROVER_EMAILS", f"{APPROVER}, second@example.com,privacy@example.com")

    result = ask(functions, load_event)

    assert result == {"request_id": RID, "approvers": 2}
    messages = sent_mail()
    assert [m["To"] for m in messages] == [APPROVER, "second@example.com"]
    assert {m["From"] for m in messages} == {"lethe@example.com"}
    links = [link_in(m) for m in messages]
    assert links[0] != links[1]
    for message, link in zip(messages, links, strict=True):
        text, page = part(message, "plain"), part(message, "html")
        assert f'href="{html.escape(link)}"' in page
        assert link in html.unescape(page)
        assert message["Subject"] == f"Approval needed: erasure request {RID} (1 data subject)"
        assert "cd" * 32 in text
        for content in (text, page, message.as_string()):
            assert SECRET.casefold() not in content.casefold()
            assert TOKEN not in content
    record = requests.get(RID)
    assert record is not None
    assert (record.status, stored_token(record)) == (ErasureStatus.AWAITING_APPROVAL, TOKEN)
    assert record.approval["approvers"] == [APPROVER, "second@example.com"]
    deadline = datetime.fromisoformat(record.approval["deadline"])
    assert timedelta(hours=71, minutes=59) < deadline - datetime.now(UTC) <= timedelta(hours=72)
    assert parse_qs(urlsplit(links[0]).query)["e"] == [str(int(deadline.timestamp()))]


# ------------------------------------------------------------------------------ the page


def test_the_link_renders_the_page_with_its_headers_and_cookie_and_changes_nothing(
    functions: tuple[Any, Any], requests: DynamoErasureRequests, load_event: Event
) -> None:
    ask(functions, load_event)
    (message,) = sent_mail()
    link = link_in(message)
    approval_id = urlsplit(link).path.rsplit("/", 1)[1]
    before = requests.get(RID)

    response = functions[1].handler(
        aimed(load_event("approval_page_get.json"), link), FakeLambdaContext()
    )

    assert response["statusCode"] == 200
    headers = headers_of(response)
    assert {k: headers[k] for k in (
        "Content-Type", "Cache-Control", "Content-Security-Policy", "X-Frame-Options",
        "Referrer-Policy", "X-Content-Type-Options",
    )} == {
        "Content-Type": "text/html; charset=utf-8",
        "Cache-Control": "no-store",
        "Content-Security-Policy": CONTENT_SECURITY_POLICY,
        "X-Frame-Options": "DENY",
        "Referrer-Policy": "no-referrer",
        "X-Content-Type-Options": "nosniff",
    }  # fmt: skip
    cookie = headers["Set-Cookie"]
    assert re.fullmatch(
        rf"lethe_csrf=[A-Za-z0-9_-]{{43}}; HttpOnly; SameSite=Strict; "
        rf"Path=/local/approvals/{approval_id}; Max-Age=43200; Secure",
        cookie,
    )
    assert re.search(
        r'<code id="confirmation-code">[2-9A-Z]{3}-[2-9A-Z]{3}</code>', response["body"]
    )
    assert response["body"].count('<form method="post"') == 2
    assert SECRET.casefold() not in response["body"].casefold()
    assert requests.get(RID) == before


def test_the_form_posted_with_the_cookie_and_code_approves_once(
    functions: tuple[Any, Any], requests: DynamoErasureRequests, load_event: Event
) -> None:
    ask(functions, load_event)
    (message,) = sent_mail()
    link = link_in(message)
    shown = functions[1].handler(
        aimed(load_event("approval_page_get.json"), link), FakeLambdaContext()
    )
    nonce_cookie = headers_of(shown)["Set-Cookie"].split(";", 1)[0]
    (csrf,) = set(re.findall(r'name="csrf_token" value="([^"]+)"', shown["body"]))
    (code,) = re.findall(r'<code id="confirmation-code">([^<]+)</code>', shown["body"])
    post = aimed(load_event("approval_page_post.json"), link)
    post["headers"]["Cookie"] = nonce_cookie
    post["multiValueHeaders"]["Cookie"] = [nonce_cookie]
    post["body"] = urlencode({"csrf_token": csrf, "confirmation": code, "decision": "approve"})

    decided = functions[1].handler(post, FakeLambdaContext())
    replayed = functions[1].handler(post, FakeLambdaContext())

    assert (decided["statusCode"], outcome(decided)) == (200, "approved")
    assert (replayed["statusCode"], outcome(replayed)) == (409, "already-decided")
    assert headers_of(decided)["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    assert "Set-Cookie" not in headers_of(decided)
    record = requests.get(RID)
    assert record is not None
    assert record.status is ErasureStatus.APPROVED
    assert (record.approval["decision"], record.approval["decided_by"]) == ("approve", APPROVER)
    assert stored_token(record) == ""
    assert [h.status for h in record.history].count(ErasureStatus.APPROVED) == 1


def test_the_sample_events_decide_nothing(
    functions: tuple[Any, Any], requests: DynamoErasureRequests, load_event: Event
) -> None:
    """events/approval_page_*.json as they are (what `sam local invoke` sends): their link is
    not signed with this deployment's key."""
    ask(functions, load_event)

    opened = functions[1].handler(load_event("approval_page_get.json"), FakeLambdaContext())
    posted = functions[1].handler(load_event("approval_page_post.json"), FakeLambdaContext())

    for response in (opened, posted):
        assert (response["statusCode"], outcome(response)) == (400, "invalid")
        assert "Set-Cookie" not in headers_of(response)
    record = requests.get(RID)
    assert record is not None
    assert (record.status, stored_token(record)) == (ErasureStatus.AWAITING_APPROVAL, TOKEN)


def test_a_post_without_the_cookie_decides_nothing(
    functions: tuple[Any, Any], requests: DynamoErasureRequests, load_event: Event
) -> None:
    ask(functions, load_event)
    (message,) = sent_mail()
    link = link_in(message)
    shown = functions[1].handler(
        aimed(load_event("approval_page_get.json"), link), FakeLambdaContext()
    )
    (csrf,) = set(re.findall(r'name="csrf_token" value="([^"]+)"', shown["body"]))
    (code,) = re.findall(r'<code id="confirmation-code">([^<]+)</code>', shown["body"])
    post = aimed(load_event("approval_page_post.json"), link)
    del post["headers"]["Cookie"]
    del post["multiValueHeaders"]["Cookie"]
    post["body"] = urlencode({"csrf_token": csrf, "confirmation": code, "decision": "approve"})

    response = functions[1].handler(post, FakeLambdaContext())

    assert (response["statusCode"], outcome(response)) == (400, "invalid")
    assert 'data-reason="csrf"' in response["body"]
    record = requests.get(RID)
    assert record is not None
    assert record.status is ErasureStatus.AWAITING_APPROVAL
