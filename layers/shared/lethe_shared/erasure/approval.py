"""The approval step's pure parts: signed links, confirmation codes, CSRF, forms and pages.

No AWS calls and no environment reads: the approval page handler owns the key (Secrets
Manager), the clock, the approval record in DynamoDB and the task token, and calls these
functions. ARCHITECTURE.md, decision 7 and the *required* approval page contract.

What this module enforces:
- a link is `{base_url}/approvals/{approval_id}?e={expires}&s={signature}`, one per approver;
  the signature is an HMAC-SHA256 of `"{approval_id}.{expires}"` under the approval key, so an
  id or an expiry cannot be changed or invented without the key (`verify_link`);
- a `GET` renders a confirmation page and decides nothing (mail scanners open every link);
- a decision is a `POST` of a form that carries a CSRF token bound to the approval id and to a
  random nonce held in an HttpOnly, SameSite=Strict cookie scoped to the approval's path
  (signed double submit, `check_csrf`), so another site cannot post it in the approver's name;
- the form must also carry the confirmation code shown on the page, typed by a person
  (`check_code`). The code is not a secret from whoever holds the link (the page shows it): it
  proves that someone read the page and typed, which scanners that submit forms do not do.

What the caller enforces (the handler, with its stored approval record):
- single use: apply a decision with a DynamoDB conditional write (status still awaiting and
  this approval id undecided), and show `render_already_decided_page` when the condition fails;
- who may decide: the approver must still be in the configured allow-list and must not be the
  requester, checked at POST time (`render_not_allowed_page`);
- the request must still await approval (`render_closed_page` for cancelled or failed ones);
- the deadline itself is carried by the signed link, but a stored deadline (the task timeout)
  wins: check it as well;
- the Step Functions task token never leaves the server; send SendTaskSuccess/Failure only
  after the conditional write succeeded.

Order of checks on POST: verify_link -> parse_decision_form -> check_csrf -> load the record ->
status/allow-list -> check_code -> conditional write -> task token. Every failure changes nothing.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hashlib
import hmac
import html
import re
import secrets
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal
from urllib.parse import parse_qsl, urlencode, urlsplit

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from lethe_shared.catalog.object_catalog import Zone
from lethe_shared.errors import LetheError

KEY_MIN_BYTES = 32
APPROVAL_ID_BYTES = 24  # 192 bits from secrets.token_urlsafe: 32 characters
CODE_ALPHABET = "23456789ABCDEFGHJKMNPQRSTVWXYZ"  # no 0/O, 1/I/L, U
CODE_LENGTH = 6
CSRF_COOKIE = "lethe_csrf"
CSRF_NONCE_BYTES = 32
DEFAULT_CSRF_MAX_AGE = 12 * 3600
MAX_FORM_BYTES = 4096
MAX_CODE_INPUT = 64

_APPROVAL_ID = re.compile(r"^[A-Za-z0-9_-]{22,128}$")
_NONCE = re.compile(r"^[A-Za-z0-9_-]{22,128}$")
_EXPIRES = re.compile(r"^(?:0|[1-9][0-9]{0,11})$")
_COOKIE_PATH = re.compile(r"^/[A-Za-z0-9._~!$&'()*+,=:@%/-]*$")
_CODE_SEPARATORS = re.compile(r"[\s\-\u2010-\u2015\u2212_.]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")

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


# ------------------------------------------------------------------ errors


class ApprovalError(LetheError):
    """A link, form or CSRF check refused a request; nothing was decided."""


class LinkForgedError(ApprovalError):
    """The link's approval id, expiry or signature is malformed or does not verify."""


class LinkExpiredError(ApprovalError):
    """The link is authentic but its deadline has passed."""

    def __init__(self, deadline: dt.datetime) -> None:
        self.deadline = deadline
        super().__init__(f"the approval link expired at {_utc_text(deadline)}")


class CsrfError(ApprovalError):
    """The POST lacks the CSRF cookie or token, or they do not agree."""


class BadFormError(ApprovalError):
    """The POST body is not the decision form (missing, unknown or repeated fields)."""


# ------------------------------------------------------------------ keys and ids


def _check_key(key: bytes) -> None:
    if len(key) < KEY_MIN_BYTES:
        raise ValueError(f"the approval signing key must have at least {KEY_MIN_BYTES} bytes")


def _mac(key: bytes, message: str) -> bytes:
    _check_key(key)
    return hmac.new(key, message.encode("utf-8"), hashlib.sha256).digest()


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode("utf-8"), b.encode("utf-8"))


def is_approval_id(value: str) -> bool:
    """Whether `value` has the shape of an approval id (URL-safe base64, 22 to 128 characters)."""
    return bool(_APPROVAL_ID.match(value))


def _require_approval_id(approval_id: str) -> None:
    if not is_approval_id(approval_id):
        raise ValueError("an approval id is 22 to 128 URL-safe base64 characters")


def new_approval_id() -> str:
    """A fresh opaque approval id (192 random bits), one per approver and request."""
    return secrets.token_urlsafe(APPROVAL_ID_BYTES)


# ------------------------------------------------------------------ signed links


def _epoch(expires: dt.datetime | int) -> int:
    if isinstance(expires, dt.datetime):
        if expires.tzinfo is None:
            raise ValueError("the deadline must be timezone-aware")
        return int(expires.timestamp())
    if expires < 0:
        raise ValueError("the expiry is a non-negative epoch second")
    return expires


def link_signature(key: bytes, approval_id: str, expires: dt.datetime | int) -> str:
    """base64url (no padding) of HMAC-SHA256(key, "{approval_id}.{expires}")."""
    _require_approval_id(approval_id)
    return _b64url(_mac(key, f"{approval_id}.{_epoch(expires)}"))


def approval_path(approval_id: str) -> str:
    """The page's path under the API: `/approvals/{approval_id}`."""
    _require_approval_id(approval_id)
    return f"/approvals/{approval_id}"


def sign_link(key: bytes, base_url: str, approval_id: str, expires: dt.datetime | int) -> str:
    """The approver's link. `base_url` is the API's public URL including any stage
    (`https://abc.execute-api.eu-west-1.amazonaws.com/Prod`); `expires` is the deadline."""
    parts = urlsplit(base_url)
    if parts.scheme not in {"https", "http"} or not parts.netloc or parts.query or parts.fragment:
        raise ValueError("base_url must be an http(s) URL without query or fragment")
    epoch = _epoch(expires)
    query = urlencode({"e": str(epoch), "s": link_signature(key, approval_id, epoch)})
    return f"{base_url.rstrip('/')}{approval_path(approval_id)}?{query}"


def verify_link(
    key: bytes,
    approval_id: str,
    expires: str | int | None,
    signature: str | None,
    now: dt.datetime,
) -> dt.datetime:
    """Check a link's parts (path id, `e`, `s`) and return its deadline (UTC).

    Raises LinkForgedError when a part is missing, malformed or the signature does not verify
    (checked before the expiry, so a forged link never reads as merely expired), and
    LinkExpiredError when `now` is at or past the deadline.
    """
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    if not is_approval_id(approval_id):
        raise LinkForgedError("the link's approval id is malformed")
    if expires is None or signature is None or signature == "":
        raise LinkForgedError("the link lacks its expiry or signature")
    if isinstance(expires, str):
        if not _EXPIRES.match(expires):
            raise LinkForgedError("the link's expiry is malformed")
        epoch = int(expires)
    elif isinstance(expires, int) and not isinstance(expires, bool) and expires >= 0:
        epoch = expires
    else:
        raise LinkForgedError("the link's expiry is malformed")
    expected = link_signature(key, approval_id, epoch)
    if not _same(expected, signature):
        raise LinkForgedError("the link's signature does not verify")
    deadline = dt.datetime.fromtimestamp(epoch, dt.UTC)
    if now >= deadline:
        raise LinkExpiredError(deadline)
    return deadline


# ------------------------------------------------------------------ confirmation code


def confirmation_code(key: bytes, approval_id: str) -> str:
    """The code the approver types, as shown: six characters in two groups (`ABC-234`).

    Derived from HMAC(key, "code." + approval_id), so a GET computes it without a write.
    """
    _require_approval_id(approval_id)
    number = int.from_bytes(_mac(key, f"code.{approval_id}"), "big")
    chars = []
    for _ in range(CODE_LENGTH):
        number, index = divmod(number, len(CODE_ALPHABET))
        chars.append(CODE_ALPHABET[index])
    half = CODE_LENGTH // 2
    return "".join(chars[:half]) + "-" + "".join(chars[half:])


def normalize_code(typed: str) -> str:
    """Upper case, without spaces, hyphens, dashes, dots or underscores (NFKC first, so
    full-width characters count as their ASCII forms)."""
    return _CODE_SEPARATORS.sub("", unicodedata.normalize("NFKC", typed)).upper()


def check_code(typed: str | None, expected: str) -> bool:
    """Whether the typed code is the expected one, whatever its case, spaces or hyphens."""
    if not typed or len(typed) > MAX_CODE_INPUT:
        return False
    want = normalize_code(expected)
    return bool(want) and _same(normalize_code(typed), want)


# ------------------------------------------------------------------ CSRF (signed double submit)


def new_csrf_nonce() -> str:
    """A fresh random nonce for the CSRF cookie (one per GET)."""
    return secrets.token_urlsafe(CSRF_NONCE_BYTES)


def csrf_token(key: bytes, approval_id: str, nonce: str) -> str:
    """The form's hidden `csrf_token`: HMAC(key, "csrf.{approval_id}.{nonce}"), base64url."""
    _require_approval_id(approval_id)
    if not _NONCE.match(nonce):
        raise ValueError("a CSRF nonce is 22 to 128 URL-safe base64 characters")
    return _b64url(_mac(key, f"csrf.{approval_id}.{nonce}"))


def csrf_cookie(
    nonce: str,
    approval_id: str,
    *,
    secure: bool,
    max_age: int = DEFAULT_CSRF_MAX_AGE,
    path: str | None = None,
) -> str:
    """The `Set-Cookie` header value that carries the nonce.

    `path` defaults to `/approvals/{approval_id}`. Behind an API Gateway stage the public path
    has the stage in front (`/Prod/approvals/...`): pass the request's public path (the
    proxy event's `requestContext.path`), or the browser will not send the cookie back.
    `secure` is true when the request came over https (always, on API Gateway).
    """
    _require_approval_id(approval_id)
    if not _NONCE.match(nonce):
        raise ValueError("a CSRF nonce is 22 to 128 URL-safe base64 characters")
    if max_age < 1:
        raise ValueError("max_age must be at least one second")
    cookie_path = approval_path(approval_id) if path is None else path
    if not _COOKIE_PATH.match(cookie_path) or not cookie_path.endswith(approval_path(approval_id)):
        raise ValueError("the cookie path must be the approval page's path")
    attributes = [
        f"{CSRF_COOKIE}={nonce}",
        "HttpOnly",
        "SameSite=Strict",
        f"Path={cookie_path}",
        f"Max-Age={max_age}",
    ]
    if secure:
        attributes.append("Secure")
    return "; ".join(attributes)


def cookie_values(cookie_header: str | None, name: str) -> list[str]:
    """Every value of cookie `name` in a `Cookie` request header (several headers: join them
    with "; "). A browser may send several cookies of one name (different paths)."""
    if not cookie_header:
        return []
    values = []
    for part in cookie_header.split(";"):
        cookie_name, sep, value = part.strip().partition("=")
        if sep and cookie_name.strip() == name:
            values.append(value.strip().strip('"'))
    return values


def check_csrf(
    key: bytes, approval_id: str, cookie_header: str | None, form_token: str | None
) -> None:
    """Raise CsrfError unless the form's token is the one made from this approval id and the
    nonce in the request's `lethe_csrf` cookie."""
    _require_approval_id(approval_id)
    nonces = [n for n in cookie_values(cookie_header, CSRF_COOKIE) if _NONCE.match(n)]
    if not nonces:
        raise CsrfError(
            "the request has no CSRF cookie: submit the form from the confirmation page, in the "
            "browser that opened it, with cookies enabled"
        )
    if not form_token:
        raise CsrfError("the form has no CSRF token: submit it from the confirmation page")
    matches = [_same(csrf_token(key, approval_id, nonce), form_token) for nonce in nonces]
    if not any(matches):
        raise CsrfError(
            "the form's CSRF token does not match this browser's cookie: open the link from "
            "the email again and decide on the page it shows"
        )


# ------------------------------------------------------------------ the decision form


class DecisionForm(BaseModel):
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


class DatasetCounts(BaseModel):
    """What the erasure touches in one dataset and zone."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    dataset_id: str = Field(min_length=1, max_length=256)
    zone: Zone
    objects: int = Field(ge=0)
    versions: int = Field(ge=0)  # stored object versions to rewrite or purge
    rows: int = Field(ge=0)  # rows of the subjects, over the current versions


class ApprovalSummary(BaseModel):
    """Everything an approval page and email show. It has no field for raw subject ids (nor for
    the free-text reason, which may quote them), and refuses unknown fields."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    request_id: str = Field(min_length=1, max_length=256)
    subject_count: int = Field(ge=1)
    datasets: tuple[DatasetCounts, ...]
    report_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    deadline: AwareDatetime
    requested_by: str = Field(min_length=1, max_length=256)
    approver: str = Field(min_length=1, max_length=256)  # the addressee of this link

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


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" + ("" if number == 1 else "s")


def _counts(d: DatasetCounts) -> str:
    return ", ".join(
        [_count(d.objects, "object"), _count(d.versions, "version"), _count(d.rows, "row")]
    )


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _utc_text(moment: dt.datetime) -> str:
    if moment.tzinfo is None:
        raise ValueError("times shown to approvers must be timezone-aware")
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


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
        f"<title>{_e(title)}</title>\n<style>{_STYLE}</style>\n</head>\n"
        f"<body>\n<main>\n{body}\n</main>\n</body>\n</html>\n"
    )


def _summary_html(summary: ApprovalSummary) -> str:
    rows = "\n".join(
        "<tr>"
        f"<td>{_e(d.dataset_id)}</td><td>{_e(d.zone.value)}</td>"
        f'<td class="n">{d.objects}</td><td class="n">{d.versions}</td>'
        f'<td class="n">{d.rows}</td>'
        "</tr>"
        for d in summary.datasets
    )
    return (
        '<dl id="summary">\n'
        f'<dt>Request</dt><dd id="request-id">{_e(summary.request_id)}</dd>\n'
        f'<dt>Requested by</dt><dd id="requested-by">{_e(summary.requested_by)}</dd>\n'
        f'<dt>Data subjects</dt><dd id="subject-count">{summary.subject_count}</dd>\n'
        f'<dt>Objects</dt><dd id="object-count">{summary.total_objects}</dd>\n'
        f'<dt>Object versions</dt><dd id="version-count">{summary.total_versions}</dd>\n'
        f'<dt>Rows</dt><dd id="row-count">{summary.total_rows}</dd>\n'
        f'<dt>Report SHA-256</dt><dd id="report-sha256" class="hash">'
        f"{_e(summary.report_sha256)}</dd>\n"
        f'<dt>Deadline</dt><dd id="deadline">{_e(_utc_text(summary.deadline))}</dd>\n'
        "</dl>\n"
        "<h2>Datasets</h2>\n"
        '<table id="datasets">\n<thead><tr><th>Dataset</th><th>Zone</th>'
        '<th class="n">Objects</th><th class="n">Versions</th><th class="n">Rows</th>'
        f"</tr></thead>\n<tbody>\n{rows}\n</tbody>\n</table>\n"
    )


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
        f'<input type="hidden" name="csrf_token" value="{_e(token)}">\n'
        f'<label for="{field_id}">{_e(_CODE_HELP)}</label>\n'
        f'<input type="text" id="{field_id}" name="confirmation" autocomplete="off" required '
        f'maxlength="16" spellcheck="false" autocapitalize="characters" inputmode="text">\n'
        f'<p class="muted">{_e(consequence)}</p>\n'
        f'<button type="submit" name="decision" value="{decision}">{_e(label)}</button>\n'
        "</form>"
    )


def render_confirmation_page(summary: ApprovalSummary, *, code: str, csrf: str) -> Page:
    """The GET page: what will be erased, the confirmation code and the two decision forms.

    `code` is `confirmation_code(key, approval_id)`; `csrf` is `csrf_token(key, approval_id,
    nonce)` for the nonce of the `Set-Cookie` sent with this page. Changes nothing.
    """
    body = (
        f"<h1>Erasure request {_e(summary.request_id)} awaits your decision</h1>\n"
        f"<p>{_e(summary.requested_by)} asked Lethe to erase the personal data of "
        f"{_count(summary.subject_count, 'data subject')} "
        f"from {_count(len(summary.dataset_ids), 'dataset')}"
        f". This link was sent to {_e(summary.approver)}. Opening this page decided nothing.</p>\n"
        + _summary_html(summary)
        + "<h2>Your decision</h2>\n"
        f'<p>Confirmation code: <code id="confirmation-code">{_e(code)}</code></p>\n'
        f"<p>Decide before {_e(_utc_text(summary.deadline))}. Without a decision by then the "
        "request expires and nothing is erased.</p>\n"
        '<div class="decisions">\n'
        + _decision_form("approve", csrf)
        + "\n"
        + _decision_form("reject", csrf)
        + "\n</div>\n"
    )
    return Page(200, _document(f"Erasure request {summary.request_id}", body))


def _result(outcome: Outcome, title: str, message: str, extra: str = "", reason: str = "") -> Page:
    reason_attr = f' data-reason="{_e(reason)}"' if reason else ""
    body = (
        f"<h1>{_e(title)}</h1>\n"
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
    when = _e(_utc_text(decided_at))
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
            f"{_e(decided_by)} approved erasure request {_e(request_id)} at {when}. "
            + (later.strip() if pending else "The erasure starts now; the requester is notified "
               "when it completes."),
            reason=reason,
        )  # fmt: skip
    return _result(
        "rejected",
        "Erasure rejected",
        f"{_e(decided_by)} rejected erasure request {_e(request_id)} at {when}. Nothing will be "
        "erased; the requester is notified." + later,
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
    when = f" at {_e(_utc_text(decided_at))}" if decided_at is not None else ""
    return _result(
        "already-decided",
        "Already decided",
        f"Erasure request {_e(request_id)} was already {verb} by {_e(decided_by)}{when}. "
        "Nothing was changed.",
    )


def render_expired_page(deadline: dt.datetime | None = None, request_id: str | None = None) -> Page:
    """The link's (or the request's) deadline has passed."""
    what = f"erasure request {_e(request_id)}" if request_id else "this erasure request"
    when = f" at {_e(_utc_text(deadline))}" if deadline is not None else ""
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
        f"{_e(_sentence(reason))} Nothing was decided. Open the link from your email again.",
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
        f"{_e(_sentence(reason))} Nothing was decided.",
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
    href = _e(_safe_href(retry_url))
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
        f"Erasure request {_e(request_id)} is no longer awaiting approval (status "
        f"{_e(status)}). Nothing was decided.",
    )


# ------------------------------------------------------------------ the email


@dataclass(frozen=True)
class ApprovalEmail:
    subject: str
    text: str
    html: str


def _header_text(value: str) -> str:
    return _CONTROL.sub(" ", value).strip()


def build_approval_email(summary: ApprovalSummary, link: str) -> ApprovalEmail:
    """One approver's email: what the request erases and their own link (the only link)."""
    parts = urlsplit(link)
    if parts.scheme not in {"https", "http"} or "/approvals/" not in parts.path:
        raise ValueError("the approval link must be an http(s) URL to /approvals/...")
    deadline = _utc_text(summary.deadline)
    subject = _header_text(
        f"Approval needed: erasure request {summary.request_id} "
        f"({_count(summary.subject_count, 'data subject')})"
    )
    dataset_lines = [f"  - {d.dataset_id} ({d.zone}): {_counts(d)}" for d in summary.datasets]
    notice = (
        "The link opens a confirmation page. Opening it changes nothing: the request is decided "
        "only when you type the confirmation code shown on that page and choose Approve or "
        "Reject."
    )
    text = "\n".join(
        [
            f"{summary.requested_by} filed erasure request {summary.request_id}.",
            f"You receive this email as a configured approver ({summary.approver}).",
            "",
            f"Data subjects: {summary.subject_count}",
            f"Objects: {summary.total_objects}",
            f"Object versions: {summary.total_versions}",
            f"Rows: {summary.total_rows}",
            "Datasets:",
            *dataset_lines,
            f"Report SHA-256: {summary.report_sha256}",
            f"Deadline: {deadline} (no decision by then: the request expires, nothing is erased)",
            "",
            notice,
            "",
            f"Review the request: {link}",
            "",
        ]
    )
    items = "".join(
        f"<li>{_e(d.dataset_id)} ({_e(d.zone)}): {_e(_counts(d))}</li>" for d in summary.datasets
    )
    body = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(subject)}</title></head>\n"
        '<body style="font-family:sans-serif;line-height:1.45;color:#1b1f24">\n'
        f"<p>{_e(summary.requested_by)} filed erasure request "
        f"<strong>{_e(summary.request_id)}</strong>. You receive this email as a configured "
        f"approver ({_e(summary.approver)}).</p>\n"
        "<table>"
        f"<tr><th align=left>Data subjects</th><td>{summary.subject_count}</td></tr>"
        f"<tr><th align=left>Objects</th><td>{summary.total_objects}</td></tr>"
        f"<tr><th align=left>Object versions</th><td>{summary.total_versions}</td></tr>"
        f"<tr><th align=left>Rows</th><td>{summary.total_rows}</td></tr>"
        f"<tr><th align=left>Report SHA-256</th><td><code>{_e(summary.report_sha256)}</code>"
        "</td></tr>"
        f"<tr><th align=left>Deadline</th><td>{_e(deadline)}</td></tr>"
        "</table>\n"
        f"<p>Datasets:</p><ul>{items}</ul>\n"
        f"<p>{_e(notice)}</p>\n"
        f'<p><a href="{_e(link)}">Review erasure request {_e(summary.request_id)}</a></p>\n'
        "</body></html>\n"
    )
    return ApprovalEmail(subject=subject, text=text, html=body)
