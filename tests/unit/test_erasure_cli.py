"""`lethe erasure ...` against a fake deployment: what is sent, what is printed, exit codes.

Every command runs through `run`, which also checks that the raw subject id never appears in
stdout or stderr."""

from __future__ import annotations

import base64
import copy
import datetime as dt
import hashlib
import io
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
from botocore.exceptions import NoCredentialsError
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, utils

from lethe import cli
from lethe import target as target_module
from lethe.api_retry import ApiUnavailableError, Attempt
from lethe.commands import ExitCode, erasure
from lethe_shared.erasure import certificate as cf

SECRET = "u-SECRET-1001"
SECRET_VALUE = "acme-SECRET-tenant"
RID = "er-20261122T100000Z-0a1b2c3d"
KEY_ARN = "arn:aws:kms:eu-west-1:123456789012:key/cert-key"
CERT_URL = "s3://lethe-reports/certificates/er-1.json"
T0 = dt.datetime(2026, 11, 22, 10, 0, tzinfo=dt.UTC)
H1 = hashlib.sha256(b"subject-1").hexdigest()


# ------------------------------------------------------------------------------ fakes


@dataclass
class Call:
    method: str
    path: str
    body: Any
    headers: dict[str, str] | None
    query: dict[str, str] | None


Answer = tuple[int, dict[str, Any]]


@dataclass
class FakeTarget:
    """call_api answers from `routes`: (method, path) -> answers, one per call (the last
    repeats). client() returns the fakes in `clients`. `lost` (method, path) -> n: each such
    call reports n attempts whose answer was lost (read time-outs) before the one answered."""

    routes: dict[tuple[str, str], list[Answer]] = field(default_factory=dict)
    clients: dict[str, Any] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    lost: dict[tuple[str, str], int] = field(default_factory=dict)
    # the stack's outputs: the certificate key --verify pins
    outputs: dict[str, str] = field(default_factory=lambda: {"ErasureCertificateKeyArn": KEY_ARN})

    def output(self, name: str) -> str:
        return self.outputs[name]

    def call_api(
        self,
        method: str,
        path: str,
        body: Any | None = None,
        *,
        headers: dict[str, str] | None = None,
        query: dict[str, str] | None = None,
        attempts: list[Attempt] | None = None,
    ) -> Answer:
        self.calls.append(Call(method, path, copy.deepcopy(body), headers, query))
        answers = self.routes[(method, path)]
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if attempts is not None:
            lost = Attempt(None, "read timed out after 30 s", True)
            attempts.extend([lost] * self.lost.get((method, path), 0))
            attempts.append(Attempt(answer[0], None, True))
        return answer

    def client(self, service: str) -> Any:
        return self.clients[service]


class FakeSts:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    def get_caller_identity(self) -> dict[str, str]:
        if self.fail:
            raise NoCredentialsError()
        return {"Arn": "arn:aws:iam::123456789012:user/dpo"}


class FakeS3:
    def __init__(self, objects: dict[tuple[str, str], bytes]) -> None:
        self.objects = objects

    def get_object(self, Bucket: str, Key: str) -> dict[str, Any]:
        return {"Body": io.BytesIO(self.objects[(Bucket, Key)])}


class MemorySigner:
    """An in-memory P-256 key signing SHA-256 digests, as KMS does with MessageType=DIGEST."""

    def __init__(self, key_id: str = KEY_ARN) -> None:
        self.key_id = key_id
        self.private_key = ec.generate_private_key(ec.SECP256R1())

    def sign(self, digest: bytes) -> bytes:
        return self.private_key.sign(digest, ec.ECDSA(utils.Prehashed(hashes.SHA256())))

    def verify(self, digest: bytes, signature: bytes) -> bool:
        try:
            self.private_key.public_key().verify(
                signature, digest, ec.ECDSA(utils.Prehashed(hashes.SHA256()))
            )
        except InvalidSignature:
            return False
        return True

    def public_key_der(self) -> bytes:
        return self.private_key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )


class FakeKms:
    """KMS Verify and GetPublicKey over a MemorySigner; records what was called."""

    class KMSInvalidSignatureException(Exception):
        pass

    def __init__(self, signer: MemorySigner) -> None:
        self.signer = signer
        self.exceptions = self
        self.calls: list[str] = []

    def verify(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append("verify")
        assert kwargs["KeyId"] == self.signer.key_id
        assert kwargs["MessageType"] == "DIGEST"
        if not self.signer.verify(kwargs["Message"], kwargs["Signature"]):
            raise self.KMSInvalidSignatureException("invalid")
        return {"SignatureValid": True}

    def get_public_key(self, KeyId: str) -> dict[str, Any]:
        self.calls.append("get_public_key")
        assert KeyId == self.signer.key_id
        return {"PublicKey": self.signer.public_key_der()}


# ---------------------------------------------------------------------------- helpers


HAPPY_PATH = ("RECEIVED", "REPORTED", "AWAITING_APPROVAL", "APPROVED", "ERASING", "COMPLETED")


def history(status: str) -> list[dict[str, str]]:
    """The history of a request now in `status` (REJECTED, EXPIRED, FAILED after approval)."""
    path = (
        HAPPY_PATH[: HAPPY_PATH.index(status) + 1]
        if status in HAPPY_PATH
        else (*HAPPY_PATH[:3], status)
    )
    return [
        {
            "status": one,
            "at": f"2026-11-22T10:0{n}:00+00:00",
            "by": "dpo" if n == 0 else "workflow",
            "detail": "3 objects" if one == "REPORTED" else "",
        }
        for n, one in enumerate(path)
    ]


def record(status: str = "AWAITING_APPROVAL", **overrides: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "request_id": RID,
        "status": status,
        "created_at": "2026-11-22T10:00:00+00:00",
        "updated_at": "2026-11-22T10:05:00+00:00",
        "requested_by": "dpo@example.com",
        "reason": "GDPR art. 17",
        "subject_hashes": [H1],
        "subject_count": 1,
        "history": history(status),
        "outcome": "",
        "report": {
            "manifest_url": "s3://lethe-reports/manifests/er-1.json",
            "manifest_sha256": "cd" * 32,
            "summary_text_url": "s3://lethe-reports/manifests/er-1.txt",
            "summary_html_url": "s3://lethe-reports/manifests/er-1.html",
            "objects": 3,
            "versions": 5,
            "rows": 7,
            "datasets": [
                {"dataset_id": "reviews", "zone": "lake", "objects": 2, "versions": 3, "rows": 4},
                {"dataset_id": "reviews", "zone": "raw", "objects": 1, "versions": 2, "rows": 3},
            ],
        },
        "approval": {
            "deadline": "2026-11-29T10:02:00+00:00",
            "approvers": 2,
            "decided_by": "",
            "decided_at": "",
            "decision": "",
        },
        "result": {},
        "certificate": {},
        "error": {},
        "execution_arn": "arn:aws:states:eu-west-1:123456789012:execution:erasure:er-1",
    }
    doc.update(overrides)
    return doc


def completed(**certificate: Any) -> dict[str, Any]:
    return record(
        "COMPLETED",
        result={
            "objects": 2,
            "rewritten": 1,
            "deleted": 1,
            "rows_removed": 5,
            "versions_purged": 3,
            "results_url": "s3://lethe-reports/results/er-1.json",
            "verification_url": "s3://lethe-reports/verification/er-1.json",
        },
        certificate={
            "url": CERT_URL,
            "html_url": "s3://lethe-reports/certificates/er-1.html",
            "sha256": "",
            "key_id": KEY_ARN,
        }
        | certificate,
    )


def make_envelope(signer: MemorySigner, request_id: str = RID, **more: Any) -> dict[str, Any]:
    cert = cf.ErasureCertificate.model_validate(
        {
            **more,
            "certificate_id": "cert-0001",
            "request_id": request_id,
            "issued_at": T0 + dt.timedelta(hours=2),
            "requested_by": "dpo@example.com",
            "approved_by": "approver@example.com",
            "approved_at": T0,
            "report_sha256": "cd" * 32,
            "subject_hashes": [H1],
            "objects": [
                {
                    "dataset_id": "reviews",
                    "zone": "lake",
                    "bucket": "lethe-lake",
                    "key": "reviews/part-0.parquet",
                    "versions_before": [
                        {"version_id": "v1", "etag": '"e1"'},
                        {"version_id": "v2", "etag": '"e2"'},
                    ],
                    "version_after": {"version_id": "v3", "etag": '"e3"'},
                    "rows_before": 10,
                    "rows_removed": 3,
                    "rows_after": 7,
                    "versions_purged": 2,
                },
                {
                    "dataset_id": "reviews",
                    "zone": "raw",
                    "bucket": "lethe-raw",
                    "key": "reviews/2026/11/01/a.jsonl.gz",
                    "versions_before": [{"version_id": "r1", "etag": '"x1"'}],
                    "version_after": None,
                    "rows_before": 2,
                    "rows_removed": 2,
                    "rows_after": 0,
                    "versions_purged": 1,
                },
            ],
            "totals": {"objects": 2, "rows_removed": 5, "versions_purged": 3},
            "verification": {
                "objects_verified": 2,
                "matching_rows_found": 0,
                "verified_at": T0 + dt.timedelta(hours=1),
            },
        }
    )
    return cf.sign_certificate(cert, signer)


@dataclass
class Outcome:
    code: int
    out: str
    err: str


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeTarget:
    target = FakeTarget(clients={"sts": FakeSts()})
    monkeypatch.setattr(erasure, "resolve", lambda args: target)
    monkeypatch.delenv("LETHE_REQUESTED_BY", raising=False)
    return target


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """A fake clock that the wait loop's sleep advances; holds the sleeps taken."""
    now = [0.0]
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    monkeypatch.setattr(erasure, "_sleep", sleep)
    monkeypatch.setattr(erasure, "_clock", lambda: now[0])
    return sleeps


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Callable[..., Outcome]:
    def _run(*argv: str) -> Outcome:
        try:
            code = cli.main(["erasure", *argv])
        except SystemExit as exc:  # argparse's own errors
            code = int(exc.code or 0)
        captured = capsys.readouterr()
        for secret in (SECRET, SECRET_VALUE):
            assert secret not in captured.out
            assert secret not in captured.err
        return Outcome(code, captured.out, captured.err)

    return _run


POST = ("POST", "/erasure-requests")
GET = ("GET", f"/erasure-requests/{RID}")
ACCEPTED: Answer = (202, {"request_id": RID, "status": "RECEIVED", "duplicate": False})


# ---------------------------------------------------------------------------- request


def test_request_sends_the_body_and_prints_only_the_id(
    fake: FakeTarget, run: Callable[..., Outcome], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LETHE_REQUESTED_BY", "dpo@example.com")
    fake.routes[POST] = [ACCEPTED]
    result = run(
        "request",
        "--subject",
        SECRET,
        "--subject",
        "u-2",
        "--subject-key",
        f"tenant={SECRET_VALUE},user_id=42",
        "--subject-key",
        r"tenant=a\,b,note=x=y\\z",
        "--reason",
        "GDPR art. 17",
        "--idempotency-key",
        "ticket-77",
    )
    assert result.code == 0
    assert result.out == f"{RID}\n"
    assert result.err == ""
    [call] = fake.calls
    assert (call.method, call.path) == POST
    assert call.body == {
        "subject_ids": [SECRET, "u-2"],
        "subject_keys": [
            {"tenant": SECRET_VALUE, "user_id": "42"},  # numbers are sent as strings
            {"tenant": "a,b", "note": "x=y\\z"},
        ],
        "reason": "GDPR art. 17",
        "requested_by": "dpo@example.com",
    }
    assert call.headers == {"Idempotency-Key": "ticket-77"}


def test_request_without_idempotency_key_sends_a_fresh_random_one_and_asks_sts_who(
    fake: FakeTarget, run: Callable[..., Outcome]
) -> None:
    # Until issue 24 no header was sent without --idempotency-key: a lost answer could not be
    # repeated safely. Now a fresh random key goes with every filing.
    fake.routes[POST] = [ACCEPTED]
    assert run("request", "--subject", SECRET).out == f"{RID}\n"
    assert run("request", "--subject", SECRET).out == f"{RID}\n"
    first, second = (call.headers or {} for call in fake.calls)
    assert set(first) == {"Idempotency-Key"}
    assert re.fullmatch(r"lethe-[A-Za-z0-9_-]{24}", first["Idempotency-Key"])
    assert first["Idempotency-Key"] != second["Idempotency-Key"]  # random, not from the ids
    call = fake.calls[0]
    assert call.body["requested_by"] == "arn:aws:iam::123456789012:user/dpo"
    assert call.body["subject_keys"] == []
    assert call.body["reason"] == ""


def test_request_dataset_flags_scope_the_request(
    fake: FakeTarget, run: Callable[..., Outcome]
) -> None:
    fake.routes[POST] = [ACCEPTED]

    result = run(
        "request", "--subject", SECRET, "--dataset", "customers", "--dataset", "orders",
        "--dataset", "customers",
    )  # fmt: skip

    assert result.code == 0
    [call] = fake.calls
    assert call.body["datasets"] == ["customers", "orders"]  # each once, in the order given
    assert call.body["subject_ids"] == [SECRET]


def test_request_without_dataset_flags_sends_no_scope(
    fake: FakeTarget, run: Callable[..., Outcome]
) -> None:
    fake.routes[POST] = [ACCEPTED]

    assert run("request", "--subject", SECRET).code == 0
    assert "datasets" not in fake.calls[0].body  # every registered dataset


def test_requested_by_option_wins(fake: FakeTarget, run: Callable[..., Outcome]) -> None:
    fake.routes[POST] = [ACCEPTED]
    fake.clients["sts"] = FakeSts(fail=True)
    assert run("request", "--subject", SECRET, "--requested-by", "legal").code == 0
    assert fake.calls[0].body["requested_by"] == "legal"


def test_request_without_identity_says_how_to_name_the_requester(
    fake: FakeTarget, run: Callable[..., Outcome]
) -> None:
    fake.clients["sts"] = FakeSts(fail=True)
    result = run("request", "--subject", SECRET)
    assert result.code == 1
    assert "--requested-by" in result.err
    assert fake.calls == []


def test_request_json_prints_the_answer(fake: FakeTarget, run: Callable[..., Outcome]) -> None:
    fake.routes[POST] = [ACCEPTED]
    result = run("request", "--subject", SECRET, "--json")
    assert json.loads(result.out) == ACCEPTED[1]


def test_duplicate_is_noted_on_stderr(fake: FakeTarget, run: Callable[..., Outcome]) -> None:
    fake.routes[POST] = [(202, {"request_id": RID, "status": "REPORTED", "duplicate": True})]
    result = run("request", "--subject", SECRET, "--idempotency-key", "k")
    assert result.out == f"{RID}\n"
    assert "Idempotency-Key" in result.err


@pytest.mark.parametrize(
    "argv",
    [
        ["request"],
        ["request", SECRET],  # an id without --subject
        ["request", "--subject", "x", SECRET],
        ["request", "--subject-key", SECRET],
        ["request", "--subject-key", f"tenant={SECRET_VALUE},"],
        ["request", "--subject-key", f"=x,tenant={SECRET_VALUE}"],
        ["request", "--subject-key", f"tenant={SECRET_VALUE},tenant=b"],
        ["request", "--subject-key", f"tenant={SECRET_VALUE}\\x"],
    ],
)
def test_usage_errors_exit_2_without_echoing_ids(
    fake: FakeTarget, run: Callable[..., Outcome], argv: list[str]
) -> None:
    result = run(*argv)
    assert result.code == 2
    assert fake.calls == []


def test_bad_request_prints_the_field_errors(fake: FakeTarget, run: Callable[..., Outcome]) -> None:
    fake.routes[POST] = [
        (
            400,
            {
                "message": "invalid erasure request",
                "errors": [
                    "reason: must not contain a subject id (it is stored as written)",
                    # a server that did echo an id (it must not): redacted all the same
                    f"subject_ids[0]: {SECRET.lower()} is odd",
                ],
            },
        )
    ]
    result = run("request", "--subject", SECRET, "--reason", "x")
    assert result.code == 1
    assert "request refused (400): invalid erasure request" in result.err
    assert "reason: must not contain a subject id" in result.err
    assert "subject_ids[0]: <subject> is odd" in result.err


def test_idempotency_conflict(fake: FakeTarget, run: Callable[..., Outcome]) -> None:
    fake.routes[POST] = [(409, {"message": "Idempotency-Key k was used with another body"})]
    result = run("request", "--subject", SECRET, "--idempotency-key", "k")
    assert result.code == 1
    assert "(409): Idempotency-Key k was used with another body" in result.err


# ------------------------------------------------------------- lost answers (issue 24)


def _unavailable(fake: FakeTarget, *attempts: Attempt) -> None:
    def call_api(method: str, path: str, body: Any = None, **kwargs: Any) -> Answer:
        fake.calls.append(Call(method, path, body, kwargs.get("headers"), kwargs.get("query")))
        raise ApiUnavailableError(f"{method} {path}", list(attempts))

    fake.call_api = call_api  # type: ignore[method-assign]


TIMED_OUT = Attempt(None, "read timed out after 30 s", True)
REFUSED = Attempt(None, "could not connect", False)


def test_a_filing_without_answer_says_it_may_be_filed_and_how_to_repeat_it(
    fake: FakeTarget, run: Callable[..., Outcome]
) -> None:
    _unavailable(fake, TIMED_OUT, Attempt(503, None, True), TIMED_OUT)

    result = run("request", "--subject", SECRET, "--subject-key", f"tenant={SECRET_VALUE}")

    assert result.code == 1
    key = fake.calls[0].headers["Idempotency-Key"]  # type: ignore[index]
    assert "after 3 attempts (last: read timed out after 30 s)" in result.err
    assert "MAY HAVE BEEN FILED" in result.err
    assert f"its Idempotency-Key is {key}" in result.err
    assert f"`--idempotency-key {key}`" in result.err
    assert result.out == ""


def test_a_filing_that_reached_nothing_says_it_was_not_filed_and_exits_4(
    fake: FakeTarget, run: Callable[..., Outcome]
) -> None:
    _unavailable(fake, REFUSED, Attempt(None, "connect timed out", False))
    result = run("request", "--subject", SECRET)
    assert result.code == ExitCode.UNREACHABLE
    assert "was NOT filed" in result.err
    assert "MAY HAVE" not in result.err


def test_a_given_key_is_the_one_sent_and_named(
    fake: FakeTarget, run: Callable[..., Outcome]
) -> None:
    _unavailable(fake, TIMED_OUT)
    result = run("request", "--subject", SECRET, "--idempotency-key", "ticket-77")
    assert fake.calls[0].headers == {"Idempotency-Key": "ticket-77"}
    assert "`--idempotency-key ticket-77`" in result.err


def test_a_retry_that_finds_its_own_filing_says_it_was_filed_once(
    fake: FakeTarget, run: Callable[..., Outcome]
) -> None:
    fake.routes[POST] = [(202, {"request_id": RID, "status": "RECEIVED", "duplicate": True})]
    fake.lost[POST] = 1
    result = run("request", "--subject", SECRET)
    assert (result.code, result.out) == (0, f"{RID}\n")
    assert "filed once, by an earlier attempt of this command" in result.err


def test_a_refusal_after_a_lost_answer_says_an_earlier_attempt_may_have_filed_it(
    fake: FakeTarget, run: Callable[..., Outcome]
) -> None:
    fake.routes[POST] = [(403, {"message": "credentials expired"})]
    fake.lost[POST] = 1
    result = run("request", "--subject", SECRET)
    assert result.code == 1
    assert "request refused (403): credentials expired" in result.err
    key = fake.calls[0].headers["Idempotency-Key"]  # type: ignore[index]
    assert f"an earlier attempt may have filed it: its Idempotency-Key is {key}" in result.err


def test_a_wait_keeps_polling_through_an_api_that_stays_unavailable(
    fake: FakeTarget, run: Callable[..., Outcome], clock: list[float]
) -> None:
    answers = iter([None, (200, record("COMPLETED"))])

    def call_api(method: str, path: str, body: Any = None, **kwargs: Any) -> Answer:
        if method == "POST":
            return ACCEPTED
        answer = next(answers)
        if answer is None:
            raise ApiUnavailableError("GET", [Attempt(503, None, True)] * 5)
        return answer

    fake.call_api = call_api  # type: ignore[method-assign]
    assert run("request", "--subject", SECRET, "--wait").code == 0


# ------------------------------------------------------------------------------- wait


def _progress(*statuses: str) -> list[Answer]:
    return [(200, record(s)) for s in statuses]


@pytest.mark.parametrize(
    ("final", "code"),
    [("COMPLETED", 0), ("REJECTED", 5), ("EXPIRED", 5), ("FAILED", 1)],
)
def test_request_wait_exit_codes(
    fake: FakeTarget,
    run: Callable[..., Outcome],
    clock: list[float],
    final: str,
    code: int,
) -> None:
    fake.routes[POST] = [ACCEPTED]
    fake.routes[GET] = [
        *_progress("RECEIVED", "RECEIVED", "REPORTED", "AWAITING_APPROVAL"),
        (503, {"message": "try again"}),  # retried
        *_progress("AWAITING_APPROVAL", final),
    ]
    result = run("request", "--subject", SECRET, "--wait")
    assert result.code == code
    assert result.out == f"{RID}\n"
    lines = result.err.splitlines()
    assert [line.split()[0] for line in lines[:-1]] == [
        "RECEIVED",
        "REPORTED",
        "AWAITING_APPROVAL",
        final,
    ]
    assert lines[-1].startswith(f"{RID}: {final}")
    assert clock == [1.0, 1.5, 2.25, 3.375, 5.0625, 7.59375]  # grows, one sleep per poll


def test_wait_interval_stops_growing_at_ten_seconds(
    fake: FakeTarget, run: Callable[..., Outcome], clock: list[float]
) -> None:
    fake.routes[GET] = [*_progress(*["RECEIVED"] * 12), (200, record("COMPLETED"))]
    assert run("status", RID, "--wait").code == 0
    assert max(clock) == 10.0


def test_wait_times_out(fake: FakeTarget, run: Callable[..., Outcome], clock: list[float]) -> None:
    fake.routes[POST] = [ACCEPTED]
    fake.routes[GET] = _progress("AWAITING_APPROVAL")
    result = run("request", "--subject", SECRET, "--wait", "--timeout", "30")
    assert result.code == 1
    assert f"request {RID} is still AWAITING_APPROVAL after 30 s; it goes on" in result.err
    assert sum(clock) <= 30


def test_request_wait_json_prints_the_final_record(
    fake: FakeTarget, run: Callable[..., Outcome], clock: list[float]
) -> None:
    fake.routes[POST] = [ACCEPTED]
    fake.routes[GET] = [(200, completed())]
    result = run("request", "--subject", SECRET, "--wait", "--json")
    assert result.code == 0
    assert json.loads(result.out) == completed()


# ----------------------------------------------------------------------------- status


def test_status_text(fake: FakeTarget, run: Callable[..., Outcome]) -> None:
    fake.routes[GET] = [(200, record())]
    result = run("status", RID)
    assert result.code == 0
    out = result.out
    for text in (
        f"request       {RID}",
        "status        AWAITING_APPROVAL",
        "requested by  dpo@example.com",
        "created       2026-11-22T10:00:00+00:00",
        "subjects      1",
        "report        3 objects, 5 versions, 7 rows",
        f"sha256      {'cd' * 32}",
        "deadline 2026-11-29T10:02:00+00:00, 2 approvers",
        "history",
        "REPORTED          workflow  3 objects",
    ):
        assert text in out
    assert [line.split() for line in out.splitlines() if "reviews" in line] == [
        ["reviews", "lake", "2", "3", "4"],
        ["reviews", "raw", "1", "2", "3"],
    ]
    assert H1 not in out  # the hashes are in --json, not in the summary


def test_status_text_of_a_completed_and_a_failed_request(
    fake: FakeTarget, run: Callable[..., Outcome]
) -> None:
    done = completed()
    done["approval"] |= {
        "decision": "APPROVED",
        "decided_by": "approver@example.com",
        "decided_at": "2026-11-22T11:00:00+00:00",
    }
    fake.routes[GET] = [
        (200, done),
        (200, record("FAILED", error={"error": "States.TaskFailed", "cause": "erase job"})),
        (200, record("REJECTED", outcome="CANCELLED")),
    ]
    out = run("status", RID).out
    assert "decision    APPROVED by approver@example.com at 2026-11-22T11:00:00+00:00" in out
    assert "result        2 objects (1 rewritten, 1 deleted), 5 rows removed, 3 versions" in out
    assert f"certificate   {CERT_URL}" in out
    assert "error         States.TaskFailed: erase job" in run("status", RID).out
    assert "status        REJECTED (CANCELLED)" in run("status", RID).out


def test_status_json_is_the_record_as_returned(
    fake: FakeTarget, run: Callable[..., Outcome]
) -> None:
    fake.routes[GET] = [(200, record(extra_field={"new": 1}))]
    result = run("status", RID, "--json")
    assert json.loads(result.out) == record(extra_field={"new": 1})


def test_status_not_found(fake: FakeTarget, run: Callable[..., Outcome]) -> None:
    fake.routes[GET] = [(404, {"message": f"erasure request {RID} not found"})]
    result = run("status", RID)
    assert result.code == 3  # ExitCode.NOT_FOUND
    assert "not found" in result.err
    assert "lethe erasure list" in result.err


def test_status_refuses_what_is_not_a_request_id_without_echoing_it(
    fake: FakeTarget, run: Callable[..., Outcome]
) -> None:
    result = run("status", SECRET)
    assert result.code == 2
    assert "not a request id" in result.err
    assert fake.calls == []


def test_status_reads_a_retention_run_s_record_and_cancel_refuses_it(
    fake: FakeTarget, run: Callable[..., Outcome]
) -> None:
    """A retention run's record (rt-...) is read as the runbook says (`lethe erasure status
    rt-...`); only requests (er-...) can be cancelled."""
    run_id = "rt-orders-20261128T033000Z-a1b2c3"
    fake.routes[("GET", f"/erasure-requests/{run_id}")] = [
        (200, record("COMPLETED", request_id=run_id, kind="retention"))
    ]
    shown = run("status", run_id, "--json")
    refused = run("cancel", run_id)

    assert shown.code == 0, shown.err
    assert json.loads(shown.out)["request_id"] == run_id
    assert refused.code == 2
    assert "request ids look like er-..." in refused.err
    assert "rt-" not in refused.err  # cancelling a retention run is not offered
    assert [(c.method, c.path) for c in fake.calls] == [("GET", f"/erasure-requests/{run_id}")]


def test_status_wait_until_awaiting_approval(
    fake: FakeTarget, run: Callable[..., Outcome], clock: list[float]
) -> None:
    fake.routes[GET] = _progress("RECEIVED", "REPORTED", "AWAITING_APPROVAL", "APPROVED")
    result = run("status", RID, "--wait", "--until", "AWAITING_APPROVAL")
    assert result.code == 0
    assert "status        AWAITING_APPROVAL" in result.out
    assert len(fake.calls) == 3


def test_status_wait_until_a_status_already_passed(
    fake: FakeTarget, run: Callable[..., Outcome], clock: list[float]
) -> None:
    erasing = record("ERASING")
    erasing["history"].append({"status": "APPROVED", "at": "t", "by": "a", "detail": ""})
    fake.routes[GET] = [(200, erasing)]
    result = run("status", RID, "--wait", "--until", "AWAITING_APPROVAL", "--json")
    assert result.code == 0
    assert json.loads(result.out)["status"] == "ERASING"
    assert clock == []


def test_status_wait_until_stops_at_a_final_status(
    fake: FakeTarget, run: Callable[..., Outcome], clock: list[float]
) -> None:
    rejected = record("REJECTED", outcome="CANCELLED", history=[])
    fake.routes[GET] = [*_progress("RECEIVED"), (200, rejected)]
    result = run("status", RID, "--wait", "--until", "AWAITING_APPROVAL")
    assert result.code == 5  # ExitCode.NOT_ERASED


def test_status_until_needs_wait(fake: FakeTarget, run: Callable[..., Outcome]) -> None:
    assert run("status", RID, "--until", "COMPLETED").code == 2
    assert run("status", RID, "--wait", "--until", "SOMEWHERE").code == 2


# ------------------------------------------------------------------------------- list


def test_list_table(fake: FakeTarget, run: Callable[..., Outcome]) -> None:
    other = record("RECEIVED", request_id="er-20261121T090000Z-ffffffff", report={})
    fake.routes[("GET", "/erasure-requests")] = [(200, {"requests": [record(), other]})]
    result = run("list")
    assert result.code == 0
    header, first, second = result.out.splitlines()
    assert header.split() == ["REQUEST", "STATUS", "CREATED", "SUBJECTS", "ROWS"]
    assert first.split() == [RID, "AWAITING_APPROVAL", "2026-11-22T10:00:00+00:00", "1", "7"]
    assert second.split()[1:] == ["RECEIVED", "2026-11-22T10:00:00+00:00", "1", "-"]
    assert fake.calls[0].query is None


def test_list_by_status_as_json(fake: FakeTarget, run: Callable[..., Outcome]) -> None:
    fake.routes[("GET", "/erasure-requests")] = [(200, {"requests": [completed()]})]
    result = run("list", "--status", "COMPLETED", "--json")
    assert json.loads(result.out) == [completed()]
    assert fake.calls[0].query == {"status": "COMPLETED"}


def test_list_empty(fake: FakeTarget, run: Callable[..., Outcome]) -> None:
    fake.routes[("GET", "/erasure-requests")] = [(200, {"requests": []})]
    assert run("list", "--status", "FAILED").out == "no erasure requests with status FAILED\n"


# ----------------------------------------------------------------------------- cancel


CANCEL = ("POST", f"/erasure-requests/{RID}/cancel")


def test_cancel(fake: FakeTarget, run: Callable[..., Outcome]) -> None:
    fake.routes[CANCEL] = [(200, record("REJECTED", outcome="CANCELLED"))]
    result = run("cancel", RID, "--requested-by", "dpo@example.com")
    assert result.code == 0
    assert result.out == f"{RID}: REJECTED (CANCELLED)\n"
    assert fake.calls[0].body == {"requested_by": "dpo@example.com"}


def test_cancel_sends_a_fresh_idempotency_key(
    fake: FakeTarget, run: Callable[..., Outcome]
) -> None:
    fake.routes[CANCEL] = [(200, record("REJECTED", outcome="CANCELLED"))]
    assert run("cancel", RID).code == 0
    assert run("cancel", RID).code == 0
    keys = [(call.headers or {}).get("Idempotency-Key") for call in fake.calls]
    assert all(keys)
    assert keys[0] != keys[1]


def test_a_cancel_whose_answer_was_lost_reports_the_request_cancelled(
    fake: FakeTarget, run: Callable[..., Outcome]
) -> None:
    # the first attempt cancelled it, its answer was lost; the retry finds it REJECTED
    fake.routes[CANCEL] = [(409, {"message": "the request cannot be cancelled: it is REJECTED"})]
    fake.lost[CANCEL] = 1
    fake.routes[GET] = [(200, record("REJECTED", outcome="CANCELLED"))]
    result = run("cancel", RID)
    assert result.code == 0, result.err
    assert result.out == f"{RID}: REJECTED (CANCELLED)\n"
    assert "an earlier attempt of this command" in result.err


def test_a_cancel_whose_retry_finds_it_erasing_still_fails(
    fake: FakeTarget, run: Callable[..., Outcome]
) -> None:
    message = "the request cannot be cancelled: it is ERASING"
    fake.routes[CANCEL] = [(409, {"message": message})]
    fake.lost[CANCEL] = 1
    fake.routes[GET] = [(200, record("ERASING"))]
    result = run("cancel", RID)
    assert result.code == 1
    assert result.err == f"lethe: error: {message}\n"


def test_cancel_too_late(fake: FakeTarget, run: Callable[..., Outcome]) -> None:
    message = f"request {RID} cannot be cancelled: it is ERASING"
    fake.routes[CANCEL] = [(409, {"message": message})]
    result = run("cancel", RID)
    assert result.code == 1
    assert result.err == f"lethe: error: {message}\n"
    assert fake.calls[0].body == {"requested_by": "arn:aws:iam::123456789012:user/dpo"}


def test_cancel_by_a_principal_that_may_not_says_why(
    fake: FakeTarget, run: Callable[..., Outcome]
) -> None:
    message = "only the IAM principal that filed this request or an approver's may cancel it"
    fake.routes[CANCEL] = [(403, {"message": message})]
    result = run("cancel", RID)
    assert result.code == 1
    assert result.err == f"lethe: error: cannot cancel request {RID} (403): {message}\n"


# ------------------------------------------------------------------------ certificate


@pytest.fixture
def signer() -> MemorySigner:
    return MemorySigner()


def _with_certificate(
    fake: FakeTarget, signer: MemorySigner, envelope: dict[str, Any], **pointer: Any
) -> FakeKms:
    fake.routes[GET] = [(200, completed(**pointer))]
    body = json.dumps(envelope).encode()
    fake.clients["s3"] = FakeS3({("lethe-reports", "certificates/er-1.json"): body})
    kms = FakeKms(signer)
    fake.clients["kms"] = kms
    return kms


def test_certificate_summary(
    fake: FakeTarget, run: Callable[..., Outcome], signer: MemorySigner
) -> None:
    envelope = make_envelope(signer)
    kms = _with_certificate(fake, signer, envelope)
    result = run("certificate", RID)
    assert result.code == 0
    for text in (
        "certificate      cert-0001",
        f"request          {RID}",
        "issued           2026-11-22T12:00:00Z",
        "objects          2",
        "rows removed     5",
        "versions purged  3",
        "verification     2 objects scanned at 2026-11-22T11:00:00Z: 0 matching rows found",
        f"key id           {KEY_ARN}",
        f"signed digest    {envelope['signature']['digest_sha256']}",
    ):
        assert text in result.out
    assert kms.calls == []  # no --verify, no KMS


def test_certificate_json_and_html(
    fake: FakeTarget, run: Callable[..., Outcome], signer: MemorySigner, tmp_path: Path
) -> None:
    envelope = make_envelope(signer)
    _with_certificate(fake, signer, envelope)
    page = tmp_path / "certificate.html"
    result = run("certificate", RID, "--json", "--html", str(page))
    assert result.code == 0
    assert json.loads(result.out) == envelope
    assert page.read_text() == cf.render_certificate_html(envelope)
    assert f"wrote {page}" in result.err


@pytest.mark.parametrize("offline", [False, True])
def test_certificate_verifies(
    fake: FakeTarget, run: Callable[..., Outcome], signer: MemorySigner, offline: bool
) -> None:
    envelope = make_envelope(signer)
    kms = _with_certificate(fake, signer, envelope)
    result = run("certificate", RID, "--verify", *(["--offline"] if offline else []))
    assert result.code == 0
    digest = envelope["signature"]["digest_sha256"]
    assert result.out.splitlines()[-1] == (
        f"certificate verifies: signed by {KEY_ARN}, digest {digest}"
    )
    assert kms.calls == (["get_public_key"] if offline else ["verify"])


def test_certificate_verify_with_json_keeps_stdout_json(
    fake: FakeTarget, run: Callable[..., Outcome], signer: MemorySigner
) -> None:
    envelope = make_envelope(signer)
    _with_certificate(fake, signer, envelope)
    result = run("certificate", RID, "--verify", "--json")
    assert json.loads(result.out) == envelope
    assert "certificate verifies: signed by" in result.err


def _tamper_rows(envelope: dict[str, Any]) -> None:
    envelope["certificate"]["totals"]["rows_removed"] = 4


def _tamper_signature(envelope: dict[str, Any]) -> None:
    other = MemorySigner().sign(bytes.fromhex(envelope["signature"]["digest_sha256"]))
    envelope["signature"]["value"] = base64.b64encode(other).decode()


def _tamper_digest_too(envelope: dict[str, Any]) -> None:
    envelope["certificate"]["objects"][0]["rows_removed"] = 4
    envelope["signature"]["digest_sha256"] = cf.certificate_digest(envelope["certificate"]).hex()


@pytest.mark.parametrize(
    ("tamper", "reason"),
    [
        (_tamper_rows, "digest-mismatch"),
        (_tamper_signature, "bad-signature"),
        (_tamper_digest_too, "bad-signature"),
    ],
)
@pytest.mark.parametrize("offline", [False, True])
def test_tampered_certificate_fails(
    fake: FakeTarget,
    run: Callable[..., Outcome],
    signer: MemorySigner,
    tamper: Callable[[dict[str, Any]], None],
    reason: str,
    offline: bool,
) -> None:
    envelope = make_envelope(signer)
    tamper(envelope)
    _with_certificate(fake, signer, envelope)
    result = run("certificate", RID, "--verify", *(["--offline"] if offline else []))
    assert result.code == 1
    assert f"lethe: error: certificate does not verify: {reason}:" in result.err
    assert "certificate verifies" not in result.out


def test_certificate_of_another_request_fails(
    fake: FakeTarget, run: Callable[..., Outcome], signer: MemorySigner
) -> None:
    _with_certificate(fake, signer, make_envelope(signer, request_id="er-other"))
    result = run("certificate", RID, "--verify")
    assert result.code == 1
    assert "request-mismatch" in result.err


def test_certificate_names_the_subject_hash_key_it_was_hashed_with(
    fake: FakeTarget, run: Callable[..., Outcome], signer: MemorySigner
) -> None:
    # issue 23: the key version (fingerprint) is stamped on the certificate and checked against
    # the request record's
    envelope = make_envelope(signer, key_fingerprint="0123456789abcdef")
    _with_certificate(fake, signer, envelope)
    fake.routes[GET] = [(200, completed() | {"key_fingerprint": "0123456789abcdef"})] * 2
    result = run("certificate", RID, "--verify")
    assert result.code == 0, result.err
    assert "subjects         1 (keyed hashes, key 0123456789abcdef)" in result.out
    assert "(keyed hashes below, hashed with the key 0123456789abcdef)" in (
        cf.render_certificate_html(envelope)
    )

    fake.routes[GET] = [(200, completed() | {"key_fingerprint": "fedcba9876543210"})]
    result = run("certificate", RID, "--verify")
    assert result.code == 1
    assert "record-mismatch" in result.err
    assert "names key fingerprint 0123456789abcdef, the request record fedcba9876543210" in (
        result.err
    )


def test_certificate_signed_by_another_key_than_the_record_names(
    fake: FakeTarget, run: Callable[..., Outcome], signer: MemorySigner
) -> None:
    _with_certificate(fake, signer, make_envelope(signer), key_id="arn:aws:kms:other")
    result = run("certificate", RID, "--verify")
    assert result.code == 1
    assert "key-mismatch" in result.err


def test_certificate_sha256_of_the_record_is_checked(
    fake: FakeTarget, run: Callable[..., Outcome], signer: MemorySigner
) -> None:
    envelope = make_envelope(signer)
    stored = json.dumps(envelope).encode()
    _with_certificate(fake, signer, envelope, sha256=hashlib.sha256(stored).hexdigest())
    assert run("certificate", RID, "--verify").code == 0
    _with_certificate(fake, signer, envelope, sha256=envelope["signature"]["digest_sha256"])
    assert run("certificate", RID, "--verify").code == 0
    _with_certificate(fake, signer, envelope, sha256="00" * 32)
    result = run("certificate", RID, "--verify")
    assert result.code == 1
    assert "record-mismatch" in result.err


def test_no_certificate_before_completion(fake: FakeTarget, run: Callable[..., Outcome]) -> None:
    fake.routes[GET] = [(200, record("ERASING"))]
    result = run("certificate", RID)
    assert result.code == 1
    assert f"request {RID} has no certificate: it is ERASING" in result.err


def test_offline_needs_verify(fake: FakeTarget, run: Callable[..., Outcome]) -> None:
    assert run("certificate", RID, "--offline").code == 2


# -------------------------------------------------------------------- Target.call_api


def test_call_api_signs_headers_and_query(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: dict[str, Any] = {}

    class Response:
        status_code = 200

        def json(self) -> dict[str, Any]:
            return {"requests": []}

    def request(method: str, url: str, **kwargs: Any) -> Response:
        sent.update(kwargs, method=method, url=url)
        return Response()

    monkeypatch.setattr(requests, "request", request)
    target = target_module.Target(
        outputs={},
        region="eu-west-1",
        api_url="https://api.example.com/prod/",
        credentials={"aws_access_key_id": "testing", "aws_secret_access_key": "testing"},
    )
    status, body = target.call_api(
        "GET",
        "/erasure-requests",
        headers={"Idempotency-Key": "ticket 77"},
        query={"status": "AWAITING_APPROVAL", "a": "x y/z"},
    )
    assert (status, body) == (200, {"requests": []})
    assert sent["url"] == (
        "https://api.example.com/prod/erasure-requests?a=x%20y%2Fz&status=AWAITING_APPROVAL"
    )
    headers = sent["headers"]
    assert headers["Idempotency-Key"] == "ticket 77"
    signed = headers["Authorization"].split("SignedHeaders=")[1].split(",")[0].split(";")
    assert "idempotency-key" in signed
    assert "content-type" in signed


# -------------------------------------------------------------- an incomplete erasure

INCOMPLETE_GAP = {
    "dataset_id": "reviews",
    "bucket": "lethe-raw",
    "key": "reviews/2026/11/01/a.jsonl",
    "version_id": "v9",
    "reason": "unparseable_records",
    "count": 2,
    "detail": "2 record(s) that could not be parsed are kept as they are, their subjects unread "
    "(first at line 3)",
}


def incomplete() -> dict[str, Any]:
    """A request certified with a place not fully searched: FAILED, outcome INCOMPLETE."""
    done = completed()
    return done | {
        "status": "FAILED",
        "outcome": "INCOMPLETE",
        "result": done["result"] | {"not_searched": 1},
        "error": {
            "error": "ErasureIncomplete",
            "cause": "1 place(s) were not fully searched for the subjects (unparseable_records: "
            "1); the signed certificate (complete: false) and the audit record list each one",
        },
    }


def incomplete_envelope(signer: MemorySigner) -> dict[str, Any]:
    document = make_envelope(signer)["certificate"]
    document.update(complete=False, not_searched=[INCOMPLETE_GAP])
    return cf.sign_certificate(cf.ErasureCertificate.model_validate(document), signer)


def test_status_shows_an_incomplete_erasure(fake: FakeTarget, run: Callable[..., Outcome]) -> None:
    fake.routes[GET] = [(200, incomplete())]

    result = run("status", RID)

    assert result.code == 0
    assert "status        FAILED (INCOMPLETE)" in result.out
    assert (
        "  INCOMPLETE  1 place(s) not fully searched: `lethe erasure certificate ID` lists them"
    ) in result.out
    assert "error         ErasureIncomplete: 1 place(s) were not fully searched" in result.out


def test_waiting_for_an_incomplete_erasure_exits_1(
    fake: FakeTarget, run: Callable[..., Outcome], clock: list[float]
) -> None:
    fake.routes[GET] = [*_progress("ERASING"), (200, incomplete())]

    result = run("status", RID, "--wait")

    assert result.code == 1
    assert "FAILED (INCOMPLETE)" in result.err
    assert "status        FAILED (INCOMPLETE)" in result.out


def test_the_certificate_of_an_incomplete_erasure_lists_its_gaps_and_verifies(
    fake: FakeTarget, run: Callable[..., Outcome], signer: MemorySigner
) -> None:
    _with_certificate(fake, signer, incomplete_envelope(signer))
    fake.routes[GET] = [(200, incomplete())]

    result = run("certificate", RID, "--verify")

    # the signature verifies, but the erasure is INCOMPLETE: --verify fails closed (exit 1), so
    # `lethe erasure certificate ID --verify && echo done` does not say done
    assert result.code == 1
    assert (
        f"lethe: error: the signature is valid, but the erasure of request {RID} is INCOMPLETE: "
        "1 place(s) were not fully searched (the certificate lists them); the request did not "
        "complete"
    ) in result.err
    lines = result.out.splitlines()
    assert "complete         NO: INCOMPLETE, 1 place(s) not fully searched (below)" in lines
    at = lines.index("not fully searched")
    assert lines[at + 1 : at + 3] == [
        "  unparseable_records  2  reviews  s3://lethe-raw/reviews/2026/11/01/a.jsonl (version v9)",
        f"    {INCOMPLETE_GAP['detail']}",
    ]
    assert lines[-1].endswith(
        "; it certifies an INCOMPLETE erasure: 1 place(s) were not fully searched"
    )


@pytest.mark.parametrize("options", [["--offline"], ["--json"], []])
def test_verifying_an_incomplete_certificate_exits_non_zero_in_every_mode(
    fake: FakeTarget, run: Callable[..., Outcome], signer: MemorySigner, options: list[str]
) -> None:
    envelope = incomplete_envelope(signer)
    _with_certificate(fake, signer, envelope)
    fake.routes[GET] = [(200, incomplete())]

    result = run("certificate", RID, "--verify", *options)

    assert result.code == ExitCode.FAILURE
    assert "certificate verifies: signed by" in (result.err if "--json" in options else result.out)
    assert "the signature is valid, but the erasure" in result.err
    assert "is INCOMPLETE" in result.err
    if "--json" in options:
        assert json.loads(result.out) == envelope  # stdout stays the envelope


def test_reading_an_incomplete_certificate_without_verify_still_exits_0(
    fake: FakeTarget, run: Callable[..., Outcome], signer: MemorySigner
) -> None:
    _with_certificate(fake, signer, incomplete_envelope(signer))
    fake.routes[GET] = [(200, incomplete())]

    result = run("certificate", RID)

    assert result.code == 0
    assert "complete         NO: INCOMPLETE, 1 place(s) not fully searched (below)" in result.out


def test_a_complete_certificate_says_so(
    fake: FakeTarget, run: Callable[..., Outcome], signer: MemorySigner
) -> None:
    _with_certificate(fake, signer, make_envelope(signer))

    result = run("certificate", RID, "--verify")

    assert result.code == 0
    assert "complete         yes: every place was searched" in result.out
    assert "not fully searched" not in result.out
    assert "INCOMPLETE" not in result.out


def test_a_failed_request_that_is_not_incomplete_has_no_certificate(
    fake: FakeTarget, run: Callable[..., Outcome]
) -> None:
    fake.routes[GET] = [(200, record("FAILED", error={"error": "States.TaskFailed"}))]

    result = run("certificate", RID)

    assert result.code == 1
    assert f"request {RID} has no certificate: it is FAILED" in result.err


def test_the_cli_and_the_workflow_name_the_outcome_alike() -> None:
    from lethe.commands.erasure_certificate import INCOMPLETE  # noqa: PLC0415
    from lethe_shared.erasure import completion  # noqa: PLC0415

    assert INCOMPLETE == completion.INCOMPLETE


def test_request_refuses_one_column_per_subject_key_flag(
    fake: FakeTarget, run: Callable[..., Outcome]
) -> None:
    # issue 23: the form `index lookup` once took is refused the same way here, never filed
    result = run(
        "request", "--subject-key", f"tenant={SECRET_VALUE}", "--subject-key", "user_id=42"
    )
    assert result.code == 2
    assert fake.calls == []
    assert "--subject-key is one whole key per flag" in result.err
    assert "--subject-key tenant=...,user_id=..." in result.err
    assert SECRET_VALUE not in result.err

    # the same column in two flags is two subjects, not the other form
    fake.routes[POST] = [ACCEPTED]
    result = run(
        "request", "--subject-key", "user_id=1", "--subject-key", "user_id=2",
        "--requested-by", "dpo@example.com",
    )  # fmt: skip
    assert result.code == 0, result.err
    assert fake.calls[0].body["subject_keys"] == [{"user_id": "1"}, {"user_id": "2"}]
