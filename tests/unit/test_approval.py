"""lethe_shared.erasure.approval_links, approval_pages and approval_email: links, codes, CSRF, the
decision form, the pages and the email."""

from __future__ import annotations

import base64
import datetime as dt
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from pydantic import ValidationError

from lethe_shared.erasure import approval_email as mail
from lethe_shared.erasure import approval_links as links
from lethe_shared.erasure import approval_pages as pages
from lethe_shared.errors import LetheError

pytestmark = pytest.mark.lambda_runtime

KEY = b"k" * 32
OTHER_KEY = b"o" * 32
BASE = "https://abc.execute-api.eu-west-1.amazonaws.com/Prod"
NOW = dt.datetime(2026, 11, 22, 10, 0, tzinfo=dt.UTC)
DEADLINE = NOW + dt.timedelta(days=2)
AID = "x7Qm3v9KpL2sT8wYzR4nB6cD1eF5gH0j"
RAW_IDS = ("user-4711", "alice@example.com", "1001")


def link_parts(url: str) -> tuple[str, str, str]:
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    return parts.path.rsplit("/", 1)[1], query["e"][0], query["s"][0]


def summary(**overrides: Any) -> pages.ApprovalSummary:
    values: dict[str, Any] = {
        "request_id": "req-20261122-0001",
        "subject_count": 3,
        "datasets": [
            {"dataset_id": "reviews", "zone": "raw", "objects": 2, "versions": 5, "rows": 7},
            {"dataset_id": "reviews", "zone": "lake", "objects": 4, "versions": 4, "rows": 7},
            {"dataset_id": "orders", "zone": "lake", "objects": 1, "versions": 3, "rows": 2},
        ],
        "report_sha256": "ab" * 32,
        "deadline": DEADLINE,
        "requested_by": "privacy@example.com",
        "approver": "dpo@example.com",
    }
    values.update(overrides)
    return pages.ApprovalSummary.model_validate(values)


# ------------------------------------------------------------------ links


def test_new_approval_ids_are_long_random_and_url_safe() -> None:
    ids = {links.new_approval_id() for _ in range(50)}
    assert len(ids) == 50
    for aid in ids:
        assert links.is_approval_id(aid)
        assert len(base64.urlsafe_b64decode(aid + "=" * (-len(aid) % 4))) * 8 >= 128


def test_signed_link_shape_and_signature() -> None:
    url = links.sign_link(KEY, BASE + "/", AID, DEADLINE)
    assert url.startswith(f"{BASE}/approvals/{AID}?e=")
    aid, expires, signature = link_parts(url)
    assert aid == AID
    assert expires == str(int(DEADLINE.timestamp()))
    assert "=" not in signature
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", signature)
    assert links.verify_link(KEY, aid, expires, signature, NOW) == DEADLINE


def test_link_with_integer_expiry_verifies() -> None:
    epoch = int(DEADLINE.timestamp())
    signature = links.link_signature(KEY, AID, epoch)
    assert links.verify_link(KEY, AID, epoch, signature, NOW) == DEADLINE


@pytest.mark.parametrize("base", ["ftp://x/y", "https://x/Prod?a=1", "https://x/#f", "/Prod"])
def test_sign_link_refuses_odd_base_urls(base: str) -> None:
    with pytest.raises(ValueError, match="base_url"):
        links.sign_link(KEY, base, AID, DEADLINE)


def test_tampered_signature_is_forged() -> None:
    aid, expires, signature = link_parts(links.sign_link(KEY, BASE, AID, DEADLINE))
    flipped = ("A" if signature[0] != "A" else "B") + signature[1:]
    with pytest.raises(links.LinkForgedError):
        links.verify_link(KEY, aid, expires, flipped, NOW)
    with pytest.raises(links.LinkForgedError):
        links.verify_link(KEY, aid, expires, signature + "=", NOW)
    with pytest.raises(links.LinkForgedError):
        links.verify_link(KEY, aid, expires, "", NOW)
    with pytest.raises(links.LinkForgedError):
        links.verify_link(KEY, aid, expires, "é" * 43, NOW)


def test_tampered_approval_id_is_forged() -> None:
    _, expires, signature = link_parts(links.sign_link(KEY, BASE, AID, DEADLINE))
    other = links.new_approval_id()
    with pytest.raises(links.LinkForgedError):
        links.verify_link(KEY, other, expires, signature, NOW)
    for malformed in ("", "short", AID + ".1", AID[:-1] + "/", "../" + AID):
        with pytest.raises(links.LinkForgedError):
            links.verify_link(KEY, malformed, expires, signature, NOW)


def test_tampered_expiry_is_forged_not_expired_nor_extended() -> None:
    aid, expires, signature = link_parts(links.sign_link(KEY, BASE, AID, DEADLINE))
    later = str(int(expires) + 86400)
    for bad in (later, "0" + expires, " " + expires, "+" + expires, "-1", "1e9", "abc"):
        with pytest.raises(links.LinkForgedError):
            links.verify_link(KEY, aid, bad, signature, NOW)
    with pytest.raises(links.LinkForgedError):
        links.verify_link(KEY, aid, None, signature, NOW)
    with pytest.raises(links.LinkForgedError):
        links.verify_link(KEY, aid, expires, None, NOW)


def test_link_signed_with_another_key_is_forged() -> None:
    aid, expires, signature = link_parts(links.sign_link(OTHER_KEY, BASE, AID, DEADLINE))
    with pytest.raises(links.LinkForgedError):
        links.verify_link(KEY, aid, expires, signature, NOW)


def test_expired_link() -> None:
    aid, expires, signature = link_parts(links.sign_link(KEY, BASE, AID, DEADLINE))
    with pytest.raises(links.LinkExpiredError) as info:
        links.verify_link(KEY, aid, expires, signature, DEADLINE)
    assert info.value.deadline == DEADLINE
    with pytest.raises(links.LinkExpiredError):
        links.verify_link(KEY, aid, expires, signature, DEADLINE + dt.timedelta(seconds=1))
    assert links.verify_link(KEY, aid, expires, signature, DEADLINE - dt.timedelta(seconds=1))


def test_expired_forged_link_reads_as_forged() -> None:
    aid, expires, _ = link_parts(links.sign_link(KEY, BASE, AID, NOW - dt.timedelta(days=1)))
    with pytest.raises(links.LinkForgedError):
        links.verify_link(KEY, aid, expires, "A" * 43, NOW)


def test_errors_are_lethe_errors() -> None:
    for error in (
        links.LinkForgedError,
        links.LinkExpiredError,
        links.CsrfError,
        pages.BadFormError,
    ):
        assert issubclass(error, links.ApprovalError)
        assert issubclass(error, LetheError)


def test_short_keys_and_naive_times_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 32 bytes"):
        links.sign_link(b"short", BASE, AID, DEADLINE)
    with pytest.raises(ValueError, match="timezone"):
        links.sign_link(KEY, BASE, AID, DEADLINE.replace(tzinfo=None))
    with pytest.raises(ValueError, match="timezone"):
        links.verify_link(KEY, AID, "1", "x", NOW.replace(tzinfo=None))


# ------------------------------------------------------------------ confirmation code


def test_code_is_deterministic_short_and_unambiguous() -> None:
    code = links.confirmation_code(KEY, AID)
    assert code == links.confirmation_code(KEY, AID)
    assert re.fullmatch(
        r"[23456789ABCDEFGHJKMNPQRSTVWXYZ]{3}-[23456789ABCDEFGHJKMNPQRSTVWXYZ]{3}", code
    )
    assert code != links.confirmation_code(OTHER_KEY, AID)
    codes = {links.confirmation_code(KEY, links.new_approval_id()) for _ in range(200)}
    assert len(codes) > 190


def test_code_check_is_tolerant_of_case_spaces_and_hyphens() -> None:
    code = links.confirmation_code(KEY, AID)
    plain = code.replace("-", "")
    for typed in (
        code,
        plain,
        plain.lower(),
        f" {plain[:3]} {plain[3:]} ",
        code.lower(),
        f"{plain[:2]}-{plain[2:4]}-{plain[4:]}",
        plain[:3] + "\u2013" + plain[3:],
        "".join(chr(ord(c) + 0xFEE0) for c in plain),
    ):  # full-width forms
        assert links.check_code(typed, code), typed


def test_code_check_refuses_wrong_or_empty_codes() -> None:
    code = links.confirmation_code(KEY, AID)
    other = links.confirmation_code(KEY, links.new_approval_id())
    assert not links.check_code(other if other != code else "ZZZ-ZZZ", code)
    assert not links.check_code(code[:-1], code)
    assert not links.check_code(code + "2", code)
    assert not links.check_code("", code)
    assert not links.check_code(None, code)
    assert not links.check_code("- -", code)
    assert not links.check_code(code + " " * 100, code)
    assert not links.check_code("", "")


# ------------------------------------------------------------------ CSRF


def test_csrf_cookie_header() -> None:
    nonce = links.new_csrf_nonce()
    cookie = links.csrf_cookie(nonce, AID, secure=True, max_age=600)
    assert cookie == (
        f"lethe_csrf={nonce}; HttpOnly; SameSite=Strict; Path=/approvals/{AID}; Max-Age=600; Secure"
    )
    plain = links.csrf_cookie(nonce, AID, secure=False)
    assert "Secure" not in plain
    assert f"Max-Age={links.DEFAULT_CSRF_MAX_AGE}" in plain
    staged = links.csrf_cookie(nonce, AID, secure=True, path=f"/Prod/approvals/{AID}")
    assert f"Path=/Prod/approvals/{AID};" in staged


@pytest.mark.parametrize(
    "path", ["/approvals/other", "/x; Domain=evil.example", "/a\r\nX: y/approvals/{aid}", "rel"]
)
def test_csrf_cookie_path_must_be_the_page_path(path: str) -> None:
    with pytest.raises(ValueError, match="cookie path"):
        links.csrf_cookie(links.new_csrf_nonce(), AID, secure=True, path=path.format(aid=AID))


def test_csrf_accepts_matching_cookie_and_token() -> None:
    nonce = links.new_csrf_nonce()
    token = links.csrf_token(KEY, AID, nonce)
    links.check_csrf(KEY, AID, f"lethe_csrf={nonce}", token)
    links.check_csrf(KEY, AID, f"other=1; lethe_csrf={nonce}; theme=dark", token)
    # an older cookie of another path under the same name does not hide the right one
    links.check_csrf(KEY, AID, f"lethe_csrf={links.new_csrf_nonce()}; lethe_csrf={nonce}", token)


def test_csrf_missing_cookie() -> None:
    token = links.csrf_token(KEY, AID, links.new_csrf_nonce())
    for header in (None, "", "other=1", "lethe_csrf=", "lethe_csrf=short"):
        with pytest.raises(links.CsrfError, match="no CSRF cookie"):
            links.check_csrf(KEY, AID, header, token)


def test_csrf_missing_token() -> None:
    nonce = links.new_csrf_nonce()
    for token in (None, ""):
        with pytest.raises(links.CsrfError, match="no CSRF token"):
            links.check_csrf(KEY, AID, f"lethe_csrf={nonce}", token)


def test_csrf_mismatched_nonce() -> None:
    token = links.csrf_token(KEY, AID, links.new_csrf_nonce())
    with pytest.raises(links.CsrfError, match="does not match"):
        links.check_csrf(KEY, AID, f"lethe_csrf={links.new_csrf_nonce()}", token)


def test_csrf_token_from_another_approval_id() -> None:
    nonce = links.new_csrf_nonce()
    token = links.csrf_token(KEY, links.new_approval_id(), nonce)
    with pytest.raises(links.CsrfError, match="does not match"):
        links.check_csrf(KEY, AID, f"lethe_csrf={nonce}", token)


def test_csrf_token_under_another_key() -> None:
    nonce = links.new_csrf_nonce()
    with pytest.raises(links.CsrfError):
        links.check_csrf(KEY, AID, f"lethe_csrf={nonce}", links.csrf_token(OTHER_KEY, AID, nonce))


# ------------------------------------------------------------------ form parsing


def test_parse_plain_form() -> None:
    body = urlencode({"csrf_token": "tok-1", "confirmation": "abc 234", "decision": "approve"})
    form = pages.parse_decision_form(body, False)
    assert form == pages.DecisionForm(
        decision="approve", csrf_token="tok-1", confirmation="abc 234"
    )


def test_parse_base64_form_from_api_gateway() -> None:
    body = urlencode({"decision": "reject", "csrf_token": "t", "confirmation": "ÄBC-234"})
    encoded = base64.b64encode(body.encode()).decode()
    assert pages.parse_decision_form(encoded, True).decision == "reject"
    assert pages.parse_decision_form(encoded.encode(), True).confirmation == "ÄBC-234"
    assert pages.parse_decision_form(body.encode(), False).decision == "reject"


def test_parse_form_without_code_or_token_leaves_them_empty() -> None:
    form = pages.parse_decision_form("decision=approve", False)
    assert (form.csrf_token, form.confirmation) == ("", "")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (None, "no body"),
        ("", "no decision"),
        ("csrf_token=t&confirmation=ABC234", "no decision"),
        ("decision=&csrf_token=t", "no decision"),
        ("decision=maybe&csrf_token=t", "unknown decision 'maybe'"),
        ("decision=APPROVE", "unknown decision"),
        ("decision=approve&decision=reject", "more than once"),
        ("decision=approve&task_token=abc", "unexpected form field 'task_token'"),
        ("decision=approve&&", "URL-encoded"),
        ("decision=approve&csrf_token=%FF", "URL-encoded"),
        ("a=1&b=2&c=3&d=4&e=5", "URL-encoded"),
        ("decision=approve&confirmation=" + "A" * 5000, "larger than"),
    ],
)
def test_bad_forms(body: str | None, message: str) -> None:
    with pytest.raises(pages.BadFormError, match=message):
        pages.parse_decision_form(body, False)


def test_bad_base64_form() -> None:
    with pytest.raises(pages.BadFormError, match="base64"):
        pages.parse_decision_form("decision=approve", True)
    with pytest.raises(pages.BadFormError, match="UTF-8"):
        pages.parse_decision_form(base64.b64encode(b"decision=\xff"), True)


def test_form_content_type() -> None:
    form_type = "application/x-www-form-urlencoded; charset=UTF-8"
    assert pages.parse_decision_form("decision=reject", False, content_type=form_type)
    with pytest.raises(pages.BadFormError, match="x-www-form-urlencoded"):
        pages.parse_decision_form('{"decision": "approve"}', False, content_type="application/json")


# ------------------------------------------------------------------ pages


@dataclass
class Form:
    attrs: dict[str, str]
    inputs: list[dict[str, str]] = field(default_factory=list)
    buttons: list[dict[str, str]] = field(default_factory=list)


class PageParser(HTMLParser):
    """Forms with their inputs and buttons, elements by id, script tags, links."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.forms: list[Form] = []
        self.by_id: dict[str, dict[str, str]] = {}
        self.text_by_id: dict[str, str] = {}
        self.scripts = 0
        self.links: list[str] = []
        self.labels: dict[str, str] = {}
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None
        self._open: list[tuple[str, str | None]] = []
        self._current: Form | None = None
        self._label_for: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "script" or any(k.startswith("on") for k in a):
            self.scripts += 1
        if "id" in a:
            self.by_id[a["id"]] = {"tag": tag, **a}
            self.text_by_id[a["id"]] = ""
        if tag == "tr":
            self.rows.append([])
        if tag in {"td", "th"} and self.rows:
            self.rows[-1].append("")
            self._cell = self.rows[-1]
        if tag == "a":
            self.links.append(a.get("href", ""))
        self._form_parts(tag, a)
        if tag not in {"input", "meta", "br"}:
            self._open.append((tag, a.get("id")))

    def _form_parts(self, tag: str, a: dict[str, str]) -> None:
        if tag == "form":
            self._current = Form(a)
            self.forms.append(self._current)
        elif tag == "input" and self._current is not None:
            self._current.inputs.append(a)
        elif tag == "button" and self._current is not None:
            self._current.buttons.append(a)
        elif tag == "label":
            self._label_for = a.get("for")
            if self._label_for:
                self.labels[self._label_for] = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._current = None
        if tag == "label":
            self._label_for = None
        if tag in {"td", "th"}:
            self._cell = None
        while self._open:
            open_tag, _ = self._open.pop()
            if open_tag == tag:
                break

    def handle_data(self, data: str) -> None:
        for _, element_id in self._open:
            if element_id is not None:
                self.text_by_id[element_id] += data
        if self._label_for:
            self.labels[self._label_for] += data
        if self._cell is not None:
            self._cell[-1] += data


def parse(page_html: str) -> PageParser:
    parser = PageParser()
    parser.feed(page_html)
    parser.close()
    return parser


def confirmation(s: pages.ApprovalSummary | None = None) -> tuple[str, str, str]:
    nonce = links.new_csrf_nonce()
    token = links.csrf_token(KEY, AID, nonce)
    code = links.confirmation_code(KEY, AID)
    page = pages.render_confirmation_page(s or summary(), code=code, csrf=token)
    assert page.status_code == 200
    assert page.outcome is None
    return page.html, code, token


def test_confirmation_page_meets_the_contract() -> None:
    page_html, code, token = confirmation()
    doc = parse(page_html)
    assert doc.by_id["confirmation-code"]["tag"] == "code"
    assert doc.text_by_id["confirmation-code"] == code
    decisions = set()
    for form in doc.forms:
        assert form.attrs["method"] == "post"
        assert "action" not in form.attrs  # posts back to the link's own URL
        hidden = [i for i in form.inputs if i.get("type") == "hidden"]
        assert hidden == [{"type": "hidden", "name": "csrf_token", "value": token}]
        (text,) = [i for i in form.inputs if i.get("name") == "confirmation"]
        assert text["type"] == "text"
        assert text["autocomplete"] == "off"
        assert "required" in text
        assert "scanner" in doc.labels[text["id"]]
        (button,) = form.buttons
        assert button["type"] == "submit"
        assert button["name"] == "decision"
        decisions.add(button["value"])
    assert decisions == {"approve", "reject"}
    assert doc.scripts == 0
    assert doc.links == []


def test_confirmation_page_shows_what_will_be_erased() -> None:
    doc = parse(confirmation()[0])
    text = doc.text_by_id
    assert text["request-id"] == "req-20261122-0001"
    assert text["requested-by"] == "privacy@example.com"
    assert text["subject-count"] == "3"
    assert text["object-count"] == "7"
    assert text["version-count"] == "12"
    assert text["row-count"] == "16"
    assert text["report-sha256"] == "ab" * 32
    assert text["deadline"] == "2026-11-24 10:00:00 UTC"
    assert doc.rows == [
        ["Dataset", "Zone", "Objects", "Versions", "Rows"],
        ["reviews", "raw", "2", "5", "7"],
        ["reviews", "lake", "4", "4", "7"],
        ["orders", "lake", "1", "3", "2"],
    ]


def test_hostile_values_are_escaped_everywhere() -> None:
    hostile = "<script>alert(1)</script>\"'><img src=x onerror=alert(2)>"
    s = summary(
        request_id=hostile,
        requested_by=hostile,
        approver=hostile,
        datasets=[{"dataset_id": hostile, "zone": "raw", "objects": 1, "versions": 1, "rows": 1}],
    )
    page_html, _, _ = confirmation(s)
    email = mail.build_approval_email(s, links.sign_link(KEY, BASE, AID, DEADLINE))
    rendered = [
        page_html,
        email.html,
        pages.render_decided_page(
            "approve", request_id=hostile, decided_by=hostile, decided_at=NOW
        ).html,
        pages.render_decided_page(
            "reject", request_id=hostile, decided_by=hostile, decided_at=NOW
        ).html,
        pages.render_already_decided_page("reject", request_id=hostile, decided_by=hostile).html,
        pages.render_expired_page(NOW, hostile).html,
        pages.render_invalid_page(hostile).html,
        pages.render_not_allowed_page(hostile).html,
        pages.render_closed_page(request_id=hostile, status=hostile).html,
        pages.render_wrong_code_page(f"?e=1&s={hostile}").html,
    ]
    for page_html in rendered:
        assert "<script" not in page_html
        assert "<img" not in page_html
        assert "&lt;script&gt;" in page_html
        doc = parse(page_html)
        assert doc.scripts == 0


def test_no_raw_ids_can_reach_a_page_or_an_email() -> None:
    with pytest.raises(ValidationError, match="extra"):
        summary(subject_ids=list(RAW_IDS))
    with pytest.raises(ValidationError, match="extra"):
        summary(reason=f"erase {RAW_IDS[0]}")
    with pytest.raises(ValidationError, match="extra"):
        pages.DatasetCounts.model_validate(
            {
                "dataset_id": "d",
                "zone": "raw",
                "objects": 1,
                "versions": 1,
                "rows": 1,
                "subjects": list(RAW_IDS),
            }
        )
    s = summary()
    email = mail.build_approval_email(s, links.sign_link(KEY, BASE, AID, DEADLINE))
    for text in (confirmation(s)[0], email.subject, email.text, email.html):
        for raw in RAW_IDS:
            assert raw not in text


def test_summary_validation() -> None:
    with pytest.raises(ValidationError):
        summary(report_sha256="not-a-hash")
    with pytest.raises(ValidationError):
        summary(deadline=DEADLINE.replace(tzinfo=None))
    with pytest.raises(ValidationError):
        summary(subject_count=0)
    with pytest.raises(ValidationError):
        summary().__setattr__("request_id", "other")


def outcome_of(page: pages.Page) -> tuple[str, str]:
    doc = parse(page.html)
    element = doc.by_id["outcome"]
    assert element["tag"] == "p"
    assert element["data-outcome"] == page.outcome
    assert doc.scripts == 0
    return element["data-outcome"], doc.text_by_id["outcome"]


def test_result_pages_carry_a_stable_outcome() -> None:
    cases: list[tuple[pages.Page, str, int, str]] = [
        (
            pages.render_decided_page("approve", request_id="r1", decided_by="dpo", decided_at=NOW),
            "approved",
            200,
            "dpo approved erasure request r1 at 2026-11-22 10:00:00 UTC",
        ),
        (
            pages.render_decided_page("reject", request_id="r1", decided_by="dpo", decided_at=NOW),
            "rejected",
            200,
            "Nothing will be erased",
        ),
        (
            pages.render_already_decided_page(
                "approve", request_id="r1", decided_by="cfo", decided_at=NOW
            ),
            "already-decided",
            409,
            "already approved by cfo at 2026-11-22 10:00:00 UTC",
        ),
        (pages.render_expired_page(DEADLINE), "expired", 410, "expired at 2026-11-24 10:00:00 UTC"),
        (
            pages.render_invalid_page("the link's signature does not verify"),
            "invalid",
            400,
            "The link's signature does not verify. Nothing was decided.",
        ),
        (
            pages.render_not_allowed_page("the requester cannot approve their own request"),
            "not-allowed",
            403,
            "The requester cannot approve their own request.",
        ),
        (pages.render_wrong_code_page("?e=1&s=x"), "wrong-code", 422, "Nothing was decided"),
        (
            pages.render_closed_page(request_id="r1", status="FAILED"),
            "closed",
            409,
            "status FAILED",
        ),
    ]
    for page, outcome, status, text in cases:
        assert page.status_code == status
        got, message = outcome_of(page)
        assert got == outcome
        assert text in " ".join(message.split())


def test_invalid_page_says_what_kind() -> None:
    page = pages.render_invalid_page("no CSRF cookie", kind="csrf")
    assert parse(page.html).by_id["outcome"]["data-reason"] == "csrf"


def test_wrong_code_page_links_back_to_the_confirmation_page() -> None:
    link = links.sign_link(KEY, BASE, AID, DEADLINE)
    doc = parse(pages.render_wrong_code_page(link).html)
    assert doc.links == [link]
    relative = "?" + urlsplit(link).query
    assert parse(pages.render_wrong_code_page(relative).html).links == [relative]
    for hostile in ("javascript:alert(1)", "data:text/html,x", "//evil.example/x"):
        with pytest.raises(ValueError, match="link"):
            pages.render_wrong_code_page(hostile)


def test_response_headers() -> None:
    headers = pages.response_headers()
    assert headers == {
        "Content-Type": "text/html; charset=utf-8",
        "Cache-Control": "no-store",
        "Content-Security-Policy": (
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
            "frame-ancestors 'none'; base-uri 'none'"
        ),
        "X-Frame-Options": "DENY",
        "Referrer-Policy": "no-referrer",
        "X-Content-Type-Options": "nosniff",
    }
    cookie = links.csrf_cookie(links.new_csrf_nonce(), AID, secure=True)
    assert pages.response_headers(cookie)["Set-Cookie"] == cookie


# ------------------------------------------------------------------ email


def test_email_for_one_approver() -> None:
    s = summary()
    link = links.sign_link(KEY, BASE, AID, DEADLINE)
    email = mail.build_approval_email(s, link)
    assert email.subject == "Approval needed: erasure request req-20261122-0001 (3 data subjects)"
    for body in (email.text, email.html):
        assert "req-20261122-0001" in body
        assert "ab" * 32 in body
        assert "2026-11-24 10:00:00 UTC" in body
        assert "reviews (raw): 2 objects, 5 versions, 7 rows" in body
        assert "orders (lake): 1 object, 3 versions, 2 rows" in body
        assert "dpo@example.com" in body
        assert "type the confirmation code" in body
    assert re.findall(r"https?://\S+", email.text) == [link]
    assert parse(email.html).links == [link]
    assert email.html.count("http") == 1
    assert parse(email.html).scripts == 0


def test_email_subject_has_no_header_injection() -> None:
    s = summary(request_id="r1\r\nBcc: evil@example.com")
    email = mail.build_approval_email(s, links.sign_link(KEY, BASE, AID, DEADLINE))
    assert "\r" not in email.subject
    assert "\n" not in email.subject
    # nor any other line break or invisible format character (one rule: requester.display_text)
    for tricky in ("\u2028", "\u0085", "\u200b"):
        other = mail.build_approval_email(
            summary(request_id=f"r1{tricky}Bcc: evil@example.com"),
            links.sign_link(KEY, BASE, AID, DEADLINE),
        )
        assert tricky not in other.subject


def test_email_refuses_a_link_that_is_not_an_approval_link() -> None:
    with pytest.raises(ValueError, match="approval link"):
        mail.build_approval_email(summary(), "javascript:alert(1)//approvals/x")


def test_a_zone_is_raw_or_lake_and_nothing_else() -> None:
    with pytest.raises(ValidationError):
        pages.DatasetCounts(dataset_id="reviews", zone="<script>", objects=1, versions=1, rows=1)


def test_the_page_and_the_email_tell_the_approver_what_is_not_searched() -> None:
    """Raw uploads the erasure cannot reach (lethe_shared.erasure.scope) are shown before the
    decision, per dataset and reason; a report without any shows no such section."""
    gaps = [
        {"dataset_id": "reviews", "reason": "ingestion_in_flight", "versions": 2},
        {"dataset_id": "orders", "reason": "archived", "versions": 1},
    ]
    s = summary(not_searched=gaps)

    page = pages.render_confirmation_page(s, code="ABCD-EFGH", csrf="t").html
    email = mail.build_approval_email(s, links.sign_link(KEY, BASE, AID, DEADLINE))

    assert '<h2 id="not-searched">Not searched</h2>' in page
    assert '<td>reviews</td><td>ingestion_in_flight</td><td class="n">2</td>' in page
    assert "NOT SEARCHED" in email.text
    assert "reviews: 2 ingestion_in_flight; orders: 1 archived" in email.text
    assert "orders: 1 archived" in email.html
    plain = summary()
    assert "not-searched" not in pages.render_confirmation_page(plain, code="C", csrf="t").html
    assert (
        "NOT SEARCHED"
        not in mail.build_approval_email(plain, links.sign_link(KEY, BASE, AID, DEADLINE)).text
    )
