"""Approval links, confirmation codes and CSRF tokens: the approval step's keyed checks.

No AWS calls and no environment reads: the approval handlers own the key (Secrets Manager),
the clock, the approval record in DynamoDB and the task token, and call these functions
(lethe_shared.erasure.approval_flow). ARCHITECTURE.md, decision 7 and the *required* approval
page contract. The page and its decision form are lethe_shared.erasure.approval_pages, the
approver's email lethe_shared.erasure.approval_email.

What this module enforces:
- a link is `{base_url}/approvals/{approval_id}?e={expires}&s={signature}`, one per approver;
  the signature is an HMAC-SHA256 of `"{approval_id}.{expires}"` under the approval key, so an
  id or an expiry cannot be changed or invented without the key (`verify_link`);
- a decision is a `POST` of a form that carries a CSRF token bound to the approval id and to a
  random nonce held in an HttpOnly, SameSite=Strict cookie scoped to the approval's path
  (signed double submit, `check_csrf`), so another site cannot post it in the approver's name.
  A GET keeps the nonce of the cookie the browser already holds for the page (`csrf_nonce_for`)
  and sets it again with a fresh Max-Age, so every tab that shows the page while the link is
  valid carries a token that matches: opening the link again never invalidates a page opened
  before. A forged or other-link token still fails (it is an HMAC of this approval id and the
  nonce under the key), and a cookie value the server did not set is no help to an attacker
  (the token needs the key);
- the form must also carry the confirmation code shown on the page, typed by a person
  (`check_code`). The code is not a secret from whoever holds the link (the page shows it): it
  proves that someone read the page and typed, which scanners that submit forms do not do.

What the caller enforces (the handler, with its stored approval record):
- a `GET` renders a confirmation page and decides nothing (mail scanners open every link);
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
import datetime as dt
import hashlib
import hmac
import re
import secrets
import unicodedata
from urllib.parse import urlencode, urlsplit

from lethe_shared.errors import LetheError

KEY_MIN_BYTES = 32
APPROVAL_ID_BYTES = 24  # 192 bits from secrets.token_urlsafe: 32 characters
CODE_ALPHABET = "23456789ABCDEFGHJKMNPQRSTVWXYZ"  # no 0/O, 1/I/L, U
CODE_LENGTH = 6
CSRF_COOKIE = "lethe_csrf"
CSRF_NONCE_BYTES = 32
DEFAULT_CSRF_MAX_AGE = 12 * 3600
MAX_CODE_INPUT = 64

_APPROVAL_ID = re.compile(r"^[A-Za-z0-9_-]{22,128}$")
_NONCE = re.compile(r"^[A-Za-z0-9_-]{22,128}$")
_EXPIRES = re.compile(r"^(?:0|[1-9][0-9]{0,11})$")
_COOKIE_PATH = re.compile(r"^/[A-Za-z0-9._~!$&'()*+,=:@%/-]*$")
_CODE_SEPARATORS = re.compile(r"[\s\-\u2010-\u2015\u2212_.]+")


# ------------------------------------------------------------------ errors


class ApprovalError(LetheError):
    """A link, form or CSRF check refused a request; nothing was decided."""


class LinkForgedError(ApprovalError):
    """The link's approval id, expiry or signature is malformed or does not verify."""


class LinkExpiredError(ApprovalError):
    """The link is authentic but its deadline has passed."""

    def __init__(self, deadline: dt.datetime) -> None:
        self.deadline = deadline
        super().__init__(f"the approval link expired at {utc_text(deadline)}")


class CsrfError(ApprovalError):
    """The POST lacks the CSRF cookie or token, or they do not agree."""


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
    """A fresh random nonce for the CSRF cookie (a GET from a browser that holds none)."""
    return secrets.token_urlsafe(CSRF_NONCE_BYTES)


def csrf_nonce_for(cookie_header: str | None) -> str:
    """The nonce for a GET of the page: the one of the page's `lethe_csrf` cookie the browser
    already holds (the first well-formed one it sends: the most specific path comes first), else
    a new one. So a second tab's GET leaves the first tab's form valid."""
    held = [n for n in cookie_values(cookie_header, CSRF_COOKIE) if _NONCE.match(n)]
    return held[0] if held else new_csrf_nonce()


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


def utc_text(moment: dt.datetime) -> str:
    """A moment as approvers read it: `2026-11-27 09:30:00 UTC` (pages, email, errors)."""
    if moment.tzinfo is None:
        raise ValueError("times shown to approvers must be timezone-aware")
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
