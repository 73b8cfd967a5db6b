"""Erasure intake: the request body, the limits, hashing the subjects, and filing a request
(lethe_shared.erasure.requests, lethe_shared.erasure.intake.file_request).

The raw subject id used throughout is SECRET: a test fails if it shows up in a problem text or
a stored record."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from lethe_shared.datasets.document import Dataset, parse_dataset
from lethe_shared.erasure.intake import file_request
from lethe_shared.erasure.principals import ApproverPrincipals, RequesterNotCallerError
from lethe_shared.erasure.requests import (
    MAX_SUBJECTS,
    ErasureRequestBody,
    ErasureRequestError,
    ErasureStatus,
    IdempotencyConflictError,
    SubjectSet,
    hash_subjects,
    idempotent_request_id,
    new_request_id,
    parse_request_body,
)
from lethe_shared.erasure.subjects import HashGroup
from lethe_shared.subject_hashing.keys import hash_of_id, hash_of_keys
from tests.fakes import MemoryErasureRequests

pytestmark = pytest.mark.lambda_runtime

KEY = b"k" * 32
SECRET = "u-SECRET-1001"
OTHER = "u-2002"
T0 = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
EXECUTIONS = "arn:aws:states:us-east-1:123456789012:execution:lethe-local-erasure"
# The erasure state machine refuses any other request id ("Is Input Valid").
WORKFLOW_REQUEST_ID = re.compile(r"^er-[A-Za-z0-9-]{6,80}$")


@pytest.fixture(autouse=True)
def _no_raw_id_logged(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    caplog.set_level(logging.DEBUG, logger="lethe")
    yield
    logged = " ".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
    assert SECRET.casefold() not in logged.casefold()


def dataset(dataset_id: str, *subject_columns: str) -> Dataset:
    columns = [*subject_columns, "stars"]
    return parse_dataset(
        {
            "dataset_id": dataset_id,
            "format": "jsonl",
            "subject_columns": list(subject_columns),
            "schema": [{"name": c, "type": "int" if c == "stars" else "string"} for c in columns],
        }
    )


REVIEWS = dataset("reviews", "user_id")
ORDERS = dataset("orders", "tenant", "customer_id")
VISITS = dataset("visits", "customer_id", "tenant")  # the same columns, another order
PAYMENTS = dataset("payments", "tenant", "customer_id", "region")  # a superset: no match
DATASETS = [REVIEWS, ORDERS, VISITS, PAYMENTS]


def body(**fields: Any) -> ErasureRequestBody:
    document: dict[str, Any] = {"requested_by": "privacy@example.com", **fields}
    return parse_request_body(document)


def problems_of(document: Any, datasets: list[Dataset] | None = None) -> list[str]:
    with pytest.raises(ErasureRequestError) as caught:
        hash_subjects(parse_request_body(document), KEY, DATASETS if datasets is None else datasets)
    assert SECRET.casefold() not in str(caught.value).casefold()
    return caught.value.problems


class RecordingStarter:
    """ErasureStarter that records each start; `fail_first` makes the first start raise (the
    Lambda died after storing the record)."""

    def __init__(self, *, fail_first: bool = False) -> None:
        self.calls: list[str] = []
        self.fail_first = fail_first

    def start(self, request_id: str) -> str:
        self.calls.append(request_id)
        if self.fail_first and len(self.calls) == 1:
            raise ConnectionError("Step Functions unreachable")
        return f"{EXECUTIONS}:erasure-{request_id}"


# ------------------------------------------------------------------------------ hashing


def test_duplicate_ids_and_composite_keys_are_folded() -> None:
    # Given the same id twice and the same composite key twice (its columns in two orders)
    request = body(
        subject_ids=[SECRET, OTHER, SECRET],
        subject_keys=[
            {"tenant": "acme", "customer_id": "c-17"},
            {"customer_id": "c-17", "tenant": "acme"},
        ],
    )

    # When the subjects are hashed against reviews (user_id) and orders (tenant, customer_id)
    subjects = hash_subjects(request, KEY, [REVIEWS, ORDERS])

    # Then each subject counts and hashes once, each dataset with its own subjects' hashes
    ids = tuple(sorted({hash_of_id(KEY, SECRET), hash_of_id(KEY, OTHER)}))
    composite = hash_of_keys(
        KEY, ["tenant", "customer_id"], {"tenant": "acme", "customer_id": "c-17"}
    )
    assert subjects == SubjectSet(
        hashes=tuple(sorted({*ids, composite})),
        count=3,
        groups=(
            HashGroup(datasets=("orders",), hashes=(composite,)),
            HashGroup(datasets=("reviews",), hashes=ids),
        ),
    )


def test_a_composite_key_is_hashed_for_each_dataset_with_exactly_its_columns() -> None:
    composite = {"tenant": "acme", "customer_id": 1001}

    subjects = hash_subjects(body(subject_keys=[composite]), KEY, DATASETS)

    # orders and visits have exactly these columns (in their own order); payments has one more
    assert subjects.count == 1
    assert set(subjects.hashes) == {
        hash_of_keys(KEY, ["tenant", "customer_id"], composite),
        hash_of_keys(KEY, ["customer_id", "tenant"], composite),
    }
    assert len(subjects.hashes) == 2
    assert hash_of_id(KEY, "1001") not in subjects.hashes  # not a single-column id


def test_a_composite_key_that_no_dataset_has_is_refused_by_its_columns() -> None:
    assert problems_of(
        {
            "subject_keys": [
                {"tenant": "acme", "customer_id": "c-1"},
                {"tenant": "acme", "region": SECRET},
            ],
            "requested_by": "privacy@example.com",
        }
    ) == ["subject_keys[1]: no registered dataset has exactly the subject columns region, tenant"]


def test_ids_match_only_single_column_datasets_hash() -> None:
    subjects = hash_subjects(body(subject_ids=[SECRET]), KEY, DATASETS)

    assert subjects.hashes == (hash_of_id(KEY, SECRET),)
    assert subjects.count == 1


def test_a_key_given_as_a_number_and_as_its_text_is_one_subject() -> None:
    """1001 and "1001" hash the same (canonical text), so they are one data subject: the count
    the approver is shown must say one."""
    request = body(
        subject_keys=[
            {"tenant": "acme", "customer_id": 1001},
            {"tenant": "acme", "customer_id": "1001"},
        ]
    )

    subjects = hash_subjects(request, KEY, [ORDERS])

    assert subjects.hashes == (
        hash_of_keys(KEY, ["tenant", "customer_id"], {"tenant": "acme", "customer_id": 1001}),
    )
    assert subjects.count == 1


# ------------------------------------------------------------------------------ limits


def test_a_request_without_subjects_is_refused() -> None:
    assert problems_of(
        {"subject_ids": [], "subject_keys": [], "requested_by": "a@example.com"}
    ) == ["subject_ids: give at least one subject id (or subject_keys)"]


def test_one_subject_more_than_the_limit_is_refused_with_the_count() -> None:
    ids = [f"user-{n:04d}" for n in range(MAX_SUBJECTS)]

    problems = problems_of(
        {
            "subject_ids": ids,
            "subject_keys": [{"tenant": "acme", "customer_id": "c-1"}],
            "requested_by": "privacy@example.com",
        }
    )

    assert MAX_SUBJECTS == 100
    assert problems == ["101 distinct subjects: at most 100 per request; split the request"]


def test_the_limit_counts_distinct_subjects() -> None:
    ids = [f"user-{n:04d}" for n in range(MAX_SUBJECTS)]

    subjects = hash_subjects(body(subject_ids=[*ids, *ids[:10]]), KEY, DATASETS)

    assert subjects.count == 100
    assert len(subjects.hashes) == 100


# ------------------------------------------------------------------------------ free text


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        (
            {"subject_ids": [SECRET], "reason": "Customer U-secret-1001 asked by phone"},
            "reason: must not contain a subject id (it is stored as written)",
        ),
        (
            {"subject_ids": [OTHER, SECRET], "requested_by": "u-secret-1001@example.com"},
            "requested_by: must not contain a subject id (it is stored as written)",
        ),
        (
            {
                "subject_keys": [{"tenant": "acme", "customer_id": "cust-7781"}],
                "reason": "re CUST-7781",
            },
            "reason: must not contain a subject id (it is stored as written)",
        ),
    ],
)
def test_free_text_quoting_a_subject_id_is_refused(fields: dict[str, Any], problem: str) -> None:
    assert problems_of({"requested_by": "privacy@example.com", **fields}) == [problem]


def test_ids_shorter_than_four_characters_are_not_searched_in_free_text() -> None:
    subjects = hash_subjects(
        body(subject_ids=["0", "ab7"], reason="ticket 0 of ab7 batch"), KEY, DATASETS
    )

    assert subjects.hashes == tuple(sorted([hash_of_id(KEY, "0"), hash_of_id(KEY, "ab7")]))


# ------------------------------------------------------------------------------ the body


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        ({"subject_ids": [""], "requested_by": "a@example.com"},
         ["subject_ids: Value error, subject_ids[0] must have 1 to 512 characters"]),
        ({"subject_ids": [SECRET * 40], "requested_by": "a@example.com"},
         ["subject_ids: Value error, subject_ids[0] must have 1 to 512 characters"]),
        ({"subject_ids": [0], "requested_by": "a@example.com"},
         ["subject_ids.0: Input should be a valid string"]),
        ({"subject_ids": SECRET, "requested_by": "a@example.com"},
         ["subject_ids: Input should be a valid list"]),
        ({"subject_ids": [SECRET]},
         ["requested_by: Field required"]),
        ({"subject_ids": [SECRET], "requested_by": "a@example.com", "subject": SECRET},
         ["subject: Extra inputs are not permitted"]),
        ({"subject_ids": [SECRET], "requested_by": "a@example.com", "reason": SECRET * 100},
         ["reason: String should have at most 1000 characters"]),
        ({"subject_keys": [{}], "requested_by": "a@example.com"},
         ["subject_keys: Value error, subject_keys[0] names no column"]),
        ([SECRET], ["body: must be a JSON object"]),
    ],
)  # fmt: skip
def test_a_bad_body_names_each_problem_and_never_echoes_a_value(
    document: Any, expected: list[str]
) -> None:
    with pytest.raises(ErasureRequestError) as caught:
        parse_request_body(document)

    assert caught.value.problems == expected
    assert SECRET.casefold() not in str(caught.value).casefold()


def test_a_composite_value_of_another_type_is_refused_without_echo() -> None:
    with pytest.raises(ErasureRequestError) as caught:
        parse_request_body(
            {"subject_keys": [{"user_id": [SECRET]}], "requested_by": "a@example.com"}
        )

    assert caught.value.problems[0] == "subject_keys.0.user_id.str: Input should be a valid string"
    assert SECRET.casefold() not in str(caught.value).casefold()


def test_zero_is_an_id_and_hashes_like_the_integer_zero() -> None:
    subjects = hash_subjects(body(subject_ids=["0"]), KEY, DATASETS)

    assert subjects.hashes == (hash_of_id(KEY, "0"),)
    assert subjects.hashes == (hash_of_keys(KEY, ["user_id"], {"user_id": 0}),)


# ------------------------------------------------------------------------------ request ids


def test_idempotent_request_ids_are_stable_per_key_and_requester() -> None:
    first = idempotent_request_id("retry-key-1", "privacy@example.com")

    assert first == idempotent_request_id("retry-key-1", "privacy@example.com")
    assert first != idempotent_request_id("retry-key-1", "other@example.com")
    assert first != idempotent_request_id("retry-key-2", "privacy@example.com")
    assert first.startswith("er-idem-")
    assert len(first) == len("er-idem-") + 20


def test_request_ids_are_ones_the_workflow_accepts() -> None:
    generated = new_request_id(T0)

    assert generated.startswith("er-20261122T100000Z-")
    assert WORKFLOW_REQUEST_ID.match(generated)
    assert WORKFLOW_REQUEST_ID.match(idempotent_request_id("k", "privacy@example.com"))
    assert new_request_id(T0) != generated


# ------------------------------------------------------------------------------ filing


def test_file_request_stores_hashes_only_and_starts_the_workflow() -> None:
    requests = MemoryErasureRequests()
    starter = RecordingStarter()

    filed = file_request(
        body(subject_ids=[SECRET, OTHER], reason="support ticket 88"),
        hash_key=KEY,
        datasets=DATASETS,
        requests=requests,
        starter=starter,
        now=T0,
    )

    record = filed.request
    assert filed.duplicate is False
    assert record.status is ErasureStatus.RECEIVED
    assert record.subject_hashes == tuple(sorted([hash_of_id(KEY, SECRET), hash_of_id(KEY, OTHER)]))
    assert record.subject_count == 2
    assert starter.calls == [record.request_id]
    assert record.execution_arn.endswith(f":erasure-{record.request_id}")
    assert [(h.status, h.by, h.detail) for h in record.history] == [
        (ErasureStatus.RECEIVED, "privacy@example.com", "2 subject(s), 2 hash(es), via api")
    ]
    assert record.created_at == "2026-11-22T10:00:00+00:00"
    stored = json.dumps(requests.items)
    assert SECRET.casefold() not in stored.casefold()
    assert OTHER not in stored


def test_the_same_idempotency_key_and_body_name_one_request_started_once() -> None:
    requests = MemoryErasureRequests()
    starter = RecordingStarter()
    request = body(subject_ids=[SECRET])

    first = file_request(
        request, hash_key=KEY, datasets=DATASETS, requests=requests, starter=starter,
        idempotency_key="key-1",
    )  # fmt: skip
    again = file_request(
        body(subject_ids=[SECRET, SECRET]), hash_key=KEY, datasets=DATASETS, requests=requests,
        starter=starter, idempotency_key="key-1",
    )  # fmt: skip

    assert first.request.request_id == idempotent_request_id("key-1", "privacy@example.com")
    assert again.request.request_id == first.request.request_id
    assert (first.duplicate, again.duplicate) == (False, True)
    assert starter.calls == [first.request.request_id]
    assert len(requests.items) == 1


def test_an_idempotency_key_reused_for_another_body_is_refused() -> None:
    requests = MemoryErasureRequests()
    starter = RecordingStarter()
    file_request(
        body(subject_ids=[SECRET]), hash_key=KEY, datasets=DATASETS, requests=requests,
        starter=starter, idempotency_key="key-1",
    )  # fmt: skip

    with pytest.raises(IdempotencyConflictError) as caught:
        file_request(
            body(subject_ids=[OTHER]), hash_key=KEY, datasets=DATASETS, requests=requests,
            starter=starter, idempotency_key="key-1",
        )  # fmt: skip

    assert OTHER not in str(caught.value)
    (stored,) = requests.list()
    assert stored.subject_hashes == (hash_of_id(KEY, SECRET),)
    assert len(starter.calls) == 1


def test_the_same_key_from_another_requester_is_another_request() -> None:
    requests = MemoryErasureRequests()
    starter = RecordingStarter()

    one = file_request(
        body(subject_ids=[SECRET]), hash_key=KEY, datasets=DATASETS, requests=requests,
        starter=starter, idempotency_key="key-1",
    )  # fmt: skip
    two = file_request(
        parse_request_body({"subject_ids": [SECRET], "requested_by": "dpo@example.com"}),
        hash_key=KEY, datasets=DATASETS, requests=requests, starter=starter,
        idempotency_key="key-1",
    )  # fmt: skip

    assert one.request.request_id != two.request.request_id
    assert (one.duplicate, two.duplicate) == (False, False)
    assert len(starter.calls) == 2


def test_a_retry_after_the_start_failed_starts_the_stored_request() -> None:
    # Given a first attempt that stored the record and died before the execution started
    requests = MemoryErasureRequests()
    starter = RecordingStarter(fail_first=True)
    request = body(subject_ids=[SECRET])
    with pytest.raises(ConnectionError):
        file_request(
            request, hash_key=KEY, datasets=DATASETS, requests=requests, starter=starter,
            idempotency_key="key-1",
        )  # fmt: skip
    rid = idempotent_request_id("key-1", "privacy@example.com")
    stored = requests.get(rid)
    assert stored is not None
    assert stored.execution_arn == ""

    # When the client retries with the same key and body
    retried = file_request(
        request, hash_key=KEY, datasets=DATASETS, requests=requests, starter=starter,
        idempotency_key="key-1",
    )  # fmt: skip

    # Then the stored request is started, once more, and says it was filed before
    assert retried.duplicate is True
    assert starter.calls == [rid, rid]
    assert retried.request.execution_arn.endswith(f":erasure-{rid}")
    assert requests.get(rid) == retried.request


def test_a_bad_body_files_nothing() -> None:
    requests = MemoryErasureRequests()
    starter = RecordingStarter()

    with pytest.raises(ErasureRequestError):
        file_request(
            body(subject_ids=[SECRET], reason=f"for {SECRET}"), hash_key=KEY, datasets=DATASETS,
            requests=requests, starter=starter,
        )  # fmt: skip

    assert requests.items == {}
    assert starter.calls == []


# ------------------------------------------------------------------------------ the IAM caller

APPROVER_ROLE = "arn:aws:iam::123456789012:role/DpoRole"
APPROVER_SESSION = "arn:aws:sts::123456789012:assumed-role/DpoRole/dpo"
PRINCIPALS = ApproverPrincipals.parse(f"dpo@example.com={APPROVER_ROLE}")


def test_the_callers_principal_is_recorded_on_the_request() -> None:
    requests = MemoryErasureRequests()

    filed = file_request(
        body(subject_ids=[SECRET], requested_by="dpo@example.com"), hash_key=KEY,
        datasets=DATASETS, requests=requests, starter=RecordingStarter(),
        caller=APPROVER_SESSION, principals=PRINCIPALS,
    )  # fmt: skip

    assert filed.request.requester_principal == APPROVER_SESSION
    assert filed.request.public()["requester_principal"] == APPROVER_SESSION


@pytest.mark.parametrize(
    "caller",
    [
        "arn:aws:iam::123456789012:user/privacy-officer",
        "arn:aws:sts::123456789012:assumed-role/OtherRole/dpo",
        None,  # an Erasure Requested event: no authenticated caller
    ],
)
def test_a_request_in_an_approvers_name_from_another_caller_files_nothing(
    caller: str | None,
) -> None:
    requests = MemoryErasureRequests()
    starter = RecordingStarter()

    with pytest.raises(RequesterNotCallerError):
        file_request(
            body(subject_ids=[SECRET], requested_by=" DPO@example.com"), hash_key=KEY,
            datasets=DATASETS, requests=requests, starter=starter, caller=caller,
            principals=PRINCIPALS,
        )  # fmt: skip

    assert requests.items == {}
    assert starter.calls == []
