"""The approval page: its decision form, what the approver sees, and the HTML pages.

Pure: lethe_shared.erasure.approval_flow.ApprovalPage checks the link, the CSRF token and the
code (lethe_shared.erasure.approval_links) and answers with these pages. Every value shown is
escaped; every response carries `response_headers` (a strict Content-Security-Policy, no
framing, no caching, no referrer).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import html
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal
from urllib.parse import parse_qsl, urlsplit

from pydantic import AwareDatetime, ConfigDict, Field

from lethe_shared.catalog.zones import Zone
from lethe_shared.erasure.approval_links import ApprovalError, utc_text
from lethe_shared.models import Model

MAX_FORM_BYTES = 4096

Decision = Literal["approve", "reject"]
Outcome = Literal[
    "approved",
    "rejected",
    "already-decided",
    "expired",
    "invalid",
    "not-allowed",
    "wrong-code",
    "closed",
]
DECISIONS: tuple[Decision, ...] = ("approve", "reject")


class BadFormError(ApprovalError):
    """The POST body is not the decision form (missing, unknown or repeated fields)."""


# ------------------------------------------------------------------ the decision form


class DecisionForm(Model):
    """A parsed decision POST. `csrf_token` and `confirmation` may be empty: check_csrf and
    check_code refuse those (so a form submitted without the code reads as a wrong code)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    decision: Decision
    csrf_token: str = ""
    confirmation: str = ""


_FORM_FIELDS = frozenset({"decision", "csrf_token", "confirmation"})


def _form_text(body: str | bytes | None, is_base64: bool) -> str:
    if body is None:
        raise BadFormError("the request has no body: submit the form on the confirmation page")
    raw = body.encode("utf-8") if isinstance(body, str) else body
    if is_base64:
        try:
            raw = base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise BadFormError("the request body is not valid base64") from exc
    if len(raw) > MAX_FORM_BYTES:
        raise BadFormError(f"the form is larger than {MAX_FORM_BYTES} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadFormError("the form is not UTF-8 text") from exc


def parse_decision_form(
    body: str | bytes | None, is_base64: bool, *, content_type: str | None = None
) -> DecisionForm:
    """Parse an `application/x-www-form-urlencoded` decision POST (API Gateway's `body` and
    `isBase64Encoded`). When `content_type` is given it must be that media type.

    Raises BadFormError for a missing body, a missing, unknown or repeated `decision`, an
    unexpected or repeated field, or a body that is not a URL-encoded form.
    """
    if content_type is not None:
        media_type = content_type.split(";", 1)[0].strip().lower()
        if media_type != "application/x-www-form-urlencoded":
            raise BadFormError("the form must be sent as application/x-www-form-urlencoded")
    text = _form_text(body, is_base64)
    try:
        pairs = parse_qsl(
            text,
            keep_blank_values=True,
            strict_parsing=bool(text),
            encoding="utf-8",
            errors="strict",
            max_num_fields=len(_FORM_FIELDS),
        )
    except ValueError as exc:
        raise BadFormError("the body is not a URL-encoded form with the decision fields") from exc
    fields: dict[str, str] = {}
    for name, value in pairs:
        if name not in _FORM_FIELDS:
            raise BadFormError(f"unexpected form field {_short(name)}")
        if name in fields:
            raise BadFormError(f"the form field {name!r} appears more than once")
        fields[name] = value
    decision = fields.get("decision")
    if decision is None or decision == "":
        raise BadFormError("the form has no decision: press Approve or Reject on the page")
    if decision not in DECISIONS:
        raise BadFormError(f"unknown decision {_short(decision)}: expected approve or reject")
    return DecisionForm(
        decision="approve" if decision == "approve" else "reject",
        csrf_token=fields.get("csrf_token", ""),
        confirmation=fields.get("confirmation", ""),
    )


def _short(value: str) -> str:
    return repr(value if len(value) <= 40 else value[:40] + "...")


# ------------------------------------------------------------------ what the approver sees


class DatasetCounts(Model):
    """What the erasure touches in one dataset and zone."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    dataset_id: str = Field(min_length=1, max_length=256)
    zone: Zone
    objects: int = Field(ge=0)
    versions: int = Field(ge=0)  # stored object versions to rewrite or purge
    rows: int = Field(ge=0)  # rows of the subjects, over the current versions


class NotSearchedCounts(Model):
    """Raw versions older than the request that the erasure cannot reach, per dataset and
    reason (lethe_shared.erasure.scope): the approver is told before deciding."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    dataset_id: str = Field(min_length=1, max_length=256)
    reason: str = Field(min_length=1, max_length=64)
    versions: int = Field(ge=1)


class ApprovalSummary(Model):
    """Everything an approval page and email show. It has no field for raw subject ids (nor for
    the free-text reason, which may quote them), and refuses unknown fields."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    request_id: str = Field(min_length=1, max_length=256)
    subject_count: int = Field(ge=1)
    datasets: tuple[DatasetCounts, ...]
    report_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    deadline: AwareDatetime
    requested_by: str = Field(min_length=1, max_length=256)  # free text, as the requester wrote
    approver: str = Field(min_length=1, max_length=256)  # the addressee of this link
    # the IAM caller that filed the request, as API Gateway authenticated it ("": not known)
    requester_principal: str = Field(default="", max_length=2048)
    not_searched: tuple[NotSearchedCounts, ...] = ()
    # the report's notes (report.report_notes): the datasets looked up, the subjects not looked
    # up in a dataset; counts, dataset ids and column types only
    notes: tuple[str, ...] = ()

    @property
    def total_objects(self) -> int:
        return sum(d.objects for d in self.datasets)

    @property
    def total_versions(self) -> int:
        return sum(d.versions for d in self.datasets)

    @property
    def total_rows(self) -> int:
        return sum(d.rows for d in self.datasets)

    @property
    def dataset_ids(self) -> list[str]:
        return sorted({d.dataset_id for d in self.datasets})


@dataclass(frozen=True)
class Page:
    """An HTML page and its HTTP status. `outcome` is None for the confirmation page."""

    status_code: int
    html: str
    outcome: Outcome | None = None


OUTCOME_STATUS: Mapping[Outcome, int] = {
    "approved": 200,
    "rejected": 200,
    "already-decided": 409,
    "expired": 410,
    "invalid": 400,
    "not-allowed": 403,
    "wrong-code": 422,
    "closed": 409,
}

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)


def response_headers(set_cookie: str | None = None) -> dict[str, str]:
    """Headers for every approval page response (and the one `Set-Cookie` of a GET)."""
    headers = {
        "Content-Type": "text/html; charset=utf-8",
        "Cache-Control": "no-store",
        "Content-Security-Policy": CONTENT_SECURITY_POLICY,
        "X-Frame-Options": "DENY",
        "Referrer-Policy": "no-referrer",
        "X-Content-Type-Options": "nosniff",
    }
    if set_cookie is not None:
        headers["Set-Cookie"] = set_cookie
    return headers


def counted(number: int, noun: str) -> str:
    """`1 object`, `2 objects`."""
    return f"{number} {noun}" + ("" if number == 1 else "s")


def escaped(value: object) -> str:
    """`value` as HTML text or attribute value."""
    return html.escape(str(value), quote=True)


_STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;background:#f6f7f9;
color:#1b1f24;line-height:1.45}
main{max-width:46rem;margin:2rem auto;background:#fff;padding:1.5rem 2rem;border-radius:8px;
box-shadow:0 1px 3px rgba(0,0,0,.12)}
h1{font-size:1.4rem;margin-top:0}h2{font-size:1.1rem;margin-top:1.5rem}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.3rem 1rem}dt{font-weight:600}dd{margin:0}
table{border-collapse:collapse;width:100%}
th,td{border-bottom:1px solid #dde1e6;padding:.35rem .5rem;text-align:left}
td.n,th.n{text-align:right}
.hash{font-family:ui-monospace,monospace;word-break:break-all;font-size:.9rem}
#confirmation-code{font-size:1.6rem;letter-spacing:.15em;background:#eef1f5;padding:.2rem .6rem;
border-radius:4px}
.decisions{display:flex;flex-wrap:wrap;gap:1.5rem;margin-top:1rem}
form{border:1px solid #dde1e6;border-radius:6px;padding:1rem;flex:1 1 16rem}
label{display:block;font-size:.9rem;margin-bottom:.4rem}
input[type=text]{font-size:1.2rem;letter-spacing:.1em;padding:.3rem .5rem;width:10rem;
text-transform:uppercase}
button{font-size:1rem;padding:.5rem 1rem;margin-top:.6rem;border-radius:4px;border:0;cursor:pointer}
button[value=approve]{background:#b42318;color:#fff}button[value=reject]{background:#475467;color:#fff}
#outcome{font-size:1.1rem}
.muted{color:#57606a;font-size:.9rem}
"""


def _document(title: str, body: str) -> str:
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta name="robots" content="noindex, nofollow">\n'
        f"<title>{escaped(title)}</title>\n<style>{_STYLE}</style>\n</head>\n"
        f"<body>\n<main>\n{body}\n</main>\n</body>\n</html>\n"
    )


def _summary_html(summary: ApprovalSummary) -> str:
    rows = "\n".join(
        "<tr>"
        f"<td>{escaped(d.dataset_id)}</td><td>{escaped(d.zone.value)}</td>"
        f'<td class="n">{d.objects}</td><td class="n">{d.versions}</td>'
        f'<td class="n">{d.rows}</td>'
        "</tr>"
        for d in summary.datasets
    )
    return (
        '<dl id="summary">\n'
        f'<dt>Request</dt><dd id="request-id">{escaped(summary.request_id)}</dd>\n'
        f'<dt>Requested by</dt><dd id="requested-by">{escaped(summary.requested_by)}</dd>\n'
        f'<dt>Data subjects</dt><dd id="subject-count">{summary.subject_count}</dd>\n'
        f'<dt>Objects</dt><dd id="object-count">{summary.total_objects}</dd>\n'
        f'<dt>Object versions</dt><dd id="version-count">{summary.total_versions}</dd>\n'
        f'<dt>Rows</dt><dd id="row-count">{summary.total_rows}</dd>\n'
        f'<dt>Report SHA-256</dt><dd id="report-sha256" class="hash">'
        f"{escaped(summary.report_sha256)}</dd>\n"
        f'<dt>Deadline</dt><dd id="deadline">{escaped(utc_text(summary.deadline))}</dd>\n'
        "</dl>\n"
        "<h2>Datasets</h2>\n"
        '<table id="datasets">\n<thead><tr><th>Dataset</th><th>Zone</th>'
        '<th class="n">Objects</th><th class="n">Versions</th><th class="n">Rows</th>'
        f"</tr></thead>\n<tbody>\n{rows}\n</tbody>\n</table>\n"
        + _not_searched_html(summary)
        + _notes_html(summary.notes)
    )


def _not_searched_html(summary: ApprovalSummary) -> str:
    if not summary.not_searched:
        return ""
    rows = "\n".join(
        f"<tr><td>{escaped(g.dataset_id)}</td><td>{escaped(g.reason)}</td>"
        f'<td class="n">{g.versions}</td></tr>'
        for g in summary.not_searched
    )
    return (
        '<h2 id="not-searched">Not searched</h2>\n'
        "<p>Raw uploads older than the request that this erasure cannot reach (still being "
        "ingested, unreadable or archived), and datasets whose re-index is pending (the whole "
        "dataset: its index still describes the old matching definition). Approving erases "
        "the rest; the certificate names these, and the report says what to do for each.</p>\n"
        '<table id="not-searched-table">\n<thead><tr><th>Dataset</th><th>Reason</th>'
        f'<th class="n">Versions</th></tr></thead>\n<tbody>\n{rows}\n</tbody>\n</table>\n'
    )


def _notes_html(notes: tuple[str, ...]) -> str:
    if not notes:
        return ""
    items = "\n".join(f"<li>{escaped(n)}</li>" for n in notes)
    return f'<h2>Where the subjects were looked up</h2>\n<ul id="report-notes">\n{items}\n</ul>\n'


_CODE_HELP = (
    "Type the confirmation code shown above. Email security scanners open links and may even "
    "submit forms; typing the code shows that a person read this page and made the decision."
)


def _decision_form(decision: Decision, token: str) -> str:
    label = "Approve erasure" if decision == "approve" else "Reject"
    consequence = (
        "The subjects' rows are removed from every listed object and every stored version."
        if decision == "approve"
        else "Nothing is erased and the requester is told the request was rejected."
    )
    field_id = f"confirmation-{decision}"
    return (
        f'<form method="post" id="{decision}-form" autocomplete="off">\n'
        f'<input type="hidden" name="csrf_token" value="{escaped(token)}">\n'
        f'<label for="{field_id}">{escaped(_CODE_HELP)}</label>\n'
        f'<input type="text" id="{field_id}" name="confirmation" autocomplete="off" required '
        f'maxlength="16" spellcheck="false" autocapitalize="characters" inputmode="text">\n'
        f'<p class="muted">{escaped(consequence)}</p>\n'
        f'<button type="submit" name="decision" value="{decision}">{escaped(label)}</button>\n'
        "</form>"
    )


def render_confirmation_page(summary: ApprovalSummary, *, code: str, csrf: str) -> Page:
    """The GET page: what will be erased, the confirmation code and the two decision forms.

    `code` is `confirmation_code(key, approval_id)`; `csrf` is `csrf_token(key, approval_id,
    nonce)` for the nonce of the `Set-Cookie` sent with this page. Changes nothing.
    """
    body = (
        f"<h1>Erasure request {escaped(summary.request_id)} awaits your decision</h1>\n"
        f"<p>{escaped(summary.requested_by)} asked Lethe to erase the personal data of "
        f"{counted(summary.subject_count, 'data subject')} "
        f"from {counted(len(summary.dataset_ids), 'dataset')}"
        f". This link was sent to {escaped(summary.approver)}. "
        "Opening this page decided nothing.</p>\n"
        + _summary_html(summary)
        + "<h2>Your decision</h2>\n"
        f'<p>Confirmation code: <code id="confirmation-code">{escaped(code)}</code></p>\n'
        f"<p>Decide before {escaped(utc_text(summary.deadline))}. Without a decision by then the "
        "request expires and nothing is erased.</p>\n"
        '<div class="decisions">\n'
        + _decision_form("approve", csrf)
        + "\n"
        + _decision_form("reject", csrf)
        + "\n</div>\n"
    )
    return Page(200, _document(f"Erasure request {summary.request_id}", body))


def _result(outcome: Outcome, title: str, message: str, extra: str = "", reason: str = "") -> Page:
    reason_attr = f' data-reason="{escaped(reason)}"' if reason else ""
    body = (
        f"<h1>{escaped(title)}</h1>\n"
        f'<p id="outcome" data-outcome="{outcome}"{reason_attr}>{message}</p>\n{extra}'
    )
    return Page(OUTCOME_STATUS[outcome], _document(title, body), outcome)


def render_decided_page(
    decision: Decision,
    *,
    request_id: str,
    decided_by: str,
    decided_at: dt.datetime,
    pending: bool = False,
) -> Page:
    """The decision was recorded (the caller's conditional write succeeded). `pending`: handing
    it to the waiting workflow failed for now (it is handed over again later)."""
    when = escaped(utc_text(decided_at))
    reason = "delivery-pending" if pending else ""
    later = (
        " It is recorded, but could not be handed to the erasure workflow yet: it is handed "
        "over again when this form is submitted again or the request's status is read."
        if pending
        else ""
    )
    if decision == "approve":
        return _result(
            "approved",
            "Erasure approved",
            f"{escaped(decided_by)} approved erasure request {escaped(request_id)} at {when}. "
            + (later.strip() if pending else "The erasure starts now; the requester is notified "
               "when it completes."),
            reason=reason,
        )  # fmt: skip
    return _result(
        "rejected",
        "Erasure rejected",
        f"{escaped(decided_by)} rejected erasure request {escaped(request_id)} at {when}. "
        "Nothing will be erased; the requester is notified." + later,
        reason=reason,
    )


def render_already_decided_page(
    decision: Decision,
    *,
    request_id: str,
    decided_by: str,
    decided_at: dt.datetime | None = None,
) -> Page:
    """Someone (this approver or another) decided before: this POST changed nothing."""
    verb = "approved" if decision == "approve" else "rejected"
    when = f" at {escaped(utc_text(decided_at))}" if decided_at is not None else ""
    return _result(
        "already-decided",
        "Already decided",
        f"Erasure request {escaped(request_id)} was already {verb} by {escaped(decided_by)}{when}. "
        "Nothing was changed.",
    )


def render_expired_page(deadline: dt.datetime | None = None, request_id: str | None = None) -> Page:
    """The link's (or the request's) deadline has passed."""
    what = f"erasure request {escaped(request_id)}" if request_id else "this erasure request"
    when = f" at {escaped(utc_text(deadline))}" if deadline is not None else ""
    return _result(
        "expired",
        "Link expired",
        f"The approval link for {what} expired{when} and can no longer decide anything. "
        "A request nobody decides before its deadline expires, and nothing is erased.",
    )


def render_invalid_page(reason: str, *, kind: str = "link") -> Page:
    """A forged or malformed link (`kind="link"`), a bad form (`"form"`) or a CSRF refusal
    (`"csrf"`): `data-reason` carries `kind`."""
    title = {
        "link": "Invalid approval link",
        "form": "Invalid form",
        "csrf": "Form not accepted",
    }.get(kind, "Not accepted")
    return _result(
        "invalid",
        title,
        f"{escaped(_sentence(reason))} Nothing was decided. Open the link from your email again.",
        reason=kind,
    )


def _sentence(text: str) -> str:
    text = text.strip().rstrip(".")
    return (text[:1].upper() + text[1:] + ".") if text else "Not accepted."


def render_not_allowed_page(reason: str) -> Page:
    """The person may not decide this request (not a configured approver, or the requester)."""
    return _result(
        "not-allowed",
        "Not allowed",
        f"{escaped(_sentence(reason))} Nothing was decided.",
        reason="forbidden",
    )


def _safe_href(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in {"", "https", "http"} or (not parts.scheme and parts.netloc):
        raise ValueError("a link on the page must be an http(s) URL or a relative reference")
    return url


def render_wrong_code_page(retry_url: str) -> Page:
    """The typed code is missing or wrong. `retry_url` reopens the confirmation page: the signed
    link, or its relative form `?e=...&s=...` (the POST goes to the link's own URL)."""
    href = escaped(_safe_href(retry_url))
    return _result(
        "wrong-code",
        "Wrong confirmation code",
        "The confirmation code you typed does not match the code on the page. Nothing was decided.",
        f'<p><a id="retry" href="{href}">Open the confirmation page again</a> and type the '
        "code it shows.</p>\n",
    )


def render_closed_page(*, request_id: str, status: str) -> Page:
    """The request no longer awaits approval (cancelled, failed, or already past this step)."""
    return _result(
        "closed",
        "No longer awaiting approval",
        f"Erasure request {escaped(request_id)} is no longer awaiting approval (status "
        f"{escaped(status)}). Nothing was decided.",
    )
