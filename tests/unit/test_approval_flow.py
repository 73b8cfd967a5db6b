"""The approval step with its state (lethe_shared.erasure.approval_flow): emailing the approvers,
and the
page they decide on, against the attacks ARCHITECTURE.md decision 7 names.

Every attack ends with exactly one decision by an allowed approver, or none: the request record
says so, and so do the task token callbacks (the only way a decision reaches the workflow)."""

from __future__ import annotations

import copy
import json
import logging
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest

from lethe_shared.erasure.approval_flow import (
    ApprovalPage,
    HttpAnswer,
    HttpRequest,
    NoApproverError,
    request_approval,
)
from lethe_shared.erasure.approval_links import (
    confirmation_code,
    csrf_token,
    link_signature,
    new_approval_id,
    new_csrf_nonce,
    sign_link,
)
from lethe_shared.erasure.intake import cancel_request
from lethe_shared.erasure.principals import ApproverPrincipals
from lethe_shared.erasure.requests import (
    ApprovalLink,
    ErasureRequest,
    ErasureStatus,
    RequestClosedError,
    hash_subjects,
    new_request,
    parse_request_body,
)
from lethe_shared.erasure.task_callbacks import TaskGoneError
from lethe_shared.erasure.workflow import (
    mark,
)
from tests.fakes import MemoryApprovals, MemoryErasureRequests

pytestmark = pytest.mark.lambda_runtime

SIGNING_KEY = b"approval-signing-key-for-unit-tests-0123456789"
HASH_KEY = b"k" * 32
SECRET = "u-SECRET-1001"
RID = "er-20261122T100000Z-0a1b2c3d"
T0 = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
NOW = T0 + timedelta(hours=1)
DEADLINE = T0 + timedelta(hours=72)
BASE_URL = "https://abc123.execute-api.us-east-1.amazonaws.com/local"
REQUESTER = "privacy@example.com"
DPO, CISO = "dpo@example.com", "ciso@example.com"
APPROVERS = [DPO, CISO]
REPORT = {
    "manifest_url": f"s3://reports/erasure/{RID}/manifest.json",
    "manifest_sha256": "ab" * 32,
    "summary_text_url": f"s3://reports/erasure/{RID}/summary.txt",
    "summary_html_url": f"s3://reports/erasure/{RID}/summary.html",
    "objects": 3,
    "versions": 5,
    "rows": 7,
    "datasets": [
        {"dataset_id": "reviews", "zone": "lake", "objects": 2, "versions": 4, "rows": 6},
        {"dataset_id": "reviews", "zone": "raw", "objects": 1, "versions": 1, "rows": 1},
    ],
}
FORM = "application/x-www-form-urlencoded"


@pytest.fixture(autouse=True)
def _no_raw_id_logged(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    caplog.set_level(logging.DEBUG, logger="lethe")
    yield
    logged = " ".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
    assert SECRET.casefold() not in logged.casefold()


@dataclass
class Mail:
    to: str
    subject: str
    text: str
    html: str


@dataclass
class RecordingMailer:
    sent: list[Mail] = field(default_factory=list)

    def send(self, to: str, subject: str, text: str, html: str) -> None:
        self.sent.append(Mail(to, subject, text, html))


class RecordingCallbacks:
    """TaskCallbacks that record each call; `gone` makes them raise TaskGoneError (the task
    timed out) after recording."""

    def __init__(self, *, gone: bool = False) -> None:
        self.calls: list[tuple[str, str, Any]] = []
        self.gone = gone

    def success(self, token: str, output: Mapping[str, Any]) -> None:
        self.calls.append(("success", token, dict(output)))
        if self.gone:
            raise TaskGoneError("Task Timed Out")

    def failure(self, token: str, error: str, cause: str) -> None:
        self.calls.append(("failure", token, (error, cause)))
        if self.gone:
            raise TaskGoneError("Task Timed Out")


class StaleReads(MemoryErasureRequests):
    """Reads that lag behind the table: the next `stale` gets return `snapshot` (two approvers
    whose pages read the request at the same moment)."""

    def __init__(self) -> None:
        super().__init__()
        self.snapshot: ErasureRequest | None = None
        self.stale = 0

    def get(self, request_id: str) -> ErasureRequest | None:
        if self.stale and self.snapshot is not None:
            self.stale -= 1
            return self.snapshot
        return super().get(request_id)


@dataclass
class World:
    requests: MemoryErasureRequests
    approvals: MemoryApprovals
    mailer: RecordingMailer
    callbacks: RecordingCallbacks

    def page(self, approvers: list[str] | None = None) -> ApprovalPage:
        return ApprovalPage(
            requests=self.requests,
            approvals=self.approvals,
            callbacks=self.callbacks,
            signing_key=SIGNING_KEY,
            approvers=APPROVERS if approvers is None else approvers,
        )

    def record(self) -> ErasureRequest:
        record = self.requests.get(RID)
        assert record is not None
        return record

    def link_of(self, approver: str) -> str:
        (mail,) = [m for m in self.mailer.sent if m.to == approver]
        (link,) = re.findall(r"https://\S+/approvals/\S+", mail.text)
        return str(link)


def reported(requests: MemoryErasureRequests) -> None:
    body = parse_request_body(
        {"subject_ids": [SECRET], "reason": "ticket 88", "requested_by": REQUESTER}
    )
    requests.create(new_request(RID, body, hash_subjects(body, HASH_KEY, []), now=T0))
    requests.transition(RID, ErasureStatus.REPORTED, by="workflow", updates={"report": REPORT})


def ask(world: World, approvers: list[str] | None = None) -> list[ApprovalLink]:
    return request_approval(
        RID,
        "task-token-1",
        requests=world.requests,
        approvals=world.approvals,
        mailer=world.mailer,
        approvers=APPROVERS if approvers is None else approvers,
        signing_key=SIGNING_KEY,
        base_url=BASE_URL,
        timeout=timedelta(hours=72),
        now=T0,
    )


@pytest.fixture
def world() -> World:
    """A REPORTED request; nobody asked yet."""
    built = World(
        MemoryErasureRequests(), MemoryApprovals(), RecordingMailer(), RecordingCallbacks()
    )
    reported(built.requests)
    return built


@pytest.fixture
def awaiting(world: World) -> World:
    """The request AWAITING_APPROVAL, its links emailed to DPO and CISO."""
    ask(world)
    return world


# ------------------------------------------------------------------------------ browser side


def parts(link: str) -> tuple[str, dict[str, str]]:
    split = urlsplit(link)
    return split.path.rsplit("/", 1)[1], {k: v[0] for k, v in parse_qs(split.query).items()}


def http(link: str, *, cookie: str | None = None, body: str | None = None) -> HttpRequest:
    approval_id, query = parts(link)
    return HttpRequest(
        approval_id=approval_id,
        query=query,
        cookie=cookie,
        body=body,
        content_type=FORM if body is not None else None,
        public_path=f"/local/approvals/{approval_id}",
    )


@dataclass(frozen=True)
class Served:
    """What a browser keeps of a confirmation page: its cookie, the form's token, the code."""

    cookie: str
    csrf: str
    code: str


def served(answer: HttpAnswer) -> Served:
    assert answer.page.outcome is None, answer.page.html
    assert answer.set_cookie is not None
    (csrf,) = set(re.findall(r'name="csrf_token" value="([^"]+)"', answer.page.html))  # 2 forms
    (code,) = re.findall(r'<code id="confirmation-code">([^<]+)</code>', answer.page.html)
    return Served(answer.set_cookie.split(";", 1)[0], csrf, code)


def form(decision: str, page: Served, code: str | None = None) -> str:
    typed = page.code if code is None else code
    return urlencode({"csrf_token": page.csrf, "confirmation": typed, "decision": decision})


def decide(
    world: World,
    link: str,
    decision: str,
    *,
    at: datetime = NOW,
    approvers: list[str] | None = None,
) -> HttpAnswer:
    """A person's visit: open the link, type the code, press the button."""
    page = world.page(approvers)
    shown = served(page.get(http(link), now=at))
    return page.post(http(link, cookie=shown.cookie, body=form(decision, shown)), now=at)


def assert_nothing_decided(world: World) -> None:
    record = world.record()
    assert record.status is ErasureStatus.AWAITING_APPROVAL
    assert record.task_token == "task-token-1"
    assert "decision" not in record.approval
    assert world.callbacks.calls == []


def reason_of(answer: HttpAnswer) -> str | None:
    found = re.search(r'data-reason="([^"]+)"', answer.page.html)
    return found.group(1) if found else None


# ------------------------------------------------------------------------------ request_approval


def test_request_approval_keeps_the_token_and_emails_each_approver_their_own_link(
    world: World,
) -> None:
    links = ask(world, [DPO, CISO, "Privacy@Example.com ", DPO])

    # one link per approver, never the requester (whatever the case), each emailed once
    assert [link.approver for link in links] == [DPO, CISO]
    assert [m.to for m in world.mailer.sent] == [DPO, CISO]
    assert {link.approval_id for link in links} == set(world.approvals.links)
    for link, mail in zip(links, world.mailer.sent, strict=True):
        own = sign_link(SIGNING_KEY, BASE_URL, link.approval_id, int(DEADLINE.timestamp()))
        assert own in mail.text
        assert own.replace("&", "&amp;") in mail.html
        assert link.deadline == int(DEADLINE.timestamp())
        assert link.request_id == RID
        assert SECRET.casefold() not in (mail.subject + mail.text + mail.html).casefold()
        assert "task-token-1" not in mail.text + mail.html
    assert links[1].approval_id not in world.mailer.sent[0].text
    # the record: AWAITING_APPROVAL, the token kept server-side, the deadline
    record = world.record()
    assert record.status is ErasureStatus.AWAITING_APPROVAL
    assert record.task_token == "task-token-1"
    assert record.approval["deadline"] == "2026-11-25T10:00:00+00:00"
    assert record.approval["approvers"] == [DPO, CISO]
    assert "task-token-1" not in json.dumps(record.public())
    assert record.public()["approval"]["approvers"] == 2


def test_only_the_requester_configured_is_no_approver(world: World) -> None:
    before = copy.deepcopy(world.requests.items)

    with pytest.raises(NoApproverError):
        ask(world, ["PRIVACY@example.com"])

    assert world.requests.items == before
    assert world.approvals.links == {}
    assert world.mailer.sent == []


def test_a_cancelled_request_asks_nobody(world: World) -> None:
    cancel_request(RID, REQUESTER, requests=world.requests, callbacks=world.callbacks)

    with pytest.raises(RequestClosedError):
        ask(world)

    assert world.mailer.sent == []
    assert world.approvals.links == {}


# ------------------------------------------------------------------------------ the page


def test_get_renders_the_confirmation_page_and_changes_nothing(awaiting: World) -> None:
    link = awaiting.link_of(DPO)
    approval_id, _ = parts(link)
    before = copy.deepcopy(awaiting.requests.items)

    answer = awaiting.page().get(http(link), now=NOW)

    assert answer.page.status_code == 200
    html = answer.page.html
    assert (
        f'<code id="confirmation-code">{confirmation_code(SIGNING_KEY, approval_id)}</code>' in html
    )
    assert html.count('<form method="post"') == 2
    assert 'name="confirmation"' in html
    assert 'value="approve"' in html
    assert 'value="reject"' in html
    assert "ab" * 32 in html  # the report hash
    assert '<dd id="row-count">7</dd>' in html
    assert SECRET.casefold() not in html.casefold()
    assert answer.set_cookie is not None
    cookie = answer.set_cookie.split("; ")
    assert cookie[0].startswith("lethe_csrf=")
    assert cookie[1:] == [
        "HttpOnly",
        "SameSite=Strict",
        f"Path=/local/approvals/{approval_id}",
        "Max-Age=43200",
        "Secure",
    ]
    assert awaiting.requests.items == before
    assert awaiting.callbacks.calls == []


def test_a_post_with_cookie_token_and_code_approves_exactly_once(awaiting: World) -> None:
    answer = decide(awaiting, awaiting.link_of(DPO), "approve")

    assert (answer.page.status_code, answer.page.outcome) == (200, "approved")
    assert awaiting.callbacks.calls == [
        (
            "success",
            "task-token-1",
            {"decision": "approve", "decided_by": DPO, "decided_at": NOW.isoformat()},
        )
    ]
    record = awaiting.record()
    assert record.status is ErasureStatus.APPROVED
    assert record.task_token == ""
    assert {k: record.approval[k] for k in ("decision", "decided_by", "decided_at")} == {
        "decision": "approve",
        "decided_by": DPO,
        "decided_at": NOW.isoformat(),
    }
    assert record.approval["approval_id"] == parts(awaiting.link_of(DPO))[0]
    assert (record.history[-1].status, record.history[-1].by) == (ErasureStatus.APPROVED, DPO)


def test_a_rejection_fails_the_task_and_ends_the_request(awaiting: World) -> None:
    answer = decide(awaiting, awaiting.link_of(CISO), "reject")

    assert (answer.page.status_code, answer.page.outcome) == (200, "rejected")
    assert awaiting.callbacks.calls == [
        ("failure", "task-token-1", ("ErasureRejected", f"rejected by {CISO}"))
    ]
    record = awaiting.record()
    assert (record.status, record.approval["decided_by"]) == (ErasureStatus.REJECTED, CISO)


def test_the_code_is_accepted_as_a_person_types_it(awaiting: World) -> None:
    link = awaiting.link_of(DPO)
    page = awaiting.page()
    shown = served(page.get(http(link), now=NOW))
    typed = " " + shown.code.lower().replace("-", " ") + " "

    answer = page.post(http(link, cookie=shown.cookie, body=form("approve", shown, typed)), now=NOW)

    assert answer.page.outcome == "approved"


# ------------------------------------------------------------------------------ attacks


def test_a_scanner_opening_every_link_decides_nothing(awaiting: World) -> None:
    for approver in APPROVERS:
        for _ in range(3):
            awaiting.page().get(http(awaiting.link_of(approver)), now=NOW)

    assert_nothing_decided(awaiting)


def test_a_scanner_submitting_the_form_as_served_decides_nothing(awaiting: World) -> None:
    link = awaiting.link_of(DPO)
    page = awaiting.page()
    shown = served(page.get(http(link), now=NOW))

    answer = page.post(http(link, cookie=shown.cookie, body=form("approve", shown, "")), now=NOW)

    assert (answer.page.status_code, answer.page.outcome) == (422, "wrong-code")
    approval_id, query = parts(link)
    assert f'href="/local/approvals/{approval_id}?e={query["e"]}&amp;s={query["s"]}"' in (
        answer.page.html
    )
    assert_nothing_decided(awaiting)


def test_a_wrong_code_decides_nothing(awaiting: World) -> None:
    link = awaiting.link_of(DPO)
    page = awaiting.page()
    shown = served(page.get(http(link), now=NOW))
    other_code = confirmation_code(SIGNING_KEY, parts(awaiting.link_of(CISO))[0])

    answer = page.post(
        http(link, cookie=shown.cookie, body=form("approve", shown, other_code)), now=NOW
    )

    assert answer.page.outcome == "wrong-code"
    assert_nothing_decided(awaiting)


def test_a_replayed_post_changes_nothing_more(awaiting: World) -> None:
    link = awaiting.link_of(DPO)
    page = awaiting.page()
    shown = served(page.get(http(link), now=NOW))
    post = http(link, cookie=shown.cookie, body=form("approve", shown))
    assert page.post(post, now=NOW).page.outcome == "approved"
    after_first = copy.deepcopy(awaiting.requests.items)

    replay = page.post(post, now=NOW + timedelta(minutes=5))

    assert (replay.page.status_code, replay.page.outcome) == (409, "already-decided")
    assert f"already approved by {DPO}" in replay.page.html
    assert len(awaiting.callbacks.calls) == 1
    assert awaiting.requests.items == after_first


def test_an_expired_link_decides_nothing(awaiting: World) -> None:
    link = awaiting.link_of(DPO)
    page = awaiting.page()
    shown = served(page.get(http(link), now=NOW))

    opened = page.get(http(link), now=DEADLINE)
    posted = page.post(http(link, cookie=shown.cookie, body=form("approve", shown)), now=DEADLINE)

    assert (opened.page.status_code, opened.page.outcome, opened.set_cookie) == (
        410,
        "expired",
        None,
    )
    assert (posted.page.status_code, posted.page.outcome) == (410, "expired")
    assert_nothing_decided(awaiting)


@pytest.mark.parametrize(
    "forge",
    [
        "signature of another key",
        "expiry moved",
        "signature cut",
        "no signature",
    ],
)
def test_a_forged_link_decides_nothing(awaiting: World, forge: str) -> None:
    link = awaiting.link_of(DPO)
    approval_id, query = parts(link)
    page = awaiting.page()
    shown = served(page.get(http(link), now=NOW))  # a real cookie and token, to be sure
    forged = {
        "signature of another key": {
            **query,
            "s": link_signature(b"x" * 32, approval_id, int(query["e"])),
        },
        "expiry moved": {**query, "e": str(int(query["e"]) + 30 * 86400)},
        "signature cut": {**query, "s": query["s"][:-2]},
        "no signature": {"e": query["e"]},
    }[forge]
    url = f"{BASE_URL}/approvals/{approval_id}?{urlencode(forged)}"

    opened = page.get(http(url), now=NOW)
    posted = page.post(http(url, cookie=shown.cookie, body=form("approve", shown)), now=NOW)

    for answer in (opened, posted):
        assert (answer.page.status_code, answer.page.outcome) == (400, "invalid")
        assert reason_of(answer) == "link"
    assert_nothing_decided(awaiting)


def test_another_approval_id_with_this_links_signature_decides_nothing(awaiting: World) -> None:
    dpo_id, dpo_query = parts(awaiting.link_of(DPO))
    ciso_id, _ = parts(awaiting.link_of(CISO))
    page = awaiting.page()
    shown = served(page.get(http(awaiting.link_of(DPO)), now=NOW))

    for target in (ciso_id, new_approval_id()):
        url = f"{BASE_URL}/approvals/{target}?{urlencode(dpo_query)}"
        nonce = shown.cookie.split("=", 1)[1]
        body = urlencode(
            {
                "csrf_token": csrf_token(SIGNING_KEY, target, nonce),
                "confirmation": confirmation_code(SIGNING_KEY, target),
                "decision": "approve",
            }
        )
        assert page.get(http(url), now=NOW).page.outcome == "invalid"
        assert page.post(http(url, cookie=shown.cookie, body=body), now=NOW).page.outcome == (
            "invalid"
        )
    assert dpo_id != ciso_id
    assert_nothing_decided(awaiting)


def test_one_approvers_cookie_and_token_do_not_decide_on_anothers_link(awaiting: World) -> None:
    page = awaiting.page()
    dpo_page = served(page.get(http(awaiting.link_of(DPO)), now=NOW))
    ciso_link = awaiting.link_of(CISO)
    ciso_code = confirmation_code(SIGNING_KEY, parts(ciso_link)[0])

    answer = page.post(
        http(ciso_link, cookie=dpo_page.cookie, body=form("approve", dpo_page, ciso_code)),
        now=NOW,
    )

    assert (answer.page.outcome, reason_of(answer)) == ("invalid", "csrf")
    assert_nothing_decided(awaiting)


def test_approve_and_reject_at_once_apply_only_the_first(awaiting: World) -> None:
    # Given both approvers on their confirmation pages, their requests reading the record at
    # the same moment (AWAITING_APPROVAL)
    requests = StaleReads()
    requests.items = copy.deepcopy(awaiting.requests.items)
    awaiting.requests = requests
    page = awaiting.page()
    dpo_link, ciso_link = awaiting.link_of(DPO), awaiting.link_of(CISO)
    dpo = served(page.get(http(dpo_link), now=NOW))
    ciso = served(page.get(http(ciso_link), now=NOW))
    requests.snapshot = requests.get(RID)

    # When DPO approves, and CISO's reject is checked against the record as it was before
    approved = page.post(http(dpo_link, cookie=dpo.cookie, body=form("approve", dpo)), now=NOW)
    requests.stale = 1
    rejected = page.post(http(ciso_link, cookie=ciso.cookie, body=form("reject", ciso)), now=NOW)

    # Then only DPO's decision counts: the conditional write refused CISO's
    assert approved.page.outcome == "approved"
    assert (rejected.page.status_code, rejected.page.outcome) == (409, "already-decided")
    assert f"already approved by {DPO}" in rejected.page.html
    assert [c[0] for c in awaiting.callbacks.calls] == ["success"]
    record = awaiting.record()
    assert (record.status, record.approval["decided_by"]) == (ErasureStatus.APPROVED, DPO)
    assert [h.status for h in record.history].count(ErasureStatus.APPROVED) == 1
    assert ErasureStatus.REJECTED not in [h.status for h in record.history]


def test_the_second_approver_after_the_first_finds_it_decided(awaiting: World) -> None:
    assert decide(awaiting, awaiting.link_of(CISO), "reject").page.outcome == "rejected"

    page = awaiting.page()
    opened = page.get(http(awaiting.link_of(DPO)), now=NOW)

    assert (opened.page.outcome, opened.set_cookie) == ("already-decided", None)
    assert f"already rejected by {CISO}" in opened.page.html
    assert len(awaiting.callbacks.calls) == 1


def test_an_approver_removed_from_the_configuration_decides_nothing(awaiting: World) -> None:
    link = awaiting.link_of(DPO)
    shown = served(awaiting.page().get(http(link), now=NOW))  # while still configured

    now_page = awaiting.page([CISO])
    opened = now_page.get(http(link), now=NOW)
    posted = now_page.post(http(link, cookie=shown.cookie, body=form("approve", shown)), now=NOW)

    for answer in (opened, posted):
        assert (answer.page.status_code, answer.page.outcome) == (403, "not-allowed")
        assert "no longer a configured approver" in answer.page.html
    assert_nothing_decided(awaiting)


def test_the_requester_cannot_approve_their_own_request(world: World) -> None:
    # Given the requester is also a configured approver: no link is made for them
    approvers = [DPO, "Privacy@Example.com"]
    ask(world, approvers)
    assert [m.to for m in world.mailer.sent] == [DPO]

    # When someone makes a link record for the requester by hand and signs it with the key
    approval_id = new_approval_id()
    deadline = int(DEADLINE.timestamp())
    world.approvals.put(
        ApprovalLink(
            approval_id=approval_id, request_id=RID, approver=REQUESTER, deadline=deadline,
            created_at=T0.isoformat(), expires_at=deadline + 86400,
        )
    )  # fmt: skip
    link = sign_link(SIGNING_KEY, BASE_URL, approval_id, deadline)
    nonce = new_csrf_nonce()
    body = urlencode(
        {
            "csrf_token": csrf_token(SIGNING_KEY, approval_id, nonce),
            "confirmation": confirmation_code(SIGNING_KEY, approval_id),
            "decision": "approve",
        }
    )
    page = world.page(approvers)
    opened = page.get(http(link), now=NOW)
    posted = page.post(http(link, cookie=f"lethe_csrf={nonce}", body=body), now=NOW)

    # Then it decides nothing
    for answer in (opened, posted):
        assert (answer.page.status_code, answer.page.outcome) == (403, "not-allowed")
        assert "The requester cannot approve their own request." in answer.page.html
    assert_nothing_decided(world)


def test_a_post_without_the_cookie_is_refused_as_csrf(awaiting: World) -> None:
    link = awaiting.link_of(DPO)
    page = awaiting.page()
    shown = served(page.get(http(link), now=NOW))

    answer = page.post(http(link, cookie=None, body=form("approve", shown)), now=NOW)

    assert (answer.page.status_code, answer.page.outcome, reason_of(answer)) == (
        400,
        "invalid",
        "csrf",
    )
    assert_nothing_decided(awaiting)


def test_a_decision_after_the_task_timed_out_shows_expired_and_the_request_expires(
    world: World,
) -> None:
    # Given the approval task timed out a moment before the approver's POST arrived
    world.callbacks = RecordingCallbacks(gone=True)
    ask(world)

    answer = decide(world, world.link_of(DPO), "approve")

    # Then the approver reads that it expired; the workflow's timeout path marks EXPIRED
    assert (answer.page.status_code, answer.page.outcome) == (410, "expired")
    assert len(world.callbacks.calls) == 1
    note = mark(RID, ErasureStatus.EXPIRED, requests=world.requests)
    assert note["status"] == "EXPIRED"
    assert world.page().get(http(world.link_of(CISO)), now=NOW).page.outcome == "expired"


def test_a_cancelled_request_is_closed_to_its_links(awaiting: World) -> None:
    link = awaiting.link_of(DPO)
    page = awaiting.page()
    shown = served(page.get(http(link), now=NOW))
    cancel_request(RID, REQUESTER, requests=awaiting.requests, callbacks=awaiting.callbacks)
    cancelled_calls = list(awaiting.callbacks.calls)

    answer = page.post(http(link, cookie=shown.cookie, body=form("approve", shown)), now=NOW)

    assert (answer.page.status_code, answer.page.outcome) == (409, "closed")
    assert "status REJECTED" in answer.page.html
    assert awaiting.callbacks.calls == cancelled_calls
    assert awaiting.record().status is ErasureStatus.REJECTED


# ------------------------------------------------------------------------------ the IAM caller

DPO_ROLE = "arn:aws:iam::123456789012:role/DpoRole"
DPO_SESSION = "arn:aws:sts::123456789012:assumed-role/DpoRole/dpo-laptop"
PRINCIPALS = ApproverPrincipals.parse(f"{DPO}={DPO_ROLE}")


def filed_by(requests: MemoryErasureRequests, caller: str) -> None:
    """A REPORTED request filed by `caller`, naming someone else as the requester."""
    body = parse_request_body(
        {"subject_ids": [SECRET], "reason": "ticket 88", "requested_by": "someone@example.com"}
    )
    requests.create(
        new_request(RID, body, hash_subjects(body, HASH_KEY, []), now=T0, principal=caller)
    )
    requests.transition(RID, ErasureStatus.REPORTED, by="workflow", updates={"report": REPORT})


def test_an_approver_who_filed_the_request_in_another_name_is_not_asked_and_cannot_decide() -> None:
    # Given DPO's role filed the request, naming someone else as the requester
    world = World(
        MemoryErasureRequests(), MemoryApprovals(), RecordingMailer(), RecordingCallbacks()
    )
    filed_by(world.requests, DPO_SESSION)

    # When approval is requested: only CISO is asked
    request_approval(
        RID, "task-token-1", requests=world.requests, approvals=world.approvals,
        mailer=world.mailer, approvers=APPROVERS, signing_key=SIGNING_KEY, base_url=BASE_URL,
        timeout=timedelta(hours=72), principals=PRINCIPALS, now=T0,
    )  # fmt: skip
    assert [m.to for m in world.mailer.sent] == [CISO]

    # and a link made for DPO by hand decides nothing, on GET or POST
    approval_id = new_approval_id()
    deadline = int(DEADLINE.timestamp())
    world.approvals.put(
        ApprovalLink(
            approval_id=approval_id, request_id=RID, approver=DPO, deadline=deadline,
            created_at=T0.isoformat(), expires_at=deadline + 86400,
        )
    )  # fmt: skip
    link = sign_link(SIGNING_KEY, BASE_URL, approval_id, deadline)
    nonce = new_csrf_nonce()
    body = urlencode(
        {
            "csrf_token": csrf_token(SIGNING_KEY, approval_id, nonce),
            "confirmation": confirmation_code(SIGNING_KEY, approval_id),
            "decision": "approve",
        }
    )
    page = replace(world.page(), principals=PRINCIPALS)
    opened = page.get(http(link), now=NOW)
    posted = page.post(http(link, cookie=f"lethe_csrf={nonce}", body=body), now=NOW)

    for answer in (opened, posted):
        assert (answer.page.status_code, answer.page.outcome) == (403, "not-allowed")
        assert "The requester cannot approve their own request." in answer.page.html
    assert_nothing_decided(world)
    # CISO still can
    assert decide(world, world.link_of(CISO), "approve").page.outcome == "approved"


def test_when_every_approver_filed_it_nobody_is_asked() -> None:
    requests = MemoryErasureRequests()
    filed_by(requests, DPO_SESSION)
    approvals, mailer = MemoryApprovals(), RecordingMailer()
    before = copy.deepcopy(requests.items)

    with pytest.raises(NoApproverError):
        request_approval(
            RID, "task-token-1", requests=requests, approvals=approvals, mailer=mailer,
            approvers=[DPO], signing_key=SIGNING_KEY, base_url=BASE_URL,
            timeout=timedelta(hours=72), principals=PRINCIPALS, now=T0,
        )  # fmt: skip

    assert requests.items == before
    assert approvals.links == {}
    assert mailer.sent == []


def test_the_approvers_are_told_what_the_report_could_not_search() -> None:
    """The report step stores not-searched counts on the record (lethe_shared.erasure.scope);
    each approver's email carries them."""
    world = World(
        MemoryErasureRequests(), MemoryApprovals(), RecordingMailer(), RecordingCallbacks()
    )
    body = parse_request_body({"subject_ids": [SECRET], "requested_by": REQUESTER})
    world.requests.create(new_request(RID, body, hash_subjects(body, HASH_KEY, []), now=T0))
    gaps = [{"dataset_id": "reviews", "reason": "ingestion_in_flight", "versions": 1}]
    world.requests.transition(
        RID,
        ErasureStatus.REPORTED,
        by="workflow",
        updates={"report": REPORT | {"not_searched": gaps}},
    )

    ask(world)

    assert world.mailer.sent
    for mail in world.mailer.sent:
        assert "NOT SEARCHED" in mail.text
        assert "reviews: 1 ingestion_in_flight" in mail.text
