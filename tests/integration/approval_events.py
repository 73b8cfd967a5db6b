"""What the approval handler tests share: API Gateway events aimed at an emailed link, the
parts of a handler's answer they read, and the approval emails SES captured in moto."""

from __future__ import annotations

import email
import email.policy
import re
from email.message import EmailMessage
from typing import Any
from urllib.parse import parse_qs, urlsplit

from moto.ses.models import ses_backends

from tests.integration.conftest import REGION

ACCOUNT = "123456789012"


def sent_mail() -> list[EmailMessage]:
    """Every message SES sent in this test (moto), parsed."""
    messages = []
    for message in ses_backends[ACCOUNT][REGION].sent_messages:
        parsed = email.message_from_string(message.raw_data, policy=email.policy.default)
        assert isinstance(parsed, EmailMessage)
        messages.append(parsed)
    return messages


def part(message: EmailMessage, subtype: str) -> str:
    body = message.get_body(preferencelist=(subtype,))
    assert body is not None
    assert body.get_content_subtype() == subtype
    return str(body.get_content())


def link_in(message: EmailMessage, api_url: str) -> str:
    (link,) = re.findall(rf"{re.escape(api_url)}/approvals/\S+", part(message, "plain"))
    return str(link)


def aimed(event: dict[str, Any], link: str) -> dict[str, Any]:
    """An approval page event for the path and query of `link`."""
    split = urlsplit(link)
    approval_id = split.path.rsplit("/", 1)[1]
    query = {k: v[0] for k, v in parse_qs(split.query).items()}
    event["path"] = f"/approvals/{approval_id}"
    event["pathParameters"] = {"approval_id": approval_id}
    event["requestContext"]["path"] = f"/local/approvals/{approval_id}"
    event["queryStringParameters"] = query
    event["multiValueQueryStringParameters"] = {k: [v] for k, v in query.items()}
    return event


def headers_of(response: dict[str, Any]) -> dict[str, str]:
    single = dict(response.get("headers") or {})
    multi = {k: ", ".join(v) for k, v in (response.get("multiValueHeaders") or {}).items()}
    return {**multi, **single}


def outcome(response: dict[str, Any]) -> str | None:
    found = re.search(r'data-outcome="([^"]+)"', response["body"])
    return found.group(1) if found else None


def stored_token(record: Any) -> str:
    """The task token a request record holds, opened: it must be stored sealed with the task
    token key (lethe_shared.erasure.task_tokens), never as it is. "" when there is none."""
    import os  # noqa: PLC0415

    import boto3  # noqa: PLC0415

    from lethe_shared.erasure.task_tokens import KmsTaskTokens, is_sealed  # noqa: PLC0415

    stored = str(record.task_token)
    if not stored:
        return ""
    assert is_sealed(stored), "the task token is stored as it is"
    key = os.environ["TASK_TOKEN_KEY_ARN"]
    return KmsTaskTokens(boto3.client("kms", region_name=REGION), key).open(stored)
