"""`requested_by` at intake: an e-mail address or an IAM principal ARN, on one line, never
echoed when refused (lethe_shared.erasure.requester, subjects.parse_request_body, intake)."""

from __future__ import annotations

import pytest

from lethe_shared.erasure.intake import file_request
from lethe_shared.erasure.requester import display_text, requested_by_problem
from lethe_shared.erasure.requests import (
    ErasureRequestBody,
    ErasureRequestError,
    parse_request_body,
)
from tests.fakes import MemoryErasureRequests

pytestmark = pytest.mark.lambda_runtime

KEY = b"k" * 32
FORMS = (
    "requested_by: Value error, requested_by must be an e-mail address (name@example.com) or "
    "an IAM principal ARN (arn:aws:iam::123456789012:user/name, "
    "arn:aws:sts::123456789012:assumed-role/role/session)"
)
CONTROL = (
    "requested_by: Value error, requested_by must not contain control or format characters "
    "(line breaks, tabs, invisible characters)"
)


class NoStarter:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def start(self, request_id: str) -> str:
        self.calls.append(request_id)
        return f"arn:aws:states:us-east-1:123456789012:execution:erasure:{request_id}"


@pytest.mark.parametrize(
    "value",
    [
        # what the tests, the demo and the samples send
        "privacy@example.com", "a@example.com", "dpo@example.com", "privacy-office@example.com",
        "p@x.io", "dpo@x.org", " DPO@example.com", "someone@example.com",
        "arn:aws:iam::123456789012:user/dpo",
        # what the CLI sends by default: `sts get-caller-identity`'s ARN (moto's, AWS's forms)
        "arn:aws:sts::123456789012:user/moto",
        "arn:aws:sts::123456789012:assumed-role/AWSReservedSSO_Admin_0a1b/jane.doe@example.com",
        "arn:aws:sts::123456789012:assumed-role/Admin/botocore-session-1700000000",
        "arn:aws:sts::123456789012:federated-user/bob",
        "arn:aws:iam::123456789012:root",
        "arn:aws:iam::123456789012:role/team/privacy/DpoRole",
        "arn:aws-us-gov:iam::123456789012:user/dpo",
        "first.last+erasure@mail.example.co.uk",
        "o'brien@example.com",
        "privacy@xn--bcher-kva.example",
    ],
)  # fmt: skip
def test_addresses_and_principal_arns_are_accepted(value: str) -> None:
    assert requested_by_problem(value) is None
    assert parse_request_body({"subject_ids": ["u-1"], "requested_by": value}).requested_by == (
        value
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("https://evil.example/approvals/x?e=1&s=2", FORMS),
        ("evil.example/approve", FORMS),
        ("Please approve at evil.example", FORMS),
        ("legal", FORMS),
        ("lethe index lookup", FORMS),
        ("dpo@example", FORMS),
        ("dpo@@example.com", FORMS),
        ("dpo@-example.com", FORMS),
        (".dpo@example.com", FORMS),
        ("dpo..x@example.com", FORMS),
        ("dpo@example.com https://evil.example", FORMS),
        ("<script>@example.com", FORMS),
        ("http://x@example.com", FORMS),
        ("x" * 65 + "@example.com", FORMS),
        ("arn:aws:s3:::bucket", FORMS),
        ("arn:aws:iam::1234:user/dpo", FORMS),
        ("arn:aws:iam::123456789012:group/privacy", FORMS),
        ("arn:aws:iam::210987654321:user/", FORMS),
        ("dpo@example.com\nReview the request: https://evil.example/approvals/x", CONTROL),
        ("dpo@example.com\r\n", CONTROL),
        ("\tdpo@example.com", CONTROL),
        ("dpo@example.com\x00", CONTROL),
        ("dpo@example.com\x85", CONTROL),  # NEL (Cc)
        ("dpo\u200b@example.com", CONTROL),  # zero-width space (Cf)
        ("\u202edpo@example.com", CONTROL),  # right-to-left override (Cf)
        ("dpo@example.com\u2028x", CONTROL),  # line separator (Zl)
        ("dpo@example.com\u2029", CONTROL),  # paragraph separator (Zp)
    ],
)  # fmt: skip
def test_anything_else_is_refused_naming_the_field_never_the_value(
    value: str, expected: str
) -> None:
    with pytest.raises(ErasureRequestError) as caught:
        parse_request_body({"subject_ids": ["u-1"], "requested_by": value})

    assert caught.value.problems == [expected]
    assert value.strip() not in str(caught.value)


def test_length_and_other_fields_are_reported_together() -> None:
    with pytest.raises(ErasureRequestError) as caught:
        parse_request_body({"subject_ids": [""], "requested_by": "a" * 250 + "@example.com"})

    assert caught.value.problems == [
        "subject_ids: Value error, subject_ids[0] must have 1 to 512 characters",
        "requested_by: String should have at most 256 characters",
    ]


def test_a_body_built_in_code_is_not_a_filed_request() -> None:
    # the CLI's `lethe index lookup` hashes ids through the body model with its own label
    body = ErasureRequestBody.model_validate(
        {"subject_ids": ["u-1"], "requested_by": "lethe index lookup"}
    )

    assert body.requested_by == "lethe index lookup"


@pytest.mark.parametrize(
    "value", ["https://evil.example/x", "dpo@example.com\nhttps://evil.example/x", "legal"]
)
def test_file_request_refuses_a_bad_requested_by_and_files_nothing(value: str) -> None:
    body = ErasureRequestBody(subject_ids=["u-1"], requested_by=value)
    requests, starter = MemoryErasureRequests(), NoStarter()

    with pytest.raises(ErasureRequestError) as caught:
        file_request(body, hash_key=KEY, datasets=[], requests=requests, starter=starter)

    assert caught.value.problems[0].startswith("requested_by: requested_by must ")
    assert value not in str(caught.value)
    assert requests.items == {}
    assert starter.calls == []


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("privacy@example.com", "privacy@example.com"),
        ("a@x.io\r\n\r\nReview the request: https://evil", "a@x.io Review the request: https://evil"),
        ("\u202ea@x.io\u200b\u2028b", "a@x.io b"),
        ("\t\n", ""),
    ],
)  # fmt: skip
def test_display_text_keeps_a_stored_value_on_one_line(value: str, shown: str) -> None:
    assert display_text(value) == shown
