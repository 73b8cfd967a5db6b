"""`lethe erasure resume ID` against a scripted API: the route, the Idempotency-Key it sends
(given, or a fresh one so that its retries are safe), what it prints, and a refusal's reason
with exit 1. The route itself: tests/integration/test_erasure_resume_api.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from lethe import cli
from lethe.api_retry import IDEMPOTENCY_HEADER

STATE_MACHINE = "arn:aws:states:us-east-1:123456789012:stateMachine:lethe-local-erasure"


class FakeApi:
    """What the CLI's target answers: scripted (status, body) per call, calls recorded."""

    def __init__(self, *answers: tuple[int, dict[str, Any]]) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str, str, dict[str, str]]] = []

    def call_api(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        self.calls.append((method, path, dict(kwargs.get("headers") or {})))
        return self.answers.pop(0)


@pytest.fixture
def fake_api(monkeypatch: pytest.MonkeyPatch) -> Callable[..., FakeApi]:
    def install(*answers: tuple[int, dict[str, Any]]) -> FakeApi:
        api = FakeApi(*answers)
        monkeypatch.setattr("lethe.commands.erasure_resume.resolve", lambda args: api)
        return api

    return install


RID = "er-20261122T100000Z-0a1b2c3d"


def test_the_cli_resumes_and_prints_the_run(
    fake_api: Callable[..., FakeApi], capsys: pytest.CaptureFixture[str]
) -> None:
    arn = f"{STATE_MACHINE.replace(':stateMachine:', ':execution:')}:erasure-{RID}-resume-1"
    api = fake_api(
        (202, {"request_id": RID, "status": "FAILED",
               "resumed": {"run": 2, "execution_arn": arn, "repeated": False}}),
    )  # fmt: skip

    assert cli.main(["erasure", "resume", RID, "--idempotency-key", "k-9"]) == 0

    assert api.calls == [("POST", f"/erasure-requests/{RID}/resume", {IDEMPOTENCY_HEADER: "k-9"})]
    assert capsys.readouterr().out.startswith(f"{RID}: resumed: run 2, execution {arn}")


def test_the_cli_says_why_a_resume_is_refused(
    fake_api: Callable[..., FakeApi], capsys: pytest.CaptureFixture[str]
) -> None:
    message = f"request {RID}: its approval of x expired at y: file a new request"
    api = fake_api((409, {"message": message}))

    assert cli.main(["erasure", "resume", RID]) == 1

    (call_made,) = api.calls
    assert call_made[2][IDEMPOTENCY_HEADER]  # a fresh key, so that retries are safe
    assert message in capsys.readouterr().err
