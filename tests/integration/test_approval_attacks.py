"""The approval attacks of the hardening issue, against the real handlers on moto.

ApprovalRequestFunction emails the links, ApprovalPageFunction answers them, both loaded from
their CodeUri with events/env.json and driven by the events in events/; DynamoDB, Secrets
Manager and SES are moto's. Step Functions' SendTaskSuccess/SendTaskFailure (the only way a
decision reaches the workflow) are recorded as the page's boto3 client sends them.

Every attack ends with exactly one decision by an allowed approver, or none:

- none: both tables hold exactly what they held before (no partial approval record, the task
  token still on the request) and no SendTask call was made;
- one: the request is APPROVED or REJECTED by one approver, the history names that one decision,
  the task token is gone from the record and was sent exactly once, with the matching call.

docs/RELIABILITY.md ("Approval attacks") lists the attacks, how many times each is tried here,
and what held.
"""

from __future__ import annotations

import logging
import multiprocessing
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, tzinfo
from html.parser import HTMLParser
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import boto3
import pytest
from aws_lambda_powertools.utilities import parameters
from botocore.exceptions import ClientError
from moto.core.config import default_user_config
from moto.dynamodb.responses import DynamoHandler

from lethe_shared.erasure import approval_flow
from lethe_shared.erasure.approval_flow import DELIVERY_ATTEMPTS
from lethe_shared.erasure.approval_links import (
    confirmation_code,
    csrf_token,
    link_signature,
    sign_link,
)
from lethe_shared.erasure.requests import (
    ApprovalLink,
    DynamoApprovals,
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
    link_in,
    outcome,
    sent_mail,
    stored_token,
)
from tests.integration.conftest import REGION, create_table_from_template, moto_server

Event = Callable[[str], dict[str, Any]]
SECRET = "u-SECRET-1001"  # the raw subject id: hashed at intake, never seen again
SIGNING_SECRET = "s" * 64
API_URL = "https://abc123.execute-api.us-east-1.amazonaws.com/local"
REQUESTER = "privacy@example.com"
DPO, CISO = "dpo@example.com", "ciso@example.com"
DPO_ROLE = "arn:aws:iam::123456789012:role/DpoRole"  # ApproverPrincipals: DPO files as it
RACES = 50
REPORT = {
    "manifest_url": "s3://lethe-local-reports-123456789012-us-east-1/erasure/x/manifest.json",
    "manifest_sha256": "cd" * 32,
    "summary_text_url": "s3://r/summary.txt",
    "summary_html_url": "s3://r/summary.html",
    "objects": 2,
    "versions": 3,
    "rows": 4,
    "datasets": [{"dataset_id": "reviews", "zone": "lake", "objects": 2, "versions": 3, "rows": 4}],
}


def rid_of(n: int) -> str:
    return f"er-20261122T100000Z-{n:08x}"


def token_of(rid: str) -> str:
    return f"AQCEAAAAKgAAAAMAAAAAAAAAAtaskTokenOf-{rid}"


# ------------------------------------------------------------------------------ the stack


class TaskCalls:
    """SendTaskSuccess/SendTaskFailure as the page's boto3 client sends them (moto accepts any
    token and forgets it, so the calls themselves are what the tests count)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []  # (operation, token, error)
        self._lock = threading.Lock()

    def hook(self, model: Any, params: dict[str, Any], **_: Any) -> None:
        if model.name in {"SendTaskSuccess", "SendTaskFailure"}:
            with self._lock:
                self.calls.append((model.name, params["taskToken"], params.get("error", "")))

    def of(self, token: str) -> list[tuple[str, str]]:
        return [(name, error) for name, sent, error in self.calls if sent == token]


@dataclass
class Stack:
    requests: DynamoErasureRequests
    tables: tuple[Any, Any]
    load_event: Event
    monkeypatch: pytest.MonkeyPatch
    task_calls: TaskCalls = field(default_factory=TaskCalls)

    def file(self, rid: str, *, requested_by: str = REQUESTER, caller: str = "") -> None:
        """A REPORTED request for SECRET (what Build Report leaves), filed by IAM `caller`."""
        body = parse_request_body(
            {"subject_ids": [SECRET], "reason": "ticket 4711", "requested_by": requested_by}
        )
        subjects = hash_subjects(body, b"k" * 32, [])
        self.requests.create(new_request(rid, body, subjects, principal=caller))
        self.requests.transition(
            rid, ErasureStatus.REPORTED, by="workflow", updates={"report": REPORT}
        )

    def ask(self, rid: str) -> dict[str, str]:
        """Wait For Approval's task for `rid` (a fresh ApprovalRequestFunction instance); the
        link each approver was emailed."""
        task = self.load_event("approval_request_task.json") | {
            "request_id": rid,
            "task_token": token_of(rid),
        }
        load_function_module("approval_request").handler(task, FakeLambdaContext())
        return {str(m["To"]): link_in(m, API_URL) for m in sent_mail() if rid in str(m["Subject"])}

    def page_function(self) -> Any:
        """A fresh ApprovalPageFunction instance (a Lambda execution environment of its own),
        its Step Functions calls recorded."""
        module = load_function_module("approval_page")
        client = module._dependencies().callbacks.client
        client.meta.events.register("before-parameter-build.sfn", self.task_calls.hook)
        return module

    def record(self, rid: str) -> Any:
        record = self.requests.get(rid)
        assert record is not None
        return record

    def snapshot(self) -> list[list[dict[str, Any]]]:
        return [sorted(table.scan(ConsistentRead=True)["Items"], key=str) for table in self.tables]


def deploy(
    handler_env: Callable[[str], None], load_event: Event, monkeypatch: pytest.MonkeyPatch
) -> Stack:
    """The approval functions' tables, signing key, SES identity and environment (DPO and CISO
    approve) on whichever moto the process talks to."""
    requests_table = create_table_from_template(
        "ErasureRequestsTable", "lethe-local-erasure-requests"
    )
    approvals_table = create_table_from_template("ApprovalsTable", "lethe-local-approvals")
    handler_env("ApprovalRequestFunction")
    handler_env("ApprovalPageFunction")
    monkeypatch.setenv("APPROVER_EMAILS", f"{DPO},{CISO}")
    monkeypatch.setenv("APPROVER_PRINCIPALS", f"{DPO}={DPO_ROLE}")
    parameters.clear_caches()
    boto3.client("secretsmanager").create_secret(
        Name="lethe-local-approval-signing-key", SecretString=SIGNING_SECRET
    )
    boto3.client("ses").verify_email_identity(EmailAddress="lethe@example.com")
    return Stack(
        DynamoErasureRequests(requests_table),
        (requests_table, approvals_table),
        load_event,
        monkeypatch,
    )


@pytest.fixture
def stack(
    aws: None,
    handler_env: Callable[[str], None],
    load_event: Event,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Stack]:
    """The stack on moto in this process (mock_aws)."""
    yield deploy(handler_env, load_event, monkeypatch)
    parameters.clear_caches()


@pytest.fixture
def awaiting(stack: Stack) -> tuple[Stack, dict[str, str]]:
    """Request rid_of(1) awaiting DPO's or CISO's decision, and their links."""
    stack.file(rid_of(1))
    links = stack.ask(rid_of(1))
    assert set(links) == {DPO, CISO}
    return stack, links


@pytest.fixture(autouse=True)
def _nothing_private_in_logs(
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> Iterator[None]:
    caplog.set_level(logging.INFO)
    yield
    out, err = capsys.readouterr()
    records = " ".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
    for text in (out, err, caplog.text, records):
        assert SECRET.casefold() not in text.casefold()
        assert "taskTokenOf" not in text


# ------------------------------------------------------------------------------ a client


class _Forms(HTMLParser):
    """The page's forms as a client reads them: method, fields with their served values, and
    each submit button's name and value."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[dict[str, Any]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.forms.append({"method": attributes.get("method", "get"), "fields": {}})
        elif tag == "input" and self.forms and attributes.get("name"):
            self.forms[-1]["fields"][attributes["name"]] = attributes.get("value", "")
        elif tag == "button" and self.forms and attributes.get("type") == "submit":
            self.forms[-1]["button"] = (attributes["name"], attributes["value"])


@dataclass(frozen=True)
class Visit:
    """What a client keeps of a GET of the link: the answer, its cookie, its forms, the code."""

    response: dict[str, Any]
    cookie: str | None
    forms: list[dict[str, Any]]

    @property
    def code(self) -> str:
        body = self.response["body"]
        start = body.index('<code id="confirmation-code">') + len('<code id="confirmation-code">')
        return str(body[start : body.index("</code>", start)])

    def form(self, decision: str, *, typed: str | None = None) -> str:
        """The decision form's body as served, with `typed` in the confirmation field (None:
        the code shown on the page, as a person types it)."""
        (chosen,) = [f for f in self.forms if f["button"] == ("decision", decision)]
        fields = dict(chosen["fields"])
        fields["confirmation"] = self.code if typed is None else typed
        return urlencode({**fields, "decision": decision})


def visit(stack: Stack, function: Any, link: str, cookie: str | None = None) -> Visit:
    """A GET of the link, from a browser holding `cookie` (None: none yet)."""
    event = aimed(stack.load_event("approval_page_get.json"), link)
    if cookie is not None:
        event.setdefault("headers", {})["Cookie"] = cookie
        event.setdefault("multiValueHeaders", {})["Cookie"] = [cookie]
    response = function.handler(event, FakeLambdaContext())
    set_cookie = headers_of(response).get("Set-Cookie")
    parser = _Forms()
    parser.feed(response["body"])
    return Visit(response, set_cookie.split(";", 1)[0] if set_cookie else None, parser.forms)


def post_event(stack: Stack, link: str, body: str, cookie: str | None) -> dict[str, Any]:
    event = aimed(stack.load_event("approval_page_post.json"), link)
    event["body"] = body
    if cookie is None:
        del event["headers"]["Cookie"]
        del event["multiValueHeaders"]["Cookie"]
    else:
        event["headers"]["Cookie"] = cookie
        event["multiValueHeaders"]["Cookie"] = [cookie]
    return event


def post(stack: Stack, function: Any, link: str, body: str, cookie: str | None) -> dict[str, Any]:
    response: dict[str, Any] = function.handler(
        post_event(stack, link, body, cookie), FakeLambdaContext()
    )
    return response


def answer(response: dict[str, Any]) -> tuple[int, str | None]:
    return response["statusCode"], outcome(response)


def relinked(link: str, **query: str) -> str:
    """The link with query parameters replaced (None removes one)."""
    split = urlsplit(link)
    current = {k: v[0] for k, v in parse_qs(split.query).items()}
    current.update(query)
    return f"{API_URL}{split.path.removeprefix('/local')}?{urlencode(current)}"


def approval_id_of(link: str) -> str:
    return urlsplit(link).path.rsplit("/", 1)[1]


def assert_undecided(stack: Stack, rid: str, before: list[list[dict[str, Any]]]) -> None:
    """None: nothing written anywhere, the token still waits on the record, never sent."""
    assert stack.snapshot() == before
    record = stack.record(rid)
    assert (record.status, stored_token(record)) == (ErasureStatus.AWAITING_APPROVAL, token_of(rid))
    assert "decision" not in record.approval
    assert stack.task_calls.of(token_of(rid)) == []


def assert_decided_once(stack: Stack, rid: str, decision: str, approver: str) -> None:
    """One: the record, its history and the task token callbacks agree on one decision."""
    record = stack.record(rid)
    status = ErasureStatus.APPROVED if decision == "approve" else ErasureStatus.REJECTED
    assert record.status is status
    assert (record.approval["decision"], record.approval["decided_by"]) == (decision, approver)
    decisions = [h for h in record.history if h.status in {status.APPROVED, status.REJECTED}]
    assert [(h.status, h.by) for h in decisions] == [(status, approver)]
    assert stored_token(record) == ""
    expected = (
        [("SendTaskSuccess", "")]
        if decision == "approve"
        else [("SendTaskFailure", "ErasureRejected")]
    )
    assert stack.task_calls.of(token_of(rid)) == expected


# ------------------------------------------------------------------------------ attacks


def test_a_link_scanner_opening_every_link_decides_nothing(
    awaiting: tuple[Stack, dict[str, str]],
) -> None:
    stack, links = awaiting
    function = stack.page_function()
    before = stack.snapshot()

    seen = [visit(stack, function, link) for link in links.values() for _ in range(5)]

    assert {answer(v.response) for v in seen} == {(200, None)}  # the confirmation page
    assert_undecided(stack, rid_of(1), before)


def test_a_scanner_submitting_every_form_as_served_decides_nothing(
    awaiting: tuple[Stack, dict[str, str]],
) -> None:
    # Given a scanner that opens each link, keeps (or drops) the cookie and submits every form
    # exactly as served: the hidden CSRF token, the confirmation field empty, the button
    stack, links = awaiting
    function = stack.page_function()
    before = stack.snapshot()
    answers = []

    for link in links.values():
        shown = visit(stack, function, link)
        assert [f["method"] for f in shown.forms] == ["post", "post"]
        for decision in ("approve", "reject"):
            served = shown.form(decision, typed="")
            for cookie in (shown.cookie, None):
                answers.append(answer(post(stack, function, link, served, cookie)))

    # Then with the cookie it is a wrong code, without it a CSRF failure; nothing is decided
    assert answers == [(422, "wrong-code"), (400, "invalid")] * 4
    assert_undecided(stack, rid_of(1), before)


def test_a_replayed_post_decides_once(awaiting: tuple[Stack, dict[str, str]]) -> None:
    stack, links = awaiting
    function = stack.page_function()
    shown = visit(stack, function, links[DPO])
    approve = post_event(stack, links[DPO], shown.form("approve"), shown.cookie)
    first = function.handler(approve, FakeLambdaContext())
    after_first = stack.snapshot()

    replays = [function.handler(approve, FakeLambdaContext()) for _ in range(5)]
    replays += [stack.page_function().handler(approve, FakeLambdaContext())]  # a new instance

    assert answer(first) == (200, "approved")
    assert [answer(r) for r in replays] == [(409, "already-decided")] * 6
    assert stack.snapshot() == after_first
    assert_decided_once(stack, rid_of(1), "approve", DPO)


def test_a_page_opened_before_the_link_was_opened_again_still_decides(
    awaiting: tuple[Stack, dict[str, str]],
) -> None:
    # Given the approver opened the link in one tab, then again in a second tab of the browser
    stack, links = awaiting
    function = stack.page_function()
    first = visit(stack, function, links[DPO])
    second = visit(stack, function, links[DPO], cookie=first.cookie)
    assert first.cookie is not None
    assert second.cookie == first.cookie  # the browser's cookie is kept, not replaced

    # When they decide on the first tab's page
    response = post(stack, function, links[DPO], first.form("approve"), second.cookie)

    # Then the decision is taken, once
    assert answer(response) == (200, "approved")
    assert_decided_once(stack, rid_of(1), "approve", DPO)


def test_a_form_of_another_link_is_refused(awaiting: tuple[Stack, dict[str, str]]) -> None:
    stack, links = awaiting
    function = stack.page_function()
    mine = visit(stack, function, links[DPO])
    theirs = visit(stack, function, links[CISO])
    before = stack.snapshot()

    # CISO's form (its CSRF token, its code typed) posted to DPO's link, with DPO's cookie
    response = post(stack, function, links[DPO], theirs.form("approve"), mine.cookie)

    assert answer(response) == (400, "invalid")
    assert 'data-reason="csrf"' in response["body"]
    assert_undecided(stack, rid_of(1), before)


class Outage:
    """Step Functions refusing the next `refuse` SendTaskSuccess/SendTaskFailure calls of the
    page's client (throttled, as past boto3's own retries): a refused call never reaches
    Step Functions, so TaskCalls records only the calls that got through."""

    def __init__(self, refuse: int) -> None:
        self.refuse = refuse
        self.refused = 0

    def hook(self, model: Any, **_: Any) -> None:
        if model.name in {"SendTaskSuccess", "SendTaskFailure"} and self.refuse > 0:
            self.refuse -= 1
            self.refused += 1
            raise ClientError(
                {"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, model.name
            )


def failing_page_function(stack: Stack, outage: Outage) -> Any:
    """A fresh ApprovalPageFunction instance whose Step Functions calls go through `outage`."""
    module = load_function_module("approval_page")
    client = module._dependencies().callbacks.client
    client.meta.events.register("before-parameter-build.sfn", outage.hook)
    client.meta.events.register("before-parameter-build.sfn", stack.task_calls.hook)
    return module


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_a_decision_step_functions_refuses_is_kept_and_handed_over_by_the_next_post(
    awaiting: tuple[Stack, dict[str, str]], decision: str
) -> None:
    stack, links = awaiting
    rid = rid_of(1)
    outage = Outage(refuse=DELIVERY_ATTEMPTS)  # every attempt of the first POST
    function = failing_page_function(stack, outage)
    shown = visit(stack, function, links[DPO])
    decide = post_event(stack, links[DPO], shown.form(decision), shown.cookie)
    ciso = stack.page_function()
    ciso_shown = visit(stack, ciso, links[CISO])  # opened before DPO decides

    # When DPO decides while Step Functions refuses every SendTask call
    first = function.handler(decide, FakeLambdaContext())

    # Then the decision is recorded and said to be pending; the token waits on the record
    assert answer(first) == (200, "approved" if decision == "approve" else "rejected")
    assert 'data-reason="delivery-pending"' in first["body"]
    assert outage.refused == DELIVERY_ATTEMPTS
    record = stack.record(rid)
    assert (record.approval["decision"], stored_token(record)) == (decision, token_of(rid))
    assert stack.task_calls.of(token_of(rid)) == []

    # When the approver submits again (Step Functions answers again), and CISO tries the other
    # decision, from another instance
    again = function.handler(decide, FakeLambdaContext())
    other = "reject" if decision == "approve" else "approve"
    late = post(stack, ciso, links[CISO], ciso_shown.form(other), ciso_shown.cookie)

    # Then the recorded decision was handed over once, and nothing else was decided
    assert [answer(again), answer(late)] == [(409, "already-decided")] * 2
    assert_decided_once(stack, rid, decision, DPO)


def test_a_refusal_within_the_attempts_of_one_post_is_retried_there(
    awaiting: tuple[Stack, dict[str, str]],
) -> None:
    stack, links = awaiting
    outage = Outage(refuse=DELIVERY_ATTEMPTS - 1)
    function = failing_page_function(stack, outage)
    shown = visit(stack, function, links[CISO])

    decided = post(stack, function, links[CISO], shown.form("reject"), shown.cookie)

    assert answer(decided) == (200, "rejected")
    assert "delivery-pending" not in decided["body"]
    assert outage.refused == DELIVERY_ATTEMPTS - 1
    assert_decided_once(stack, rid_of(1), "reject", CISO)


class _LaterClock(datetime):
    """The approval flow's `datetime`, moved `ahead` into the future: the links' deadline passes
    without the test sleeping, and a loaded machine cannot make the page open too late."""

    ahead = timedelta(0)

    @classmethod
    def now(cls, tz: tzinfo | None = None) -> _LaterClock:  # type: ignore[override]
        return cls.fromtimestamp((datetime.now(tz) + cls.ahead).timestamp(), tz)


def test_an_expired_link_decides_nothing(stack: Stack) -> None:
    # Given links whose deadline is three minutes away, and the page opened in time
    stack.monkeypatch.setenv("APPROVAL_TIMEOUT_HOURS", "0.05")  # 180 s
    stack.monkeypatch.setattr(approval_flow, "datetime", _LaterClock)
    stack.monkeypatch.setattr(_LaterClock, "ahead", timedelta(0))
    stack.file(rid_of(1))
    links = stack.ask(rid_of(1))
    function = stack.page_function()
    shown = {approver: visit(stack, function, link) for approver, link in links.items()}
    deadline = int(parse_qs(urlsplit(links[DPO]).query)["e"][0])
    assert deadline - time.time() > 60, "the links should still be valid for minutes"
    before = stack.snapshot()

    # When the approvers decide after the deadline (the flow's clock a second past it), with
    # the page's cookie and code
    _LaterClock.ahead = timedelta(seconds=deadline - time.time() + 1)
    posted = [
        answer(post(stack, function, links[a], shown[a].form(d), shown[a].cookie))
        for a, d in ((DPO, "approve"), (CISO, "reject"))
    ]
    opened = [answer(visit(stack, function, link).response) for link in links.values()]

    # Then each gets the expired page and nothing is decided
    assert all(v.response["statusCode"] == 200 for v in shown.values())
    assert posted + opened == [(410, "expired")] * 4
    assert_undecided(stack, rid_of(1), before)


FORGERIES: dict[str, Callable[[dict[str, str]], str]] = {
    "signature with one character changed": lambda links: relinked(
        links[DPO],
        s=("A" if parse_qs(urlsplit(links[DPO]).query)["s"][0][0] != "A" else "B")
        + parse_qs(urlsplit(links[DPO]).query)["s"][0][1:],
    ),
    "signature under another key": lambda links: relinked(
        links[DPO],
        s=link_signature(
            b"x" * 64,
            approval_id_of(links[DPO]),
            int(parse_qs(urlsplit(links[DPO]).query)["e"][0]),
        ),
    ),
    "deadline moved a month on": lambda links: relinked(
        links[DPO], e=str(int(parse_qs(urlsplit(links[DPO]).query)["e"][0]) + 30 * 86400)
    ),
    "no signature": lambda links: relinked(links[DPO], s=""),
    "the other approver's id under this signature": lambda links: links[DPO].replace(
        approval_id_of(links[DPO]), approval_id_of(links[CISO])
    ),
    "an id nobody issued, signed with the key": lambda links: sign_link(
        SIGNING_SECRET.encode(),
        API_URL,
        "Q" * 32,
        int(parse_qs(urlsplit(links[DPO]).query)["e"][0]),
    ),
}


@pytest.mark.parametrize("forgery", FORGERIES)
def test_a_forged_link_decides_nothing(
    awaiting: tuple[Stack, dict[str, str]], forgery: str
) -> None:
    # Given a real cookie, CSRF token and code for the id the forged link names
    stack, links = awaiting
    function = stack.page_function()
    forged = FORGERIES[forgery](links)
    genuine = {approval_id_of(link): link for link in links.values()}
    target = approval_id_of(forged)
    shown = visit(stack, function, genuine.get(target, links[DPO]))
    body = urlencode(
        {
            "csrf_token": shown.forms[0]["fields"]["csrf_token"],
            "confirmation": confirmation_code(SIGNING_SECRET.encode(), target),
            "decision": "approve",
        }
    )
    before = stack.snapshot()

    opened = visit(stack, function, forged)
    posted = post(stack, function, forged, body, shown.cookie)

    assert answer(opened.response) == answer(posted) == (400, "invalid")
    assert opened.cookie is None
    assert_undecided(stack, rid_of(1), before)


def test_a_link_of_another_request_decides_only_that_request(stack: Stack) -> None:
    # Given two requests awaiting the same approvers
    for n in (1, 2):
        stack.file(rid_of(n))
    first, second = stack.ask(rid_of(1)), stack.ask(rid_of(2))
    function = stack.page_function()
    on_second = visit(stack, function, second[DPO])
    before = stack.snapshot()

    # When the second request's link is aimed at the first's approval id (its signature kept),
    # and the first's link is posted with the second page's cookie, token and code
    crossed = second[DPO].replace(approval_id_of(second[DPO]), approval_id_of(first[DPO]))
    refused = [
        answer(visit(stack, function, crossed).response),
        answer(post(stack, function, crossed, on_second.form("approve"), on_second.cookie)),
        answer(post(stack, function, first[DPO], on_second.form("approve"), on_second.cookie)),
    ]

    # Then nothing is decided; the second link decides the second request only
    assert refused == [(400, "invalid")] * 3
    assert_undecided(stack, rid_of(1), before)
    assert_undecided(stack, rid_of(2), before)
    decided = post(stack, function, second[DPO], on_second.form("reject"), on_second.cookie)
    assert answer(decided) == (200, "rejected")
    assert_decided_once(stack, rid_of(2), "reject", DPO)
    record = stack.record(rid_of(1))
    assert (record.status, stored_token(record)) == (
        ErasureStatus.AWAITING_APPROVAL,
        token_of(rid_of(1)),
    )
    assert stack.task_calls.of(token_of(rid_of(1))) == []


def test_a_non_approver_decides_nothing(awaiting: tuple[Stack, dict[str, str]]) -> None:
    # Given DPO opened the page, then was removed from ApproverEmails (a new cold start)
    stack, links = awaiting
    shown = visit(stack, stack.page_function(), links[DPO])
    stack.monkeypatch.setenv("APPROVER_EMAILS", CISO)
    stack.monkeypatch.setenv("APPROVER_PRINCIPALS", "")  # DPO's mapping goes with them
    function = stack.page_function()
    # and a link record for an address that was never an approver, signed with the key
    outsider = "Q" * 32
    deadline = int(parse_qs(urlsplit(links[DPO]).query)["e"][0])
    DynamoApprovals(stack.tables[1]).put(
        ApprovalLink(
            approval_id=outsider, request_id=rid_of(1), approver="mallory@example.com",
            deadline=deadline, created_at="2026-11-22T10:00:00+00:00", expires_at=deadline,
        )
    )  # fmt: skip
    stranger_link = sign_link(SIGNING_SECRET.encode(), API_URL, outsider, deadline)
    stranger = visit(stack, stack.page_function(), links[CISO])  # a cookie of the real page
    stranger_body = urlencode(
        {
            "csrf_token": stranger.forms[0]["fields"]["csrf_token"],
            "confirmation": confirmation_code(SIGNING_SECRET.encode(), outsider),
            "decision": "approve",
        }
    )
    before = stack.snapshot()

    answers = [
        answer(visit(stack, function, links[DPO]).response),
        answer(post(stack, function, links[DPO], shown.form("approve"), shown.cookie)),
        answer(visit(stack, function, stranger_link).response),
    ]
    forged_csrf = answer(post(stack, function, stranger_link, stranger_body, stranger.cookie))

    assert answers == [(403, "not-allowed")] * 3
    assert forged_csrf == (400, "invalid")  # the token was made for CISO's link, not this one
    assert_undecided(stack, rid_of(1), before)


def test_the_requester_named_as_an_approver_gets_no_link_and_cannot_decide(
    stack: Stack,
) -> None:
    # Given the requester's address is also configured (in another case)
    stack.monkeypatch.setenv("APPROVER_EMAILS", f"{DPO},{REQUESTER.upper()}")
    stack.file(rid_of(1))

    links = stack.ask(rid_of(1))

    # Then only DPO is asked; a link made for the requester by hand decides nothing
    assert list(links) == [DPO]
    own = "R" * 32
    deadline = int(parse_qs(urlsplit(links[DPO]).query)["e"][0])
    DynamoApprovals(stack.tables[1]).put(
        ApprovalLink(
            approval_id=own, request_id=rid_of(1), approver=REQUESTER, deadline=deadline,
            created_at="2026-11-22T10:00:00+00:00", expires_at=deadline,
        )
    )  # fmt: skip
    own_link = sign_link(SIGNING_SECRET.encode(), API_URL, own, deadline)
    function = stack.page_function()
    key, nonce = SIGNING_SECRET.encode(), "n" * 43
    own_form = urlencode(
        {
            "csrf_token": csrf_token(key, own, nonce),
            "confirmation": confirmation_code(key, own),
            "decision": "approve",
        }
    )
    before = stack.snapshot()

    opened = visit(stack, function, own_link)
    posted = post(stack, function, own_link, own_form, f"lethe_csrf={nonce}")

    assert answer(opened.response) == answer(posted) == (403, "not-allowed")
    assert "The requester cannot approve their own request." in posted["body"]
    assert_undecided(stack, rid_of(1), before)


def test_an_approver_who_filed_the_request_in_another_name_gets_no_link_and_cannot_decide(
    stack: Stack,
) -> None:
    # Given DPO's role filed the request through the API, naming someone else as requester
    stack.file(rid_of(1), caller="arn:aws:sts::123456789012:assumed-role/DpoRole/dpo-laptop")

    links = stack.ask(rid_of(1))

    # Then only CISO is asked; a link made for DPO by hand decides nothing
    assert list(links) == [CISO]
    own = "R" * 32
    deadline = int(parse_qs(urlsplit(links[CISO]).query)["e"][0])
    DynamoApprovals(stack.tables[1]).put(
        ApprovalLink(
            approval_id=own, request_id=rid_of(1), approver=DPO, deadline=deadline,
            created_at="2026-11-22T10:00:00+00:00", expires_at=deadline,
        )
    )  # fmt: skip
    own_link = sign_link(SIGNING_SECRET.encode(), API_URL, own, deadline)
    function = stack.page_function()
    key, nonce = SIGNING_SECRET.encode(), "n" * 43
    own_form = urlencode(
        {
            "csrf_token": csrf_token(key, own, nonce),
            "confirmation": confirmation_code(key, own),
            "decision": "approve",
        }
    )
    before = stack.snapshot()

    opened = visit(stack, function, own_link)
    posted = post(stack, function, own_link, own_form, f"lethe_csrf={nonce}")

    assert answer(opened.response) == answer(posted) == (403, "not-allowed")
    assert "The requester cannot approve their own request." in posted["body"]
    assert_undecided(stack, rid_of(1), before)


# ------------------------------------------------------------------------------ the race


@pytest.fixture
def served_stack(
    handler_env: Callable[[str], None],
    load_event: Event,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Stack]:
    """The stack on a moto server on 127.0.0.1, so that several processes share it (each
    process is one Lambda execution environment, as on AWS: Powertools keeps the current event
    on a class, so two handlers in threads of one process would read each other's events).

    DynamoDB checks a write's condition and applies the write as one atomic step per item;
    moto's server handles requests in threads and copies, checks and updates an item in
    separate Python statements with no lock, so two requests could both pass one condition
    there where DynamoDB lets exactly one through. One lock around the handling of each
    DynamoDB request gives moto the serialisation DynamoDB has per item; the code under test
    is unchanged, and every contender still sends its own conditional write."""
    for name in ("AWS_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in {
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_METRICS_NAMESPACE": "Lethe",
        "POWERTOOLS_SERVICE_NAME": "lethe",
    }.items():
        monkeypatch.setenv(name, value)
    lock = threading.Lock()
    handle = DynamoHandler.call_action

    def one_at_a_time(self: Any) -> Any:
        with lock:
            return handle(self)

    monkeypatch.setattr(DynamoHandler, "call_action", one_at_a_time)
    with moto_server() as endpoints, pytest.MonkeyPatch.context() as server:
        # no workflow runs here: Step Functions takes any task token, as with mock_aws
        server.setitem(default_user_config["stepfunctions"], "execute_state_machine", False)
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoints.endpoint_url)
        yield deploy(handler_env, load_event, monkeypatch)
    parameters.clear_caches()


def contend(
    event: dict[str, Any], gate: Any, answers: Any, index: int
) -> None:  # pragma: no cover - runs in a forked process
    """One approver's POST in a Lambda execution environment of its own (a forked process).
    Its conditional write waits at `gate` until every contender has reached its own: all have
    read the request as AWAITING_APPROVAL and passed every check, so only the conditional
    write can tell them apart (the winner's later write, removing the handed-over task
    token, is not held). Puts (index, status, body, task calls, error) on `answers`."""
    calls: list[tuple[str, str, str]] = []

    def record(model: Any, params: dict[str, Any], **_: Any) -> None:
        if model.name in {"SendTaskSuccess", "SendTaskFailure"}:
            calls.append((model.name, params["taskToken"], params.get("error", "")))

    held: list[bool] = []

    def hold(**_: Any) -> None:  # the decision's conditional write (the first UpdateItem)
        if not held:
            held.append(True)
            gate.wait()

    try:
        function = load_function_module("approval_page")
        deps = function._dependencies()
        deps.callbacks.client.meta.events.register("before-parameter-build.sfn", record)
        deps.requests._table.meta.client.meta.events.register(
            "before-call.dynamodb.UpdateItem", hold
        )
        response = function.handler(event, FakeLambdaContext())
        answers.put((index, response["statusCode"], response["body"], calls, ""))
    except BaseException as exc:
        answers.put((index, 0, "", calls, repr(exc)))


def race(events: list[dict[str, Any]], task_calls: TaskCalls) -> list[dict[str, Any]]:
    """Each event handled at once by its own process; their SendTask calls join `task_calls`."""
    context = multiprocessing.get_context("fork")
    gate = context.Barrier(len(events), timeout=60)
    answers = context.Queue()
    processes = [
        context.Process(target=contend, args=(event, gate, answers, index))
        for index, event in enumerate(events)
    ]
    for process in processes:
        process.start()
    results = sorted(answers.get(timeout=120) for _ in processes)
    for process in processes:
        process.join(timeout=60)
    errors = [error for *_, error in results if error]
    assert not errors, errors
    for *_, calls, _ in results:
        task_calls.calls.extend(calls)
    return [{"statusCode": status, "body": body} for _, status, body, _, _ in results]


def test_approve_and_reject_at_once_from_two_approvers_decide_exactly_once(
    served_stack: Stack,
) -> None:
    stack = served_stack
    function = stack.page_function()  # the pages both approvers opened
    winners = []

    for n in range(1, RACES + 1):
        # Given a request awaiting DPO and CISO, each on their confirmation page
        rid = rid_of(n)
        stack.file(rid)
        links = stack.ask(rid)
        pages = {a: visit(stack, function, links[a]) for a in (DPO, CISO)}
        plan = {DPO: "approve", CISO: "reject"} if n % 2 else {DPO: "reject", CISO: "approve"}
        events = [
            post_event(stack, links[a], pages[a].form(plan[a]), pages[a].cookie)
            for a in (DPO, CISO)
        ]

        # When both submit at the same moment, each to a Lambda instance of their own
        responses = race(events, stack.task_calls)

        # Then one decides and the other is told it is already decided
        outcomes = [answer(r) for r in responses]
        decided = [i for i, o in enumerate(outcomes) if o[1] in {"approved", "rejected"}]
        assert len(decided) == 1, (n, outcomes)
        assert outcomes[1 - decided[0]] == (409, "already-decided"), (n, outcomes)
        winner = (DPO, CISO)[decided[0]]
        assert_decided_once(stack, rid, plan[winner], winner)
        winners.append(winner)

    assert len(winners) == RACES
    assert len(stack.task_calls.calls) == RACES
