"""Retries of the CLI's REST API calls: what is retried, how long it waits, what it says.

`Target.call_api` sends every call through `send_with_retry`. A call is retried only when
repeating it cannot do a thing twice: a GET, HEAD, PUT or DELETE, or a call that carries an
`Idempotency-Key` (the CLI gives every state-changing POST one: `erasure request`, `erasure
cancel`). Each attempt is a new request, signed again (a SigV4 signature carries a timestamp),
with the same method, URL, headers and body.

Retried: a connect or read time-out, a connection refused, reset or closed without an answer, a
429 and any 5xx. Never retried: any other status (2xx, 3xx, 4xx), a TLS error. At most
`MAX_ATTEMPTS` attempts; before retry n (1, 2, ...) it waits a random time between half and all
of `min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2**(n-1))` ("equal jitter": a burst of
clients spreads out), at least what a Retry-After header asks (capped the same way), and it
stops early rather than wait more than `MAX_TOTAL_WAIT_SECONDS` in all.

When the attempts run out `ApiUnavailableError` says whether any attempt may have reached the
API (`maybe_delivered`: a read time-out, a connection closed after the request was sent, a 5xx
or a 429 after one of those), so the command can tell the user whether something may have been
done and how to repeat it safely. Its exit status is 4 (unreachable) when no attempt can have
reached the API, 1 otherwise.

The read time-out is `READ_TIMEOUT_SECONDS` (API Gateway ends an integration after 29 s), or
`LETHE_API_TIMEOUT` seconds when that variable is set (tests set it short).
"""

from __future__ import annotations

import os
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import requests

from lethe.errors import CommandError, ExitCode

MAX_ATTEMPTS: Final = 5  # attempts per call, the first included
BACKOFF_BASE_SECONDS: Final = 0.5  # the first retry waits 0.25-0.5 s, then 0.5-1, 1-2, 2-4 s
BACKOFF_CAP_SECONDS: Final = 8.0  # no single wait is longer (Retry-After included)
MAX_TOTAL_WAIT_SECONDS: Final = 20.0  # the waits of one call add up to at most this
CONNECT_TIMEOUT_SECONDS: Final = 10.0
READ_TIMEOUT_SECONDS: Final = 30.0  # API Gateway's own integration time-out is 29 s
TIMEOUT_VARIABLE: Final = "LETHE_API_TIMEOUT"
#: Methods that are safe to repeat whatever they carry (RFC 9110 idempotent methods).
IDEMPOTENT_METHODS: Final = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
IDEMPOTENCY_HEADER: Final = "Idempotency-Key"

# Seams for tests: the wait between attempts and the jitter's random source.
_sleep: Callable[[float], None] = time.sleep
_random: Callable[[], float] = random.random


def read_timeout() -> float:
    """`LETHE_API_TIMEOUT` seconds when set to a positive number, else READ_TIMEOUT_SECONDS."""
    text = os.environ.get(TIMEOUT_VARIABLE, "")
    try:
        value = float(text)
    except ValueError:
        return READ_TIMEOUT_SECONDS
    return value if value > 0 else READ_TIMEOUT_SECONDS


def is_repeatable(method: str, headers: dict[str, str] | None) -> bool:
    """Whether a call may be sent again after a failure: an idempotent method, or a call that
    carries an Idempotency-Key (the API then files it at most once)."""
    return method.upper() in IDEMPOTENT_METHODS or any(
        name.lower() == IDEMPOTENCY_HEADER.lower() for name in (headers or {})
    )


def retryable_status(status: int) -> bool:
    """429 (throttled) and every 5xx are retried; any other status is an answer."""
    return status == 429 or status >= 500


@dataclass(frozen=True)
class Attempt:
    """One attempt's outcome: the status it got, or the failure (no answer)."""

    status: int | None
    failure: str | None  # what went wrong, in words: never the request's body
    maybe_delivered: bool  # the API may have received (and acted on) this attempt

    @property
    def text(self) -> str:
        return self.failure if self.failure is not None else f"HTTP {self.status}"


#: Failures of `requests`, in the order they are matched: (type, retried?, what went wrong,
#: may the API have received the request?). A connection never made delivered nothing.
_FAILURES: Final[tuple[tuple[type[requests.RequestException], bool, str, bool], ...]] = (
    (requests.exceptions.SSLError, False, "TLS error", False),  # retrying cannot fix it
    (requests.exceptions.ConnectTimeout, True, "connect timed out", False),
    (requests.exceptions.ReadTimeout, True, "read timed out after {timeout:g} s", True),
    (requests.exceptions.ConnectionError, True, "connection closed without an answer", True),
    (requests.exceptions.ChunkedEncodingError, True, "answer cut off", True),
)


def classify(error: requests.RequestException, timeout: float) -> tuple[bool, Attempt]:
    """(retry it?, the attempt) for an exception of `requests`. A connection that was never
    made cannot have delivered the request; any other failure may have."""
    if isinstance(error, requests.exceptions.ConnectionError) and _never_connected(error):
        return True, Attempt(None, "could not connect", False)
    for kind, retry, text, delivered in _FAILURES:
        if isinstance(error, kind):
            return retry, Attempt(None, text.format(timeout=timeout), delivered)
    return False, Attempt(None, type(error).__name__, True)


def _never_connected(error: requests.exceptions.ConnectionError) -> bool:
    """The connection was refused, or the host not found: urllib3's NewConnectionError (or a
    subclass), matched by name, since urllib3 is requests' dependency rather than Lethe's."""
    reason = error.args[0] if error.args else None
    reason = getattr(reason, "reason", reason)  # urllib3's MaxRetryError wraps the cause
    return any(kind.__name__ == "NewConnectionError" for kind in type(reason).__mro__)


def backoff_delay(retry: int, retry_after: float | None = None) -> float:
    """The wait before retry `retry` (1 for the second attempt): equal jitter on a capped
    exponential, and at least a Retry-After (capped too)."""
    ceiling = min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2.0 ** (retry - 1))
    delay = ceiling / 2 + _random() * ceiling / 2
    if retry_after is not None:
        delay = max(delay, min(retry_after, BACKOFF_CAP_SECONDS))
    return delay


def _retry_after(response: requests.Response) -> float | None:
    try:
        return max(0.0, float(str(response.headers.get("Retry-After", ""))))
    except (TypeError, ValueError, AttributeError):
        return None  # absent, or an HTTP date: the backoff alone decides


class ApiUnavailableError(CommandError):
    """No usable answer after every attempt. `maybe_delivered`: an attempt may have reached the
    API (then it may have acted); exit status 4 when none can have, 1 otherwise."""

    def __init__(self, what: str, attempts: list[Attempt]) -> None:
        self.what = what
        self.attempts = list(attempts)
        self.maybe_delivered = any(a.maybe_delivered for a in attempts)
        self.exit_code = ExitCode.FAILURE if self.maybe_delivered else ExitCode.UNREACHABLE
        super().__init__(self.summary())

    @property
    def last(self) -> Attempt:
        return self.attempts[-1]

    @property
    def answered(self) -> bool:
        """The last attempt got a status (429 or 5xx): the API is up but would not answer."""
        return self.last.status is not None

    def add_hint(self, hint: str) -> None:
        """Say what to do next after the summary (the message shown)."""
        self.args = (f"{self.summary()}: {hint}",)

    def summary(self) -> str:
        count = len(self.attempts)
        tries = f"{count} attempts" if count > 1 else "1 attempt"
        return f"{self.what}: no usable answer from the API after {tries} (last: {self.last.text})"


Notify = Callable[[str], None]


def _to_stderr(line: str) -> None:
    sys.stderr.write(f"lethe: {line}\n")
    sys.stderr.flush()


def send_with_retry(
    send: Callable[[float], requests.Response],
    *,
    what: str,
    repeatable: bool,
    idempotency_key: str | None = None,
    attempts: list[Attempt] | None = None,
    notify: Notify | None = None,
    max_attempts: int = MAX_ATTEMPTS,
) -> requests.Response:
    """Call `send(read_timeout)` (which signs and sends one attempt) until it gets an answer
    that is not retried, at most `max_attempts` times (once when not `repeatable`). Returns
    that response; raises ApiUnavailableError when the attempts or the total wait run out.
    Every attempt is appended to `attempts` when given; each retry is announced through
    `notify` (stderr by default) with `what` and the `idempotency_key` it is sent with again."""
    log = attempts if attempts is not None else []
    say = notify or _to_stderr
    limit = max_attempts if repeatable else 1
    timeout = read_timeout()
    waited = 0.0
    again = f" with the same {IDEMPOTENCY_HEADER} {idempotency_key}" if idempotency_key else ""
    while True:
        retry_after: float | None = None
        try:
            response = send(timeout)
        except requests.RequestException as error:
            retry, attempt = classify(error, timeout)
            log.append(attempt)
            if not retry:
                raise ApiUnavailableError(what, log) from None
        else:
            if not retryable_status(response.status_code):
                log.append(Attempt(response.status_code, None, True))
                return response
            # a 429 is API Gateway's throttling, before the function: it delivered nothing new
            delivered = response.status_code != 429
            log.append(Attempt(response.status_code, None, delivered))
            retry_after = _retry_after(response)
        if len(log) >= limit:
            raise ApiUnavailableError(what, log)
        delay = backoff_delay(len(log), retry_after)
        if waited + delay > MAX_TOTAL_WAIT_SECONDS:
            raise ApiUnavailableError(what, log)
        say(
            f"{what}: {log[-1].text} (attempt {len(log)} of {limit}); retrying in "
            f"{delay:.1f} s{again}"
        )
        _sleep(delay)
        waited += delay
