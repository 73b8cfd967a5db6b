"""`lethe erasure resend ID`: the approval email of a request AWAITING_APPROVAL sent again, by
the approval request function (moto: DynamoDB, Secrets Manager, SES), with the same link, the
same deadline and the same task token; the resent link decides once like the first one. The CLI
invokes the function through a Lambda client that runs the handler in-process."""

# ruff: noqa: F811 - the fixtures of test_approval_handlers, imported by name
from __future__ import annotations

import io
import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from lethe import cli
from lethe.commands import erasure_resend
from lethe_shared.erasure.approval_flow import ResendRefusedError, SesMailer, resend_approval
from lethe_shared.erasure.requests import DynamoErasureRequests, ErasureStatus
from tests.conftest import FakeLambdaContext
from tests.integration.approval_events import aimed, headers_of, outcome, sent_mail, stored_token
from tests.integration.test_approval_handlers import (  # noqa: F401 - fixtures
    APPROVER,
    RID,
    TOKEN,
    Event,
    _nothing_private_in_logs,
    ask,
    functions,
    link_in,
    requests,
)

pytestmark = pytest.mark.lambda_runtime


def resend(functions: tuple[Any, Any], **event: Any) -> dict[str, Any]:
    answer: dict[str, Any] = functions[0].handler(
        {"action": "resend", "request_id": RID, **event}, FakeLambdaContext()
    )
    return answer


def test_resend_emails_the_same_link_and_changes_no_deadline_or_token(
    functions: tuple[Any, Any],
    requests: DynamoErasureRequests,
    load_event: Event,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("APPROVER_EMAILS", f"{APPROVER},second@example.com")
    ask(functions, load_event)
    first = {m["To"]: link_in(m) for m in sent_mail()}
    before = requests.get(RID)
    assert before is not None

    assert resend(functions) == {"request_id": RID, "resent": [APPROVER, "second@example.com"]}
    assert resend(functions, approver="SECOND@example.com") == {
        "request_id": RID,
        "resent": ["second@example.com"],
    }

    messages = sent_mail()
    assert [m["To"] for m in messages[2:]] == [APPROVER, "second@example.com", "second@example.com"]
    assert all(link_in(m) == first[m["To"]] for m in messages[2:])  # the very same links
    after = requests.get(RID)
    assert after is not None
    assert after.status is ErasureStatus.AWAITING_APPROVAL
    assert after.approval == before.approval  # same deadline, same links
    assert stored_token(after) == TOKEN
    resent = [h for h in after.history if h.by == "lethe erasure resend"]
    assert [h.detail for h in resent] == [
        "approval email sent again to 2 approver(s); deadline unchanged",
        "approval email sent again to 1 approver(s); deadline unchanged",
    ]
    assert "links" not in after.public()["approval"]  # never shown


def test_the_resent_link_approves_once(
    functions: tuple[Any, Any], requests: DynamoErasureRequests, load_event: Event
) -> None:
    ask(functions, load_event)
    resend(functions)
    link = link_in(sent_mail()[-1])
    shown = functions[1].handler(
        aimed(load_event("approval_page_get.json"), link), FakeLambdaContext()
    )
    cookie = headers_of(shown)["Set-Cookie"].split(";", 1)[0]
    (csrf,) = set(re.findall(r'name="csrf_token" value="([^"]+)"', shown["body"]))
    (code,) = re.findall(r'<code id="confirmation-code">([^<]+)</code>', shown["body"])
    post = aimed(load_event("approval_page_post.json"), link)
    post["headers"]["Cookie"] = cookie
    post["multiValueHeaders"]["Cookie"] = [cookie]
    from urllib.parse import urlencode  # noqa: PLC0415

    post["body"] = urlencode({"csrf_token": csrf, "confirmation": code, "decision": "approve"})
    decided = functions[1].handler(post, FakeLambdaContext())
    assert (decided["statusCode"], outcome(decided)) == (200, "approved")

    # decided: nothing more to resend, nothing sent
    sent = len(sent_mail())
    answer = resend(functions)
    assert answer["not_found"] is False
    assert "is APPROVED: only a request AWAITING_APPROVAL" in answer["refused"]
    assert len(sent_mail()) == sent


def test_resend_refusals_send_nothing(
    functions: tuple[Any, Any], requests: DynamoErasureRequests, load_event: Event
) -> None:
    # before the approval was asked for (REPORTED): no email to send again
    assert "is REPORTED" in resend(functions)["refused"]
    ask(functions, load_event)
    sent = len(sent_mail())
    assert resend(functions, request_id="er-20261122T100000Z-ffffffff")["not_found"] is True
    assert "is not an approver" in resend(functions, approver="mallory@example.com")["refused"]
    # links an older Lethe emailed were not recorded: cancel and file again
    record = requests.get(RID)
    assert record is not None
    approval = {k: v for k, v in record.approval.items() if k != "links"}
    requests.update(RID, {"approval": approval})
    assert "did not record them" in resend(functions)["refused"]
    assert len(sent_mail()) == sent


def test_resend_after_the_deadline_is_refused(
    functions: tuple[Any, Any], requests: DynamoErasureRequests, load_event: Event
) -> None:
    ask(functions, load_event)
    record = requests.get(RID)
    assert record is not None
    later = datetime.fromisoformat(record.approval["deadline"]) + timedelta(seconds=1)
    import boto3  # noqa: PLC0415

    with pytest.raises(ResendRefusedError, match=r"deadline .* has passed"):
        resend_approval(
            RID,
            requests=requests,
            mailer=SesMailer(boto3.client("ses"), "lethe@example.com"),
            approvers=[APPROVER],
            signing_key=b"s" * 64,
            base_url="https://abc123.execute-api.us-east-1.amazonaws.com/local",
            now=later.astimezone(UTC),
        )


# ---------------------------------------------------------------------------------- the CLI


class _InProcessLambda:
    """A Lambda client whose invoke runs the approval request handler (as the local cloud's)."""

    def __init__(self, handler: Any) -> None:
        self.handler = handler
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def invoke(self, FunctionName: str, Payload: bytes) -> dict[str, Any]:
        event = json.loads(Payload)
        self.calls.append((FunctionName, event))
        result = self.handler(event, FakeLambdaContext())
        return {"StatusCode": 200, "Payload": io.BytesIO(json.dumps(result).encode())}


class _Target:
    def __init__(self, client: _InProcessLambda) -> None:
        self._client = client

    def client(self, service: str) -> Any:
        assert service == "lambda"
        return self._client

    def output(self, name: str) -> str:
        return {"StackStage": "local"}[name]


def test_the_cli_resends_through_the_function(
    functions: tuple[Any, Any],
    requests: DynamoErasureRequests,
    load_event: Event,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    client = _InProcessLambda(functions[0].handler)
    monkeypatch.setattr(erasure_resend, "resolve", lambda args: _Target(client))
    ask(functions, load_event)
    capsys.readouterr()

    code = cli.main(["erasure", "resend", RID, "--state-file", "unused.json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    # (the in-process handler prints its metrics line first, as Lambda would to its log)
    assert out.endswith(f"{RID}: approval email sent again to 1 approver(s)\n  {APPROVER}\n")
    assert client.calls == [
        ("lethe-local-approval-request", {"action": "resend", "request_id": RID})
    ]
    assert len(sent_mail()) == 2

    code = cli.main(["erasure", "resend", RID, "--approver", "x@example.com", "--state-file", "u"])
    assert (code, "not sent: x@example.com is not an approver") == (
        1,
        capsys.readouterr().err.removeprefix("lethe: error: ").split(" of request")[0],
    )
    code = cli.main(["erasure", "resend", "er-20261122T100000Z-ffffffff", "--state-file", "u"])
    assert code == 3
    assert cli.main(["erasure", "resend", "u-SECRET-1001", "--state-file", "u"]) == 2
    assert "u-SECRET-1001" not in capsys.readouterr().err
