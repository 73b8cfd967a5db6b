"""Safe filing (issue 24): the real `lethe erasure ...` CLI against a real HTTP server on
127.0.0.1 that loses answers the way a loaded API does: it files the request and then answers
too late (after the client's read time-out), or closes the connection without answering.

The server keeps the erasure API's Idempotency-Key rules (same key and body: the same request,
`duplicate: true`; same key, another body: 409), records every key it saw, and never decides
anything by time: a late answer waits until the client's retry has arrived. The client's read
time-out is set short with LETHE_API_TIMEOUT, and the waits between attempts are recorded
instead of slept."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from lethe import api_retry, cli
from lethe.commands import ExitCode

SUBJECT = "u-SECRET-4242"
TENANT = "acme-SECRET-tenant"
LATE_ANSWER_LIMIT_SECONDS = 10.0  # a late answer waits for the retry, at most this long


@dataclass
class Seen:
    method: str
    path: str
    key: str | None
    body: str
    signed_key: bool  # the Idempotency-Key header is among the SigV4 signed headers


@dataclass
class FakeErasureApi:
    """The erasure API's filing and cancel rules, in memory. `plan` says what happens to the
    answers of the next state-changing calls, in order: "late", "drop" or "answer" (the
    default once the plan is used up)."""

    plan: list[str] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)
    requests: dict[str, dict[str, Any]] = field(default_factory=dict)
    keys: dict[str, tuple[str, str]] = field(default_factory=dict)  # key -> (body, request id)
    get_errors: list[int] = field(default_factory=list)  # statuses for the next GETs
    lock: threading.Lock = field(default_factory=threading.Lock)
    arrived: threading.Condition = field(init=False)

    def __post_init__(self) -> None:
        self.arrived = threading.Condition(self.lock)

    def note(self, seen: Seen) -> int:
        with self.arrived:
            self.seen.append(seen)
            self.arrived.notify_all()
            return len(self.seen)

    def wait_for_more_than(self, count: int) -> None:
        with self.arrived:
            self.arrived.wait_for(lambda: len(self.seen) > count, LATE_ANSWER_LIMIT_SECONDS)

    def file(self, key: str | None, body: str) -> tuple[int, dict[str, Any]]:
        with self.lock:
            if key is not None and key in self.keys:
                first_body, request_id = self.keys[key]
                if first_body != body:
                    return 409, {"message": "this Idempotency-Key was used for another body"}
                return 202, {"request_id": request_id, "status": "RECEIVED", "duplicate": True}
            request_id = f"er-test-{len(self.requests) + 1}"
            self.requests[request_id] = {
                "request_id": request_id,
                "status": "RECEIVED",
                "history": [{"status": "RECEIVED", "by": json.loads(body)["requested_by"]}],
                "subject_count": len(json.loads(body)["subject_ids"]),
            }
            if key is not None:
                self.keys[key] = (body, request_id)
            return 202, {"request_id": request_id, "status": "RECEIVED", "duplicate": False}

    def cancel(self, request_id: str) -> tuple[int, dict[str, Any]]:
        with self.lock:
            record = self.requests.get(request_id)
            if record is None:
                return 404, {"message": f"no erasure request {request_id}"}
            if record["status"] != "RECEIVED":
                return 409, {
                    "message": f"the request cannot be cancelled: it is {record['status']}"
                }
            record.update(status="REJECTED", outcome="CANCELLED")
            record["history"].append({"status": "REJECTED", "detail": "cancelled"})
            return 200, dict(record)

    def get(self, request_id: str) -> tuple[int, dict[str, Any]]:
        with self.lock:
            if self.get_errors:
                return self.get_errors.pop(0), {"message": "try again"}
            record = self.requests.get(request_id)
            if record is None:
                return 404, {"message": f"no erasure request {request_id}"}
            return 200, dict(record)

    def post(self, path: str, key: str | None, body: str) -> tuple[int, dict[str, Any]]:
        path = path.removeprefix("/prod")
        if path == "/erasure-requests":
            return self.file(key, body)
        if path.startswith("/erasure-requests/") and path.endswith("/cancel"):
            return self.cancel(path.split("/")[2])
        return 404, {"message": "no such route"}

    def next_plan(self) -> str:
        with self.lock:
            return self.plan.pop(0) if self.plan else "answer"

    @property
    def filed(self) -> list[str]:
        return sorted(self.requests)


def _handler(api: FakeErasureApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def _seen(self) -> tuple[str, int]:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length).decode() if length else ""
            authorization = self.headers.get("Authorization", "")
            signed = authorization.split("SignedHeaders=")[-1].split(",")[0].split(";")
            number = api.note(
                Seen(
                    self.command,
                    self.path,
                    self.headers.get("Idempotency-Key"),
                    body,
                    "idempotency-key" in signed,
                )
            )
            return body, number

        def _answer(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:  # the client gave up on this connection
                pass

        def do_POST(self) -> None:
            body, number = self._seen()
            status, payload = api.post(self.path, self.headers.get("Idempotency-Key"), body)
            plan = api.next_plan()
            if plan == "drop":  # done, but the connection closes without an answer
                self.close_connection = True
                return
            if plan == "late":  # done, but answered only after the client retried
                api.wait_for_more_than(number)
            self._answer(status, payload)

        def do_GET(self) -> None:
            self._seen()
            path = self.path.removeprefix("/prod")
            status, payload = api.get(path.split("/")[2])
            self._answer(status, payload)

    return Handler


@pytest.fixture
def api() -> Iterator[FakeErasureApi]:
    fake = FakeErasureApi()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    fake.port = server.server_address[1]  # type: ignore[attr-defined]
    try:
        yield fake
    finally:
        with fake.arrived:  # release a late answer still waiting
            fake.seen.append(Seen("", "", None, "", False))
            fake.arrived.notify_all()
        server.shutdown()
        server.server_close()


def _state_file(tmp_path: Path, port: int) -> Path:
    state = tmp_path / "state.json"
    state.write_text(
        json.dumps(
            {
                "outputs": {},
                "region": "us-east-1",
                "api_url": f"http://127.0.0.1:{port}/prod",
                "endpoint_url": "http://127.0.0.1:9",  # no AWS service is called
            }
        )
    )
    return state


@pytest.fixture
def lethe(
    api: FakeErasureApi,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Any:
    """Runs `lethe erasure ...` against the server; returns (exit code, stdout, stderr) and
    checks that no subject id was shown."""
    monkeypatch.setenv("LETHE_API_TIMEOUT", "0.5")
    monkeypatch.setattr(api_retry, "_sleep", lambda seconds: None)
    state = _state_file(tmp_path, api.port)  # type: ignore[attr-defined]

    def run(*argv: str, state_file: Path = state) -> tuple[int, str, str]:
        code = cli.main(["erasure", *argv, "--state-file", str(state_file)])
        out, err = capsys.readouterr()
        for secret in (SUBJECT, TENANT):
            assert secret not in out
            assert secret not in err
        return code, out, err

    return run


FILE = (
    "request", "--subject", SUBJECT, "--subject-key", f"tenant={TENANT},user_id=7",
    "--reason", "art. 17", "--requested-by", "dpo@example.com",
)  # fmt: skip


def _posts(api: FakeErasureApi) -> list[Seen]:
    return [s for s in api.seen if s.method == "POST"]


@pytest.mark.parametrize("lost", ["late", "drop"])
def test_a_lost_answer_is_retried_with_the_same_key_and_files_once(
    api: FakeErasureApi, lethe: Any, lost: str
) -> None:
    api.plan = [lost]

    code, out, err = lethe(*FILE)

    assert code == 0, err
    assert api.filed == ["er-test-1"]  # exactly one request filed
    assert out == "er-test-1\n"
    first, second = _posts(api)
    assert first.key is not None
    assert first.key == second.key
    assert first.body == second.body
    assert first.signed_key
    assert second.signed_key
    assert "(attempt 1 of 5); retrying in" in err
    assert f"with the same Idempotency-Key {first.key}" in err
    assert "filed once, by an earlier attempt of this command" in err


def test_no_answer_at_all_names_the_key_and_repeating_with_it_files_once(
    api: FakeErasureApi, lethe: Any
) -> None:
    api.plan = ["drop"] * api_retry.MAX_ATTEMPTS

    code, out, err = lethe(*FILE)

    assert code == ExitCode.FAILURE
    assert out == ""
    keys = {s.key for s in _posts(api)}
    assert len(_posts(api)) == api_retry.MAX_ATTEMPTS
    assert len(keys) == 1
    [key] = keys
    assert "MAY HAVE BEEN FILED" in err
    assert f"`--idempotency-key {key}`" in err
    assert api.filed == ["er-test-1"]  # the first attempt filed it

    # what the message says to do: the same command with that key
    code, out, err = lethe(*FILE, "--idempotency-key", str(key))

    assert code == 0, err
    assert out == "er-test-1\n"
    assert api.filed == ["er-test-1"]  # still one
    assert "this Idempotency-Key filed it before" in err


def test_another_body_under_the_same_key_is_refused(api: FakeErasureApi, lethe: Any) -> None:
    assert lethe(*FILE, "--idempotency-key", "ticket-9")[0] == 0
    code, _, err = lethe(*FILE, "--dataset", "orders", "--idempotency-key", "ticket-9")
    assert code == ExitCode.FAILURE
    assert "request refused (409)" in err
    assert api.filed == ["er-test-1"]


def test_without_a_key_each_filing_gets_its_own(api: FakeErasureApi, lethe: Any) -> None:
    assert lethe(*FILE)[1] == "er-test-1\n"
    assert lethe(*FILE)[1] == "er-test-2\n"  # two commands, two requests: as before
    first, second = _posts(api)
    assert first.key != second.key


def test_a_cancel_whose_answer_was_lost_ends_cancelled_once(
    api: FakeErasureApi, lethe: Any
) -> None:
    assert lethe(*FILE)[0] == 0
    api.plan = ["drop"]

    code, out, err = lethe("cancel", "er-test-1", "--requested-by", "dpo@example.com")

    assert code == 0, err
    assert out == "er-test-1: REJECTED (CANCELLED)\n"
    cancels = [s for s in _posts(api) if s.path.endswith("/cancel")]
    assert len(cancels) == 2
    assert cancels[0].key
    assert cancels[0].key == cancels[1].key
    history = api.requests["er-test-1"]["history"]
    assert [h["status"] for h in history] == ["RECEIVED", "REJECTED"]


def test_status_is_retried_through_throttling_and_server_errors(
    api: FakeErasureApi, lethe: Any
) -> None:
    assert lethe(*FILE)[0] == 0
    api.get_errors = [429, 503]
    code, out, err = lethe("status", "er-test-1", "--json")
    assert code == 0, err
    assert json.loads(out)["status"] == "RECEIVED"
    assert len([s for s in api.seen if s.method == "GET"]) == 3


def test_an_api_nobody_answers_on_is_unreachable_and_nothing_was_filed(
    lethe: Any, tmp_path: Path
) -> None:
    code, _out, err = lethe(*FILE, state_file=_state_file(tmp_path, 9))  # nothing listens on 9
    assert code == ExitCode.UNREACHABLE
    assert "was NOT filed" in err
    assert "could not connect" in err
