"""The approval step with its state: emailing the approvers, and the page they decide on.

`request_approval` runs as the workflow's `.waitForTaskToken` task: it keeps the task token on
the request record, sealed with the task token key (lethe_shared.erasure.task_tokens: nobody
who can read the table or its index can use it), creates one signed link per configured approver
(never the requester), and emails each approver their own link. `ApprovalPage` answers the
link: a GET renders the confirmation page and changes nothing; a POST checks the link, the
form, the CSRF token, who decides and the typed code, in that order (the pure checks and pages
are lethe_shared.erasure.approval_links, approval_pages and approval_email), then applies the
decision exactly once with a conditional transition of the request, and only then hands the
decision to the waiting workflow through the task token (`deliver_decision`, on
lethe_shared.erasure.task_callbacks).

The token stays on the record until the decision was handed over: a SendTaskSuccess or
SendTaskFailure that fails (throttling, a network error) is retried DELIVERY_ATTEMPTS times,
and a decision still not handed over is handed over again by the next POST of an approval link
of the request and by the erasure API's GET of it. Handing it over twice is harmless: it is the
one recorded decision, and Step Functions takes only the first answer for a token (a later one
finds the task gone, which also settles it).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage
from typing import Any, Protocol

from pydantic import Field, model_validator

from lethe_shared.catalog.zones import Zone
from lethe_shared.config import CommaList, Settings
from lethe_shared.erasure.approval_email import build_approval_email
from lethe_shared.erasure.approval_links import (
    ApprovalError,
    CsrfError,
    LinkExpiredError,
    LinkForgedError,
    approval_path,
    check_code,
    check_csrf,
    confirmation_code,
    csrf_cookie,
    csrf_nonce_for,
    csrf_token,
    new_approval_id,
    sign_link,
    verify_link,
)
from lethe_shared.erasure.approval_pages import (
    ApprovalSummary,
    BadFormError,
    DatasetCounts,
    Decision,
    NotSearchedCounts,
    Page,
    parse_decision_form,
    render_already_decided_page,
    render_closed_page,
    render_confirmation_page,
    render_decided_page,
    render_expired_page,
    render_invalid_page,
    render_not_allowed_page,
    render_wrong_code_page,
)
from lethe_shared.erasure.decision_delivery import (  # re-exported
    DELIVERY_ATTEMPTS as DELIVERY_ATTEMPTS,  # noqa: PLC0414
)
from lethe_shared.erasure.decision_delivery import (
    DELIVERY_PAUSE_SECONDS as DELIVERY_PAUSE_SECONDS,  # noqa: PLC0414
)
from lethe_shared.erasure.decision_delivery import (
    deliver_decision,
)
from lethe_shared.erasure.decision_delivery import (
    pending_delivery as pending_delivery,  # noqa: PLC0414
)
from lethe_shared.erasure.principals import ApproverPrincipals, ApproverPrincipalsSetting
from lethe_shared.erasure.requests import (
    ApprovalLink,
    Approvals,
    ErasureRequest,
    ErasureRequests,
    ErasureStatus,
    InvalidTransitionError,
    RequestClosedError,
)
from lethe_shared.erasure.task_callbacks import TaskCallbacks, TaskGoneError
from lethe_shared.erasure.task_tokens import TokenSealer
from lethe_shared.errors import LetheError

LOG = logging.getLogger("lethe.approval")
LINK_RECORD_DAYS = 30  # approval link records stay this long after their deadline (TTL)
CSRF_MAX_AGE = 12 * 3600


class ApproversSettingsBase(Settings):
    """Who may decide, for the functions that ask and answer approvers: the addresses
    (`ApproverEmails`) and the IAM principals they file requests as (`ApproverPrincipals`,
    lethe_shared.erasure.principals), every mapped address a configured approver."""

    approvers: CommaList = Field(alias="APPROVER_EMAILS", min_length=1)
    approver_principals: ApproverPrincipalsSetting = Field(alias="APPROVER_PRINCIPALS")

    @model_validator(mode="after")
    def _mapped_addresses_are_approvers(self) -> ApproversSettingsBase:
        unknown = self.approver_principals.unknown(self.approvers)
        if unknown:
            raise ValueError(
                "APPROVER_PRINCIPALS maps addresses that are not in APPROVER_EMAILS: "
                + ", ".join(unknown)
            )
        return self


class NoApproverError(LetheError):
    """No configured approver may decide this request (the requester is the only one)."""


class Mailer(Protocol):
    def send(self, to: str, subject: str, text: str, html: str) -> None: ...


@dataclass(frozen=True)
class SesMailer:
    """Mailer on SES: one multipart/alternative message (text and HTML) per approver, sent raw
    so that both parts reach the approver (and the local cloud's capture) as written. With a
    configuration set (template.yaml SesConfigurationSet), SES publishes the message's bounces
    and complaints to the notifications topic."""

    client: Any  # a boto3 SES client
    sender: str
    configuration_set: str = ""

    def send(self, to: str, subject: str, text: str, html: str) -> None:
        message = EmailMessage()
        message["From"] = self.sender
        message["To"] = to
        message["Subject"] = subject
        message.set_content(text)
        message.add_alternative(html, subtype="html")
        extra = {"ConfigurationSetName": self.configuration_set} if self.configuration_set else {}
        self.client.send_raw_email(
            Source=self.sender,
            Destinations=[to],
            RawMessage={"Data": message.as_bytes()},
            **extra,
        )


def _same_person(a: str, b: str) -> bool:
    return a.strip().casefold() == b.strip().casefold()


def is_requester(approver: str, record: ErasureRequest, principals: ApproverPrincipals) -> bool:
    """Whether `approver` filed the request: by the address the request names, or (the
    authenticated part) by the IAM principal that filed it (lethe_shared.erasure.principals)."""
    return _same_person(approver, record.requested_by) or principals.filed_by(
        approver, record.requester_principal
    )


def _summary(record: ErasureRequest, approver: str, deadline: datetime) -> ApprovalSummary:
    report = record.report
    return ApprovalSummary(
        request_id=record.request_id,
        subject_count=record.subject_count,
        datasets=tuple(
            DatasetCounts(
                dataset_id=d["dataset_id"],
                zone=Zone(d["zone"]),
                objects=d["objects"],
                versions=d["versions"],
                rows=d["rows"],
            )
            for d in report.get("datasets", [])
        ),
        report_sha256=report["manifest_sha256"],
        deadline=deadline,
        requested_by=record.requested_by,
        requester_principal=record.requester_principal,
        approver=approver,
        not_searched=tuple(
            NotSearchedCounts(
                dataset_id=g["dataset_id"], reason=g["reason"], versions=g["versions"]
            )
            for g in report.get("not_searched", [])
        ),
        notes=tuple(report.get("notes", ())),
    )


def request_approval(
    request_id: str,
    task_token: str,
    *,
    requests: ErasureRequests,
    approvals: Approvals,
    mailer: Mailer,
    approvers: Sequence[str],
    signing_key: bytes,
    base_url: str,
    timeout: timedelta,
    principals: ApproverPrincipals | None = None,
    tokens: TokenSealer | None = None,
    now: datetime | None = None,
) -> list[ApprovalLink]:
    """Keep the task token (sealed by `tokens`; None: as it is, for tests), create each
    approver's link and email it; the request becomes
    AWAITING_APPROVAL with the deadline (the task's timeout). The requester (is_requester) is
    never asked. Raises RequestClosedError when the request was cancelled meanwhile,
    NoApproverError when nobody may decide."""
    at = now or datetime.now(UTC)
    record = requests.get(request_id)
    if record is None or record.terminal:
        raise RequestClosedError(f"request {request_id} is closed")
    distinct = {a.strip().casefold(): a.strip() for a in approvers if a.strip()}  # one each
    known = principals or ApproverPrincipals()
    allowed = [a for a in distinct.values() if not is_requester(a, record, known)]
    if not allowed:
        raise NoApproverError(
            f"request {request_id}: no configured approver other than the requester (by "
            "address or by the IAM principal that filed it)"
        )
    deadline = (at + timeout).replace(microsecond=0)
    links = [
        ApprovalLink(
            approval_id=new_approval_id(),
            request_id=request_id,
            approver=approver,
            deadline=int(deadline.timestamp()),
            created_at=at.isoformat(),
            expires_at=int((deadline + timedelta(days=LINK_RECORD_DAYS)).timestamp()),
        )
        for approver in allowed
    ]
    for link in links:
        approvals.put(link)
    record = requests.transition(
        request_id,
        ErasureStatus.AWAITING_APPROVAL,
        by="workflow",
        detail=f"{len(links)} approver(s) emailed; deadline {deadline.isoformat()}",
        allowed_from=frozenset({ErasureStatus.REPORTED, ErasureStatus.AWAITING_APPROVAL}),
        updates={
            "task_token": tokens.seal(task_token) if tokens is not None else task_token,
            "approval": {
                "deadline": deadline.isoformat(),
                "approvers": [link.approver for link in links],
                "requested_at": at.isoformat(),
                # what `resend_approval` emails again (never shown: ErasureRequest.public)
                "links": [
                    {"approval_id": link.approval_id, "approver": link.approver} for link in links
                ],
            },
        },
    )
    for link in links:
        email = build_approval_email(
            _summary(record, link.approver, deadline),
            sign_link(signing_key, base_url, link.approval_id, link.deadline),
        )
        mailer.send(link.approver, email.subject, email.text, email.html)
    LOG.info("approval requested from %d approver(s)", len(links))
    return links


class ResendRefusedError(LetheError):
    """The request has no approval email that may be sent again (the message says why and what
    to do); nothing was sent or changed."""


RESENT_BY = "lethe erasure resend"


def resend_approval(
    request_id: str,
    *,
    requests: ErasureRequests,
    mailer: Mailer,
    approvers: Sequence[str],
    signing_key: bytes,
    base_url: str,
    principals: ApproverPrincipals | None = None,
    only: str = "",
    now: datetime | None = None,
) -> list[str]:
    """Email each approver of a request AWAITING_APPROVAL (or `only` that one) the link they were
    sent, again; the addresses emailed.

    The same link: the approval id recorded when the approval was requested (`approval.links`),
    signed for the same deadline, so its confirmation code is the same too. Nothing new is
    created: no new link, no longer deadline, no new task token; a link that is still valid stays
    the only valid one per approver, and sending it twice (a retried command) is harmless. An
    approver who is no longer configured, or who filed the request, is never emailed (as
    `request_approval`). The resend is recorded in the history (a conditional transition
    AWAITING_APPROVAL -> AWAITING_APPROVAL for the same deadline) before anything is sent.
    Raises RequestNotFoundError; ResendRefusedError for a request not AWAITING_APPROVAL, past its
    deadline, whose links were not recorded (emailed by an older Lethe), or when nobody may be
    emailed."""
    from lethe_shared.erasure.requests import RequestNotFoundError  # noqa: PLC0415

    at = now or datetime.now(UTC)
    record = requests.get(request_id)
    if record is None:
        raise RequestNotFoundError(f"no erasure request {request_id}")
    if record.status is not ErasureStatus.AWAITING_APPROVAL:
        raise ResendRefusedError(
            f"request {request_id} is {record.status.value}: only a request AWAITING_APPROVAL "
            "has an approval email to send again"
        )
    deadline_text = str(record.approval.get("deadline", ""))
    deadline = datetime.fromisoformat(deadline_text)
    if at >= deadline:
        raise ResendRefusedError(
            f"request {request_id}'s approval deadline ({deadline_text}) has passed: it expires; "
            "file a new request"
        )
    recorded = [
        link
        for link in record.approval.get("links") or []
        if isinstance(link, Mapping) and link.get("approval_id") and link.get("approver")
    ]
    if not recorded:
        raise ResendRefusedError(
            f"request {request_id}'s approval links were emailed by an older Lethe that did not "
            "record them: cancel it (`lethe erasure cancel ID`) and file it again"
        )
    known = principals or ApproverPrincipals()
    chosen = [
        link
        for link in recorded
        if any(_same_person(str(link["approver"]), a) for a in approvers)
        and not is_requester(str(link["approver"]), record, known)
        and (not only or _same_person(str(link["approver"]), only))
    ]
    if not chosen:
        raise ResendRefusedError(
            f"{only} is not an approver of request {request_id}"
            if only
            else f"no approver of request {request_id} is still configured"
        )
    requests.transition(
        request_id,
        ErasureStatus.AWAITING_APPROVAL,
        by=RESENT_BY,
        detail=f"approval email sent again to {len(chosen)} approver(s); deadline unchanged",
        allowed_from=frozenset({ErasureStatus.AWAITING_APPROVAL}),
        require={"approval.deadline": deadline_text},
    )
    epoch = int(deadline.timestamp())
    for link in chosen:
        approver = str(link["approver"])
        email = build_approval_email(
            _summary(record, approver, deadline),
            sign_link(signing_key, base_url, str(link["approval_id"]), epoch),
        )
        mailer.send(approver, email.subject, email.text, email.html)
    LOG.info("approval email sent again to %d approver(s)", len(chosen))
    return [str(link["approver"]) for link in chosen]


@dataclass(frozen=True)
class HttpRequest:
    """The parts of an API Gateway proxy request the page needs."""

    approval_id: str
    query: Mapping[str, str]
    cookie: str | None
    body: str | None = None
    is_base64: bool = False
    content_type: str | None = None
    secure: bool = True  # https: always on API Gateway; the local cloud serves http
    public_path: str | None = None  # requestContext.path (with the stage), for the cookie


@dataclass(frozen=True)
class HttpAnswer:
    page: Page
    set_cookie: str | None = None


@dataclass(frozen=True)
class ApprovalPage:
    requests: ErasureRequests
    approvals: Approvals
    callbacks: TaskCallbacks
    signing_key: bytes
    approvers: Sequence[str]
    principals: ApproverPrincipals = field(default_factory=ApproverPrincipals)

    def _link(self, request: HttpRequest, now: datetime) -> ApprovalLink:
        """The approval record of an authentic, unexpired link. Raises ApprovalError."""
        verify_link(
            self.signing_key,
            request.approval_id,
            request.query.get("e"),
            request.query.get("s"),
            now,
        )
        link = self.approvals.get(request.approval_id)
        if link is None:
            raise LinkForgedError("no such approval")
        if now.timestamp() >= link.deadline:
            raise LinkExpiredError(datetime.fromtimestamp(link.deadline, UTC))
        return link

    def _closed(self, record: ErasureRequest) -> Page | None:
        """The page for a request that no longer awaits this decision, if it does not."""
        if record.status in (
            ErasureStatus.APPROVED,
            ErasureStatus.REJECTED,
        ) and record.approval.get("decision"):
            decided_at = record.approval.get("decided_at")
            return render_already_decided_page(
                "approve" if record.approval["decision"] == "approve" else "reject",
                request_id=record.request_id,
                decided_by=str(record.approval.get("decided_by", "")),
                decided_at=datetime.fromisoformat(decided_at) if decided_at else None,
            )
        if record.status is ErasureStatus.EXPIRED:
            return render_expired_page(request_id=record.request_id)
        if record.status is not ErasureStatus.AWAITING_APPROVAL:
            return render_closed_page(request_id=record.request_id, status=record.status.value)
        return None

    def _allowed(self, link: ApprovalLink, record: ErasureRequest) -> Page | None:
        if not any(_same_person(link.approver, a) for a in self.approvers):
            return render_not_allowed_page("this address is no longer a configured approver")
        if is_requester(link.approver, record, self.principals):
            return render_not_allowed_page("the requester cannot approve their own request")
        return None

    def _record(self, link: ApprovalLink) -> ErasureRequest:
        record = self.requests.get(link.request_id)
        if record is None:
            raise LinkForgedError("the request of this approval does not exist")
        return record

    def get(self, request: HttpRequest, now: datetime | None = None) -> HttpAnswer:
        """The confirmation page (and its CSRF cookie: the nonce the browser already holds for
        this page, else a new one, so a page opened in another tab stays valid). Changes
        nothing."""
        at = now or datetime.now(UTC)
        try:
            link = self._link(request, at)
        except ApprovalError as exc:
            return HttpAnswer(_refusal(exc))
        record = self._record(link)
        refusal = self._closed(record) or self._allowed(link, record)
        if refusal is not None:
            return HttpAnswer(refusal)
        nonce = csrf_nonce_for(request.cookie)
        deadline = datetime.fromtimestamp(link.deadline, UTC)
        page = render_confirmation_page(
            _summary(record, link.approver, deadline),
            code=confirmation_code(self.signing_key, link.approval_id),
            csrf=csrf_token(self.signing_key, link.approval_id, nonce),
        )
        cookie = csrf_cookie(
            nonce,
            link.approval_id,
            secure=request.secure,
            max_age=max(1, min(CSRF_MAX_AGE, int(link.deadline - at.timestamp()))),
            path=request.public_path or approval_path(link.approval_id),
        )
        return HttpAnswer(page, cookie)

    def post(self, request: HttpRequest, now: datetime | None = None) -> HttpAnswer:
        """Apply a decision exactly once, or answer why not. Every refusal changes nothing."""
        at = now or datetime.now(UTC)
        try:
            link = self._link(request, at)
            form = parse_decision_form(
                request.body, request.is_base64, content_type=request.content_type
            )
            check_csrf(self.signing_key, link.approval_id, request.cookie, form.csrf_token)
        except ApprovalError as exc:
            return HttpAnswer(_refusal(exc))
        record = self._record(link)
        if pending_delivery(record):  # decided, not yet handed over: hand it over again
            try:
                deliver_decision(record, requests=self.requests, callbacks=self.callbacks)
            except TaskGoneError:
                LOG.warning("request %s: the approval task ended undelivered", record.request_id)
        refusal = self._closed(record) or self._allowed(link, record)
        if refusal is not None:
            return HttpAnswer(refusal)
        if not check_code(form.confirmation, confirmation_code(self.signing_key, link.approval_id)):
            retry = (request.public_path or approval_path(link.approval_id)) + (
                f"?e={request.query.get('e', '')}&s={request.query.get('s', '')}"
            )
            return HttpAnswer(render_wrong_code_page(retry))
        return HttpAnswer(self._decide(link, record, form.decision, at))

    def _decide(
        self, link: ApprovalLink, record: ErasureRequest, decision: Decision, at: datetime
    ) -> Page:
        target = ErasureStatus.APPROVED if decision == "approve" else ErasureStatus.REJECTED
        try:  # the token stays until the decision is handed over (deliver_decision)
            decided = self.requests.transition(
                record.request_id,
                target,
                by=link.approver,
                detail=f"{decision} on the approval page",
                allowed_from=frozenset({ErasureStatus.AWAITING_APPROVAL}),
                updates={
                    "approval": {
                        **record.approval,
                        "decision": decision,
                        "decided_by": link.approver,
                        "decided_at": at.isoformat(),
                        "approval_id": link.approval_id,
                        # the report decided on: a resume runs only this one (erasure.resume)
                        "report_sha256": str(record.report.get("manifest_sha256", "")),
                    }
                },
            )
        except InvalidTransitionError:  # another approver (or a cancel) was first
            current = self._record(link)
            return self._closed(current) or render_closed_page(
                request_id=current.request_id, status=current.status.value
            )
        try:
            handed = deliver_decision(decided, requests=self.requests, callbacks=self.callbacks)
        except TaskGoneError:  # the approval task timed out as the decision arrived
            LOG.warning("request %s: the decision came after the deadline", record.request_id)
            return render_expired_page(request_id=record.request_id)
        LOG.info("request %s: %s by an approver", record.request_id, decision)
        return render_decided_page(
            decision,
            request_id=record.request_id,
            decided_by=link.approver,
            decided_at=at,
            pending=not handed,
        )


def _refusal(exc: ApprovalError) -> Page:
    if isinstance(exc, LinkExpiredError):
        return render_expired_page(exc.deadline)
    if isinstance(exc, CsrfError):
        return render_invalid_page(str(exc), kind="csrf")
    if isinstance(exc, BadFormError):
        return render_invalid_page(str(exc), kind="form")
    return render_invalid_page(str(exc))
