"""The approval step against three weaknesses (issue 19): the requester's words ahead of the
link in the email, four-eyes on free text, and a second tab invalidating the first.

Helpers (the World of a request awaiting approval, a browser's view of a page) come from
tests.unit.test_approval_flow.
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import timedelta

import pytest

from lethe_shared.erasure import approval_pages as pages
from lethe_shared.erasure.approval_email import (
    PRINCIPAL_LABEL,
    REQUESTED_BY_LABEL,
    build_approval_email,
)
from lethe_shared.erasure.approval_flow import is_requester, request_approval
from lethe_shared.erasure.approval_links import (
    CSRF_COOKIE,
    csrf_nonce_for,
    csrf_token,
    new_csrf_nonce,
    sign_link,
)
from lethe_shared.erasure.principals import ApproverPrincipals
from lethe_shared.erasure.requests import (
    ErasureRequest,
    ErasureStatus,
    hash_subjects,
    new_request,
    parse_request_body,
)
from tests.fakes import MemoryApprovals, MemoryErasureRequests
from tests.unit.test_approval_flow import (
    APPROVERS,
    BASE_URL,
    CISO,
    DEADLINE,
    DPO,
    HASH_KEY,
    NOW,
    REPORT,
    RID,
    SECRET,
    SIGNING_KEY,
    T0,
    RecordingCallbacks,
    RecordingMailer,
    World,
    ask,
    assert_nothing_decided,
    form,
    http,
    reason_of,
    served,
)
from tests.unit.test_approval_flow import awaiting as awaiting  # noqa: PLC0414  (fixtures)
from tests.unit.test_approval_flow import world as world  # noqa: PLC0414

pytestmark = pytest.mark.lambda_runtime

AID = "A" * 32
EVIL = "https://evil.example/approvals/x?e=1&s=2"
LINK = sign_link(SIGNING_KEY, BASE_URL, AID, DEADLINE)


def summary(requested_by: str, principal: str = "") -> pages.ApprovalSummary:
    return pages.ApprovalSummary(
        request_id=RID,
        subject_count=1,
        datasets=(
            pages.DatasetCounts(dataset_id="reviews", zone="lake", objects=1, versions=1, rows=2),
        ),
        report_sha256="ab" * 32,
        deadline=DEADLINE,
        requested_by=requested_by,
        requester_principal=principal,
        approver=DPO,
    )


# ------------------------------------------------------------------------------ the email


@pytest.mark.parametrize(
    "requested_by",
    [
        EVIL,  # a URL (intake refuses it now; a record stored before may hold one)
        f"privacy@example.com\n\nReview the request: {EVIL}\n",  # an attempted extra line
        f"privacy@example.com\u2028Review the request: {EVIL}",
    ],
)
def test_the_requesters_words_come_after_the_link_quoted_on_one_line(requested_by: str) -> None:
    email = build_approval_email(summary(requested_by), LINK)

    lines = email.text.splitlines()
    # the one line that offers a link is Lethe's, and it comes before the requester's words
    assert [line for line in lines if line.startswith("Review the request:")] == [
        f"Review the request: {LINK}"
    ]
    link_at = lines.index(f"Review the request: {LINK}")
    label_at = lines.index(REQUESTED_BY_LABEL)
    assert link_at < label_at
    quoted = lines[label_at + 1]
    assert quoted.startswith("> ")
    assert quoted.endswith(EVIL)
    assert [i for i, line in enumerate(lines) if "evil.example" in line] == [label_at + 1]
    # HTML: escaped, after the only anchor (the approver's own link)
    html = email.html
    assert re.findall(r'<a href="([^"]+)"', html) == [LINK.replace("&", "&amp;")]
    assert html.index('<a href="') < html.index('id="requested-by"') < html.index("evil.example")
    assert EVIL not in html  # `&` escaped
    assert EVIL.replace("&", "&amp;") in html


def test_the_email_says_who_filed_it_as_aws_authenticated_it_after_the_link() -> None:
    principal = "arn:aws:sts::123456789012:assumed-role/Clerk/clerk-1"
    email = build_approval_email(summary("privacy@example.com", principal), LINK)

    text = email.text
    assert text.startswith(f"Erasure request {RID} awaits your decision.\n")
    assert text.endswith(
        f"Review the request: {LINK}\n\n{REQUESTED_BY_LABEL}\n> privacy@example.com\n"
        f"{PRINCIPAL_LABEL}\n> {principal}\n"
    )
    assert "privacy@example.com" not in text[: text.index(LINK)]
    assert (
        email.html.index(LINK.replace("&", "&amp;"))
        < email.html.index('<q id="requested-by">privacy@example.com</q>')
        < email.html.index(f'<code id="requester-principal">{principal}</code>')
    )
    # no principal recorded (a request filed before it was): no such line
    assert PRINCIPAL_LABEL not in build_approval_email(summary("privacy@example.com"), LINK).text


def test_request_approval_emails_the_recorded_principal_after_the_link() -> None:
    world = World(
        MemoryErasureRequests(), MemoryApprovals(), RecordingMailer(), RecordingCallbacks()
    )
    body = parse_request_body({"subject_ids": [SECRET], "requested_by": "privacy@example.com"})
    caller = "arn:aws:iam::123456789012:user/clerk"
    world.requests.create(
        new_request(RID, body, hash_subjects(body, HASH_KEY, []), now=T0, principal=caller)
    )
    world.requests.transition(
        RID, ErasureStatus.REPORTED, by="workflow", updates={"report": REPORT}
    )

    ask(world)

    for mail in world.mailer.sent:
        assert mail.text.index("Review the request: https://") < mail.text.index(
            f"{REQUESTED_BY_LABEL}\n> privacy@example.com\n{PRINCIPAL_LABEL}\n> {caller}\n"
        )


# ------------------------------------------------------------------------------ four eyes

DPO_ROLE = "arn:aws:iam::123456789012:role/DpoRole"
DPO_SESSION = "arn:aws:sts::123456789012:assumed-role/DpoRole/dpo-laptop"
CLERK = "arn:aws:iam::123456789012:user/clerk"
MAPPED = ApproverPrincipals.parse(f"{DPO}={DPO_ROLE}")


def record_of(requested_by: str, principal: str) -> ErasureRequest:
    body = parse_request_body({"subject_ids": [SECRET], "requested_by": requested_by})
    return new_request(RID, body, hash_subjects(body, HASH_KEY, []), now=T0, principal=principal)


@pytest.mark.parametrize(
    ("principals", "approver", "requested_by", "principal", "is_the_requester"),
    [
        # ApproverPrincipals set, approver mapped: the recorded caller decides, whatever the text
        (MAPPED, DPO, "someone@example.com", DPO_SESSION, True),
        (MAPPED, DPO, "someone@example.com", CLERK, False),
        (MAPPED, DPO, CLERK, DPO_SESSION, True),
        # (a request naming DPO from another caller is refused at intake: check_requester)
        # ApproverPrincipals set, approver not mapped: by address only (map every approver)
        (MAPPED, CISO, "CISO@example.com", CLERK, True),
        (MAPPED, CISO, "someone@example.com", CLERK, False),
        # ApproverPrincipals empty (the default): the documented fallback, by address only
        (ApproverPrincipals(), DPO, " DPO@Example.com", CLERK, True),
        (ApproverPrincipals(), DPO, "someone@example.com", DPO_SESSION, False),
    ],
)  # fmt: skip
def test_who_counts_as_the_requester(
    principals: ApproverPrincipals,
    approver: str,
    requested_by: str,
    principal: str,
    is_the_requester: bool,
) -> None:
    record = record_of(requested_by, principal)

    assert is_requester(approver, record, principals) is is_the_requester


def test_with_principals_set_a_requester_who_writes_another_name_still_cannot_approve() -> None:
    # Given DPO's role filed the request, writing a non-approver's address as requested_by
    world = World(
        MemoryErasureRequests(), MemoryApprovals(), RecordingMailer(), RecordingCallbacks()
    )
    world.requests.create(record_of("someone@example.com", DPO_SESSION))
    world.requests.transition(
        RID, ErasureStatus.REPORTED, by="workflow", updates={"report": REPORT}
    )

    # When approval is requested with DPO mapped: DPO is not asked
    request_approval(
        RID, "task-token-1", requests=world.requests, approvals=world.approvals,
        mailer=world.mailer, approvers=APPROVERS, signing_key=SIGNING_KEY, base_url=BASE_URL,
        timeout=timedelta(hours=72), principals=MAPPED, now=T0,
    )  # fmt: skip
    assert [m.to for m in world.mailer.sent] == [CISO]

    # and without the mapping (the fallback compares the free text), DPO would have been asked:
    # the reason operators should set ApproverPrincipals
    assert not is_requester(DPO, world.record(), ApproverPrincipals())


# ------------------------------------------------------------------------------ two tabs


def test_a_page_opened_before_the_link_was_opened_again_still_decides(awaiting: World) -> None:
    link = awaiting.link_of(DPO)
    page = awaiting.page()

    first = served(page.get(http(link), now=NOW))  # tab 1: no cookie yet
    second_answer = page.get(http(link, cookie=first.cookie), now=NOW)  # tab 2, same browser
    second = served(second_answer)

    # the browser keeps its cookie (set again, same nonce) and both tabs carry one token
    assert second.cookie == first.cookie
    assert second.csrf == first.csrf
    assert second_answer.set_cookie is not None
    assert "Max-Age=" in second_answer.set_cookie
    assert_nothing_decided(awaiting)

    # tab 1 posts
    answer = page.post(http(link, cookie=second.cookie, body=form("approve", first)), now=NOW)

    assert (answer.page.status_code, answer.page.outcome) == (200, "approved")
    assert awaiting.record().approval["decision"] == "approve"


def test_a_token_of_another_link_is_refused(awaiting: World) -> None:
    mine, other = awaiting.link_of(DPO), awaiting.link_of(CISO)
    page = awaiting.page()
    shown = served(page.get(http(mine), now=NOW))
    theirs = served(page.get(http(other), now=NOW))

    # the other link's token, with this page's cookie or with the other page's cookie
    for cookie in (shown.cookie, theirs.cookie, f"{shown.cookie}; {theirs.cookie}"):
        body = form("approve", replace(shown, csrf=theirs.csrf))
        answer = page.post(http(mine, cookie=cookie, body=body), now=NOW)
        assert (answer.page.status_code, answer.page.outcome) == (400, "invalid")
        assert reason_of(answer) == "csrf"
    assert_nothing_decided(awaiting)


def test_a_malformed_or_foreign_cookie_is_not_kept(awaiting: World) -> None:
    link = awaiting.link_of(DPO)
    page = awaiting.page()

    answer = page.get(http(link, cookie=f"{CSRF_COOKIE}=short; other=x"), now=NOW)

    shown = served(answer)
    assert shown.cookie != f"{CSRF_COOKIE}=short"
    assert re.fullmatch(rf"{CSRF_COOKIE}=[A-Za-z0-9_-]{{43}}", shown.cookie)


def test_the_nonce_for_a_get_is_the_held_one_else_new() -> None:
    held = new_csrf_nonce()
    assert csrf_nonce_for(f"a=1; {CSRF_COOKIE}={held}; {CSRF_COOKIE}={new_csrf_nonce()}") == held
    assert csrf_nonce_for(f"{CSRF_COOKIE}=bad!; {CSRF_COOKIE}={held}") == held
    fresh = {csrf_nonce_for(None), csrf_nonce_for(""), csrf_nonce_for(f"{CSRF_COOKIE}=x")}
    assert len(fresh) == 3
    assert held not in fresh
    # the token stays bound to the approval id: the same nonce on another link is another token
    assert csrf_token(SIGNING_KEY, AID, held) != csrf_token(SIGNING_KEY, "B" * 32, held)
