"""Captured SES mail of the local cloud, as `lethe local mail` shows it.

moto's SES keeps every sent message in its backend (`SESBackend.sent_messages`): `Message` for
SendEmail / SESv2 Simple content, `RawMessage` for SendRawEmail / SESv2 Raw content,
`TemplateMessage` for SendTemplatedEmail. This module turns them into
``{"to", "subject", "text", "html", "links"}`` items.

The CLI runs in another process than the cloud. moto's generic ``/moto-api/data.json`` cannot
serve them: it serializes every model in the server and fails with HTTP 500 as soon as a Lambda
function exists (moto's LambdaFunction.docker_client property tries to reach Docker). So the
local cloud reads the backend in its own process (`captured_mail`) and serves the list on its
control endpoint (``GET <control_url>/mail``, see lethe.localcloud.cloud); the CLI fetches it
with `fetch_mail`.

Fidelity: moto stores only one body for a simple message (the HTML part when there is one, the
text part otherwise). A body that looks like HTML is reported as ``html`` with its text
rendering as ``text``. Raw MIME messages keep both parts: send multipart/alternative mail
(SendRawEmail) for exact text and HTML.
"""

from __future__ import annotations

import email
import email.policy
import html as html_lib
import json
import re
import urllib.request
from email.message import EmailMessage
from email.utils import getaddresses
from html.parser import HTMLParser
from typing import Any, TypedDict


class MailItem(TypedDict):
    to: list[str]
    subject: str
    text: str
    html: str
    links: list[str]


_URL_IN_TEXT = re.compile(r"https?://[^\s<>\"'()\[\]{}]+")
_TRAILING_PUNCTUATION = ".,;:!?"
_HTML_TAG = re.compile(r"<\s*(html|body|p|a|div|br|table|span|h[1-6])\b", re.IGNORECASE)


class _HrefParser(HTMLParser):
    """Collects href targets and the visible text of an HTML body."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.hrefs: list[str] = []
        self.text: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in {"script", "style"}:
            self._skip += 1
        if tag in {"br", "p", "div", "tr", "li", "h1", "h2", "h3"}:
            self.text.append("\n")
        for name, value in attrs:
            if name == "href" and value:
                self.hrefs.append(value.strip())

    def handle_endtag(self, tag: str) -> None:
        if tag in {"script", "style"} and self._skip:
            self._skip -= 1

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.text.append(data)


def _parse_html(body: str) -> _HrefParser:
    parser = _HrefParser()
    parser.feed(body)
    parser.close()
    return parser


def html_to_text(body: str) -> str:
    lines = "".join(_parse_html(body).text).splitlines()
    return "\n".join(line.strip() for line in lines if line.strip())


def extract_links(text: str, html: str) -> list[str]:
    """Every http(s) URL in the HTML hrefs, then in the text; de-duplicated, in order."""
    found: list[str] = []
    hrefs = [html_lib.unescape(h) for h in _parse_html(html).hrefs] if html else []
    in_text = [m.group(0).rstrip(_TRAILING_PUNCTUATION) for m in _URL_IN_TEXT.finditer(text)]
    for url in [*hrefs, *in_text]:
        if url.lower().startswith(("http://", "https://")) and url not in found:
            found.append(url)
    return found


def _item(to: list[str], subject: str, text: str, html: str) -> MailItem:
    return {
        "to": to,
        "subject": subject,
        "text": text,
        "html": html,
        "links": extract_links(text, html),
    }


def _looks_like_html(body: str) -> bool:
    return bool(_HTML_TAG.search(body))


def _simple_item(destinations: dict[str, list[str]], subject: str, body: str) -> MailItem:
    to = list(destinations.get("ToAddresses") or _all_destinations(destinations))
    if _looks_like_html(body):
        return _item(to, subject, html_to_text(body), body)
    return _item(to, subject, body, "")


def _all_destinations(destinations: dict[str, list[str]]) -> list[str]:
    return [
        address
        for key in ("ToAddresses", "CcAddresses", "BccAddresses")
        for address in destinations.get(key, [])
    ]


def raw_item(raw: str, destinations: list[str]) -> MailItem:
    """A MIME message: To header (or the envelope destinations), subject, text and HTML parts."""
    message = email.message_from_string(raw, policy=email.policy.default)
    assert isinstance(message, EmailMessage)
    to = [address for _, address in getaddresses(message.get_all("To", [])) if address]
    text = _part(message, "plain")
    html = _part(message, "html")
    if not text and html:
        text = html_to_text(html)
    return _item(to or list(destinations), str(message.get("Subject", "")), text, html)


def _part(message: EmailMessage, subtype: str) -> str:
    part = message.get_body(preferencelist=(subtype,))
    if part is None or part.get_content_subtype() != subtype:
        return ""
    content = part.get_content()
    return content if isinstance(content, str) else content.decode("utf-8", "replace")


def _template_item(backend: Any, message: Any) -> MailItem:
    from moto.ses.template import parse_template  # noqa: PLC0415 - only the cloud process has moto state

    template = backend.templates.get(message.template, {})
    data = json.loads(message.template_data or "{}")
    subject = parse_template(str(template.get("subject_part", "")), data)
    text = parse_template(str(template.get("text_part", "")), data)
    html = parse_template(str(template.get("html_part", "")), data)
    return _item(_all_destinations(message.destinations), subject, text or html_to_text(html), html)


def message_item(backend: Any, message: Any) -> MailItem | None:
    """One of moto's sent messages as a mail item (None for kinds Lethe never sends)."""
    kind = type(message).__name__
    if kind == "Message":
        return _simple_item(message.destinations, message.subject, message.body)
    if kind == "RawMessage":
        return raw_item(message.raw_data, list(message.destinations))
    if kind == "TemplateMessage":
        return _template_item(backend, message)
    return None


def captured_mail() -> list[MailItem]:
    """Every message sent through the moto SES backends of this process, in sending order."""
    from moto.ses.models import ses_backends  # noqa: PLC0415 - only the cloud process has moto state

    items: list[MailItem] = []
    for account in list(ses_backends.values()):
        for backend in list(account.values()):
            for message in list(backend.sent_messages):
                item = message_item(backend, message)
                if item is not None:
                    items.append(item)
    return items


def fetch_mail(control_url: str, timeout: float = 10.0) -> list[MailItem]:
    """The captured mail of a running local cloud, from its control endpoint."""
    url = control_url.rstrip("/") + "/mail"
    if not url.startswith("http://127.0.0.1:"):
        raise ValueError(f"not a local control endpoint: {control_url}")
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - checked above
        items: list[MailItem] = json.loads(response.read())
    return items


def summary(items: list[MailItem]) -> str:
    """Readable listing for `lethe local mail` without --json."""
    if not items:
        return "no mail captured"
    blocks = []
    for number, item in enumerate(items, start=1):
        lines = [
            f"#{number} To: {', '.join(item['to'])}",
            f"   Subject: {item['subject']}",
            *(f"   Link: {link}" for link in item["links"]),
            "",
            *(f"   {line}" for line in item["text"].splitlines()),
        ]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)
