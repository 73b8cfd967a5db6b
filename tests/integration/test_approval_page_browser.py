"""The approval page in a real browser: Debian's Chromium driven by Playwright.

A tiny HTTP server on 127.0.0.1 serves the page from the pure functions of
lethe_shared.erasure.approval_links and approval_pages the
way the approval Lambda does (GET: render and set the CSRF cookie, keeping the nonce of the one
the browser holds; POST: link, form, CSRF, code,
then a single-use decision), so what is checked here is what a person's browser does with the
page: the cookie comes back on the POST, the form posts to the link's own URL under the page's
Content-Security-Policy, `required` stops an empty code, and the outcome element reads right.

Needs `apt-get install -y chromium` and `pip install playwright==1.63.0` (never
`playwright install`: the system Chromium is used). Nothing here is skipped: a missing browser
fails with the command that installs it.
"""

from __future__ import annotations

import datetime as dt
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import requests

from lethe_shared.erasure import approval_links as links
from lethe_shared.erasure import approval_pages as pages
from tests.browser import chromium, outcome

KEY = b"approval-signing-key-for-the-browser-tests-0123456789"
RAW_SUBJECT_IDS = ("user-4711", "alice@example.com")


@dataclass
class Approvals:
    """The approval record the Lambda keeps in DynamoDB, reduced to what the page needs."""

    summary: pages.ApprovalSummary
    approval_id: str
    deadline: dt.datetime
    decision: pages.Decision | None = None
    decided_at: dt.datetime | None = None
    posts: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def decide(self, decision: pages.Decision) -> bool:
        """The conditional write: succeeds once."""
        with self.lock:
            if self.decision is not None:
                return False
            self.decision = decision
            self.decided_at = dt.datetime.now(dt.UTC)
            return True


class ApprovalPageHandler(BaseHTTPRequestHandler):
    server: ApprovalServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet test output
        pass

    def do_GET(self) -> None:
        approvals = self.server.approvals
        approval_id, query = self._route()
        try:
            links.verify_link(
                KEY, approval_id, query.get("e"), query.get("s"), dt.datetime.now(dt.UTC)
            )
        except links.LinkExpiredError as exc:
            return self._send(pages.render_expired_page(exc.deadline))
        except links.LinkForgedError as exc:
            return self._send(pages.render_invalid_page(str(exc)))
        # the nonce of the cookie this browser holds for the page, else a new one (as the Lambda)
        nonce = links.csrf_nonce_for("; ".join(self.headers.get_all("Cookie") or []) or None)
        page = pages.render_confirmation_page(
            approvals.summary,
            code=links.confirmation_code(KEY, approval_id),
            csrf=links.csrf_token(KEY, approval_id, nonce),
        )
        self._send(page, links.csrf_cookie(nonce, approval_id, secure=False, max_age=600))
        return None

    def do_POST(self) -> None:
        approvals = self.server.approvals
        with approvals.lock:
            approvals.posts += 1
        approval_id, query = self._route()
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            links.verify_link(
                KEY, approval_id, query.get("e"), query.get("s"), dt.datetime.now(dt.UTC)
            )
            form = pages.parse_decision_form(
                body, False, content_type=self.headers.get("Content-Type")
            )
            cookies = "; ".join(self.headers.get_all("Cookie") or [])
            links.check_csrf(KEY, approval_id, cookies, form.csrf_token)
        except links.LinkExpiredError as exc:
            return self._send(pages.render_expired_page(exc.deadline))
        except links.LinkForgedError as exc:
            return self._send(pages.render_invalid_page(str(exc)))
        except pages.BadFormError as exc:
            return self._send(pages.render_invalid_page(str(exc), kind="form"))
        except links.CsrfError as exc:
            return self._send(pages.render_invalid_page(str(exc), kind="csrf"))
        if approval_id != approvals.approval_id:
            return self._send(pages.render_not_allowed_page("this link is not for this request"))
        if not links.check_code(form.confirmation, links.confirmation_code(KEY, approval_id)):
            return self._send(pages.render_wrong_code_page("?" + urlsplit(self.path).query))
        request_id, approver = approvals.summary.request_id, approvals.summary.approver
        if not approvals.decide(form.decision):
            assert approvals.decision is not None
            return self._send(
                pages.render_already_decided_page(
                    approvals.decision,
                    request_id=request_id,
                    decided_by=approver,
                    decided_at=approvals.decided_at,
                )
            )
        assert approvals.decided_at is not None
        return self._send(
            pages.render_decided_page(
                form.decision,
                request_id=request_id,
                decided_by=approver,
                decided_at=approvals.decided_at,
            )
        )

    def _route(self) -> tuple[str, dict[str, str]]:
        parts = urlsplit(self.path)
        match = re.fullmatch(r"/approvals/([^/]+)", parts.path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        return (match.group(1) if match else ""), query

    def _send(self, page: pages.Page, set_cookie: str | None = None) -> None:
        body = page.html.encode("utf-8")
        self.send_response(page.status_code)
        for name, value in pages.response_headers(set_cookie).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class ApprovalServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, approvals: Approvals) -> None:
        super().__init__(("127.0.0.1", 0), ApprovalPageHandler)
        self.approvals = approvals

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@dataclass
class Site:
    approvals: Approvals
    link: str


@pytest.fixture
def site() -> Iterator[Site]:
    deadline = (dt.datetime.now(dt.UTC) + dt.timedelta(days=2)).replace(microsecond=0)
    summary = pages.ApprovalSummary(
        request_id="req-20261122-0042",
        subject_count=2,
        datasets=(
            pages.DatasetCounts(dataset_id="reviews", zone="raw", objects=2, versions=3, rows=4),
            pages.DatasetCounts(dataset_id="reviews", zone="lake", objects=3, versions=3, rows=4),
        ),
        report_sha256="c0ffee" + "0" * 58,
        deadline=deadline,
        requested_by="privacy-office@example.com",
        approver="dpo@example.com",
    )
    approval_id = links.new_approval_id()
    server = ApprovalServer(Approvals(summary, approval_id, deadline))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Site(server.approvals, links.sign_link(KEY, server.base_url, approval_id, deadline))
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as launched:
        yield launched


@pytest.fixture
def console() -> list[str]:
    """The browser console's messages (CSP violations are reported there)."""
    return []


@pytest.fixture
def page(browser: Any, console: list[str]) -> Iterator[Any]:
    context = browser.new_context()
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.on("console", lambda message: console.append(message.text))
    try:
        yield page
    finally:
        context.close()


def test_a_person_reads_the_page_types_the_code_and_approves(
    site: Site, page: Any, console: list[str]
) -> None:
    response = page.goto(site.link)
    assert response.status == 200
    assert response.headers["content-security-policy"] == pages.CONTENT_SECURITY_POLICY
    assert site.approvals.decision is None  # opening the link decided nothing

    assert page.locator("#request-id").inner_text() == "req-20261122-0042"
    assert page.locator("#subject-count").inner_text() == "2"
    assert page.locator("#object-count").inner_text() == "5"
    assert page.locator("#row-count").inner_text() == "8"
    assert page.locator("#report-sha256").inner_text() == "c0ffee" + "0" * 58
    assert "reviews" in page.locator("#datasets").inner_text()
    body_text = page.locator("body").inner_text()
    assert all(raw not in body_text for raw in RAW_SUBJECT_IDS)

    cookies = page.context.cookies()
    assert [(c["name"], c["httpOnly"], c["sameSite"]) for c in cookies] == [
        ("lethe_csrf", True, "Strict")
    ]
    assert cookies[0]["path"] == urlsplit(site.link).path

    code = page.locator("code#confirmation-code").inner_text()
    assert re.fullmatch(r"[A-Z2-9]{3}-[A-Z2-9]{3}", code)
    form = page.locator("form:has(button[value=approve])")
    form.locator("input[name=confirmation]").fill(code.lower().replace("-", " "))
    form.locator("button[value=approve]").click()

    assert outcome(page) == "approved"
    assert "dpo@example.com approved erasure request req-20261122-0042" in (
        page.locator("#outcome").inner_text()
    )
    assert site.approvals.decision == "approve"
    assert urlsplit(page.url).query == urlsplit(site.link).query  # posted to the link's URL
    assert not [m for m in console if "Content Security Policy" in m], console

    # The approver opens the link again and answers differently: the first decision stands.
    page.goto(site.link)
    code = page.locator("#confirmation-code").inner_text()
    form = page.locator("form:has(button[value=reject])")
    form.locator("input[name=confirmation]").fill(code)
    form.locator("button[value=reject]").click()
    assert outcome(page) == "already-decided"
    assert site.approvals.decision == "approve"


def test_a_page_opened_in_a_first_tab_decides_after_a_second_tab_opened_the_link(
    site: Site, page: Any
) -> None:
    # Given the approver opens the link, then opens it again in a second tab of the browser
    first = page
    first.goto(site.link)
    first_token = first.locator("input[name=csrf_token]").first.get_attribute("value")
    second = page.context.new_page()
    second.goto(site.link)
    assert second.locator("input[name=csrf_token]").first.get_attribute("value") == first_token
    assert [c["name"] for c in page.context.cookies()] == ["lethe_csrf"]  # one cookie, kept

    # When they decide on the first tab
    code = first.locator("#confirmation-code").inner_text()
    form = first.locator("form:has(button[value=approve])")
    form.locator("input[name=confirmation]").fill(code)
    form.locator("button[value=approve]").click()

    # Then it is decided
    assert outcome(first) == "approved"
    assert site.approvals.decision == "approve"

    # and the second tab, now stale, finds it decided (not a CSRF failure)
    code = second.locator("#confirmation-code").inner_text()
    form = second.locator("form:has(button[value=reject])")
    form.locator("input[name=confirmation]").fill(code)
    form.locator("button[value=reject]").click()
    assert outcome(second) == "already-decided"
    assert site.approvals.decision == "approve"


def test_submitting_without_the_code_decides_nothing(site: Site, page: Any) -> None:
    page.goto(site.link)
    form = page.locator("form:has(button[value=approve])")
    form.locator("button[value=approve]").click()
    page.wait_for_timeout(300)
    # `required`: the browser itself refuses to send the form without the code
    assert site.approvals.posts == 0
    assert page.locator("#outcome").count() == 0

    # A client that ignores `required` (a scanner submitting forms) gets the wrong-code page.
    form.locator("input[name=confirmation]").evaluate("input => input.removeAttribute('required')")
    form.locator("button[value=approve]").click()
    assert outcome(page) == "wrong-code"
    assert site.approvals.posts == 1
    assert site.approvals.decision is None

    # A wrong code is refused too; the page links back to the confirmation page.
    page.go_back()
    page.goto(site.link)
    form = page.locator("form:has(button[value=reject])")
    form.locator("input[name=confirmation]").fill("ZZZ-ZZZ")
    form.locator("button[value=reject]").click()
    assert outcome(page) == "wrong-code"
    assert site.approvals.decision is None
    page.locator("a#retry").click()
    code = page.locator("#confirmation-code").inner_text()
    form = page.locator("form:has(button[value=reject])")
    form.locator("input[name=confirmation]").fill(code)
    form.locator("button[value=reject]").click()
    assert outcome(page) == "rejected"
    assert site.approvals.decision == "reject"


def test_a_post_without_the_csrf_cookie_is_refused(site: Site) -> None:
    with requests.Session() as session:
        session.trust_env = False
        response = session.get(site.link, timeout=10)
        assert response.status_code == 200
        assert "lethe_csrf" in session.cookies
        token = re.search(r'name="csrf_token" value="([^"]+)"', response.text)
        code = re.search(r'<code id="confirmation-code">([^<]+)</code>', response.text)
        assert token is not None
        assert code is not None
        form = {"csrf_token": token.group(1), "confirmation": code.group(1), "decision": "approve"}

        # the same form, replayed from elsewhere: no cookie
        with requests.Session() as stranger:
            stranger.trust_env = False
            refused = stranger.post(site.link, data=form, timeout=10)
        assert refused.status_code == 400
        assert 'data-outcome="invalid"' in refused.text
        assert 'data-reason="csrf"' in refused.text
        assert site.approvals.decision is None

        # the cookie of another page load does not match this form's token
        other = requests.Session()
        other.trust_env = False
        other.get(site.link, timeout=10)
        mismatched = other.post(site.link, data=form, timeout=10)
        other.close()
        assert 'data-reason="csrf"' in mismatched.text
        assert site.approvals.decision is None

        # control: the browser that loaded the page, with its cookie, can decide
        accepted = session.post(site.link, data=form, timeout=10)
        assert accepted.status_code == 200
        assert 'data-outcome="approved"' in accepted.text
        assert site.approvals.decision == "approve"


def test_forged_and_expired_links_show_a_page_and_decide_nothing(site: Site, page: Any) -> None:
    parts = urlsplit(site.link)
    query = parse_qs(parts.query)
    forged = (
        f"{parts.scheme}://{parts.netloc}{parts.path}?e={int(query['e'][0]) + 60}&s="
        + (query["s"][0])
    )
    response = page.goto(forged)
    assert response.status == 400
    assert outcome(page) == "invalid"
    assert page.context.cookies() == []

    past = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    expired = links.sign_link(
        KEY, f"{parts.scheme}://{parts.netloc}", site.approvals.approval_id, past
    )
    response = page.goto(expired)
    assert response.status == 410
    assert outcome(page) == "expired"
    assert site.approvals.decision is None
