"""The REST API retry policy (lethe.api_retry) and Target.call_api's use of it (issue 24, "Safe
filing"): which answers and errors are retried, how long it waits, and that every attempt
sends the same key and body under a new signature."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from typing import Any

import botocore.auth
import pytest
import requests
from urllib3.exceptions import MaxRetryError, NewConnectionError, ProtocolError

from lethe import api_retry
from lethe import target as target_module
from lethe.api_retry import (
    BACKOFF_CAP_SECONDS,
    MAX_ATTEMPTS,
    MAX_TOTAL_WAIT_SECONDS,
    ApiUnavailableError,
    Attempt,
    backoff_delay,
    send_with_retry,
)
from lethe.errors import ExitCode


class Answer:
    """A stand-in for requests.Response."""

    def __init__(self, status: int, body: Any = None, headers: dict[str, str] | None = None):
        self.status_code = status
        self.headers = headers or {}
        self._body = body if body is not None else {}
        self.text = json.dumps(self._body)

    def json(self) -> Any:
        return self._body


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    taken: list[float] = []
    monkeypatch.setattr(api_retry, "_sleep", taken.append)
    return taken


def script(*steps: Answer | Exception) -> tuple[Callable[[float], Any], list[float]]:
    """A `send` that plays `steps` in order (the last repeats) and records its time-outs."""
    timeouts: list[float] = []
    queue = list(steps)

    def send(timeout: float) -> Any:
        timeouts.append(timeout)
        step = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(step, Exception):
            raise step
        return step

    return send, timeouts


def refused() -> requests.ConnectionError:
    reason = NewConnectionError(None, "Failed to establish a new connection: refused")  # type: ignore[arg-type]
    return requests.ConnectionError(MaxRetryError(None, "/x", reason))  # type: ignore[arg-type]


def dropped() -> requests.ConnectionError:
    return requests.ConnectionError(ProtocolError("Connection aborted.", ConnectionResetError()))


# ------------------------------------------------------------------- what is retried


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504])
def test_throttling_and_server_errors_are_retried_until_an_answer(
    sleeps: list[float], status: int
) -> None:
    send, timeouts = script(Answer(status), Answer(status), Answer(202, {"ok": 1}))
    attempts: list[Attempt] = []
    response = send_with_retry(
        send, what="POST /x", repeatable=True, attempts=attempts, notify=lambda _: None
    )
    assert response.status_code == 202
    assert [a.status for a in attempts] == [status, status, 202]
    assert len(timeouts) == 3
    assert len(sleeps) == 2


@pytest.mark.parametrize("status", [200, 202, 301, 400, 401, 403, 404, 409, 422])
def test_any_other_status_is_an_answer_and_never_retried(sleeps: list[float], status: int) -> None:
    send, timeouts = script(Answer(status), Answer(200))
    response = send_with_retry(send, what="POST /x", repeatable=True, notify=lambda _: None)
    assert response.status_code == status
    assert len(timeouts) == 1
    assert sleeps == []


@pytest.mark.parametrize(
    ("error", "delivered"),
    [
        (requests.exceptions.ReadTimeout("read timed out"), True),
        (requests.exceptions.ConnectTimeout("connect timed out"), False),
        (refused(), False),
        (dropped(), True),
        (requests.exceptions.ChunkedEncodingError("cut"), True),
    ],
)
def test_time_outs_and_lost_connections_are_retried(
    sleeps: list[float], error: Exception, delivered: bool
) -> None:
    send, timeouts = script(error, Answer(202))
    attempts: list[Attempt] = []
    send_with_retry(send, what="POST /x", repeatable=True, attempts=attempts, notify=print)
    assert len(timeouts) == 2
    assert attempts[0].status is None
    assert attempts[0].maybe_delivered is delivered  # whether it may have been filed


def test_a_tls_error_is_not_retried(sleeps: list[float]) -> None:
    send, timeouts = script(requests.exceptions.SSLError("bad certificate"), Answer(202))
    with pytest.raises(ApiUnavailableError):
        send_with_retry(send, what="GET /x", repeatable=True, notify=print)
    assert len(timeouts) == 1


def test_a_call_that_is_not_repeatable_gets_one_attempt(sleeps: list[float]) -> None:
    send, timeouts = script(requests.exceptions.ReadTimeout("t"), Answer(202))
    with pytest.raises(ApiUnavailableError) as raised:
        send_with_retry(send, what="POST /x", repeatable=False, notify=print)
    assert len(timeouts) == 1
    assert raised.value.maybe_delivered


@pytest.mark.parametrize(
    ("method", "headers", "repeatable"),
    [
        ("GET", None, True),
        ("PUT", None, True),
        ("DELETE", None, True),
        ("POST", None, False),
        ("POST", {"Idempotency-Key": "k"}, True),
        ("POST", {"idempotency-key": "k"}, True),
        ("PATCH", {"Content-Type": "application/json"}, False),
    ],
)
def test_only_idempotent_methods_or_keyed_calls_are_repeatable(
    method: str, headers: dict[str, str] | None, repeatable: bool
) -> None:
    assert api_retry.is_repeatable(method, headers) is repeatable


# ------------------------------------------------------------------------ how long


def test_backoff_doubles_with_equal_jitter_and_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(api_retry, "_random", lambda: 1.0)
    assert [backoff_delay(n) for n in range(1, 5)] == [0.5, 1.0, 2.0, 4.0]
    assert backoff_delay(30) == BACKOFF_CAP_SECONDS
    monkeypatch.setattr(api_retry, "_random", lambda: 0.0)
    assert [backoff_delay(n) for n in range(1, 5)] == [0.25, 0.5, 1.0, 2.0]  # never zero
    assert backoff_delay(1, retry_after=3.0) == 3.0  # Retry-After is honoured...
    assert backoff_delay(1, retry_after=3600.0) == BACKOFF_CAP_SECONDS  # ...within the cap


def test_attempts_are_bounded_and_the_last_failure_is_named(sleeps: list[float]) -> None:
    send, timeouts = script(requests.exceptions.ReadTimeout("t"))
    with pytest.raises(ApiUnavailableError) as raised:
        send_with_retry(send, what="POST /erasure-requests", repeatable=True, notify=print)
    error = raised.value
    assert len(timeouts) == MAX_ATTEMPTS
    assert len(sleeps) == MAX_ATTEMPTS - 1
    assert sum(sleeps) <= MAX_TOTAL_WAIT_SECONDS
    assert error.maybe_delivered
    assert error.exit_code == ExitCode.FAILURE
    assert not error.answered
    assert str(error) == (
        f"POST /erasure-requests: no usable answer from the API after {MAX_ATTEMPTS} attempts "
        "(last: read timed out after 30 s)"
    )


def test_the_total_wait_is_capped_even_when_the_api_asks_for_more(sleeps: list[float]) -> None:
    send, timeouts = script(Answer(503, headers={"Retry-After": "3600"}))
    with pytest.raises(ApiUnavailableError) as raised:
        send_with_retry(send, what="GET /x", repeatable=True, notify=print)
    assert sleeps == [BACKOFF_CAP_SECONDS, BACKOFF_CAP_SECONDS]  # a third 8 s would pass 20 s
    assert len(timeouts) == 3
    assert raised.value.answered
    assert raised.value.last.status == 503


def test_nothing_delivered_exits_4(sleeps: list[float]) -> None:
    send, _ = script(refused(), Answer(429), requests.exceptions.ConnectTimeout("t"))
    with pytest.raises(ApiUnavailableError) as raised:
        send_with_retry(send, what="GET /x", repeatable=True, notify=print)
    assert not raised.value.maybe_delivered  # a 429 is throttling before the function
    assert raised.value.exit_code == ExitCode.UNREACHABLE


def test_the_read_timeout_comes_from_lethe_api_timeout(
    sleeps: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LETHE_API_TIMEOUT", "0.25")
    send, timeouts = script(Answer(200))
    send_with_retry(send, what="GET /x", repeatable=True)
    assert timeouts == [0.25]
    monkeypatch.setenv("LETHE_API_TIMEOUT", "soon")
    assert api_retry.read_timeout() == api_retry.READ_TIMEOUT_SECONDS


def test_each_retry_is_announced_with_its_key(sleeps: list[float]) -> None:
    lines: list[str] = []
    send, _ = script(requests.exceptions.ReadTimeout("t"), Answer(202))
    send_with_retry(
        send, what="POST /x", repeatable=True, idempotency_key="lethe-k1", notify=lines.append
    )
    [line] = lines
    assert line.startswith("POST /x: read timed out after 30 s (attempt 1 of 5); retrying in ")
    assert line.endswith(" with the same Idempotency-Key lethe-k1")


# ------------------------------------------------------------- Target.call_api's attempts


@pytest.fixture
def ticking_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """botocore's signing clock, one second later at every signature."""
    now = [dt.datetime(2026, 11, 27, 16, 0, tzinfo=dt.UTC)]

    def current() -> dt.datetime:
        now[0] += dt.timedelta(seconds=1)
        return now[0]

    monkeypatch.setattr(botocore.auth, "get_current_datetime", current)


def test_call_api_sends_the_same_key_and_body_signed_anew_each_attempt(
    monkeypatch: pytest.MonkeyPatch, sleeps: list[float], ticking_clock: None
) -> None:
    sent: list[dict[str, Any]] = []
    outcomes: list[Any] = [
        requests.exceptions.ReadTimeout("t"),
        dropped(),
        Answer(503),
        Answer(202, {"request_id": "er-1", "duplicate": True}),
    ]

    def request(method: str, url: str, **kwargs: Any) -> Any:
        sent.append(dict(kwargs, method=method, url=url))
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    monkeypatch.setattr(requests, "request", request)
    target = target_module.Target(
        outputs={},
        region="eu-west-1",
        api_url="https://api.example.com/prod",
        credentials={"aws_access_key_id": "testing", "aws_secret_access_key": "testing"},
    )
    attempts: list[Attempt] = []
    body = {"subject_ids": ["u-1"], "reason": "r", "requested_by": "dpo"}
    status, answer = target.call_api(
        "POST", "/erasure-requests", body, headers={"Idempotency-Key": "k-1"}, attempts=attempts
    )

    assert (status, answer) == (202, {"request_id": "er-1", "duplicate": True})
    assert len(sent) == 4
    assert len(attempts) == 4
    assert {s["url"] for s in sent} == {"https://api.example.com/prod/erasure-requests"}
    assert {s["data"] for s in sent} == {json.dumps(body)}
    assert {s["headers"]["Idempotency-Key"] for s in sent} == {"k-1"}
    assert len({s["headers"]["X-Amz-Date"] for s in sent}) == 4  # signed at each attempt
    assert len({s["headers"]["Authorization"] for s in sent}) == 4
    assert {s["timeout"] for s in sent} == {(api_retry.CONNECT_TIMEOUT_SECONDS, 30.0)}


def test_call_api_does_not_retry_a_post_without_a_key(
    monkeypatch: pytest.MonkeyPatch, sleeps: list[float]
) -> None:
    calls: list[str] = []

    def request(method: str, url: str, **kwargs: Any) -> Any:
        calls.append(method)
        raise requests.exceptions.ReadTimeout("t")

    monkeypatch.setattr(requests, "request", request)
    target = target_module.Target(
        outputs={},
        region="eu-west-1",
        api_url="https://api.example.com/prod",
        credentials={"aws_access_key_id": "testing", "aws_secret_access_key": "testing"},
    )
    with pytest.raises(ApiUnavailableError):
        target.call_api("POST", "/erasure-requests/er-1/cancel", {"requested_by": "x"})
    assert calls == ["POST"]
